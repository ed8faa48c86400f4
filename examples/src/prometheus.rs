//! A training loop that Prometheus watches: an MLP trained with candle-nn's SGD, one
//! outermost iteration per step, clean by default; with [`Options::leak`] every step also
//! keeps a block of features "for later analysis" (`history.push(features)`), a leak of
//! [`Options::leak_bytes`] per step. The example binary (`examples/prometheus.rs`)
//! installs `metrics-exporter-prometheus` and serves the tracker's metrics as `/metrics`
//! while this loop runs; the tests scrape it, and run the leaky loop under a memory limit
//! set by hand to check the forecast of running out against the step that crosses it.

use crate::common::{loss_fn, synthetic_batch, Mlp};
use candle_core::{Device, Result, Tensor};
use candle_nn::{Optimizer, VarMap, SGD};
use std::time::Duration;

/// The loop's length, pace and leak.
#[derive(Debug, Clone)]
pub struct Options {
    /// Training steps.
    pub steps: usize,
    /// Keep every step's features (the leak).
    pub leak: bool,
    /// Bytes the leak keeps per step (rounded down to whole rows of 1,024 f32).
    pub leak_bytes: usize,
    /// A pause after each step, so that a scraper sees the loop run.
    pub step_pause: Duration,
}

impl Default for Options {
    /// 600 steps of 100 ms (a minute), clean; the leak keeps 4 MiB per step.
    fn default() -> Options {
        Options {
            steps: 600,
            leak: false,
            leak_bytes: 4 << 20,
            step_pause: Duration::from_millis(100),
        }
    }
}

/// Values of one row of kept features.
const ROW: usize = 1024;

/// Trains for [`Options::steps`]; calls `after_step(step)` at the end of each step's
/// body (before its iteration ends). Returns the last loss.
#[tensor_lifetime::track]
pub fn run(opts: &Options, mut after_step: impl FnMut(usize)) -> Result<f32> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let params = varmap.all_vars();
    let mut opt = SGD::new(params, 0.05)?;
    let mut history = Vec::new();
    let rows = (opts.leak_bytes / (ROW * 4)).max(1);
    let mut last = 0.0;
    'step: for step in 0..opts.steps {
        let (x, y) = synthetic_batch(step, &device)?;
        let logits = model.forward(&x)?;
        let loss = loss_fn(&logits, &y)?;
        opt.backward_step(&loss)?;
        last = loss.to_scalar::<f32>()?;
        if opts.leak {
            let features = Tensor::randn(0f32, 1.0, (rows, ROW), &device)?;
            history.push(features);
        }
        after_step(step);
        if !opts.step_pause.is_zero() {
            std::thread::sleep(opts.step_pause);
        }
    }
    Ok(last)
}
