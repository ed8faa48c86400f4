//! A dataset that caches every batch it yields in a `Vec` and never evicts: the cache
//! grows by one batch per step, a leak of `BATCH_BYTES` per batch.

use crate::common::{loss_fn, synthetic_batch, Mlp, BATCH_BYTES};
use candle_core::{Device, Result, Tensor};
use candle_nn::{Optimizer, VarMap, SGD};

/// Epochs and batches per epoch the example runs.
pub const EPOCHS: usize = 5;
pub const BATCHES: usize = 6;

/// A dataset that remembers every input batch it produced ("for later analysis").
#[derive(Debug)]
pub struct CachedDataset {
    cache: Vec<Tensor>,
    device: Device,
}

impl CachedDataset {
    pub fn new(device: Device) -> Self {
        CachedDataset {
            cache: Vec::new(),
            device,
        }
    }

    /// The batch for `step`.
    pub fn batch(&mut self, step: usize) -> Result<(Tensor, Tensor)> {
        let (x, y) = synthetic_batch(step, &self.device)?;
        tensor_lifetime::tag!(x);
        tensor_lifetime::store!(x, "self.cache");
        self.cache.push(x.clone());
        Ok((x, y))
    }
}

/// Bytes the cache holds after the run.
pub const LEAKED_BYTES: u64 = (EPOCHS * BATCHES) as u64 * BATCH_BYTES;

/// Trains a small MLP for [`EPOCHS`] epochs over the leaky dataset.
pub fn run() -> Result<f32> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut data = CachedDataset::new(device.clone());
    let mut last = 0.0;
    let epochs = tensor_lifetime::loop_scope!("'epoch");
    for epoch in 0..EPOCHS {
        let _epoch = epochs.iteration();
        let batches = tensor_lifetime::loop_scope!();
        for b in 0..BATCHES {
            let _batch = batches.iteration();
            let (x, y) = data.batch(epoch * BATCHES + b)?;
            let logits = model.forward(&x)?;
            tensor_lifetime::tag!(logits);
            let loss = loss_fn(&logits, &y)?;
            tensor_lifetime::tag!(loss);
            opt.backward_step(&loss)?;
            last = loss.to_scalar::<f32>()?;
        }
    }
    Ok(last)
}
