//! `cargo xtask bench`: the overhead benchmark, one run, variants side by side.
//!
//! Builds `bench_loops` and `bench_loops_dhat` (examples package, release) and runs
//! `bench_loops compare` (untracked / tracked / off / dhat as paired processes,
//! interleaved round by round, medians and ratios) and `bench_loops memory` (bytes per
//! live record, heap over a long tracked loop). Wall and CPU time on a shared machine
//! move by a few percent between runs, more than the budgets being checked, so when
//! valgrind is installed it also counts instructions per step with callgrind (the same
//! count on every run, with one compute thread: `RAYON_NUM_THREADS=1`, since idle worker
//! threads spin for a time that depends on scheduling): each variant runs `--warmup 1`
//! with 2 and with 6 measured steps,
//! and the difference divided by 4 is the cost of one step, start-up excluded. The
//! hot-path micro-benchmarks are criterion's: `cargo bench -p tensor-lifetime --bench
//! hot_paths`.

use crate::util::{root, run_cmd};
use anyhow::{Context, Result};
use std::path::Path;
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
    let mut skip_callgrind = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" | "--small-steps" | "--mlp-steps" | "--device" => {
                compare.push(a.clone());
                compare.push(crate::util::flag_value(a, &mut it)?);
            }
            "--no-dhat" => compare.push(a.clone()),
            "--no-callgrind" => skip_callgrind = true,
            "--records" | "--iterations" => {
                memory.push(a.clone());
                memory.push(crate::util::flag_value(a, &mut it)?);
            }
            other => anyhow::bail!(
                "bench: unknown option `{other}` (options: --rounds N --small-steps N \
                 --mlp-steps N --device cpu|cuda --no-dhat --no-callgrind --records N \
                 --iterations N)"
            ),
        }
    }
    run_cmd(Command::new(&exe).args(&compare))?;
    if !skip_callgrind {
        instructions(&exe)?;
    }
    run_cmd(Command::new(&exe).args(&memory))
}

/// Instructions executed by `bench_loops run <args>` under callgrind.
fn callgrind_ir(exe: &Path, args: &[&str], off: bool) -> Result<u64> {
    let out_file = std::env::temp_dir().join(format!("tl-callgrind-{}", std::process::id()));
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(exe)
        .args(args)
        .env("TENSOR_LIFETIME_REPORT", "off")
        // One compute thread: idle worker threads spin for a scheduling-dependent time,
        // which would make the counts differ from run to run.
        .env("RAYON_NUM_THREADS", "1");
    if off {
        cmd.env("TENSOR_LIFETIME", "off");
    }
    let out = cmd.output().context("cannot run valgrind")?;
    let _ = std::fs::remove_file(&out_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no instruction count from callgrind: {stderr}"))
}

/// Instructions per step of each variant, and their ratios.
fn instructions(exe: &Path) -> Result<()> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("bench: valgrind not found; skipping the instruction counts");
        return Ok(());
    }
    println!("instructions per step (callgrind; (Ir at 6 steps - Ir at 2 steps) / 4):");
    println!(
        "{:<8} {:<10} {:>16} {:>13}",
        "loop", "variant", "instr/step", "vs untracked"
    );
    for workload in ["small", "mlp"] {
        let mut base = 0f64;
        for (name, mode, off) in [
            ("untracked", "plain", false),
            ("tracked", "tracked", false),
            ("off", "tracked", true),
        ] {
            let ir = |steps: &str| {
                callgrind_ir(
                    exe,
                    &["run", workload, mode, "--warmup", "1", "--steps", steps],
                    off,
                )
            };
            let per_step = (ir("6")?.saturating_sub(ir("2")?)) as f64 / 4.0;
            if name == "untracked" {
                base = per_step;
            }
            println!(
                "{:<8} {:<10} {:>16.0} {:>13.4}",
                workload,
                name,
                per_step,
                per_step / base
            );
        }
    }
    Ok(())
}
