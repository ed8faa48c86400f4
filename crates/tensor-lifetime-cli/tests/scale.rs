//! A log of a million events: the HTML page stays small (the timeline is downsampled)
//! and a real headless Chromium renders it promptly (that part is skipped without Chromium,
//! unless `TENSOR_LIFETIME_REQUIRE_CHROMIUM=1`). See docs/cli.md for the release build's
//! figures.

mod common;

use common::{run_chromium, write_log, Logs};
use std::time::{Duration, Instant};
use tensor_lifetime_test_support::synth::SynthLoop;

#[test]
fn a_million_events_make_a_small_page_that_renders_promptly() {
    let logs = Logs::new();
    let n = write_log(&logs.path("big.jsonl"), &SynthLoop::with_events(1_000_000));
    assert!(n >= 1_000_000, "{n} events");
    let out = logs.run(&["html", "big.jsonl", "-o", "big.html"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::transcript(&out));
    let size = std::fs::metadata(logs.path("big.html")).unwrap().len();
    assert!(size < 2 << 20, "the page is {size} bytes");
    let html = String::from_utf8(logs.read("big.html")).unwrap();
    assert!(html.contains("points: each point is the iteration end with the most live bytes"));

    if !common::chromium_available("a_million_events_make_a_small_page_that_renders_promptly") {
        return;
    }
    let start = Instant::now();
    let dom = run_chromium(
        &logs.path("big.html"),
        &logs.path("profile"),
        &["--dump-dom".to_string()],
    );
    let took = start.elapsed();
    let dom = String::from_utf8(dom).unwrap();
    assert!(
        dom.contains("data-ready=\"1\""),
        "the script did not finish"
    );
    // Chromium starts in about 2 s here; a page that froze the browser would take far longer.
    assert!(took < Duration::from_secs(30), "chromium took {took:?}");
}
