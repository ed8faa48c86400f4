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

#[tensor_lifetime::track]
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
        self.cache.push(x.clone());
        Ok((x, y))
    }
}

/// Bytes the cache holds after the run.
pub const LEAKED_BYTES: u64 = (EPOCHS * BATCHES) as u64 * BATCH_BYTES;

/// Trains a small MLP for [`EPOCHS`] epochs over the leaky dataset.
#[tensor_lifetime::track]
pub fn run() -> Result<f32> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut data = CachedDataset::new(device.clone());
    let mut last = 0.0;
    'epoch: for epoch in 0..EPOCHS {
        for b in 0..BATCHES {
            let (x, y) = data.batch(epoch * BATCHES + b)?;
            let logits = model.forward(&x)?;
            let loss = loss_fn(&logits, &y)?;
            opt.backward_step(&loss)?;
            last = loss.to_scalar::<f32>()?;
        }
    }
    Ok(last)
}
