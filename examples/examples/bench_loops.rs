//! The overhead benchmark behind `cargo xtask bench` (docs/performance.md).
//!
//! ```text
//! bench_loops compare [--device cpu|cuda] [--rounds R] [--small-steps N] [--mlp-steps N] [--no-dhat]
//! bench_loops run <small|mlp> <plain|tracked> [--device cpu|cuda] [--warmup N] [--steps N]
//! bench_loops run rollout <plain|tracked> --steps N [--device cpu|cuda] [--warmup E] [--epochs E]
//! bench_loops memory [--records N] [--iterations N]
//! bench_loops interleave [--device cpu|cuda] [--rounds R] [--small-steps N] [--mlp-steps N]
//!                         [--rollout N[,N...]] [--rollout-epochs E]
//! ```
//!
//! `interleave` alternates blocks of untracked and tracked steps (A B B A A B ...) in one
//! process, on the same model and data: no process-to-process variance (GPU clocks, pool
//! state), at the price of not covering dhat. Run with `TENSOR_LIFETIME=off` it compares
//! untracked code with tracked code whose tracking is off. Besides the ratio of the pooled
//! medians it prints the median of the per-round ratios (each round's tracked block
//! against its untracked block), which a drift of the machine moves less. `--rollout
//! 1000,10000` adds the rollout loop at those inner step counts after the small loop and
//! the MLP: each block is `--rollout-epochs` epochs (default 1), one epoch a step.
//!
//! `compare` runs the variants as paired processes, interleaved round by round
//! (untracked, tracked, off, dhat, untracked, ...), and prints the medians and ratios:
//! untracked = the plain loop; tracked = the same loop under `#[track]`; off = the tracked
//! binary with `TENSOR_LIFETIME=off`; dhat = the plain loop in `bench_loops_dhat`, with
//! dhat-rs heap profiling running.
//!
//! `run rollout` runs epochs of the rollout loop, each of `--steps N` inner steps (default
//! 1 000): `--warmup` unmeasured epochs (default 1), then `--epochs` measured ones
//! (default 3); it prints the median CPU time of an epoch.
//!
//! `memory` measures tracker memory with a counting allocator: heap bytes per live
//! tracked record, and heap bytes over many iterations of a tracked loop.

use candle_core::{Device, Result};
use std::process::Command;
use tensor_lifetime_examples::bench::{self, Workload};
use tensor_lifetime_examples::heap;

/// Counts live heap bytes (used by `memory`).
#[global_allocator]
static ALLOC: heap::CountingAlloc = heap::CountingAlloc;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} needs a value")),
        None => default,
    }
}

fn device(args: &[String]) -> Result<Device> {
    match arg(args, "--device", "cpu".to_string()).as_str() {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0),
        other => panic!("--device {other}: expected cpu or cuda"),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args),
        Some("compare") => compare(&args),
        Some("memory") => memory(&args),
        Some("interleave") => interleave(&args),
        _ => {
            eprintln!("usage: bench_loops compare|run|memory ... (see the file's docs)");
            std::process::exit(2)
        }
    }
}

fn run(args: &[String]) -> Result<()> {
    let rollout = args.get(1).map(String::as_str) == Some("rollout");
    let workload = match args.get(1).map(String::as_str) {
        Some("small") => Workload::Small,
        Some("mlp") => Workload::Mlp,
        Some("rollout") => Workload::Rollout(arg(args, "--steps", 1_000usize)),
        other => panic!("workload {other:?}: expected small, mlp or rollout"),
    };
    let tracked = match args.get(2).map(String::as_str) {
        Some("plain") => false,
        Some("tracked") => true,
        other => panic!("variant {other:?}: expected plain or tracked"),
    };
    let device = device(args)?;
    let (warmup, steps) = if rollout {
        (arg(args, "--warmup", 1usize), arg(args, "--epochs", 3usize))
    } else {
        (arg(args, "--warmup", 5usize), arg(args, "--steps", 50usize))
    };
    let mut times = bench::run(workload, tracked, &device, warmup, steps)?;
    println!("median_ns {}", bench::median(&mut times));
    Ok(())
}

struct Variant {
    name: &'static str,
    exe: std::path::PathBuf,
    mode: &'static str,
    env_off: bool,
}

fn compare(args: &[String]) -> Result<()> {
    let rounds = arg(args, "--rounds", 5usize);
    let dev = arg(args, "--device", "cpu".to_string());
    let me = std::env::current_exe()?;
    let dhat = me.with_file_name(format!("bench_loops_dhat{}", std::env::consts::EXE_SUFFIX));
    let mut variants = vec![
        Variant {
            name: "untracked",
            exe: me.clone(),
            mode: "plain",
            env_off: false,
        },
        Variant {
            name: "tracked",
            exe: me.clone(),
            mode: "tracked",
            env_off: false,
        },
        Variant {
            name: "off",
            exe: me.clone(),
            mode: "tracked",
            env_off: true,
        },
    ];
    if !args.iter().any(|a| a == "--no-dhat") && dhat.exists() {
        variants.push(Variant {
            name: "dhat",
            exe: dhat,
            mode: "plain",
            env_off: false,
        });
    }
    println!(
        "bench_loops compare: device {dev}, {rounds} rounds, variants interleaved as paired processes"
    );
    println!(
        "{:<8} {:<10} {:>14} {:>13} {:>9}",
        "loop",
        "variant",
        if dev == "cpu" {
            "cpu/step"
        } else {
            "wall/step"
        },
        "vs untracked",
        "vs dhat"
    );
    for (workload, steps) in [
        ("small", arg(args, "--small-steps", 30usize)),
        ("mlp", arg(args, "--mlp-steps", 60usize)),
    ] {
        let mut samples: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (i, v) in variants.iter().enumerate() {
                let mut cmd = Command::new(&v.exe);
                cmd.args([
                    "run",
                    workload,
                    v.mode,
                    "--device",
                    &dev,
                    "--steps",
                    &steps.to_string(),
                ]);
                cmd.env("TENSOR_LIFETIME_REPORT", "off");
                if v.env_off {
                    cmd.env("TENSOR_LIFETIME", "off");
                }
                let out = cmd.output()?;
                let text = String::from_utf8_lossy(&out.stdout);
                let Some(ns) = text
                    .lines()
                    .find_map(|l| l.strip_prefix("median_ns "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                else {
                    panic!(
                        "{} {workload} failed: {}{}",
                        v.name,
                        text,
                        String::from_utf8_lossy(&out.stderr)
                    );
                };
                samples[i].push(ns);
            }
        }
        let medians: Vec<u64> = samples.iter_mut().map(|s| bench::median(s)).collect();
        let base = medians[0] as f64;
        let dhat = variants
            .iter()
            .position(|v| v.name == "dhat")
            .map(|i| medians[i] as f64);
        for (v, m) in variants.iter().zip(&medians) {
            let vs_dhat = dhat.map_or("-".to_string(), |d| format!("{:.3}", *m as f64 / d));
            println!(
                "{:<8} {:<10} {:>11.3} ms {:>13.3} {:>9}",
                workload,
                v.name,
                *m as f64 / 1e6,
                *m as f64 / base,
                vs_dhat
            );
        }
    }
    Ok(())
}

fn interleave(args: &[String]) -> Result<()> {
    if std::env::var_os("TENSOR_LIFETIME_REPORT").is_none() {
        std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    }
    let device = device(args)?;
    let rounds = arg(args, "--rounds", 10usize);
    println!(
        "bench_loops interleave: device {}, {rounds} rounds of untracked and tracked blocks in one process",
        arg(args, "--device", "cpu".to_string())
    );
    println!(
        "{:<14} {:<10} {:>14} {:>13}",
        "loop", "variant", "median/step", "vs untracked"
    );
    let mut loops = vec![
        (
            "small".to_string(),
            Workload::Small,
            arg(args, "--small-steps", 10usize),
            5,
        ),
        (
            "mlp".to_string(),
            Workload::Mlp,
            arg(args, "--mlp-steps", 40usize),
            5,
        ),
    ];
    let epochs = arg(args, "--rollout-epochs", 1usize);
    for n in arg(args, "--rollout", String::new())
        .split(',')
        .filter(|n| !n.is_empty())
    {
        let n: usize = n.parse().unwrap_or_else(|_| {
            panic!("--rollout {n}: expected inner step counts, e.g. 1000,10000")
        });
        loops.push((format!("rollout-{n}"), Workload::Rollout(n), epochs, 1));
    }
    for (name, workload, steps, warmup) in loops {
        let (mut plain, mut tracked) =
            bench::interleaved(workload, &device, warmup, steps, rounds, bench::Only::Both)?;
        // Each round's tracked block against its untracked block, right before or after
        // it: a drift of the machine during the run (clock, another process) moves both
        // alike.
        let mut paired: Vec<f64> = plain
            .chunks(steps)
            .zip(tracked.chunks(steps))
            .map(|(p, t)| {
                bench::median(&mut t.to_vec()) as f64 / bench::median(&mut p.to_vec()) as f64
            })
            .collect();
        paired.sort_by(f64::total_cmp);
        let p = bench::median(&mut plain) as f64;
        let t = bench::median(&mut tracked) as f64;
        println!(
            "{:<14} {:<10} {:>11.3} ms {:>13.3}",
            name,
            "untracked",
            p / 1e6,
            1.0
        );
        println!(
            "{:<14} {:<10} {:>11.3} ms {:>13.3}",
            name,
            "tracked",
            t / 1e6,
            t / p
        );
        if let (Some(lo), Some(hi)) = (paired.first(), paired.last()) {
            let mid = paired[paired.len() / 2];
            println!(
                "{:<14} {:<10} {:>14} {:>13.3}   (per-round ratios {lo:.3}..{hi:.3})",
                name, "paired", "median ratio", mid
            );
        }
        // A build with tensor-lifetime's `phase-timing` feature: where the tracked
        // blocks' tracker time went (TSC cycles; empty otherwise).
        let phases = tensor_lifetime::__private::phase_timing_summary();
        if !phases.is_empty() {
            print!("{name}: tracker TSC cycles by phase\n{phases}");
        }
    }
    Ok(())
}

fn memory(args: &[String]) -> Result<()> {
    let records = arg(args, "--records", 100_000usize);
    let iterations = arg(args, "--iterations", 1_000_000usize);
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    tensor_lifetime::init().expect("tracking is on");

    // Bytes per live record: the heap with N tensors alive, before and after tagging them.
    let (before, after) = heap::record_bytes(records)?;
    println!(
        "memory: {records} live records: {:.1} bytes per record (heap {} -> {} bytes)",
        (after - before) as f64 / records as f64,
        before,
        after
    );

    // Flat over a long tracked loop: sample the heap every tenth of the run.
    let samples = heap::tracked_loop_heap(iterations)?;
    let min = samples.iter().map(|s| s.1).min().unwrap_or(0);
    let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    for (i, bytes) in &samples {
        println!("memory: after {i:>9} iterations: heap {bytes} bytes");
    }
    println!(
        "memory: {iterations} iterations of the small-tensor op (randn 64x64, mul, tanh, add): heap range {} bytes (min {min}, max {max})",
        max - min
    );
    Ok(())
}
