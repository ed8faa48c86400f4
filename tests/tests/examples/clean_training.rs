//! `clean_training` reports no leak; its lazily created optimizer state shows as
//! `retained` (information), of role `optimizer_state`.

use tensor_lifetime_examples::clean_training;
use tensor_lifetime_tests::{findings_for, json_report_env, read_json};

#[test]
fn clean_loop_has_no_leak() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "clean_loop_has_no_leak") {
        return;
    }
    let json_path = json_report_env("clean_training.json");
    let loss = clean_training::run().unwrap();
    assert!(loss.is_finite());
    let json = read_json(&json_path);
    let findings = json["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .all(|f| f["kind"] == "retained" && f["growing"] == false),
        "{json:#}"
    );
    let state = findings_for(&json, "state");
    assert_eq!(state.len(), 1, "{json:#}");
    // One velocity buffer per parameter (2 layers x weight and bias), born in the first
    // step and kept.
    assert_eq!(state[0]["survivors"], 4);
    assert_eq!(state[0]["iterations"], 1);
    assert_eq!(state[0]["holders"][0]["label"], "self.velocity");
    // The velocity buffers are `Var`s, which would be parameters: the optimizer says
    // their role (`tag!(state, "state", Role::OptimizerState)`).
    assert_eq!(state[0]["role"], "optimizer_state", "{json:#}");
    let now = &json["memory_by_role"]["now"];
    assert_eq!(now["optimizer_state"]["tensors"], 4, "{json:#}");
    assert_eq!(now["parameter"]["tensors"], 4, "{json:#}");
}
