//! Helpers shared by the integration tests.

use std::path::PathBuf;

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
    // Each integration test file is its own process and calls this first.
    std::env::set_var("TENSOR_LIFETIME_JSON", &json);
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    json
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
