//! The `tensor-lifetime` binary on synthetic logs: its output (snapshots), its exit codes
//! and its messages for bad input.

mod common;

use common::{transcript, Logs};
use insta::assert_snapshot;
use tensor_lifetime_report::Report;
use tensor_lifetime_test_support::trace_check::check_trace;

#[test]
fn help_names_every_command_with_examples() {
    let logs = Logs::new();
    let out = logs.run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert_snapshot!(String::from_utf8_lossy(&out.stdout));
    for command in ["report", "html", "trace", "pprof", "diff", "cat"] {
        let out = logs.run(&[command, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{command} --help");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Example"),
            "{command} --help has no example"
        );
    }
}

#[test]
fn report_text_of_a_leaky_run() {
    let logs = Logs::new();
    let out = logs.run(&["report", "leaky.jsonl"]);
    assert_snapshot!(transcript(&out));
}

#[test]
fn report_text_of_a_clean_run() {
    let logs = Logs::new();
    let out = logs.run(&["report", "clean.jsonl"]);
    assert_snapshot!(transcript(&out));
}

#[test]
fn report_json_is_the_report_shape() {
    let logs = Logs::new();
    let out = logs.run(&["report", "leaky.jsonl", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let json = String::from_utf8(out.stdout).unwrap();
    let report: Report = serde_json::from_str(&json).expect("a Report");
    assert!(report.has_leaks());
    assert_snapshot!(json);
}

#[test]
fn report_reads_standard_input() {
    let logs = Logs::new();
    let file = std::fs::File::open(logs.path("leaky.jsonl")).unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["report", "-"])
        .stdin(file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, logs.run(&["report", "leaky.jsonl"]).stdout);
}

#[test]
fn a_log_cut_off_mid_line_is_read_up_to_its_last_record_with_a_warning() {
    let logs = Logs::new();
    let mut bytes = logs.read("leaky.jsonl");
    let lines = bytes.iter().filter(|b| **b == b'\n').count();
    // Cut the last line in half, as a crashed writer leaves it.
    bytes.truncate(bytes.len() - 15);
    logs.write("crashed.jsonl", &bytes);
    let out = logs.run(&["report", "crashed.jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("line {lines} is cut off")),
        "{stderr}"
    );
    assert_snapshot!(transcript(&out));
}

#[test]
fn a_corrupt_line_is_an_error_naming_the_line() {
    let logs = Logs::new();
    let text = String::from_utf8(logs.read("leaky.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[20] = r#"{"event":"dropped","t_ns":5,"tensor":"seven"}"#;
    logs.write("corrupt.jsonl", (lines.join("\n") + "\n").as_bytes());
    let out = logs.run(&["report", "corrupt.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert_snapshot!(transcript(&out));
}

#[test]
fn a_wrong_format_version_is_an_error() {
    let logs = Logs::new();
    logs.write(
        "v9.jsonl",
        br#"{"event":"header","format":"tensor-lifetime-events","version":9,"pid":1,"started_unix_ms":0,"tool_version":"9.0.0"}
"#,
    );
    let out = logs.run(&["report", "v9.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert_snapshot!(transcript(&out));
}

#[test]
fn a_file_that_is_not_a_log_is_an_error() {
    let logs = Logs::new();
    logs.write("data.csv", b"epoch,loss\n0,2.3\n");
    let out = logs.run(&["html", "data.csv", "-o", "out.html"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!logs.path("out.html").exists(), "no page for a bad log");
    assert_snapshot!(transcript(&out));
    logs.write("empty.jsonl", b"");
    let out = logs.run(&["trace", "empty.jsonl", "-o", "t.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert_snapshot!("empty_file", transcript(&out));
}

#[test]
fn a_missing_file_and_usage_errors_exit_2() {
    let logs = Logs::new();
    let out = logs.run(&["report", "nowhere.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert_snapshot!(transcript(&out));
    let out = logs.run(&["report", "leaky.jsonl", "--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_snapshot!("bad_format_value", transcript(&out));
    let out = logs.run(&["html", "leaky.jsonl"]);
    assert_eq!(out.status.code(), Some(2), "-o is required");
    let out = logs.run(&[]);
    assert_eq!(out.status.code(), Some(2), "a command is required");
}

#[test]
fn diff_clean_against_leaky_fails_and_names_the_leaking_site() {
    let logs = Logs::new();
    let out = logs.run(&["diff", "clean.jsonl", "leaky.jsonl", "--fail-on-increase"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("src/dataset.rs:41 `t`"), "{stdout}");
    assert_snapshot!(transcript(&out));
}

#[test]
fn diff_against_itself_passes() {
    let logs = Logs::new();
    for log in ["clean.jsonl", "leaky.jsonl"] {
        let out = logs.run(&["diff", log, log, "--fail-on-increase"]);
        assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("none grew"));
    }
}

#[test]
fn diff_without_the_flag_reports_growth_but_exits_0() {
    let logs = Logs::new();
    let out = logs.run(&["diff", "clean.jsonl", "leaky.jsonl"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 grew"));
}

#[test]
fn diff_takes_a_saved_json_report_as_base_and_writes_json() {
    let logs = Logs::new();
    let report = logs.run(&["report", "clean.jsonl", "--format", "json"]);
    logs.write("base-report.json", &report.stdout);
    let out = logs.run(&[
        "diff",
        "base-report.json",
        "leaky.jsonl",
        "--fail-on-increase",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(diff["sites"][0]["change"], "grew");
    assert_eq!(diff["sites"][0]["line"], 41);
    assert_snapshot!(String::from_utf8_lossy(&out.stdout));
    // A JSON file that is not a report is named as such.
    logs.write("other.json", b"{\n  \"a\": 1\n}\n");
    let out = logs.run(&["diff", "other.json", "leaky.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert_snapshot!("not_a_report", transcript(&out));
}

#[test]
fn html_writes_one_self_contained_page() {
    let logs = Logs::new();
    let out = logs.run(&["html", "leaky.jsonl", "-o", "report.html"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    let html = String::from_utf8(logs.read("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for outside in ["http://", "https://", "<link", " src="] {
        assert!(!html.contains(outside), "refers outside: {outside}");
    }
    assert!(html.contains("stored into `self.cache` at src/dataset.rs:42"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tensor-lifetime: wrote report.html ("),
        "{stderr}"
    );
    assert!(stderr.contains("2 findings, 1 leak"), "{stderr}");
}

#[test]
fn trace_is_valid_chrome_trace_event_json() {
    let logs = Logs::new();
    let out = logs.run(&["trace", "leaky.jsonl", "-o", "trace.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    let trace: serde_json::Value = serde_json::from_slice(&logs.read("trace.json")).unwrap();
    let stats = check_trace(&trace).unwrap_or_else(|e| panic!("{e}"));
    // 4 x 12 batches + 4 epochs; 4 batch loops + 1 epoch loop.
    assert_eq!(stats.slices, 48 + 4 + 5);
    assert_eq!(stats.instants, 2, "one per finding");
    assert!(stats.counters > 100);
    let names: Vec<&str> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .filter_map(|e| e["name"].as_str())
        .collect();
    for counter in ["live bytes", "pool used (cuda:0)", "pool reserved (cuda:0)"] {
        assert!(names.contains(&counter), "no {counter} counter");
    }
    let out = logs.run(&["trace", "-", "-o", "t.json"]);
    assert_eq!(out.status.code(), Some(2), "trace reads the log twice");
}

#[test]
fn pprof_writes_a_gzipped_profile_and_names_what_it_cannot_do() {
    let logs = Logs::new();
    for args in [
        &["pprof", "leaky.jsonl", "-o", "end.pb.gz"][..],
        &["pprof", "leaky.jsonl", "--at", "peak", "-o", "peak.pb.gz"],
        &[
            "pprof",
            "leaky.jsonl",
            "--at-iteration",
            "1",
            "-o",
            "it1.pb.gz",
        ],
    ] {
        let out = logs.run(args);
        assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
        let bytes = logs.read(args[args.len() - 1]);
        assert_eq!(bytes[..2], [0x1f, 0x8b], "gzip magic");
    }
    let out = logs.run(&[
        "pprof",
        "leaky.jsonl",
        "--at-iteration",
        "99",
        "-o",
        "x.pb.gz",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("leaky.jsonl: no outermost loop ended an iteration 99"),
        "{err}"
    );
    let out = logs.run(&["pprof", "-", "--at", "peak", "-o", "x.pb.gz"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("give a file, not `-`"),
        "{}",
        transcript(&out)
    );
    let out = logs.run(&[
        "pprof",
        "leaky.jsonl",
        "--at",
        "peak",
        "--at-iteration",
        "1",
        "-o",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", transcript(&out));
}
