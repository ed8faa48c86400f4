//! Keeps a one-row view of each large batch "as a sample for later": the view is
//! `FEATURES * 4` bytes, but it pins the whole `BATCH x FEATURES` storage.

use crate::common::{loss_fn, synthetic_batch, Mlp};
use candle_core::{Device, Result, Tensor};
use candle_nn::{Optimizer, VarMap, SGD};

/// Steps the example runs.
pub const STEPS: usize = 10;

/// Trains for [`STEPS`] steps keeping the first row of each batch.
pub fn run() -> Result<usize> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut samples: Vec<Tensor> = Vec::new();
    let steps = tensor_lifetime::loop_scope!("'train");
    for step in 0..STEPS {
        let _it = steps.iteration();
        let (x, y) = synthetic_batch(step, &device)?;
        tensor_lifetime::tag!(x);
        let row = x.narrow(0, 0, 1)?; // a view: should be `.copy()?`
        tensor_lifetime::tag!(row);
        tensor_lifetime::store!(row, "samples");
        samples.push(row);
        let logits = model.forward(&x)?;
        let loss = loss_fn(&logits, &y)?;
        tensor_lifetime::tag!(loss);
        opt.backward_step(&loss)?;
    }
    drop(steps);
    Ok(samples.len())
}
