//! `decoding`: with a cache per request the run is clean; with `--leak` (one cache for
//! every request, never reset) each layer's keys and values are `growing_tensor` leaks
//! at the example's own lines, with their bytes (300 positions of 25 requests of 12
//! tokens, plus each prompt's 4 but the first token's) and their growth per request.

use candle_core::Device;
use tensor_lifetime_examples::decoding;
use tensor_lifetime_tests::{findings_for, json_report_env, line_of, read_json};

const SOURCE: &str = include_str!("../../../examples/src/decoding.rs");

/// Bytes of `positions` positions of one site's tensors: 2 layers of 64 f32.
fn bytes(positions: u64) -> u64 {
    positions * 2 * 64 * 4
}

#[test]
fn a_cache_kept_across_requests_is_a_growing_tensor() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_cache_kept_across_requests_is_a_growing_tensor",
    ) {
        return;
    }
    let json_path = json_report_env("decoding_leak.json");
    let outcome = decoding::run(true, &Device::Cpu).unwrap();
    // 4 prompt positions and 11 generated ones per request.
    assert_eq!(outcome.cache_positions, 25 * 15);
    let json = read_json(&json_path);
    let line = line_of(
        SOURCE,
        "let (k, v) = match (cache.k.take(), cache.v.take())",
    );
    for label in ["k", "v"] {
        // The cache also makes tensors of a new size every request (shape churn).
        let found: Vec<_> = findings_for(&json, label)
            .into_iter()
            .filter(|f| f["kind"] != "shape_churn")
            .collect();
        assert_eq!(found.len(), 1, "{json:#}");
        let f = found[0];
        assert_eq!(f["kind"], "growing_tensor", "{json:#}");
        assert_eq!(f["site"]["file"], "examples/src/decoding.rs");
        assert_eq!(f["site"]["line"], line);
        assert_eq!(f["survivors"], 2, "one per layer");
        assert_eq!(f["bytes"], bytes(25 * 15));
        assert_eq!(f["bytes_per_iteration"], bytes(15));
        // The layer's cache keeps the newest one.
        assert_eq!(
            f["holders"][0]["label"],
            format!("cache.{label}"),
            "{json:#}"
        );
    }
    let leaks = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "leak" || f["kind"] == "growing_tensor")
        .count();
    assert_eq!(leaks, 2, "{json:#}");
}

#[test]
fn a_cache_per_request_is_clean() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "a_cache_per_request_is_clean") {
        return;
    }
    let json_path = json_report_env("decoding_clean.json");
    let outcome = decoding::run(false, &Device::Cpu).unwrap();
    assert_eq!(outcome.cache_positions, 15);
    let json = read_json(&json_path);
    assert!(json["findings"].as_array().unwrap().is_empty(), "{json:#}");
    assert_eq!(json["live_tensors"], 0, "{json:#}");
}
