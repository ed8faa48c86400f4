//! A run of a single epoch: a leak in the inner loop is confirmed when the epoch loop
//! closes (there is no second epoch to confirm it at), named with its site and said to
//! be seen in one epoch; the same loop whose growth is released at the epoch's end, or
//! whose cache lives in the epoch only, is clean. Each case runs in its own leak session.

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime::{check_leaks, LeakTestOptions, LeakTestOutcome};

const STEPS: usize = 30;

/// One epoch of `STEPS` steps. `keep`: each step's batch goes into `cache`, which
/// outlives the epoch (the leak). Otherwise the per-epoch losses are kept and released
/// at the epoch's end.
#[tensor_lifetime::track]
fn one_epoch(cache: &mut Vec<Tensor>, keep: bool) -> Result<f32> {
    let mut total = 0.0;
    for _epoch in 0..1 {
        let mut losses: Vec<Tensor> = Vec::new();
        for step in 0..STEPS {
            let batch = Tensor::full(step as f32, (16, 16), &Device::Cpu)?;
            let loss = batch.sqr()?.mean_all()?;
            if keep {
                cache.push(batch);
            }
            losses.push(loss);
        }
        for loss in losses {
            total += loss.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        }
    }
    Ok(total)
}

fn run(keep: bool) -> (Vec<Tensor>, LeakTestOutcome) {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = tensor_lifetime_tests::serial();
    let mut cache = Vec::new();
    let (result, outcome) = check_leaks(LeakTestOptions::default(), || one_epoch(&mut cache, keep))
        .expect("tracking is on");
    result.unwrap();
    (cache, outcome)
}

#[test]
fn a_leak_in_the_only_epoch_is_found() {
    let (cache, outcome) = run(true);
    let leaks: Vec<_> = outcome.report.leaks().collect();
    assert_eq!(leaks.len(), 1, "{}", outcome.report);
    let leak = leaks[0];
    assert_eq!(leak.site.label, "batch", "{}", outcome.report);
    assert_eq!(leak.survivors, STEPS as u64, "{}", outcome.report);
    assert_eq!(
        leak.bytes,
        (STEPS * 16 * 16 * 4) as u64,
        "{}",
        outcome.report
    );
    assert!(leak.hint.contains("outer loop ran once"), "{}", leak.hint);
    drop(cache);
}

#[test]
fn growth_released_within_the_only_epoch_is_clean() {
    let (cache, outcome) = run(false);
    assert!(cache.is_empty());
    assert_eq!(outcome.report.leaks().count(), 0, "{}", outcome.report);
}
