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

/// A count with thousands separators: `2400` → `2,400`.
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
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
///
/// The arithmetic is exact (integers, not floating point): `"1.1 KB"` is 1100 bytes,
/// `"18446744073709551615"` is `u64::MAX` and one more is too large.
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
    let mult: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1000u128.pow(2),
        "mib" => 1 << 20,
        "g" | "gb" => 1000u128.pow(3),
        "gib" => 1 << 30,
        "t" | "tb" => 1000u128.pow(4),
        "tib" => 1 << 40,
        _ => return Err(err("unknown unit")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((&num, ""));
    if frac.contains('.') || (int.is_empty() && frac.is_empty()) {
        return Err(err("not a number"));
    }
    // Digits only from here; a number of more than 20 digits exceeds u64 anyway.
    let frac = frac.trim_end_matches('0');
    let int = int.trim_start_matches('0');
    if int.len() > 20 {
        return Err(err("too large"));
    }
    if frac.len() > 24 {
        return Err(err("not a whole number of bytes"));
    }
    let digits = |d: &str| d.parse::<u128>().unwrap_or(0);
    let scale = 10u128.pow(frac.len() as u32);
    let frac_bytes = digits(frac) * mult;
    if frac_bytes % scale != 0 {
        return Err(err("not a whole number of bytes"));
    }
    digits(int)
        .checked_mul(mult)
        .and_then(|b| b.checked_add(frac_bytes / scale))
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| err("too large"))
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
    fn groups_digits() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(2400), "2,400");
        assert_eq!(group_digits(1_000_312), "1,000,312");
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
        assert!(parse_size("1.2.3 KiB").is_err());
        assert!(parse_size(". KiB").is_err());
    }

    /// Found by the `cli_options` fuzz target (fuzz/): sizes went through `f64`, so
    /// 2^64 parsed as `u64::MAX`, large byte counts were rounded and `1.1 KB` was not a
    /// whole number of bytes.
    #[test]
    fn parses_exactly() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        let e = parse_size("18446744073709551616").unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        assert!(parse_size("17179869184 GiB").is_err());
        assert_eq!(parse_size("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("1.1 KB"), Ok(1100));
        assert_eq!(parse_size("0.001 KB"), Ok(1));
        assert_eq!(parse_size("2.50 MB"), Ok(2_500_000));
        assert_eq!(parse_size("16 TiB"), Ok(16 << 40));
        assert_eq!(parse_size("000000000000000000000000042"), Ok(42));
        assert_eq!(parse_size(".5 KiB"), Ok(512));
        assert_eq!(parse_size("1. KiB"), Ok(1024));
        assert!(parse_size("0.0001 KB").is_err());
    }
}
