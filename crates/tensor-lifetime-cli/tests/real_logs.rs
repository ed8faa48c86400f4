//! The CLI on event logs of real example runs.
//!
//! A custom harness (`harness = false`): the test binary runs each example in a child
//! process of itself (`TL_REAL_LOGS_CHILD=<example>`, with `TENSOR_LIFETIME_LOG` set), since
//! the tracker and its log are per process; then it checks, with the `tensor-lifetime`
//! binary:
//! - `diff` of the `clean_training` log against the `leaky_dataset` log exits 1 and names
//!   the leaking site; each log against itself exits 0;
//! - `report --format json` of a log finds what the in-process report found (the child
//!   also writes `TENSOR_LIFETIME_JSON`): the same judgement;
//! - `trace` of a real log passes the Chrome Trace Event format check;
//! - each example run again with a binary log (`TENSOR_LIFETIME_LOG=<name>.tlog`): `cat` of
//!   it prints the JSON-lines log of the first run event for event, and `report` judges it
//!   as the in-process report did. Two runs differ in what the clock and the allocator
//!   give them (`t_ns`, `duration_ns`, `pid`, `started_unix_ms`, `storage` addresses and
//!   even which of them are reused, the process's resident memory): those fields are
//!   compared by presence, everything else exactly. (The unit tests of `event::binary`
//!   check that every field, these included, reads back exactly.)
//! - `pprof` and `--format markdown` read by the tools users read them with
//!   (`real_logs/formats.rs`).

#[path = "real_logs/formats.rs"]
mod formats;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tensor-lifetime");
const CHILD: &str = "TL_REAL_LOGS_CHILD";

fn main() {
    if let Ok(example) = std::env::var(CHILD) {
        let result = match example.as_str() {
            "leaky_dataset" => tensor_lifetime_examples::leaky_dataset::run().map(drop),
            "clean_training" => tensor_lifetime_examples::clean_training::run().map(drop),
            "loss_accumulation" => tensor_lifetime_examples::loss_accumulation::run().map(drop),
            other => panic!("unknown example {other}"),
        };
        result.expect("the example runs");
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut failed = 0;
    let mut passed = 0;
    let examples = ["leaky_dataset", "clean_training", "loss_accumulation"];
    let logs: Vec<(String, PathBuf, PathBuf)> = examples
        .iter()
        .map(|name| run_example(dir.path(), name, "jsonl"))
        .collect();
    let binary_logs: Vec<(String, PathBuf, PathBuf)> = examples
        .iter()
        .map(|name| run_example(dir.path(), name, "tlog"))
        .collect();
    let log = |name: &str| &logs.iter().find(|l| l.0 == name).unwrap().1;
    let json = |name: &str| &logs.iter().find(|l| l.0 == name).unwrap().2;
    let mut check = |name: &str, f: &dyn Fn()| match std::panic::catch_unwind(
        std::panic::AssertUnwindSafe(f),
    ) {
        Ok(()) => {
            println!("test {name} ... ok");
            passed += 1;
        }
        Err(_) => {
            println!("test {name} ... FAILED");
            failed += 1;
        }
    };
    check(
        "diff_clean_against_leaky_exits_1_and_names_the_site",
        &|| {
            let out = cli(&[
                "diff",
                s(log("clean_training")),
                s(log("leaky_dataset")),
                "--fail-on-increase",
            ]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(1), "{stdout}");
            assert!(stdout.contains("examples/src/leaky_dataset.rs"), "{stdout}");
            assert!(stdout.contains("`x`"), "{stdout}");
        },
    );
    check("diff_of_a_log_against_itself_exits_0", &|| {
        for name in ["clean_training", "leaky_dataset"] {
            let out = cli(&["diff", s(log(name)), s(log(name)), "--fail-on-increase"]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{name}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    });
    check(
        "report_from_the_log_agrees_with_the_in_process_report",
        &|| {
            for name in ["leaky_dataset", "clean_training", "loss_accumulation"] {
                let out = cli(&["report", s(log(name)), "--format", "json"]);
                assert_eq!(out.status.code(), Some(0));
                let from_log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let in_process = in_process_report(json(name));
                assert_eq!(from_log["findings"], in_process["findings"], "{name}");
                assert!(
                    !in_process["findings"].as_array().unwrap().is_empty(),
                    "{name}"
                );
            }
        },
    );
    check("trace_of_a_real_log_is_valid_chrome_trace_json", &|| {
        let trace = dir.path().join("trace.json");
        let out = cli(&["trace", s(log("leaky_dataset")), "-o", s(&trace)]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&trace).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        tensor_lifetime_test_support::trace_check::check_trace(&value).expect("a valid trace");
    });
    check(
        "cat_of_a_binary_log_is_the_json_lines_log_of_the_same_run",
        &|| {
            for ((name, jsonl, _), (_, tlog, _)) in logs.iter().zip(&binary_logs) {
                let bytes = std::fs::read(tlog).unwrap();
                assert_eq!(&bytes[..4], b"\x89TLE", "{name}: a binary log");
                let out = cli(&["cat", s(tlog)]);
                assert_eq!(out.status.code(), Some(0), "{name}");
                let cat = String::from_utf8(out.stdout).unwrap();
                let json = std::fs::read_to_string(jsonl).unwrap();
                let (cat, json) = (comparable(&cat), comparable(&json));
                assert!(json.len() > 50, "{name}: {} events", json.len());
                assert_eq!(cat.len(), json.len(), "{name}: as many events");
                if name == "clean_training" {
                    // Its tensors reach the log in an order that depends on their
                    // addresses (a drain of several at once): the same events between
                    // the same iteration ends, in any order, tensor ids aside.
                    assert_eq!(segments(&cat), segments(&json), "{name}");
                    continue;
                }
                for (i, (a, b)) in cat.iter().zip(&json).enumerate() {
                    assert_eq!(a, b, "{name}: event {}", i + 1);
                }
                // Smaller than the JSON lines by far.
                let json_bytes = std::fs::metadata(jsonl).unwrap().len() as usize;
                assert!(
                    bytes.len() * 4 < json_bytes,
                    "{name}: {} bytes",
                    bytes.len()
                );
            }
        },
    );
    check(
        "report_of_a_binary_log_agrees_with_the_in_process_report",
        &|| {
            for (name, tlog, json) in &binary_logs {
                let out = cli(&["report", s(tlog), "--format", "json"]);
                assert_eq!(out.status.code(), Some(0), "{name}");
                let from_log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let in_process = in_process_report(json);
                assert_eq!(from_log["findings"], in_process["findings"], "{name}");
            }
        },
    );
    check("pprof_top_shows_the_leak_site_with_its_bytes", &|| {
        formats::pprof_top_shows_the_leak_site_with_its_bytes(
            dir.path(),
            log("leaky_dataset"),
            json("leaky_dataset"),
        )
    });
    check("markdown_renders_tables_with_the_leak_linked", &|| {
        formats::markdown_renders_tables_with_the_leak_linked(
            log("leaky_dataset"),
            log("clean_training"),
            json("leaky_dataset"),
        )
    });
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed > 0 {
        std::process::exit(101);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("the CLI runs")
}

/// The events of a JSON-lines log with what differs between two runs of one program
/// (times, the process, storage addresses, the resident memory) kept by presence only.
fn comparable(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            let map = v.as_object_mut().unwrap();
            for key in [
                "t_ns",
                "duration_ns",
                "pid",
                "started_unix_ms",
                "storage",
                "process_resident",
            ] {
                if let Some(x) = map.get_mut(key) {
                    *x = serde_json::Value::Null;
                }
            }
            v
        })
        .collect()
}

/// The events between loop boundaries (loop starts and ends, iteration ends: each
/// boundary a segment of its own), each segment's events without their tensor ids, sorted.
fn segments(events: &[serde_json::Value]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    for e in events {
        let mut e = e.clone();
        let boundary = matches!(
            e["event"].as_str(),
            Some("loop_start" | "loop_end" | "iteration_end")
        );
        if let Some(x) = e.as_object_mut().unwrap().get_mut("tensor") {
            *x = serde_json::Value::Null;
        }
        if boundary {
            out.push(vec![e.to_string()]);
            out.push(Vec::new());
        } else {
            out.last_mut().unwrap().push(e.to_string());
        }
    }
    for segment in &mut out {
        segment.sort();
    }
    out
}

/// Runs an example in a child process with its event log named `<name>.<extension>`;
/// returns its name, event log and JSON report.
fn run_example(dir: &Path, name: &str, extension: &str) -> (String, PathBuf, PathBuf) {
    let log = dir.join(format!("{name}.{extension}"));
    let json = dir.join(format!("{name}-{extension}.json"));
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, name)
        .env("TENSOR_LIFETIME_LOG", &log)
        .env("TENSOR_LIFETIME_JSON", &json)
        .env("TENSOR_LIFETIME_REPORT", "off")
        // One compute thread: the order in which tensors made on candle's worker threads
        // reach the log would otherwise differ from run to run.
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .expect("the child runs");
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (name.to_string(), log, json)
}

/// The in-process JSON report at `path`, without what only a process can know: the
/// forecast of running out reads the device, and a log has none (docs/metrics.md).
fn in_process_report(path: &Path) -> serde_json::Value {
    let mut report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for f in report["findings"].as_array_mut().unwrap() {
        f.as_object_mut().unwrap().remove("forecast");
    }
    report
}
