//! Byte sizes in `#[leak_test(max_leaked_bytes = "1 MiB")]`, parsed at compile time.
//!
//! The same parser as `tensor_lifetime_report::size::parse_size`, which the runtime and
//! the CLI use: this crate depends on syn, quote and proc-macro2 only, so it keeps its own
//! copy. The two must accept the same sizes and give the same errors; the test
//! `crates/tensor-lifetime-test-support/tests/size_parsers_agree.rs` and the `cli_options`
//! fuzz target (`fuzz/`) compile this file next to the report crate's parser and check
//! that they do.

/// Parses a byte size such as `"1 MiB"`, `"512kb"`, `"4096"`, `"1.5 GiB"`; the error is the
/// message the user sees.
///
/// Decimal units (`KB`, `MB`, `GB`) are powers of 1000, binary units (`KiB`, `MiB`, `GiB`)
/// powers of 1024. Case is ignored; whitespace between number and unit is optional. The
/// arithmetic is exact (integers, not floating point).
pub(crate) fn parse_size(input: &str) -> Result<u64, String> {
    let err = |reason: &str| {
        format!(
            "invalid size {input:?}: {reason} (expected a number and an optional unit: B, KB, \
             KiB, MB, MiB, GB, GiB, e.g. \"1 MiB\")"
        )
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
