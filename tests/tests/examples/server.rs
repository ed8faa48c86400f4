//! `server`: a tokio task answering requests with a cache per request is clean; keeping
//! every answer's logits is a leak at the example's line, held by `self.answers`.

use candle_core::Device;
use tensor_lifetime_examples::server;
use tensor_lifetime_tests::{in_session, json_report_env, line_of, read_json};

const SOURCE: &str = include_str!("../../../examples/src/server.rs");

#[test]
fn a_server_keeping_answers_leaks_them() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "a_server_keeping_answers_leaks_them")
    {
        return;
    }
    // In a leak session, as a `#[leak_test]` runs it: the task carries the session to
    // the runtime's workers (`in_task`), and the session's report is the run's.
    let (answers, outcome) = in_session(|| server::run(true, 25, 12, &Device::Cpu));
    assert_eq!(answers.len(), 25);
    let report = &outcome.report;
    let found: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.site.label == "logits")
        .collect();
    assert_eq!(found.len(), 1, "{report}");
    let f = found[0];
    assert_eq!(f.kind, tensor_lifetime::FindingKind::Leak, "{report}");
    assert_eq!(
        f.site.line,
        line_of(SOURCE, "let logits = self.model.forward")
    );
    // 12 logits of 128 f32 per request.
    assert_eq!(f.survivors, 25 * 12, "{report}");
    assert_eq!(f.bytes, 25 * 12 * 128 * 4);
    assert_eq!(f.bytes_per_iteration, 12 * 128 * 4);
    assert_eq!(
        f.holders[0].label.as_deref(),
        Some("self.answers"),
        "{report}"
    );
    assert!(outcome.failed(), "the leak test fails");
}

#[test]
fn a_server_with_a_cache_per_request_is_clean() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_server_with_a_cache_per_request_is_clean",
    ) {
        return;
    }
    let json_path = json_report_env("server_clean.json");
    let answers = server::run(false, 25, 12, &Device::Cpu).unwrap();
    assert_eq!(answers.len(), 25);
    let json = read_json(&json_path);
    let leaks = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "leak" || f["kind"] == "growing_tensor" || f["growing"] == true)
        .count();
    assert_eq!(leaks, 0, "{json:#}");
}
