//! `loss_accumulation` reports `total` as a growing graph retention with the graph it
//! holds, and folds into it the per-step losses and the batches the graph holds.

use tensor_lifetime_examples::loss_accumulation::{self, STEPS};
use tensor_lifetime_tests::{findings_for, json_report_env, line_of, read_json};

#[test]
fn running_loss_carries_its_graph() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "running_loss_carries_its_graph") {
        return;
    }
    let json_path = json_report_env("loss_accumulation.json");
    loss_accumulation::run().unwrap();
    let json = read_json(&json_path);
    let source = include_str!("../../../examples/src/loss_accumulation.rs");
    let found = findings_for(&json, "total");
    assert_eq!(found.len(), 1, "{json:#}");
    let f = found[0];
    assert_eq!(f["kind"], "graph_retention");
    assert_eq!(f["growing"], true);
    assert_eq!(f["site"]["file"], "examples/src/loss_accumulation.rs");
    assert_eq!(
        f["site"]["line"],
        line_of(source, "total = (total + &loss)?;")
    );
    // Every step's total is still alive, held by the graph of the newest one.
    assert_eq!(f["survivors"], STEPS as u64);
    assert!(
        f["graph_tensors"].as_u64().unwrap() >= 10 * STEPS as u64,
        "{f:#}"
    );
    // The graph holds each step's logits (64 x 10 f32) at least.
    assert!(
        f["bytes"].as_u64().unwrap() >= (STEPS * 64 * 10 * 4) as u64,
        "{f:#}"
    );
    assert!(f["hint"].as_str().unwrap().contains("detach"));
    // The per-step losses and logits are held only by that graph: folded in.
    let held: Vec<&str> = f["held_sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["label"].as_str().unwrap())
        .collect();
    assert!(
        held.contains(&"loss") && held.contains(&"logits"),
        "{held:?}"
    );
    assert!(findings_for(&json, "loss").is_empty());
    // Each step's batch `x` (64 x 784 f32) leads to no variable, so it is no node of
    // the graph, but the first op holds it: held by the graph, counted in its bytes,
    // and no leak of its own.
    assert!(held.contains(&"x"), "{held:?}");
    assert!(findings_for(&json, "x").is_empty(), "{json:#}");
    let batches = (STEPS * 64 * 784 * 4) as u64;
    assert!(f["bytes"].as_u64().unwrap() >= batches, "{f:#}");
    assert!(f["graph_bytes"].as_u64().unwrap() >= batches, "{f:#}");
}
