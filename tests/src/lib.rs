//! Helpers shared by the integration tests: finding sites by their text, leak sessions
//! run one at a time, the tracker's JSON report and event log, a test run alone in a
//! process of its own ([`process`]), and the model pieces the judgement tests train with
//! ([`fixtures`]).

pub mod fixtures;
pub mod process;

use std::path::PathBuf;
use std::sync::OnceLock;
use tensor_lifetime::{check_leaks, Finding, LeakTestOptions, LeakTestOutcome};
use tensor_lifetime_report::event::{EventReader, ReadOutcome};
use tensor_lifetime_report::Event;
pub use tensor_lifetime_test_support::serial;

/// The 1-based line of the first line in `source` containing `needle`.
///
/// Tests find sites by their text rather than hard-coding line numbers.
pub fn line_of(source: &str, needle: &str) -> u32 {
    source
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not found in source")) as u32
        + 1
}

/// A source file whose sites tests find by text: its path as the tracker reports it, and
/// its text (`include_str!`).
#[derive(Debug, Clone, Copy)]
pub struct Source {
    pub file: &'static str,
    pub text: &'static str,
}

impl Source {
    /// The line of the first line containing `marker`.
    pub fn line(&self, marker: &str) -> u32 {
        line_of(self.text, marker)
    }

    /// The finding at `marker`'s line of this file with `label`.
    pub fn finding<'a>(
        &self,
        outcome: &'a LeakTestOutcome,
        marker: &str,
        label: &str,
    ) -> &'a Finding {
        let (file, line) = (self.file, self.line(marker));
        outcome
            .report
            .findings
            .iter()
            .find(|f| f.site.file == file && f.site.line == line && f.site.label == label)
            .unwrap_or_else(|| panic!("no finding at {file}:{line} `{label}`:\n{}", outcome.report))
    }
}

/// Runs `f` in a leak session of its own (`check_leaks`); the caller holds [`serial`] when
/// other tests must not run meanwhile.
pub fn in_session<R>(f: impl FnOnce() -> candle_core::Result<R>) -> (R, LeakTestOutcome) {
    let (value, outcome) = check_leaks(LeakTestOptions::default(), f).expect("tracking is on");
    (value.expect("the case runs"), outcome)
}

/// Runs the plain and the tracked version of a function, one test at a time ([`serial`]);
/// checks that they agree exactly and returns the tracked run's leak outcome.
pub fn compare<R: PartialEq + std::fmt::Debug>(
    plain: impl FnOnce() -> candle_core::Result<R>,
    tracked: impl FnOnce() -> candle_core::Result<R>,
) -> LeakTestOutcome {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = serial();
    let expected = plain().unwrap();
    let (got, outcome) = check_leaks(LeakTestOptions::default(), tracked).unwrap();
    assert_eq!(got.unwrap(), expected, "tracked and plain results differ");
    outcome
}

/// A clean outcome: no leak finding, no tracked tensor left alive, the leak test passes.
pub fn assert_clean(outcome: &LeakTestOutcome) {
    assert!(!outcome.report.has_leaks(), "{}", outcome.report);
    assert!(outcome.alive.is_empty(), "{}", outcome.message("clean"));
    assert!(!outcome.failed(), "{}", outcome.message("clean"));
}

/// A fresh path in the temporary directory for this test process.
pub fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensor-lifetime-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Points the tracker's JSON report at a temporary file and silences printing; must run
/// before the first tracked tensor of the process. Returns the JSON path.
pub fn json_report_env(name: &str) -> PathBuf {
    let json = temp_path(name);
    // A test that calls this runs alone in its process (`process::alone`) and calls it first.
    std::env::set_var("TENSOR_LIFETIME_JSON", &json);
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    json
}

static EVENT_LOG: OnceLock<PathBuf> = OnceLock::new();

/// Points the tracker's event log at a temporary file named `name` and silences printing,
/// at the first call in the process; must run before the first tracked tensor of the
/// process (the event log is process-wide: one test binary, or a test run alone).
pub fn event_log_env(name: &str) {
    EVENT_LOG.get_or_init(|| {
        let path = temp_path(name);
        std::env::set_var("TENSOR_LIFETIME_LOG", &path);
        std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
        path
    });
}

/// The events of the log [`event_log_env`] set, each with its line, read after a report
/// flushed the log (so every line is complete).
pub fn read_event_log() -> Vec<(u64, Event)> {
    let _ = tensor_lifetime::report();
    let path = EVENT_LOG.get().expect("event_log_env was called");
    let bytes = std::fs::read(path).unwrap();
    EventReader::new(&bytes[..])
        .map(|o| match o.unwrap() {
            ReadOutcome::Event { event, line } => (line, event),
            other => panic!("the log is complete after a report: {other:?}"),
        })
        .collect()
}

/// Reads the JSON report written by the tracker.
pub fn read_json(path: &PathBuf) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no JSON report at {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the JSON report parses")
}

/// The findings of a JSON report whose site label is `label`.
pub fn findings_for<'a>(json: &'a serde_json::Value, label: &str) -> Vec<&'a serde_json::Value> {
    json["findings"]
        .as_array()
        .expect("findings array")
        .iter()
        .filter(|f| f["site"]["label"] == label)
        .collect()
}

/// Runs a server task (`serve`, given the receiving end of a request channel) on a tokio
/// runtime of 4 worker threads, sends it the requests `0..requests` and returns its
/// result. The task is spawned wrapped in `tensor_lifetime::in_task`, so it carries the
/// caller's leak session to the workers.
pub fn serve_on_runtime<F>(
    requests: usize,
    serve: impl FnOnce(tokio::sync::mpsc::Receiver<usize>) -> F,
) -> candle_core::Result<f32>
where
    F: std::future::Future<Output = candle_core::Result<f32>> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .map_err(candle_core::Error::wrap)?;
    runtime.block_on(async move {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let task = tokio::spawn(tensor_lifetime::in_task(serve(rx)));
        for request in 0..requests {
            tx.send(request).await.map_err(candle_core::Error::wrap)?;
        }
        drop(tx);
        task.await.map_err(candle_core::Error::wrap)?
    })
}
