//! The macros crate keeps its own copy of the byte-size parser (it depends on syn, quote
//! and proc-macro2 only): `#[leak_test(max_leaked_bytes = "...")]` must accept the same
//! sizes as the runtime and the CLI (`tensor_lifetime_report::size::parse_size`), with the
//! same error messages. A proc-macro crate exports no functions, so its file is compiled
//! here as a module.

#[path = "../../tensor-lifetime-macros/src/size.rs"]
mod macro_size;

use tensor_lifetime_report::size::parse_size;

const INPUTS: &[&str] = &[
    "",
    " ",
    "0",
    "1",
    "4096",
    "1 MiB",
    "1mib",
    "1MIB",
    " 512 KB ",
    "512kb",
    "1.5 KiB",
    "1_000 B",
    "1.1 KB",
    "0.001 KB",
    "0.0001 KB",
    "2.50 MB",
    "16 TiB",
    "1 t",
    "3 g",
    "7 m",
    "9 k",
    ".5 KiB",
    "1. KiB",
    ".",
    ". KiB",
    "1.2.3 KiB",
    "1.5 B",
    "MiB",
    "-1 MiB",
    "1e400 GiB",
    "12 parsecs",
    "1 MIBS",
    "18446744073709551615",
    "18446744073709551616",
    "17179869184 GiB",
    "9007199254740993",
    "000000000000000000000000042",
    "123456789012345678901",
    "0.0000000000000000000000001 TiB",
    "0.1234567890123456789012345 KB",
    "1 ½",
    "\"1 MiB\"",
];

#[test]
fn the_macros_and_the_report_parse_sizes_alike() {
    for input in INPUTS {
        let report = parse_size(input).map_err(|e| e.to_string());
        let macros = macro_size::parse_size(input);
        assert_eq!(macros, report, "{input:?}");
    }
}

#[test]
fn the_table_has_sizes_and_errors_of_every_kind() {
    let results: Vec<Result<u64, String>> = INPUTS
        .iter()
        .map(|i| parse_size(i).map_err(|e| e.to_string()))
        .collect();
    for reason in [
        "empty",
        "missing number",
        "unknown unit",
        "not a number",
        "too large",
        "not a whole number of bytes",
    ] {
        assert!(
            results.iter().any(|r| r
                .as_ref()
                .is_err_and(|e| e.contains(&format!(": {reason} (")))),
            "no input is refused as {reason:?}"
        );
    }
    assert!(results.iter().filter(|r| r.is_ok()).count() >= 15);
}
