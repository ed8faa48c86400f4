//! Tensors registered from several threads at once are all accounted for, exactly. The
//! per-site totals are the whole process's: the test runs alone in its process.

use candle_core::{DType, Device, Tensor};
use std::sync::{Arc, Barrier};
use tensor_lifetime::site;

const THREADS: usize = 8;
const PER_THREAD: usize = 500;
const KEPT_EVERY: usize = 5;

#[test]
fn concurrent_tagging_is_exact() {
    if !tensor_lifetime_tests::process::alone(module_path!(), "concurrent_tagging_is_exact") {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut kept = Vec::new();
                for i in 0..PER_THREAD {
                    let t = Tensor::zeros(16, DType::F32, &Device::Cpu).unwrap();
                    tensor_lifetime::__private::tag(&t, site!("worker_tensor"));
                    // A second tag of the same tensor is an alias, never a second record.
                    tensor_lifetime::__private::tag(&t, site!("alias"));
                    if i % KEPT_EVERY == 0 {
                        kept.push(t);
                    }
                }
                kept
            })
        })
        .collect();
    // Sweeps run while the workers tag.
    for _ in 0..20 {
        let _ = tensor_lifetime::report();
    }
    let kept: Vec<Vec<Tensor>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let live = tensor_lifetime::snapshot();
    let expected_live = THREADS * PER_THREAD / KEPT_EVERY;
    assert_eq!(live.len(), expected_live);
    assert!(live.iter().all(|t| t.site.label == "worker_tensor"));
    let report = tensor_lifetime::report();
    assert_eq!(report.live_bytes, expected_live as u64 * 64);
    let totals: Vec<_> = tensor_lifetime::site_totals()
        .into_iter()
        .map(|t| (t.site.label, t.born, t.dropped))
        .collect();
    let born = (THREADS * PER_THREAD) as u64;
    assert_eq!(
        totals,
        vec![("worker_tensor", born, born - expected_live as u64)]
    );
    drop(kept);
    assert!(tensor_lifetime::snapshot().is_empty());
}
