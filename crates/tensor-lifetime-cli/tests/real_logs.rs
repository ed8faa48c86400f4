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
//! - `trace` of a real log passes the Chrome Trace Event format check.

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
    let logs: Vec<(String, PathBuf, PathBuf)> =
        ["leaky_dataset", "clean_training", "loss_accumulation"]
            .iter()
            .map(|name| run_example(dir.path(), name))
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
                let mut in_process: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(json(name)).unwrap()).unwrap();
                // The forecast of running out is made in the process, which reads the
                // device; a log has none (docs/metrics.md).
                for f in in_process["findings"].as_array_mut().unwrap() {
                    f.as_object_mut().unwrap().remove("forecast");
                }
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

/// Runs an example in a child process; returns its name, event log and JSON report.
fn run_example(dir: &Path, name: &str) -> (String, PathBuf, PathBuf) {
    let log = dir.join(format!("{name}.jsonl"));
    let json = dir.join(format!("{name}.json"));
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, name)
        .env("TENSOR_LIFETIME_LOG", &log)
        .env("TENSOR_LIFETIME_JSON", &json)
        .env("TENSOR_LIFETIME_REPORT", "off")
        .output()
        .expect("the child runs");
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (name.to_string(), log, json)
}
