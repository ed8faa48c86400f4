//! Refcounts and drops as the tracker sees them: clones raise the count, drops are seen
//! at the next sweep, views share a storage and are counted once. The live tensors are
//! the whole process's: the test runs alone in its process.

use candle_core::{DType, Device, Tensor};
use tensor_lifetime::{site, snapshot};

fn live_for(label: &str) -> Vec<tensor_lifetime::LiveTensor> {
    snapshot()
        .into_iter()
        .filter(|t| t.site.label == label)
        .collect()
}

#[test]
fn refcounts_drops_and_views() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "refcounts_drops_and_views") {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let a = Tensor::zeros((32, 32), DType::F32, &Device::Cpu).unwrap();
    tensor_lifetime::__private::tag(&a, site!("a"));
    let live = live_for("a");
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].refcount, 1);
    assert_eq!(live[0].storage_bytes, 32 * 32 * 4);

    // Clones raise the count; a clone is the same tensor (an alias), not a new record.
    let a2 = a.clone();
    let a3 = a.clone();
    tensor_lifetime::__private::tag(&a2, site!("a2"));
    assert_eq!(live_for("a")[0].refcount, 3);
    assert!(live_for("a2").is_empty(), "a clone keeps its creation site");
    drop(a3);
    assert_eq!(live_for("a")[0].refcount, 2);

    // Views share the storage: bytes are counted once, by the oldest live record.
    let row = a.narrow(0, 0, 1).unwrap();
    tensor_lifetime::__private::tag(&row, site!("row"));
    let report = tensor_lifetime::report();
    assert_eq!(report.live_tensors, 2);
    assert_eq!(report.live_bytes, 32 * 32 * 4);
    let row_live = &live_for("row")[0];
    assert_eq!(row_live.view_bytes, 32 * 4);
    assert_eq!(row_live.storage_bytes, 32 * 32 * 4);

    // Dropping the base keeps the storage alive through the view: still counted once.
    drop(a);
    drop(a2);
    assert!(
        live_for("a").is_empty(),
        "the drop is seen at the next sweep"
    );
    let report = tensor_lifetime::report();
    assert_eq!(report.live_tensors, 1);
    assert_eq!(report.live_bytes, 32 * 32 * 4);

    drop(row);
    let report = tensor_lifetime::report();
    assert_eq!(report.live_tensors, 0);
    assert_eq!(report.live_bytes, 0);
    let totals: Vec<_> = tensor_lifetime::site_totals()
        .into_iter()
        .map(|t| (t.site.label, t.born, t.dropped))
        .collect();
    assert!(totals.contains(&("a", 1, 1)), "{totals:?}");
    assert!(totals.contains(&("row", 1, 1)), "{totals:?}");
}
