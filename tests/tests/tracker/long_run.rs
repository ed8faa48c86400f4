//! Long run: 1,000,000 iterations of a tracked loop keep the tracker's memory flat.
//!
//! A counting global allocator (the test runs alone in its process) gives the heap bytes in use;
//! they are sampled at the end of every 100,000 iterations of a small tracked loop (10
//! epochs of 100,000 steps, one small tensor per step, a window of the 8 latest kept so
//! every sweep has survivors to summarize). The tracker folds dead records into per-site
//! counters and keeps per-(loop, site) summaries, not histories, so after the first epoch
//! the heap must not grow with the iterations. The bound is generous (256 KiB over nine
//! epochs, where a leak of one record per iteration would be tens of MiB); the figures of
//! a run are in `docs/reliability.md`.

use candle_core::{Device, Result, Tensor};
use std::collections::VecDeque;
use std::time::Instant;
use tensor_lifetime_test_support::alloc::live_bytes;

const EPOCHS: usize = 10;
const STEPS: usize = 100_000;
const WINDOW: usize = 8;

/// Heap bytes in use now.
fn heap() -> i64 {
    live_bytes() as i64
}

#[tensor_lifetime::track]
fn long_run(samples: &mut Vec<i64>) -> Result<f32> {
    let mut window: VecDeque<Tensor> = VecDeque::with_capacity(WINDOW);
    let mut last = 0.0;
    'epoch: for epoch in 0..EPOCHS {
        for step in 0..STEPS {
            let x = Tensor::full((epoch * STEPS + step) as f32, 4, &Device::Cpu)?;
            if window.len() == WINDOW {
                window.pop_front();
            }
            window.push_back(x);
        }
        last = window[WINDOW - 1].sum_all()?.to_scalar::<f32>()?;
        samples.push(heap());
    }
    Ok(last)
}

#[test]
fn a_million_iterations_keep_tracker_memory_flat() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_million_iterations_keep_tracker_memory_flat",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    assert!(tensor_lifetime::enabled());
    let before = heap();
    let mut samples = Vec::with_capacity(EPOCHS);
    let started = Instant::now();
    let last = long_run(&mut samples).unwrap();
    let elapsed = started.elapsed();
    assert_eq!(last, ((EPOCHS * STEPS - 1) * 4) as f32);

    let iterations: u64 = tensor_lifetime::report()
        .loops
        .iter()
        .map(|l| l.iterations)
        .sum();
    assert_eq!(iterations, (EPOCHS * STEPS + EPOCHS) as u64);
    let totals = tensor_lifetime::site_totals();
    let x = totals.iter().find(|t| t.site.label == "x").unwrap();
    assert_eq!(
        (x.born, x.dropped),
        ((EPOCHS * STEPS) as u64, (EPOCHS * STEPS) as u64)
    );

    let kib = |b: i64| format!("{:.1} KiB", b as f64 / 1024.0);
    println!(
        "long run: {} iterations in {:.2?} ({:.2} us per iteration); heap before {}, after each 100k: {}",
        EPOCHS * STEPS,
        elapsed,
        elapsed.as_secs_f64() * 1e6 / (EPOCHS * STEPS) as f64,
        kib(before),
        samples.iter().map(|s| kib(*s)).collect::<Vec<_>>().join(", ")
    );
    let steady = &samples[1..];
    let spread = steady.iter().max().unwrap() - steady.iter().min().unwrap();
    let growth = samples[EPOCHS - 1] - samples[1];
    println!(
        "long run: spread over epochs 2-10 {}, growth from epoch 2 to 10 {}",
        kib(spread),
        kib(growth)
    );
    assert!(spread < 256 * 1024, "heap not flat: {samples:?}");
    // A record or an event kept per iteration would be at least 900,000 x 16 bytes here.
    assert!(growth < 256 * 1024, "heap grows: {samples:?}");
}
