//! A leaky training loop run until the GPU is out of memory, and the post-mortem it
//! leaves: the example behind the out-of-memory part of `docs/gpu.md`.
//!
//! An MLP trained with candle-nn's SGD, whose hidden activations of every step are kept
//! "for later analysis" (`history.push(hidden)`): each step keeps `batch x hidden` f32
//! and, through its autograd graph, the batch. On a GPU the loop runs until an
//! allocation fails with candle's CUDA out-of-memory error (plain device allocations
//! from the device's memory pool, never managed memory); the tracked function that
//! returns it writes the post-mortem (stderr, `TENSOR_LIFETIME_JSON`, the event log),
//! once, and the example prints [`tensor_lifetime::post_mortem`] again from `main`.
//!
//! On the CPU ([`Config::cpu`]) nothing runs out: the loop stops after a few steps with a
//! stand-in for the CUDA error (a `candle_core::Error::Cuda` saying
//! `CUDA_ERROR_OUT_OF_MEMORY`), which takes the same path (`tests/tests/examples/cuda_oom.rs`).

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap, SGD};

/// Sizes of the model and the loop.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub batch: usize,
    pub features: usize,
    pub hidden: usize,
    pub classes: usize,
    /// Steps at most (the GPU runs out long before).
    pub max_steps: usize,
    /// Return the stand-in out-of-memory error after this many steps (CPU runs).
    pub fake_oom_after: Option<usize>,
}

impl Config {
    /// On an H200 (141 GiB): 128 MiB of hidden activations and 16 MiB of batch kept per
    /// step, out of memory after about a thousand steps.
    pub fn gpu() -> Config {
        Config {
            batch: 4096,
            features: 1024,
            hidden: 8192,
            classes: 16,
            max_steps: 1_000_000,
            fake_oom_after: None,
        }
    }

    /// Small sizes on the CPU, with the stand-in error after 8 steps.
    pub fn cpu() -> Config {
        Config {
            batch: 32,
            features: 64,
            hidden: 256,
            classes: 4,
            max_steps: 100,
            fake_oom_after: Some(8),
        }
    }
}

/// The model: two linear layers.
#[derive(Debug)]
pub struct Trainer {
    l1: Linear,
    l2: Linear,
}

#[tensor_lifetime::track]
impl Trainer {
    /// The hidden activations of a batch.
    pub fn features(&self, x: &Tensor) -> Result<Tensor> {
        let hidden = self.l1.forward(x)?.relu()?;
        Ok(hidden)
    }
}

/// The stand-in for cudarc's out-of-memory driver error, on the CPU.
#[derive(Debug)]
struct FakeOom;

impl std::fmt::Display for FakeOom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\") (CPU stand-in)")
    }
}

impl std::error::Error for FakeOom {}

/// A batch of inputs; the stand-in error instead after `fake_oom_after` steps.
fn batch(device: &Device, cfg: &Config, step: usize) -> Result<Tensor> {
    if cfg.fake_oom_after == Some(step) {
        return Err(candle_core::Error::Cuda(Box::new(FakeOom)));
    }
    Tensor::randn(0f32, 1.0, (cfg.batch, cfg.features), device)
}

/// Trains until an error (out of memory on a GPU) or `max_steps`; returns the steps done
/// and the error that stopped it.
#[tensor_lifetime::track]
pub fn train_until_oom(device: &Device, cfg: &Config) -> Result<usize> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
    let trainer = Trainer {
        l1: linear(cfg.features, cfg.hidden, vb.pp("l1"))?,
        l2: linear(cfg.hidden, cfg.classes, vb.pp("l2"))?,
    };
    let params = varmap.all_vars();
    let mut opt = SGD::new(params, 0.01)?;
    let mut history = Vec::new();
    let labels: Vec<u32> = (0..cfg.batch).map(|i| (i % cfg.classes) as u32).collect();
    'step: for step in 0..cfg.max_steps {
        let x = batch(device, cfg, step)?;
        let y = Tensor::new(labels.as_slice(), device)?;
        let hidden = trainer.features(&x)?;
        let logits = trainer.l2.forward(&hidden)?;
        let log_probs = candle_nn::ops::log_softmax(&logits, 1)?;
        let loss = candle_nn::loss::nll(&log_probs, &y)?;
        let grads = loss.backward()?;
        opt.step(&grads)?;
        // The leak: every step's activations, kept with their graph.
        history.push(hidden);
    }
    Ok(history.len())
}
