//! A running loss summed without `detach`: each step's loss, and with it the whole
//! autograd graph of the step, stays reachable from `total`.

use crate::common::{loss_fn, synthetic_batch, Mlp};
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{Optimizer, VarMap, SGD};

/// Steps the example runs.
pub const STEPS: usize = 12;

/// Trains for [`STEPS`] steps, accumulating the loss for logging the wrong way.
#[tensor_lifetime::track]
pub fn run() -> Result<f32> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut total = Tensor::zeros((), DType::F32, &device)?;
    'train: for step in 0..STEPS {
        let (x, y) = synthetic_batch(step, &device)?;
        let logits = model.forward(&x)?;
        let loss = loss_fn(&logits, &y)?;
        opt.backward_step(&loss)?;
        total = (total + &loss)?; // should be `loss.detach()`
    }
    Ok(total.to_scalar::<f32>()? / STEPS as f32)
}
