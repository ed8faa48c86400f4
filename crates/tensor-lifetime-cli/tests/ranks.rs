//! Several ranks' logs merged: `report`, `html`, `trace` and `diff` on a directory or a
//! list of logs.

mod common;

use common::{transcript, write_rank_logs, Logs};
use insta::assert_snapshot;
use tensor_lifetime_test_support::trace_check::check_trace;

#[test]
fn report_names_the_ranks_a_leak_occurs_on_and_the_rank_that_grows_apart() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 4, &[1, 3]);
    let out = logs.run(&["report", "job"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("leak on ranks 1, 3 of 4"), "{text}");
    assert_snapshot!(transcript(&out));

    // The same logs named one by one give the same report.
    let named = logs.run(&[
        "report",
        "job/rank-0.jsonl",
        "job/rank-1.jsonl",
        "job/rank-2.jsonl",
        "job/rank-3.jsonl",
    ]);
    assert_eq!(named.stdout, out.stdout);
}

#[test]
fn one_leaking_rank_of_four_diverges() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 4, &[2]);
    let out = logs.run(&["report", "job", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = json["findings"].as_array().unwrap();
    let leak = findings
        .iter()
        .find(|f| f["kind"] == "leak")
        .expect("a leak");
    assert_eq!(leak["ranks"], serde_json::json!([2]));
    let div = findings
        .iter()
        .find(|f| f["kind"] == "rank_divergence")
        .expect("rank 2 grows apart");
    assert_eq!(div["ranks"], serde_json::json!([2]));
    assert_eq!(json["world_size"], 4);
}

#[test]
fn clean_ranks_have_no_leak_and_no_divergence() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 4, &[]);
    let out = logs.run(&["report", "job"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0 leaks (clean)"), "{text}");
    assert!(!text.contains("RANK "), "{text}");
}

#[test]
fn two_logs_of_the_same_rank_are_an_error() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("a"), 2, &[]);
    write_rank_logs(&logs.path("b"), 2, &[]);
    let out = logs.run(&["report", "a/rank-0.jsonl", "b/rank-0.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("both claim rank 0"));
}

#[test]
fn html_has_every_rank() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 4, &[1]);
    let out = logs.run(&["html", "job", "-o", "job.html"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    let page = String::from_utf8(logs.read("job.html")).unwrap();
    assert!(page.contains("<section id=\"ranks-section\">"));
    assert_eq!(page.matches("class=\"rank-line\"").count(), 4);
    assert!(page.contains("the timeline below is rank 1's"));
    assert!(page.contains("<tr class=\"leaking\" data-rank=\"1\">"));
    // A single log's page has no ranks section.
    let out = logs.run(&["html", "job/rank-1.jsonl", "-o", "one.html"]);
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(logs.read("one.html")).unwrap();
    assert!(!page.contains("ranks-section"));
}

#[test]
fn trace_has_a_process_per_rank() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("job"), 3, &[0]);
    let out = logs.run(&["trace", "job", "-o", "job.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    let trace: serde_json::Value = serde_json::from_slice(&logs.read("job.json")).unwrap();
    check_trace(&trace).expect("a valid trace");
    let events = trace["traceEvents"].as_array().unwrap();
    let mut names: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            (0, "rank 0 (synth, pid 4242)".to_string()),
            (1, "rank 1 (synth, pid 4243)".to_string()),
            (2, "rank 2 (synth, pid 4244)".to_string()),
        ]
    );
    // The leak's instant is on rank 0's process only.
    let leaks: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("LEAK"))
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(leaks, vec![0]);
}

#[test]
fn diff_compares_directories_of_ranks() {
    let logs = Logs::new();
    write_rank_logs(&logs.path("base"), 4, &[]);
    write_rank_logs(&logs.path("new"), 4, &[3]);
    let out = logs.run(&["diff", "base", "new", "--fail-on-increase"]);
    assert_eq!(out.status.code(), Some(1), "{}", transcript(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("LEAK+"));
}
