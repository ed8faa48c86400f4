//! `view_retention` reports the kept rows as views pinning whole batches, sized by the
//! storages they pin.

use tensor_lifetime_examples::common::{BATCH_BYTES, FEATURES};
use tensor_lifetime_examples::view_retention::{self, STEPS};
use tensor_lifetime_tests::{findings_for, json_report_env, line_of, read_json};

#[test]
fn kept_rows_pin_their_batches() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "kept_rows_pin_their_batches") {
        return;
    }
    let json_path = json_report_env("view_retention.json");
    view_retention::run().unwrap();
    let json = read_json(&json_path);
    let source = include_str!("../../../examples/src/view_retention.rs");
    let found = findings_for(&json, "row");
    assert_eq!(found.len(), 1, "{json:#}");
    let f = found[0];
    assert_eq!(f["kind"], "view_retention");
    assert_eq!(f["growing"], true);
    assert_eq!(f["site"]["file"], "examples/src/view_retention.rs");
    assert_eq!(
        f["site"]["line"],
        line_of(source, "let row = x.narrow(0, 0, 1)?;")
    );
    assert_eq!(f["survivors"], STEPS as u64);
    assert_eq!(f["bytes"], STEPS as u64 * BATCH_BYTES);
    assert_eq!(f["view_bytes"], (STEPS * FEATURES * 4) as u64);
    assert_eq!(f["view_storage_bytes"], STEPS as u64 * BATCH_BYTES);
    assert_eq!(f["holders"][0]["label"], "samples");
    // The batches themselves were dropped: only the views keep their storage.
    assert!(findings_for(&json, "x").is_empty(), "{json:#}");
}
