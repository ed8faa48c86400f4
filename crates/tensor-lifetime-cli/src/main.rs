//! The `tensor-lifetime` binary: the command line is parsed, run and turned into an exit
//! code by the library (`src/lib.rs`), where the commands and their docs are.

#![deny(unsafe_code)]

use clap::Parser;
use std::process::ExitCode;
use tensor_lifetime_cli::{exit_code, run, Cli};

fn main() -> ExitCode {
    exit_code(run(Cli::parse()))
}
