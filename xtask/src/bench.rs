//! `cargo xtask bench`: the overhead benchmark, one run, variants side by side.
//!
//! Builds `bench_loops` and `bench_loops_dhat` (examples package, release) and runs
//! `bench_loops compare` (untracked / tracked / off / dhat as paired processes,
//! interleaved round by round, medians and ratios) and `bench_loops memory` (bytes per
//! live record, heap over a long tracked loop). The hot-path micro-benchmarks are
//! criterion's: `cargo bench -p tensor-lifetime --bench hot_paths`.

use crate::util::{root, run_cmd};
use anyhow::Result;
use std::process::Command;

pub fn run(args: &[String]) -> Result<()> {
    let root = root();
    run_cmd(
        Command::new(env!("CARGO"))
            .current_dir(&root)
            .args(["build", "--release", "-p", "tensor-lifetime-examples"])
            .args(["--example", "bench_loops", "--example", "bench_loops_dhat"]),
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let exe = target.join("release/examples/bench_loops");
    let mut compare: Vec<String> = vec!["compare".into()];
    let mut memory: Vec<String> = vec!["memory".into()];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" | "--small-steps" | "--mlp-steps" | "--device" => {
                compare.push(a.clone());
                compare.push(crate::util::flag_value(a, &mut it)?);
            }
            "--no-dhat" => compare.push(a.clone()),
            "--records" | "--iterations" => {
                memory.push(a.clone());
                memory.push(crate::util::flag_value(a, &mut it)?);
            }
            other => anyhow::bail!(
                "bench: unknown option `{other}` (options: --rounds N --small-steps N \
                 --mlp-steps N --device cpu|cuda --no-dhat --records N --iterations N)"
            ),
        }
    }
    run_cmd(Command::new(&exe).args(&compare))?;
    run_cmd(Command::new(&exe).args(&memory))
}
