//! `cargo xtask log-cost`: what the event log costs, in both formats.
//!
//! - Instructions (callgrind, one compute thread) of one rollout epoch of N steps
//!   (`--warmup 1` with 2 and with 1 measured epochs, the difference), tracked without a
//!   log, with the binary log and with the JSON-lines log, side by side in one run, each
//!   log's ratio to the tracked run without one.
//! - Bytes per event of the rollout (the same runs, natively) and of the four CPU examples
//!   (`leaky_dataset`, `loss_accumulation`, `view_retention`, `clean_training`), each run
//!   once per format: the binary log's size over its events (frames that are not string
//!   declarations), beside the JSON-lines log's size over its lines.

use crate::util::{root, run_cmd};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The CPU examples whose logs are measured.
const EXAMPLES: [&str; 4] = [
    "leaky_dataset",
    "loss_accumulation",
    "view_retention",
    "clean_training",
];

pub fn run(args: &[String]) -> Result<()> {
    let mut steps = "1000".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--steps" => steps = crate::util::flag_value(a, &mut it)?,
            other => anyhow::bail!("log-cost: unknown option `{other}` (options: --steps N)"),
        }
    }
    let root = root();
    let mut build = Command::new(env!("CARGO"));
    build
        .current_dir(&root)
        .args(["build", "--release", "-p", "tensor-lifetime-examples"]);
    for name in std::iter::once("bench_loops").chain(EXAMPLES) {
        build.args(["--example", name]);
    }
    run_cmd(&mut build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let examples = target.join("release/examples");
    let dir = std::env::temp_dir().join(format!("tl-log-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bench = examples.join("bench_loops");
    let rollout = |epochs: &str| -> Vec<String> {
        [
            "run", "rollout", "tracked", "--steps", &steps, "--warmup", "1", "--epochs", epochs,
        ]
        .map(String::from)
        .to_vec()
    };

    println!("rollout N = {steps}: instructions of one epoch (callgrind, 2 epochs - 1 epoch)");
    println!("{:<12} {:>16} {:>12}", "log", "instr/epoch", "vs no log");
    let mut base = 0f64;
    for (name, log) in [
        ("none", None),
        ("binary", Some(dir.join("rollout.tlog"))),
        ("JSON lines", Some(dir.join("rollout.jsonl"))),
    ] {
        let ir = |epochs: &str| callgrind_ir(&bench, &rollout(epochs), log.as_deref());
        let per_epoch = ir("2")?.saturating_sub(ir("1")?) as f64;
        if log.is_none() {
            base = per_epoch;
        }
        println!("{name:<12} {per_epoch:>16.0} {:>12.4}", per_epoch / base);
    }

    println!("\nbytes per event (natively run, each format its own run):");
    println!(
        "{:<20} {:>8} {:>12} {:>10} {:>12} {:>10}",
        "run", "events", "binary B", "B/event", "JSON B", "B/event"
    );
    let mut total = [0u64; 4];
    let runs: Vec<(&str, PathBuf, Vec<String>)> =
        std::iter::once(("rollout", bench.clone(), rollout("2")))
            .chain(EXAMPLES.iter().map(|e| (*e, examples.join(e), Vec::new())))
            .collect();
    for (name, exe, args) in &runs {
        let tlog = dir.join(format!("{name}.tlog"));
        let jsonl = dir.join(format!("{name}.jsonl"));
        run_logged(exe, args, &tlog)?;
        run_logged(exe, args, &jsonl)?;
        let (events, binary_bytes) = binary_events(&tlog)?;
        let json = std::fs::read(&jsonl)?;
        let lines = json.iter().filter(|b| **b == b'\n').count() as u64;
        println!(
            "{name:<20} {events:>8} {binary_bytes:>12} {:>10.2} {:>12} {:>10.2}",
            binary_bytes as f64 / events as f64,
            json.len(),
            json.len() as f64 / lines as f64
        );
        for (t, v) in total
            .iter_mut()
            .zip([events, binary_bytes, lines, json.len() as u64])
        {
            *t += v;
        }
    }
    println!(
        "{:<20} {:>8} {:>12} {:>10.2} {:>12} {:>10.2}",
        "all",
        total[0],
        total[1],
        total[1] as f64 / total[0] as f64,
        total[3],
        total[3] as f64 / total[2] as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Runs `exe args` with its event log at `log` (printing off, one compute thread).
fn run_logged(exe: &Path, args: &[String], log: &Path) -> Result<()> {
    let out = Command::new(exe)
        .args(args)
        .current_dir(root())
        .env("TENSOR_LIFETIME_LOG", log)
        .env("TENSOR_LIFETIME_REPORT", "off")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The events of a binary log (its frames but the string declarations, tag 1) and its
/// size (docs/event-log.md, "The binary format").
fn binary_events(path: &Path) -> Result<(u64, u64)> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut at = 10;
    let mut events = 0;
    while at < data.len() {
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let b = *data.get(at).context("a cut-off frame length")?;
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        if data.get(at) != Some(&1) {
            events += 1;
        }
        at += len;
    }
    Ok((events, data.len() as u64))
}

/// Instructions of `exe args` under callgrind, with the event log at `log` if any.
fn callgrind_ir(exe: &Path, args: &[String], log: Option<&Path>) -> Result<u64> {
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(exe)
        .args(args)
        .env("TENSOR_LIFETIME_REPORT", "off")
        .env("RAYON_NUM_THREADS", "1");
    if let Some(log) = log {
        cmd.env("TENSOR_LIFETIME_LOG", log);
    }
    let out = cmd
        .output()
        .context("cannot run valgrind (log-cost needs it)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no instruction count from callgrind: {stderr}"))
}
