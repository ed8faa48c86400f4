//! A small MLP classifier and synthetic data shared by the examples.

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{linear, Linear, Module, VarBuilder, VarMap};

/// Input features per sample.
pub const FEATURES: usize = 784;
/// Samples per batch.
pub const BATCH: usize = 64;
/// Classes.
pub const CLASSES: usize = 10;

/// A two-layer perceptron `784 -> hidden -> 10`.
#[derive(Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    /// A new model with its parameters in `varmap`.
    pub fn new(varmap: &VarMap, hidden: usize, device: &Device) -> Result<Mlp> {
        let vb = VarBuilder::from_varmap(varmap, DType::F32, device);
        Ok(Mlp {
            fc1: linear(FEATURES, hidden, vb.pp("fc1"))?,
            fc2: linear(hidden, CLASSES, vb.pp("fc2"))?,
        })
    }

    /// Logits for a batch.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc1.forward(x)?.relu()?;
        self.fc2.forward(&h)
    }
}

/// Cross-entropy loss of logits against class ids.
pub fn loss_fn(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    candle_nn::loss::nll(&log_probs, labels)
}

/// A deterministic synthetic batch: inputs `(BATCH, FEATURES)` and labels `(BATCH,)`.
pub fn synthetic_batch(step: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    let xs: Vec<f32> = (0..BATCH * FEATURES)
        .map(|i| ((i * 7 + step * 13) % 101) as f32 / 101.0 - 0.5)
        .collect();
    let ys: Vec<u32> = (0..BATCH).map(|i| ((i + step) % CLASSES) as u32).collect();
    let x = Tensor::from_vec(xs, (BATCH, FEATURES), device)?;
    let y = Tensor::from_vec(ys, BATCH, device)?;
    Ok((x, y))
}

/// Bytes of one input batch (`BATCH x FEATURES` f32).
pub const BATCH_BYTES: u64 = (BATCH * FEATURES * 4) as u64;
