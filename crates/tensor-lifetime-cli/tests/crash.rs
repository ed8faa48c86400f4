//! Crash: a tracked run killed with SIGKILL mid-run leaves an event log that the CLI reads
//! up to its last flushed iteration.
//!
//! The test runs this very test binary again as the child (`TL_CRASH_CHILD` set): a
//! `#[track]`ed training loop that never ends, with `TENSOR_LIFETIME_LOG` set, caching a
//! batch per epoch (a leak). The parent waits until the log holds a few epoch ends,
//! kills the child with SIGKILL (`Child::kill`), and runs `tensor-lifetime report` on
//! what is left: exit 0, the leak found with the survivors of the last epoch end written,
//! the loop shown as still running. The same log cut off mid-line (as a kill during a
//! write leaves it) is read up to its last complete line with a warning.

use candle_core::{Device, Tensor};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tensor-lifetime");
const CHILD_ENV: &str = "TL_CRASH_CHILD";
/// Epoch ends the parent waits for before the kill: enough for the leak rule (3 growth
/// events after the warm-up epoch).
const EPOCHS_BEFORE_KILL: usize = 6;
const STEPS: usize = 40;

/// The child's training loop: never ends by itself (a deadline guards against an orphan).
#[tensor_lifetime::track]
fn train_forever(deadline: Instant) -> candle_core::Result<usize> {
    let mut cache = Vec::new();
    'epoch: loop {
        for step in 0..STEPS {
            let batch = Tensor::full(step as f32, (16, 16), &Device::Cpu)?;
            let activations = (batch.sqr()? + 1.0)?;
            if step == 0 {
                cache.push(batch.clone());
            }
            let _ = activations.sum_all()?.to_scalar::<f32>()?;
        }
        if Instant::now() > deadline {
            break 'epoch;
        }
        // An epoch of real training takes a while; the log stays small.
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(cache.len())
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run the CLI")
}

/// Complete lines of the log, with the outermost loop's frame.
fn epoch_ends(log: &str) -> (u64, Vec<serde_json::Value>) {
    let mut outer = None;
    let mut ends = Vec::new();
    for line in log.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match v["event"].as_str() {
            Some("loop_start") if outer.is_none() => outer = v["frame"].as_u64(),
            Some("iteration_end") if outer.is_some() && v["frame"].as_u64() == outer => {
                ends.push(v)
            }
            _ => {}
        }
    }
    (outer.unwrap_or(0), ends)
}

#[test]
fn a_killed_run_leaves_a_log_the_cli_reads_to_its_last_flushed_iteration() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let cached = train_forever(Instant::now() + Duration::from_secs(120)).unwrap();
        panic!("the child was not killed ({cached} epochs)");
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("crashed.jsonl");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_run_leaves_a_log_the_cli_reads_to_its_last_flushed_iteration",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .env("TENSOR_LIFETIME_LOG", &log)
        .env("TENSOR_LIFETIME_REPORT", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child");
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if epoch_ends(&text).1.len() >= EPOCHS_BEFORE_KILL {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child wrote no {EPOCHS_BEFORE_KILL} epoch ends in 60 s"
        );
        assert!(child.try_wait().unwrap().is_none(), "the child ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL the child");
    let killed_after = started.elapsed();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");

    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (outer, ends) = epoch_ends(&text);
    let last = ends.last().expect("epoch ends").clone();
    let last_epoch = last["iteration"].as_u64().unwrap();
    assert!(last_epoch as usize + 1 >= EPOCHS_BEFORE_KILL);
    // The cache's survivors at the last epoch end in the file: one batch per epoch.
    let cached = last["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["survivors"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(cached, last_epoch + 1, "{last}");

    let cut_off = !text.ends_with('\n');
    println!(
        "crash: child killed by SIGKILL after {:.0?}; log {} bytes, {} lines, last epoch end {last_epoch}, {}",
        killed_after,
        bytes.len(),
        text.lines().count(),
        if cut_off { "last line cut off" } else { "ends at a flushed line" }
    );
    check_report(&log, outer, last_epoch, cached, cut_off);

    // A kill during a write leaves a line cut off: the same log without the end of its
    // last complete line is read up to the line before, with a warning.
    let cut = dir.path().join("cut.jsonl");
    let end = text.trim_end_matches(|c| c != '\n').len();
    std::fs::write(&cut, &bytes[..end - 20]).unwrap();
    let out = cli(&["report", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is cut off"), "{stderr}");
}

/// `tensor-lifetime report` on the crashed log: the leak at the cached batch's site, its
/// survivors those of the last epoch end in the log, the loop still running.
fn check_report(log: &Path, outer: u64, last_epoch: u64, cached: u64, cut_off: bool) {
    let path = log.to_str().unwrap();
    let out = cli(&["report", path, "--format", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // A kill while the buffer was being written leaves the last line cut off: read up to
    // the line before, with a warning; otherwise the log ends at a flushed line.
    assert_eq!(stderr.contains("is cut off"), cut_off, "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let leak = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["site"]["label"] == "batch" && f["kind"] == "leak")
        .unwrap_or_else(|| panic!("no leak at `batch`: {report:#}"));
    assert_eq!(leak["survivors"], cached, "{report:#}");
    assert_eq!(leak["iteration"], last_epoch, "{report:#}");
    assert_eq!(leak["loop"], "'epoch");
    let epoch = report["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "'epoch")
        .expect("the epoch loop");
    assert_eq!(epoch["running"], 1, "the loop never ended: {epoch}");
    assert!(outer > 0);

    let text = cli(&["report", path]);
    assert_eq!(text.status.code(), Some(0));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("LEAK") && text.contains("`batch`"), "{text}");
}
