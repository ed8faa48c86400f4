//! `cargo xtask sample-cost`: the sampled mode's cost, instructions side by side in one
//! run: each loop untracked and tracked with `TENSOR_LIFETIME_SAMPLE` (512KiB unless
//! `--interval` says otherwise), under callgrind with one compute thread, and the ratio.
//!
//! The small loop and the MLP: `--warmup 1` with 6 and with 2 measured steps, the
//! difference over 4 (one step, start-up excluded). The rollout at each N of
//! `--rollout` (1 000, 10 000, 100 000): `--warmup 1` with 1 + E and with 1 measured
//! epochs, the difference over E, E making at least [`ROLLOUT_STEPS`] steps (20 epochs at
//! N = 1 000: one epoch's count moves by about 20 000 instructions with the state of the
//! C allocator's caches, which the epochs before it left). With `--log`, each loop is
//! also run sampled with the binary event log on (`TENSOR_LIFETIME_LOG` in a temporary
//! folder), in two more columns. Figures: docs/performance.md, "The budgets and the
//! current figures" and "Where the rollout's instructions go".

use crate::bench::{callgrind_ir_env, Mode};
use crate::util::{flag_value, root, run_cmd};
use anyhow::{bail, Context, Result};
use std::process::Command;

/// The fewest rollout steps a figure is measured over (see the module docs).
const ROLLOUT_STEPS: u64 = 20_000;

/// `cargo xtask sample-cost [--interval SIZE] [--rollout N,N,...] [--log] [--no-build]`.
pub fn run(args: &[String]) -> Result<()> {
    let mut interval = "512KiB".to_string();
    let mut rollout = vec![1_000u64, 10_000, 100_000];
    let mut build = true;
    let mut log = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--interval" => interval = flag_value(a, &mut it)?,
            "--rollout" => {
                rollout = flag_value(a, &mut it)?
                    .split(',')
                    .map(|n| n.trim().replace('_', "").parse())
                    .collect::<Result<_, _>>()
                    .context("--rollout needs numbers separated by commas")?
            }
            "--no-build" => build = false,
            "--log" => log = true,
            other => bail!(
                "sample-cost: unknown option `{other}` (options: --interval SIZE \
                 --rollout N,N,... --log --no-build)"
            ),
        }
    }
    if Command::new("valgrind").arg("--version").output().is_err() {
        bail!("sample-cost: valgrind not found (it counts the instructions)");
    }
    let root = root();
    if build {
        run_cmd(
            Command::new(env!("CARGO"))
                .current_dir(&root)
                .args(["build", "--release", "-p", "tensor-lifetime-examples"])
                .args(["--example", "bench_loops"]),
        )?;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let exe = target.join("release/examples/bench_loops");
    let sampled = [("TENSOR_LIFETIME_SAMPLE", interval.as_str())];
    let dir = std::env::temp_dir().join(format!("tl-sample-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log_path = dir.join("sampled.tlog");
    let log_path = log_path
        .to_str()
        .context("a temporary path that is UTF-8")?;
    let logged = [
        ("TENSOR_LIFETIME_SAMPLE", interval.as_str()),
        ("TENSOR_LIFETIME_LOG", log_path),
    ];
    println!(
        "sampled ({interval}) against untracked, instructions (callgrind, RAYON_NUM_THREADS=1)"
    );
    print!(
        "{:<16} {:>16} {:>16} {:>8}",
        "loop", "untracked", "sampled", "ratio"
    );
    if log {
        print!(" {:>16} {:>8}", "sampled+log", "ratio");
    }
    println!();
    let row = |name: &str, plain: f64, tracked: f64, with_log: Option<f64>| {
        print!(
            "{:<16} {:>16.0} {:>16.0} {:>8.4}",
            name,
            plain,
            tracked,
            tracked / plain
        );
        if let Some(l) = with_log {
            print!(" {:>16.0} {:>8.4}", l, l / plain);
        }
        println!();
    };
    for workload in ["small", "mlp"] {
        let per_step = |variant: &str, env: &[(&str, &str)]| -> Result<f64> {
            let ir = |steps: &str| {
                callgrind_ir_env(
                    &exe,
                    &["run", workload, variant, "--warmup", "1", "--steps", steps],
                    Mode::Plain,
                    env,
                )
            };
            Ok(ir("6")?.saturating_sub(ir("2")?) as f64 / 4.0)
        };
        let plain = per_step("plain", &[])?;
        let tracked = per_step("tracked", &sampled)?;
        let with_log = log.then(|| per_step("tracked", &logged)).transpose()?;
        row(&format!("{workload} (step)"), plain, tracked, with_log);
    }
    for n in rollout {
        let n_arg = n.to_string();
        let epochs = ROLLOUT_STEPS.div_ceil(n.max(1)).max(1);
        let (one, more) = ("1".to_string(), (1 + epochs).to_string());
        let per_epoch = |variant: &str, env: &[(&str, &str)]| -> Result<f64> {
            let ir = |epochs: &str| {
                callgrind_ir_env(
                    &exe,
                    &[
                        "run", "rollout", variant, "--steps", &n_arg, "--warmup", "1", "--epochs",
                        epochs,
                    ],
                    Mode::Plain,
                    env,
                )
            };
            Ok(ir(&more)?.saturating_sub(ir(&one)?) as f64 / epochs as f64)
        };
        let plain = per_epoch("plain", &[])?;
        let tracked = per_epoch("tracked", &sampled)?;
        let with_log = log.then(|| per_epoch("tracked", &logged)).transpose()?;
        row(&format!("rollout N={n}"), plain, tracked, with_log);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
