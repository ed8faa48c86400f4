//! One holder for the same tensors everywhere: a loss summed without `detach` keeps every
//! step's graph, and with it every step's batch `x` (an input of the graph's first op, no
//! node of it). The finding of `total` (the in-process report), the JSON report
//! (`TENSOR_LIFETIME_JSON`) and the post-mortem must all say that the graph of `total`
//! holds the batches: the findings fold `x` into `total`'s held sites, and the post-mortem
//! counts the batches' bytes under that graph, not under "no holder seen".
//!
//! Checked with few live records (every walk exact: at most `TENSOR_LIFETIME_EXACT_MAX`,
//! 16) and with more (most records are then old ones of the generational registry, which
//! the post-mortem's graph walk must find as inputs too). Both cases run in one test, one
//! after the other: the tracker is one per process.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarMap;
use tensor_lifetime::report_model::report::HolderKind;
use tensor_lifetime::PostMortem;
use tensor_lifetime_examples::common::{synthetic_batch, Mlp, BATCH_BYTES};
use tensor_lifetime_tests::{findings_for, json_report_env, read_json};

/// Steps of the loop: enough for the growth to be judged, few enough that the records of
/// the small case (a batch, its logits and a total per step) stay at most 16.
const STEPS: usize = 5;

/// The default `TENSOR_LIFETIME_EXACT_MAX`.
const EXACT_MAX: usize = 16;

/// Sums each step's logits into `total` without `detach`: every step's graph, and the
/// batch it was computed from, stays reachable from the total returned.
#[tensor_lifetime::track]
fn train(model: &Mlp) -> Result<Tensor> {
    let device = Device::Cpu;
    let mut total = Tensor::zeros((), DType::F32, &device)?;
    'steps: for step in 0..STEPS {
        let (x, _) = synthetic_batch(step, &device)?;
        let logits = model.forward(&x)?;
        total = (total + logits.sum_all()?)?;
    }
    Ok(total)
}

/// The finding of `total` folds the batches in (its held sites), and no finding of its own
/// is made for them: in the report given and in the JSON report written.
fn assert_findings_fold_batches(report: &tensor_lifetime::Report, json: &serde_json::Value) {
    let totals: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.site.label == "total")
        .collect();
    assert!(!totals.is_empty(), "{report}");
    for f in &totals {
        assert!(f.held_sites.iter().any(|s| s.label == "x"), "{report}");
    }
    assert!(
        report.findings.iter().all(|f| f.site.label != "x"),
        "{report}"
    );
    let totals = findings_for(json, "total");
    assert!(!totals.is_empty(), "{json:#}");
    for f in totals {
        let held = f["held_sites"].as_array().expect("held sites");
        assert!(held.iter().any(|s| s["label"] == "x"), "{f:#}");
    }
    assert!(findings_for(json, "x").is_empty(), "{json:#}");
}

/// The post-mortem counts the batches under the graph of `total`, and what no holder keeps
/// is less than one batch.
fn assert_post_mortem_holds_batches(pm: &PostMortem) {
    let graph = pm
        .by_holder
        .iter()
        .find(|h| h.holder.kind == HolderKind::Graph && h.holder.label.as_deref() == Some("total"))
        .unwrap_or_else(|| panic!("no graph holder `total`:\n{pm}"));
    assert!(graph.bytes >= STEPS as u64 * BATCH_BYTES, "{pm}");
    let unknown: u64 = pm
        .by_holder
        .iter()
        .filter(|h| h.holder.kind == HolderKind::Unknown)
        .map(|h| h.bytes)
        .sum();
    assert!(unknown < BATCH_BYTES, "{pm}");
}

#[test]
fn findings_json_and_post_mortem_name_the_same_holder() {
    let json_path = json_report_env("holder_agreement.json");
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 16, &Device::Cpu).unwrap();

    // Few live records: every walk is exact.
    let total = train(&model).unwrap();
    let live = tensor_lifetime::snapshot().len();
    assert!(live <= EXACT_MAX, "{live} live records");
    assert_findings_fold_batches(&tensor_lifetime::report(), &read_json(&json_path));
    assert_post_mortem_holds_batches(&tensor_lifetime::post_mortem());
    drop(total);

    // More live records than the threshold: the batches are old records between walks.
    let others: Vec<Tensor> = (0..2 * EXACT_MAX)
        .map(|_| {
            let other = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
            tensor_lifetime::tag!(other);
            other
        })
        .collect();
    let total = train(&model).unwrap();
    let live = tensor_lifetime::snapshot().len();
    assert!(live > EXACT_MAX, "{live} live records");
    assert_findings_fold_batches(&tensor_lifetime::report(), &read_json(&json_path));
    assert_post_mortem_holds_batches(&tensor_lifetime::post_mortem());
    drop((total, others));
}
