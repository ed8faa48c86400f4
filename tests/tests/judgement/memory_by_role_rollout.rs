//! Roles with many live tensors: a rollout keeps one observation per step, so above
//! `TENSOR_LIFETIME_EXACT_MAX` live records the inner iteration ends are partial sweeps
//! (the generational registry). Their split by role must still count every live tensor,
//! the ones a partial sweep does not walk included, exactly as an exact walk would. The
//! split is the whole process's: the test runs alone in its process.

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime::MemoryByRole;

/// Steps of an epoch: far above the 16 live records of exact sweeps.
const STEPS: usize = 300;
/// Floats per observation (256 bytes).
const OBS: usize = 64;

/// Two epochs; each keeps its observations until the epoch's update. Returns the split
/// read in the middle of the first epoch, at step `at`.
#[tensor_lifetime::track]
fn rollout(at: usize) -> Result<MemoryByRole> {
    let mut kept: Vec<Tensor> = Vec::with_capacity(STEPS);
    let mut mid = None;
    for epoch in 0..2 {
        for step in 0..STEPS {
            if epoch == 0 && step == at {
                mid = Some(tensor_lifetime::report().memory_by_role);
            }
            let obs = Tensor::ones(OBS, DType::F32, &Device::Cpu)?;
            let noise = (&obs * 0.5)?;
            let x = (obs + noise)?;
            kept.push(x);
        }
        kept.clear();
    }
    Ok(mid.expect("the step was reached"))
}

#[test]
fn a_partial_sweep_splits_every_live_tensor_by_role() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_partial_sweep_splits_every_live_tensor_by_role",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    for at in [60, 200, STEPS - 1] {
        let split = rollout(at).unwrap();
        // The latest iteration end is step `at - 1`'s: `at` observations are kept, all
        // of role `other`, and that step's `obs` and `noise` were its temporaries.
        let now = &split.now;
        assert_eq!(now.other.tensors, at as u64, "at step {at}: {split:?}");
        assert_eq!(
            now.other.bytes,
            (at * OBS * 4) as u64,
            "at step {at}: {split:?}"
        );
        assert_eq!(now.temporary.tensors, 2, "at step {at}: {split:?}");
        assert_eq!(
            now.temporary.bytes,
            (2 * OBS * 4) as u64,
            "at step {at}: {split:?}"
        );
        assert_eq!(
            now.parameter.tensors + now.activation.tensors,
            0,
            "{split:?}"
        );
    }
}
