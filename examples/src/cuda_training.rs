//! A real MLP training loop on the GPU, and the memory statistics that PyTorch users
//! read from `torch.cuda`: the example behind `docs/gpu.md`.
//!
//! Three modes ([`Mode`]):
//!
//! - `clean`: every tensor tagged (parameters, batches, activations the loop binds, loss,
//!   optimizer state), metrics taken with `to_scalar`. No leak; after a synchronize the
//!   pool's used bytes equal the tracked live bytes up to the pool's rounding.
//! - `leaky`: a replay buffer that keeps every batch (`replay.push(x)`: a leak at `x`,
//!   held by `replay`) and a running loss summed without `detach` (its autograd graph
//!   keeps every step's activations: a graph retention at `running`).
//! - `untracked`: a model that keeps an activation of every step in code that is not
//!   annotated (an untracked leak: only the pool sees it) and batches of a different
//!   number of rows each step (dynamic shapes): the findings `untracked_growth` and
//!   `shape_churn`, judged from memory samples taken every step.
//!
//! The same code runs on the CPU (tests use [`Config::small`]); the memory checks
//! ([`rounding_probe`], [`empty_cache_demo`], [`threshold_benchmark`]) need the CUDA pool.

use crate::clean_training::MomentumSgd;
use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{linear, Linear, Module, VarBuilder, VarMap};
use std::cell::RefCell;
use std::time::Instant;
use tensor_lifetime::{memory, MemoryStats, Report};

/// Which training loop to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Clean,
    Leaky,
    Untracked,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "clean" => Ok(Mode::Clean),
            "leaky" => Ok(Mode::Leaky),
            "untracked" => Ok(Mode::Untracked),
            other => Err(format!(
                "unknown mode `{other}` (expected clean, leaky or untracked)"
            )),
        }
    }
}

/// Sizes of the model and the loop.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub features: usize,
    pub hidden: usize,
    pub classes: usize,
    /// Rows per batch (in `untracked` mode, between half of it and all of it).
    pub batch: usize,
    pub epochs: usize,
    pub batches: usize,
}

impl Config {
    /// The GPU configuration: 1024 -> 4096 -> 4096 -> 10, batches of 1024 rows
    /// (4 MiB of input, 16 MiB per hidden activation), 3 epochs of 20 steps.
    pub fn gpu() -> Config {
        Config {
            features: 1024,
            hidden: 4096,
            classes: 10,
            batch: 1024,
            epochs: 3,
            batches: 20,
        }
    }

    /// A configuration small enough for CPU tests.
    pub fn small() -> Config {
        Config {
            features: 64,
            hidden: 256,
            classes: 10,
            batch: 128,
            epochs: 2,
            batches: 8,
        }
    }
}

/// A three-layer perceptron. `activation_log`, when on, keeps the first hidden
/// activation of every forward pass: code that is not annotated, so the tracker does not
/// see what it keeps.
#[derive(Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    activation_log: Option<RefCell<Vec<Tensor>>>,
}

impl Mlp {
    pub fn new(varmap: &VarMap, cfg: &Config, device: &Device, log: bool) -> Result<Mlp> {
        let vb = VarBuilder::from_varmap(varmap, DType::F32, device);
        Ok(Mlp {
            fc1: linear(cfg.features, cfg.hidden, vb.pp("fc1"))?,
            fc2: linear(cfg.hidden, cfg.hidden, vb.pp("fc2"))?,
            fc3: linear(cfg.hidden, cfg.classes, vb.pp("fc3"))?,
            activation_log: log.then(|| RefCell::new(Vec::new())),
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h1 = self.fc1.forward(x)?.relu()?;
        if let Some(log) = &self.activation_log {
            log.borrow_mut().push(h1.detach());
        }
        let h2 = self.fc2.forward(&h1)?.relu()?;
        self.fc3.forward(&h2)
    }
}

/// Rows of the batch of `step`: fixed, or (dynamic) one of many sizes.
fn rows(cfg: &Config, step: usize, dynamic: bool) -> usize {
    if dynamic {
        cfg.batch / 2 + (step * 37) % (cfg.batch / 2)
    } else {
        cfg.batch
    }
}

/// Labels of a batch (small: made on the host).
fn labels(rows: usize, classes: usize, step: usize, device: &Device) -> Result<Tensor> {
    let ys: Vec<u32> = (0..rows).map(|i| ((i + step) % classes) as u32).collect();
    Tensor::from_vec(ys, rows, device)
}

/// What a training run left.
#[derive(Debug)]
pub struct Outcome {
    pub mode: Mode,
    pub final_loss: f32,
    pub steps: usize,
    /// Mean wall time of the steps after the first.
    pub step_ms: f64,
    /// The report after the loop (the tracker's judgement).
    pub report: Report,
    /// Statistics after a synchronize, everything the run keeps still alive.
    pub stats: MemoryStats,
    /// The live tracked tensors at that moment: (`file:line `label``, storage bytes).
    pub live: Vec<(String, u64)>,
}

/// Trains in `mode` on `device`. In `untracked` mode a memory sample is recorded after
/// every step, once its tensors are dropped and the device synchronized (what the
/// monitor does at iteration ends, settled).
pub fn train(device: &Device, mode: Mode, cfg: &Config) -> Result<Outcome> {
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, cfg, device, mode == Mode::Untracked)?;
    let params = varmap.all_vars();
    tensor_lifetime::tag!(params);
    let mut opt = MomentumSgd::new(params.clone(), 0.01, 0.9);
    let mut replay: Vec<Tensor> = Vec::new();
    let mut running = Tensor::zeros((), DType::F32, device)?;
    tensor_lifetime::tag!(running);
    let mut final_loss = 0.0;
    let mut started = Instant::now();
    let epochs = tensor_lifetime::loop_scope!("'epoch");
    for epoch in 0..cfg.epochs {
        let _epoch = epochs.iteration();
        let batches = tensor_lifetime::loop_scope!("'batch");
        for b in 0..cfg.batches {
            let _step = batches.iteration();
            let step = epoch * cfg.batches + b;
            let n = rows(cfg, step, mode == Mode::Untracked);
            // The step's tensors live in this block.
            final_loss = {
                let x = Tensor::randn(0f32, 1f32, (n, cfg.features), device)?;
                tensor_lifetime::tag!(x);
                let y = labels(n, cfg.classes, step, device)?;
                tensor_lifetime::tag!(y);
                let logits = model.forward(&x)?;
                tensor_lifetime::tag!(logits);
                let log_probs = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
                tensor_lifetime::tag!(log_probs);
                let loss = candle_nn::loss::nll(&log_probs, &y)?;
                tensor_lifetime::tag!(loss);
                let grads = loss.backward()?;
                opt.step(&grads)?;
                if mode == Mode::Leaky {
                    tensor_lifetime::store!(x, "replay");
                    replay.push(x.clone());
                    running = (&running + &loss)?;
                    tensor_lifetime::tag!(running);
                }
                loss.to_scalar::<f32>()?
            };
            if mode == Mode::Untracked {
                device.synchronize()?;
                memory::record_memory_sample(device).map_err(candle_core::Error::wrap)?;
            }
            if step == 0 {
                // The first step loads the kernels (on a fresh GPU host, JIT-compiles
                // candle's PTX): not a step time.
                started = Instant::now();
            }
        }
    }
    drop(epochs);
    let steps = cfg.epochs * cfg.batches;
    let step_ms = started.elapsed().as_secs_f64() * 1e3 / (steps - 1).max(1) as f64;
    device.synchronize()?;
    let report = tensor_lifetime::report();
    let stats = memory::memory_stats(device).map_err(candle_core::Error::wrap)?;
    let mut live: Vec<(String, u64)> = tensor_lifetime::snapshot()
        .iter()
        .map(|t| {
            let site = format!("{}:{} `{}`", t.site.file, t.site.line, t.site.label);
            (site, t.storage_bytes)
        })
        .collect();
    live.sort();
    // What the run keeps (the model, the leaks) lives until here.
    drop((model, opt, replay, running, params));
    Ok(Outcome {
        mode,
        final_loss,
        steps,
        step_ms,
        report,
        stats,
        live,
    })
}

/// The pool's rounding: for each requested size, how much `pool used` grows when one
/// tensor of that many bytes is allocated (after a synchronize).
pub fn rounding_probe(device: &Device, sizes: &[usize]) -> Result<Vec<(u64, i64)>> {
    let used = |d: &Device| -> Result<i64> {
        d.synchronize()?;
        let s = memory::memory_stats(d).map_err(candle_core::Error::wrap)?;
        Ok(s.pool_used.unwrap_or(0) as i64)
    };
    let mut out = Vec::new();
    for &n in sizes {
        let before = used(device)?;
        let t = Tensor::zeros(n, DType::U8, device)?;
        let after = used(device)?;
        drop(t);
        out.push((n as u64, after - before));
    }
    Ok(out)
}

/// `empty_cache` with numbers: with the release threshold at "keep everything", a
/// `bytes`-byte temporary is allocated and dropped (the pool keeps it cached), then
/// `empty_cache` returns it. Returns (stats with the temporary cached, bytes released,
/// stats after). Restores a release threshold of 0.
pub fn empty_cache_demo(device: &Device, bytes: usize) -> Result<(MemoryStats, u64, MemoryStats)> {
    let wrap = candle_core::Error::wrap;
    memory::set_release_threshold(device, u64::MAX).map_err(wrap)?;
    let t = Tensor::zeros(bytes, DType::U8, device)?;
    device.synchronize()?;
    drop(t);
    device.synchronize()?;
    let cached = memory::memory_stats(device).map_err(wrap)?;
    let released = memory::empty_cache(device).map_err(wrap)?;
    let after = memory::memory_stats(device).map_err(wrap)?;
    memory::set_release_threshold(device, 0).map_err(wrap)?;
    Ok((cached, released, after))
}

/// Where a timed step synchronizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepSync {
    /// `loss.to_scalar()` while the step's tensors are alive (the usual loop).
    Metric,
    /// A synchronize after the step's tensors are dropped (a loop that logs at the end
    /// of each step): what the pool frees is free at the synchronize.
    AfterDrop,
}

/// Step times of one run.
#[derive(Debug, Clone, Default)]
pub struct StepTimes {
    /// Wall time of each step, ms.
    pub times: Vec<f64>,
    /// Mean pool reserved bytes right after each step.
    pub reserved_after_step: f64,
}

/// Times training steps under a release threshold of `threshold` bytes.
pub fn timed_steps(
    device: &Device,
    cfg: &Config,
    threshold: u64,
    sync: StepSync,
    warmup: usize,
    steps: usize,
) -> Result<StepTimes> {
    let wrap = candle_core::Error::wrap;
    memory::set_release_threshold(device, threshold).map_err(wrap)?;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, cfg, device, false)?;
    let mut opt = MomentumSgd::new(varmap.all_vars(), 0.01, 0.9);
    let mut out = StepTimes::default();
    for step in 0..warmup + steps {
        let t0 = Instant::now();
        {
            let x = Tensor::randn(0f32, 1f32, (cfg.batch, cfg.features), device)?;
            let y = labels(cfg.batch, cfg.classes, step, device)?;
            let log_probs = candle_nn::ops::log_softmax(&model.forward(&x)?, D::Minus1)?;
            let loss = candle_nn::loss::nll(&log_probs, &y)?;
            opt.step(&loss.backward()?)?;
            if sync == StepSync::Metric {
                let _ = loss.to_scalar::<f32>()?;
            }
        }
        if sync == StepSync::AfterDrop {
            device.synchronize()?;
        }
        if step >= warmup {
            out.times.push(t0.elapsed().as_secs_f64() * 1e3);
            let reserved = memory::memory_reserved(device).map_err(wrap)?.unwrap_or(0);
            out.reserved_after_step += reserved as f64 / steps as f64;
        }
    }
    memory::set_release_threshold(device, 0).map_err(wrap)?;
    Ok(out)
}

/// Times `iters` rounds of: allocate `bytes` (zeroed), synchronize, drop, synchronize,
/// under a release threshold of `threshold`: the pool's own cost, with nothing else.
pub fn alloc_benchmark(
    device: &Device,
    bytes: usize,
    threshold: u64,
    iters: usize,
) -> Result<StepTimes> {
    let wrap = candle_core::Error::wrap;
    memory::set_release_threshold(device, threshold).map_err(wrap)?;
    let mut out = StepTimes::default();
    for i in 0..iters + 2 {
        let t0 = Instant::now();
        let t = Tensor::zeros(bytes, DType::U8, device)?;
        device.synchronize()?;
        drop(t);
        device.synchronize()?;
        if i >= 2 {
            out.times.push(t0.elapsed().as_secs_f64() * 1e3);
            let reserved = memory::memory_reserved(device).map_err(wrap)?.unwrap_or(0);
            out.reserved_after_step += reserved as f64 / iters as f64;
        }
    }
    memory::set_release_threshold(device, 0).map_err(wrap)?;
    memory::empty_cache(device).map_err(wrap)?;
    Ok(out)
}

/// Mean and median of step times.
pub fn mean_median(times: &[f64]) -> (f64, f64) {
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    (mean, median)
}

/// Alternates runs of `steps` steps under threshold 0 and "keep everything", `rounds`
/// times each (so drift hits both alike). Returns (threshold 0, threshold max), the
/// reserved bytes averaged over the rounds.
pub fn threshold_benchmark(
    device: &Device,
    cfg: &Config,
    sync: StepSync,
    rounds: usize,
    steps: usize,
) -> Result<(StepTimes, StepTimes)> {
    let (mut zero, mut max) = (StepTimes::default(), StepTimes::default());
    for _ in 0..rounds {
        for (threshold, acc) in [(0, &mut zero), (u64::MAX, &mut max)] {
            let run = timed_steps(device, cfg, threshold, sync, 3, steps)?;
            acc.times.extend(run.times);
            acc.reserved_after_step += run.reserved_after_step / rounds as f64;
        }
        memory::empty_cache(device).map_err(candle_core::Error::wrap)?;
    }
    Ok((zero, max))
}
