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
//! `log` variant is the tracked loop writing the event log (`TENSOR_LIFETIME_LOG`; the
//! binary format, its path having no `.jsonl`); `cargo xtask log-cost` compares the two
//! formats.
//!
//! The rollout loop (an epoch of N inner steps, each keeping one tensor until the epoch
//! ends) runs for each N of `--rollout 1000,10000,100000`: instructions of one epoch
//! (callgrind, `--warmup 1` with 2 and with 1 measured epochs, the difference) for
//! untracked, tracked and log, while N is at most `--callgrind-max` (1 000); above it the
//! epoch is timed natively (process CPU time, median of 3 epochs), while N is at most
//! `--native-max` (10 000); larger N are skipped. (Before issue 16 the tracker's cost
//! grew with the square of N: a tracked epoch of 10 000 steps took about 9 s natively,
//! one of 100 000 would take about 15 minutes.)
//!
//! The hot-path micro-benchmarks are criterion's: `cargo bench -p tensor-lifetime --bench
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
    let mut rollout_steps = vec![1_000u64, 10_000, 100_000];
    let mut callgrind_max = 1_000u64;
    let mut native_max = 10_000u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" | "--small-steps" | "--mlp-steps" | "--device" => {
                compare.push(a.clone());
                compare.push(crate::util::flag_value(a, &mut it)?);
            }
            "--no-dhat" => compare.push(a.clone()),
            "--no-callgrind" => skip_callgrind = true,
            "--rollout" => {
                rollout_steps = crate::util::flag_value(a, &mut it)?
                    .split(',')
                    .map(|n| n.trim().replace('_', "").parse())
                    .collect::<Result<_, _>>()
                    .context("--rollout needs numbers separated by commas")?
            }
            "--callgrind-max" | "--native-max" => {
                let n = crate::util::flag_value(a, &mut it)?
                    .parse()
                    .with_context(|| format!("{a} needs a number"))?;
                if a == "--callgrind-max" {
                    callgrind_max = n
                } else {
                    native_max = n
                }
            }
            "--records" | "--iterations" => {
                memory.push(a.clone());
                memory.push(crate::util::flag_value(a, &mut it)?);
            }
            other => anyhow::bail!(
                "bench: unknown option `{other}` (options: --rounds N --small-steps N \
                 --mlp-steps N --device cpu|cuda --no-dhat --no-callgrind --records N \
                 --iterations N --rollout N,N,... --callgrind-max N --native-max N)"
            ),
        }
    }
    run_cmd(Command::new(&exe).args(&compare))?;
    if !skip_callgrind {
        instructions(&exe)?;
    }
    let callgrind_max = if skip_callgrind { 0 } else { callgrind_max };
    rollout(&exe, &rollout_steps, callgrind_max, native_max)?;
    run_cmd(Command::new(&exe).args(&memory))
}

/// How a variant's process is run: the tracked binary with tracking off, or with the
/// event log written (to a temporary file, removed after the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Plain,
    Off,
    Log,
}

/// The variants whose instructions are counted: name, `bench_loops run` variant, mode.
const VARIANTS: [(&str, &str, Mode); 4] = [
    ("untracked", "plain", Mode::Plain),
    ("tracked", "tracked", Mode::Plain),
    ("off", "tracked", Mode::Off),
    ("log", "tracked", Mode::Log),
];

/// Instructions executed by `bench_loops run <args>` under callgrind.
fn callgrind_ir(exe: &Path, args: &[&str], mode: Mode) -> Result<u64> {
    callgrind_ir_env(exe, args, mode, &[])
}

/// [`callgrind_ir`] with more environment variables (`TENSOR_LIFETIME_SAMPLE`).
pub(crate) fn callgrind_ir_env(
    exe: &Path,
    args: &[&str],
    mode: Mode,
    env: &[(&str, &str)],
) -> Result<u64> {
    let out_file = std::env::temp_dir().join(format!("tl-callgrind-{}", std::process::id()));
    let mut cmd = Command::new("valgrind");
    cmd.envs(env.iter().copied());
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(exe)
        .args(args)
        .env("TENSOR_LIFETIME_REPORT", "off")
        // One compute thread: idle worker threads spin for a scheduling-dependent time,
        // which would make the counts differ from run to run.
        .env("RAYON_NUM_THREADS", "1");
    let log_file = std::env::temp_dir().join(format!("tl-bench-log-{}", std::process::id()));
    match mode {
        Mode::Plain => {}
        Mode::Off => {
            cmd.env("TENSOR_LIFETIME", "off");
        }
        Mode::Log => {
            cmd.env("TENSOR_LIFETIME_LOG", &log_file);
        }
    }
    let out = cmd.output().context("cannot run valgrind")?;
    let _ = std::fs::remove_file(&out_file);
    let _ = std::fs::remove_file(&log_file);
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
        for (name, variant, mode) in VARIANTS {
            let ir = |steps: &str| {
                callgrind_ir(
                    exe,
                    &["run", workload, variant, "--warmup", "1", "--steps", steps],
                    mode,
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

/// The rollout loop at each N: instructions of one epoch under callgrind while N is at
/// most `callgrind_max`, process CPU time of one epoch (median of 3) above it up to
/// `native_max`.
fn rollout(exe: &Path, steps: &[u64], callgrind_max: u64, native_max: u64) -> Result<()> {
    let callgrind = Command::new("valgrind").arg("--version").output().is_ok();
    println!("rollout loop: an epoch of N inner steps, one tensor per step kept until its end");
    println!(
        "{:<8} {:<10} {:>16} {:>13}",
        "N", "variant", "per epoch", "vs untracked"
    );
    for &n in steps {
        if n > callgrind_max.max(native_max) {
            println!("{n:<8} skipped (above --callgrind-max and --native-max)");
            continue;
        }
        let n_arg = n.to_string();
        let mut base = 0f64;
        for (name, variant, mode) in VARIANTS {
            if mode == Mode::Off {
                continue;
            }
            let (value, unit) = if callgrind && n <= callgrind_max {
                let ir = |epochs: &str| {
                    callgrind_ir(
                        exe,
                        &[
                            "run", "rollout", variant, "--steps", &n_arg, "--warmup", "1",
                            "--epochs", epochs,
                        ],
                        mode,
                    )
                };
                ((ir("2")?.saturating_sub(ir("1")?)) as f64, "instr")
            } else {
                (
                    rollout_cpu_ns(exe, variant, &n_arg, mode)? as f64 / 1e6,
                    "ms cpu",
                )
            };
            if name == "untracked" {
                base = value;
            }
            println!(
                "{:<8} {:<10} {:>16} {:>13.4}",
                n,
                name,
                format!("{value:.0} {unit}"),
                value / base
            );
        }
    }
    Ok(())
}

/// Median process CPU time of a rollout epoch of `n` steps (3 epochs, no warm-up: at the
/// sizes timed natively the first epoch's start-up is small beside the epoch).
fn rollout_cpu_ns(exe: &Path, variant: &str, n: &str, mode: Mode) -> Result<u64> {
    let log_file = std::env::temp_dir().join(format!("tl-bench-log-{}", std::process::id()));
    let mut cmd = Command::new(exe);
    cmd.args(["run", "rollout", variant, "--steps", n])
        .args(["--warmup", "0", "--epochs", "3"])
        .env("TENSOR_LIFETIME_REPORT", "off")
        .env("RAYON_NUM_THREADS", "1");
    if mode == Mode::Log {
        cmd.env("TENSOR_LIFETIME_LOG", &log_file);
    }
    let out = cmd.output().context("cannot run bench_loops")?;
    let _ = std::fs::remove_file(&log_file);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("median_ns "))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("rollout {variant} {n}: no time: {text}"))
}

/// Functions whose instruction counts depend on the random values of a run (the small
/// loop's `randn` and `tanh`), left out of the tracker's cost: they move by hundreds of
/// instructions per inner iteration between runs of the same build.
const RUN_DEPENDENT: &[&str] = &[
    "tanhf", "expm1f", "exp", "log", "rand", "Normal", "ziggurat", "chacha", "ppv",
];

/// `cargo xtask tracker-cost [--top N]`: the tracker's own instructions per inner iteration
/// of the small-tensor loop, per function and in total (see docs/performance.md).
pub fn tracker_cost(args: &[String]) -> Result<()> {
    let mut top = 25usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--top" => {
                top = crate::util::flag_value(a, &mut it)?
                    .parse()
                    .context("--top needs a number")?
            }
            other => anyhow::bail!("tracker-cost: unknown option `{other}` (options: --top N)"),
        }
    }
    run_cmd(
        Command::new(env!("CARGO"))
            .current_dir(root())
            .args(["build", "--release", "-p", "tensor-lifetime-examples"])
            .args(["--example", "bench_loops"]),
    )?;
    let exe = root().join("target/release/examples/bench_loops");
    // Self cost per function of the tracked and plain runs at 2 and 6 measured steps.
    let mut runs = Vec::new();
    for mode in ["tracked", "plain"] {
        for steps in ["2", "6"] {
            runs.push(callgrind_functions(&exe, mode, steps)?);
        }
    }
    let [t2, t6, p2, p6] = <[_; 4]>::try_from(runs).expect("four runs");
    // Four steps (6 - 2) of SMALL_OPS inner iterations.
    let per_iteration = 4.0 * SMALL_OPS;
    let mut names: Vec<&String> = t2.keys().chain(t6.keys()).chain(p2.keys()).collect();
    names.sort();
    names.dedup();
    let count = |m: &std::collections::HashMap<String, u64>, k: &String| {
        m.get(k).copied().unwrap_or(0) as f64
    };
    let mut rows: Vec<(f64, &String)> = names
        .into_iter()
        .map(|k| {
            let d = (count(&t6, k) - count(&t2, k)) - (count(&p6, k) - count(&p2, k));
            (d / per_iteration, k)
        })
        .collect();
    let (noise, own): (Vec<_>, Vec<_>) = rows
        .drain(..)
        .partition(|(_, k)| RUN_DEPENDENT.iter().any(|n| k.contains(n)));
    let total: f64 = own.iter().map(|(d, _)| d).sum();
    let noise: f64 = noise.iter().map(|(d, _)| d).sum();
    let mut own = own;
    own.sort_by(|a, b| b.0.abs().total_cmp(&a.0.abs()));
    println!(
        "tracker instructions per inner iteration of the small loop (callgrind, tracked minus \
         plain, (6 steps - 2 steps) / (4 x {})): {total:.0}",
        SMALL_OPS
    );
    println!("(left out, run-dependent math and random numbers: {noise:.0})");
    for (d, k) in own.iter().take(top) {
        println!("{d:>9.1}  {k}");
    }
    Ok(())
}

/// Inner iterations of one small-loop step (`SMALL_OPS` in examples/src/bench.rs).
const SMALL_OPS: f64 = 200.0;

/// Self instructions per function of `bench_loops run small <mode> --warmup 1 --steps N`
/// under callgrind, as `callgrind_annotate` lists them.
fn callgrind_functions(
    exe: &Path,
    mode: &str,
    steps: &str,
) -> Result<std::collections::HashMap<String, u64>> {
    let out_file =
        std::env::temp_dir().join(format!("tl-cost-{}-{mode}-{steps}", std::process::id()));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(exe)
        .args(["run", "small", mode, "--warmup", "1", "--steps", steps])
        .env("TENSOR_LIFETIME_REPORT", "off")
        .env("RAYON_NUM_THREADS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("cannot run valgrind (tracker-cost needs it)")?;
    if !status.success() {
        anyhow::bail!("valgrind failed on `bench_loops run small {mode}` ({status})");
    }
    let out = Command::new("callgrind_annotate")
        .args(["--auto=no", "--inclusive=no", "--threshold=100"])
        .arg(&out_file)
        .output()
        .context("cannot run callgrind_annotate")?;
    let _ = std::fs::remove_file(&out_file);
    let mut map = std::collections::HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "  1,234 ( 0.01%)  file:function [binary]"
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        let Some((_, name)) = rest.split_once(')') else {
            continue;
        };
        let name = name.trim();
        if name.contains("PROGRAM TOTALS") {
            continue;
        }
        let name = match name.rfind(" [") {
            Some(i) if name.ends_with(']') => &name[..i],
            _ => name,
        };
        // "file:function": code inlined from another file is listed under that file;
        // counted here under the function it runs in.
        let name = match name.split_once(':') {
            Some((_, function)) if !function.starts_with(':') => function,
            _ => name,
        };
        *map.entry(name.to_string()).or_insert(0) += count;
    }
    Ok(map)
}
