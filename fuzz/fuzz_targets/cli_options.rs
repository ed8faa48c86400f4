//! Fuzzes the command line's option parsing: byte sizes (`parse_size`, the parser of
//! `#[leak_test(max_leaked_bytes = "1 MiB")]`) and the `tensor-lifetime` CLI's own clap
//! parser (`tensor_lifetime_cli::Cli`, the library the binary runs).
//!
//! The input is split at NUL bytes into arguments (bytes, not necessarily UTF-8, as a
//! shell may pass them). The CLI is only parsed, never run: a fuzzed `-o` must not write
//! files. Properties checked besides not panicking: a parse error renders (what the user
//! sees), the typed parser and clap's untyped matches agree, a parsed command line has its
//! values inside the ranges the CLI declares, and a size made only of digits is exactly
//! that number of bytes. `parse_size` is the one size parser: `#[leak_test]` evaluates
//! its `const fn` form (`parse_size_const`) at compile time.

#![no_main]

use clap::{CommandFactory, Parser};
use libfuzzer_sys::fuzz_target;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use tensor_lifetime_cli::Cli;
use tensor_lifetime_report::size::{format_bytes, parse_size};

fn check_size(text: &str) {
    match parse_size(text) {
        Ok(bytes) => {
            let _ = format_bytes(bytes);
            let digits = text.trim();
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                assert_eq!(Ok(bytes), digits.parse::<u64>(), "{text:?}");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check_size(text);
    }
    let mut args = vec![OsString::from("tensor-lifetime")];
    args.extend(
        data.split(|b| *b == 0)
            .map(|a| OsString::from_vec(a.to_vec())),
    );
    for arg in &args[1..] {
        if let Some(text) = arg.to_str() {
            check_size(text);
        }
    }
    let parsed = Cli::try_parse_from(&args);
    // The same command line through clap's untyped matches: the declared ranges hold.
    let matches = Cli::command().try_get_matches_from(&args);
    assert_eq!(parsed.is_ok(), matches.is_ok(), "{args:?}");
    match (parsed, matches) {
        (Ok(parsed), Ok(matches)) => {
            let _ = format!("{parsed:?}");
            if let Some(html) = matches.subcommand_matches("html") {
                let top = *html.get_one::<u16>("top").expect("a default");
                let max_points = *html.get_one::<u32>("max_points").expect("a default");
                assert!((1..=9).contains(&top), "{args:?}");
                assert!((16..=100_000).contains(&max_points), "{args:?}");
            }
        }
        (Err(e), _) => {
            let _ = e.render().to_string();
            let _ = e.kind();
        }
        (Ok(_), Err(_)) => unreachable!("checked above"),
    }
});
