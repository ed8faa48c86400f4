//! `leaky_dataset` reports its cache as a leak at the right file:line and label with the
//! right bytes, read from the JSON report (`TENSOR_LIFETIME_JSON`).

use tensor_lifetime_examples::common::BATCH_BYTES;
use tensor_lifetime_examples::leaky_dataset::{self, BATCHES, EPOCHS, LEAKED_BYTES};
use tensor_lifetime_tests::{findings_for, json_report_env, line_of, read_json};

#[test]
fn cache_is_reported_as_a_leak() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "cache_is_reported_as_a_leak") {
        return;
    }
    let json_path = json_report_env("leaky_dataset.json");
    leaky_dataset::run().unwrap();
    let json = read_json(&json_path);
    let source = include_str!("../../../examples/src/leaky_dataset.rs");
    let found = findings_for(&json, "x");
    assert_eq!(found.len(), 1, "{json:#}");
    let f = found[0];
    assert_eq!(f["kind"], "leak");
    assert_eq!(f["site"]["file"], "examples/src/leaky_dataset.rs");
    assert_eq!(
        f["site"]["line"],
        line_of(source, "let (x, y) = synthetic_batch(step, &self.device)?;")
    );
    assert_eq!(f["survivors"], (EPOCHS * BATCHES) as u64);
    assert_eq!(f["bytes"], LEAKED_BYTES);
    // Judged per epoch, the outermost loop: one epoch's batches per iteration.
    assert_eq!(f["loop"], "'epoch");
    assert_eq!(f["bytes_per_iteration"], BATCHES as u64 * BATCH_BYTES);
    assert_eq!(f["refcount"], 1);
    let holder = &f["holders"][0];
    assert_eq!(holder["kind"], "store");
    assert_eq!(holder["label"], "self.cache");
    assert_eq!(holder["count"], (EPOCHS * BATCHES) as u64);
    // Nothing else leaks: the model, the optimizer and the per-step tensors are clean.
    let leaks: Vec<_> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "leak")
        .collect();
    assert_eq!(leaks.len(), 1, "{json:#}");
}
