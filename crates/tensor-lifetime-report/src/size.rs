//! Byte sizes: binary-unit formatting for reports and the one parser of sizes the user
//! writes (`max_leaked_bytes = "1 MiB"`), a `const fn` so that `#[leak_test]` checks a
//! size at compile time with it.

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

/// The text after a refused size's reason: what a size looks like.
macro_rules! expected {
    () => {
        "(expected a number and an optional unit: B, KB, KiB, MB, MiB, GB, GiB, e.g. \"1 MiB\")"
    };
}

/// One table for the reasons: [`SizeError::reason`] and [`SizeError::message`] are built
/// from it, so the two cannot drift apart.
macro_rules! size_errors {
    ($($(#[$doc:meta])* $variant:ident => $reason:literal,)*) => {
        /// Why a text is not a byte size ([`parse_size_const`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum SizeError {
            $($(#[$doc])* $variant,)*
        }

        impl SizeError {
            /// The reason alone: `unknown unit`.
            pub const fn reason(self) -> &'static str {
                match self {
                    $(SizeError::$variant => $reason,)*
                }
            }

            /// The message without the input, for a compile-time check that points at
            /// the input instead: `invalid size: unknown unit (expected ...)`.
            pub const fn message(self) -> &'static str {
                match self {
                    $(SizeError::$variant => concat!("invalid size: ", $reason, " ", expected!()),)*
                }
            }
        }
    };
}

size_errors! {
    /// Nothing but whitespace.
    Empty => "empty",
    /// A unit without a number (`"MiB"`).
    MissingNumber => "missing number",
    /// Not one of the units [`parse_size`] lists.
    UnknownUnit => "unknown unit",
    /// Digits with more than one `.`, or a lone `.`.
    NotANumber => "not a number",
    /// More than `u64::MAX` bytes.
    TooLarge => "too large",
    /// A fraction of a byte (`"1.5 B"`).
    NotWholeBytes => "not a whole number of bytes",
}

/// Error from [`parse_size`]: the input and why it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseSizeError {
    input: String,
    kind: SizeError,
}

impl ParseSizeError {
    /// Why the input was refused.
    pub fn kind(&self) -> SizeError {
        self.kind
    }
}

impl fmt::Display for ParseSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            concat!("invalid size {:?}: {} ", expected!()),
            self.input,
            self.kind.reason()
        )
    }
}

impl std::error::Error for ParseSizeError {}

/// Parses a byte size such as `"1 MiB"`, `"512kb"`, `"4096"`, `"1.5 GiB"`.
///
/// Decimal units (`KB`, `MB`, `GB`, `TB`, or `K`, `M`, `G`, `T`) are powers of 1000,
/// binary units (`KiB`, `MiB`, `GiB`, `TiB`) powers of 1024, `B` or none is bytes. Case
/// is ignored; whitespace around the size and between number and unit is optional; `_`
/// may separate digits.
///
/// The arithmetic is exact (integers, not floating point): `"1.1 KB"` is 1100 bytes,
/// `"18446744073709551615"` is `u64::MAX` and one more is too large.
pub fn parse_size(input: &str) -> Result<u64, ParseSizeError> {
    parse_size_const(input).map_err(|kind| ParseSizeError {
        input: input.to_string(),
        kind,
    })
}

/// [`parse_size`] as a `const fn`, the one parser of sizes: `#[leak_test(max_leaked_bytes
/// = "1 MiB")]` evaluates it in a constant, so a bad size is a compile error at the
/// attribute.
pub const fn parse_size_const(input: &str) -> Result<u64, SizeError> {
    let b = input.as_bytes();
    let (start, end) = trim(b, 0, b.len());
    if start == end {
        return Err(SizeError::Empty);
    }
    // The number: digits, `.` and `_` (ASCII, so a byte scan splits at a char boundary).
    let mut split = start;
    while split < end && (b[split].is_ascii_digit() || b[split] == b'.' || b[split] == b'_') {
        split += 1;
    }
    let mut i = start;
    while i < split && b[i] == b'_' {
        i += 1;
    }
    if i == split {
        return Err(SizeError::MissingNumber);
    }
    let (unit_start, unit_end) = trim(b, split, end);
    let mult = match unit(b, unit_start, unit_end) {
        Some(mult) => mult,
        None => return Err(SizeError::UnknownUnit),
    };
    // The integer part ends at the first `.`; a second one is not a number.
    let mut dot = start;
    while dot < split && b[dot] != b'.' {
        dot += 1;
    }
    let frac_start = if dot < split { dot + 1 } else { split };
    i = frac_start;
    while i < split {
        if b[i] == b'.' {
            return Err(SizeError::NotANumber);
        }
        i += 1;
    }
    // Digits only from here; a number of more than 20 digits exceeds u64 anyway.
    let int = Digits::of(b, start, dot);
    let frac = Digits::of(b, frac_start, split);
    if int.count == 0 && frac.count == 0 {
        return Err(SizeError::NotANumber);
    }
    if int.significant_from_first_nonzero > 20 {
        return Err(SizeError::TooLarge);
    }
    let frac_len = frac.significant_to_last_nonzero;
    if frac_len > 24 {
        return Err(SizeError::NotWholeBytes);
    }
    let scale = 10u128.pow(frac_len as u32);
    let frac_bytes = frac.value_of_first(frac_len) * mult;
    if frac_bytes % scale != 0 {
        return Err(SizeError::NotWholeBytes);
    }
    let bytes = match int.value_of_first(int.count).checked_mul(mult) {
        Some(b) => b.checked_add(frac_bytes / scale),
        None => None,
    };
    match bytes {
        Some(b) if b <= u64::MAX as u128 => Ok(b as u64),
        _ => Err(SizeError::TooLarge),
    }
}

/// The units and their sizes in bytes, lowercase.
const UNIT_BYTES: [(&str, u128); 14] = [
    ("", 1),
    ("b", 1),
    ("k", 1000),
    ("kb", 1000),
    ("kib", 1 << 10),
    ("m", 1000u128.pow(2)),
    ("mb", 1000u128.pow(2)),
    ("mib", 1 << 20),
    ("g", 1000u128.pow(3)),
    ("gb", 1000u128.pow(3)),
    ("gib", 1 << 30),
    ("t", 1000u128.pow(4)),
    ("tb", 1000u128.pow(4)),
    ("tib", 1 << 40),
];

/// The size of the unit `b[start..end]` (ASCII case ignored), if it is one.
const fn unit(b: &[u8], start: usize, end: usize) -> Option<u128> {
    let mut u = 0;
    while u < UNIT_BYTES.len() {
        let (name, bytes) = UNIT_BYTES[u];
        let name = name.as_bytes();
        if name.len() == end - start {
            let mut i = 0;
            while i < name.len() && b[start + i].to_ascii_lowercase() == name[i] {
                i += 1;
            }
            if i == name.len() {
                return Some(bytes);
            }
        }
        u += 1;
    }
    None
}

/// The digits of a run of digits and `_` (the `_` skipped).
struct Digits<'a> {
    bytes: &'a [u8],
    start: usize,
    end: usize,
    /// Digits in all (bytes other than `_`: a run without `.`).
    count: usize,
    /// Digits from the first non-zero one to the end (leading zeros trimmed).
    significant_from_first_nonzero: usize,
    /// Digits from the start to the last non-zero one (trailing zeros trimmed).
    significant_to_last_nonzero: usize,
}

impl<'a> Digits<'a> {
    const fn of(bytes: &'a [u8], start: usize, end: usize) -> Digits<'a> {
        let (mut count, mut first_nonzero, mut last_nonzero) = (0, None, 0);
        let mut i = start;
        while i < end {
            if bytes[i] != b'_' {
                count += 1;
                if bytes[i] != b'0' {
                    if first_nonzero.is_none() {
                        first_nonzero = Some(count - 1);
                    }
                    last_nonzero = count;
                }
            }
            i += 1;
        }
        let significant_from_first_nonzero = match first_nonzero {
            Some(first) => count - first,
            None => 0,
        };
        Digits {
            bytes,
            start,
            end,
            count,
            significant_from_first_nonzero,
            significant_to_last_nonzero: last_nonzero,
        }
    }

    /// The number the first `n` digits spell (callers keep it below 10^39).
    const fn value_of_first(&self, n: usize) -> u128 {
        let (mut value, mut seen) = (0u128, 0);
        let mut i = self.start;
        while i < self.end && seen < n {
            if self.bytes[i] != b'_' {
                value = value * 10 + (self.bytes[i] - b'0') as u128;
                seen += 1;
            }
            i += 1;
        }
        value
    }
}

/// `b[start..end]` without the whitespace at either end, as `str::trim` (Unicode
/// `White_Space`); `b` is UTF-8 and `start`, `end` are char boundaries.
const fn trim(b: &[u8], mut start: usize, mut end: usize) -> (usize, usize) {
    while start < end {
        let (c, len) = decode(b, start);
        if !is_whitespace(c) {
            break;
        }
        start += len;
    }
    while start < end {
        let mut char_start = end - 1;
        while b[char_start] & 0xC0 == 0x80 {
            char_start -= 1;
        }
        if !is_whitespace(decode(b, char_start).0) {
            break;
        }
        end = char_start;
    }
    (start, end)
}

/// The char starting at `b[i]` and its length in bytes (`b` is valid UTF-8).
const fn decode(b: &[u8], i: usize) -> (u32, usize) {
    const fn cont(b: &[u8], i: usize) -> u32 {
        (b[i] & 0x3F) as u32
    }
    let b0 = b[i] as u32;
    if b0 < 0x80 {
        (b0, 1)
    } else if b0 < 0xE0 {
        ((b0 & 0x1F) << 6 | cont(b, i + 1), 2)
    } else if b0 < 0xF0 {
        ((b0 & 0x0F) << 12 | cont(b, i + 1) << 6 | cont(b, i + 2), 3)
    } else {
        let high = (b0 & 0x07) << 18 | cont(b, i + 1) << 12;
        (high | cont(b, i + 2) << 6 | cont(b, i + 3), 4)
    }
}

/// `char::is_whitespace` (Unicode `White_Space`), which is not a `const fn` in every
/// release this crate supports; the test `whitespace_is_std_whitespace` compares them.
const fn is_whitespace(c: u32) -> bool {
    matches!(
        c,
        0x09..=0x0D | 0x20 | 0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F
            | 0x205F | 0x3000
    )
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

    #[test]
    fn whitespace_is_std_whitespace() {
        for c in '\0'..=char::MAX {
            assert_eq!(is_whitespace(c as u32), c.is_whitespace(), "{c:?}");
        }
        assert_eq!(parse_size("\u{3000}1\u{2009}KiB\u{85}"), Ok(1024));
        assert_eq!(parse_size("1 MiB\u{a0}"), Ok(1 << 20));
        assert!(parse_size("1 ½").is_err());
        assert!(parse_size("1 \u{1F4BE}").is_err());
    }

    /// Every reason, as the runtime (with the input) and the compile-time check (without)
    /// spell it.
    #[test]
    fn every_reason_has_its_message() {
        let cases = [
            (" ", SizeError::Empty),
            ("_ MiB", SizeError::MissingNumber),
            ("1 MIBS", SizeError::UnknownUnit),
            ("1.2.3", SizeError::NotANumber),
            (". KiB", SizeError::NotANumber),
            ("123456789012345678901", SizeError::TooLarge),
            ("0.1234567890123456789012345 KB", SizeError::NotWholeBytes),
        ];
        let expected = "(expected a number and an optional unit: B, KB, KiB, MB, MiB, GB, \
                        GiB, e.g. \"1 MiB\")";
        for (input, kind) in cases {
            let e = parse_size(input).unwrap_err();
            assert_eq!(e.kind(), kind, "{input:?}");
            let reason = kind.reason();
            assert_eq!(
                e.to_string(),
                format!("invalid size {input:?}: {reason} {expected}")
            );
            assert_eq!(kind.message(), format!("invalid size: {reason} {expected}"));
        }
        const CHECKED: Result<u64, SizeError> = parse_size_const("1_000 KiB");
        assert_eq!(CHECKED, Ok(1_024_000));
    }
}
