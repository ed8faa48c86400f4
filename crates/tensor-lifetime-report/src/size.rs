//! Byte sizes: binary-unit formatting for reports and a parser for user options
//! (`max_leaked_bytes = "1 MiB"`).

use std::fmt;

const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/// Formats `bytes` with binary units: `512 B`, `1.2 MiB`.
pub fn format_bytes(bytes: u64) -> String {
    format_signed(bytes as f64)
}

/// Formats a possibly negative or fractional byte amount (`+1.2 MiB` style without sign).
pub fn format_signed(bytes: f64) -> String {
    let mut value = bytes;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{} B", value.round() as i64)
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Error from [`parse_size`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseSizeError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for ParseSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid size {:?}: {} (expected a number and an optional unit: B, KB, KiB, MB, MiB, GB, GiB, e.g. \"1 MiB\")",
            self.input, self.reason
        )
    }
}

impl std::error::Error for ParseSizeError {}

/// Parses a byte size such as `"1 MiB"`, `"512kb"`, `"4096"`, `"1.5 GiB"`.
///
/// Decimal units (`KB`, `MB`, `GB`) are powers of 1000, binary units (`KiB`, `MiB`, `GiB`)
/// powers of 1024. Case is ignored; whitespace between number and unit is optional.
pub fn parse_size(input: &str) -> Result<u64, ParseSizeError> {
    let err = |reason| ParseSizeError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(err("missing number"));
    }
    let value: f64 = num.parse().map_err(|_| err("not a number"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024f64.powi(4),
        _ => return Err(err("unknown unit")),
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(err("too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(err("not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.0 KiB");
        assert_eq!(format_bytes(1_258_291), "1.2 MiB");
        assert_eq!(format_bytes(96 * 1024 * 1024), "96.0 MiB");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1mib"), Ok(1 << 20));
        assert_eq!(parse_size("512 KB"), Ok(512_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("1_000 B"), Ok(1000));
    }

    #[test]
    fn rejects_bad_sizes_with_reason() {
        let e = parse_size("12 parsecs").unwrap_err();
        assert!(e.to_string().contains("unknown unit"), "{e}");
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("1.5 B").is_err());
        assert!(parse_size("1e400 GiB").is_err());
        assert!(parse_size("-1 MiB").is_err());
    }
}
