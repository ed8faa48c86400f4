//! Keeps a one-row view of each large batch "as a sample for later": the view is
//! `FEATURES * 4` bytes, but it pins the whole `BATCH x FEATURES` storage.

use crate::common::{loss_fn, synthetic_batch, Mlp};
use candle_core::{Device, Result, Tensor};
use candle_nn::{Optimizer, VarMap, SGD};

/// Steps the example runs.
pub const STEPS: usize = 10;

/// Trains for [`STEPS`] steps keeping the first row of each batch.
#[tensor_lifetime::track]
pub fn run() -> Result<usize> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut samples: Vec<Tensor> = Vec::new();
    'train: for step in 0..STEPS {
        let (x, y) = synthetic_batch(step, &device)?;
        let row = x.narrow(0, 0, 1)?; // a view: should be `.copy()?`
        samples.push(row);
        let logits = model.forward(&x)?;
        let loss = loss_fn(&logits, &y)?;
        opt.backward_step(&loss)?;
    }
    Ok(samples.len())
}
