//! The loops `cargo xtask bench` measures (docs/performance.md), each compiled twice from
//! one definition: plain, and under `#[tensor_lifetime::track]`.
//!
//! 1. small-tensor loop: per step 200 x (randn 64x64, mul, tanh, add), the shape of the
//!    PyTorch `_record_memory_history` measurement made on the H200;
//! 2. MLP training step with candle-nn: 784-512-10, batch 256, an SGD step;
//! 3. rollout epoch: N inner steps, each making a few small tensors and keeping one in a
//!    `Vec` until the epoch ends (a policy-gradient agent's observations, a replay
//!    buffer): what is alive grows through the epoch.

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap, SGD};

/// Inner iterations of one small-tensor step.
pub const SMALL_OPS: usize = 200;

/// The tensors of the small-tensor loop: 64x64.
pub const SMALL_DIMS: (usize, usize) = (64, 64);

macro_rules! small_step {
    ($name:ident $(, #[$attr:meta])?) => {
        /// One step of the small-tensor loop on tensors of `dims` ([`SMALL_DIMS`] in
        /// `cargo xtask bench`); returns the accumulated tensor.
        $(#[$attr])?
        pub fn $name(device: &Device, dims: (usize, usize)) -> Result<Tensor> {
            let mut acc = Tensor::zeros(dims, DType::F32, device)?;
            for _ in 0..SMALL_OPS {
                let a = Tensor::randn(0f32, 1.0, dims, device)?;
                let b = (&a * &a)?;
                let c = b.tanh()?;
                acc = (acc + c)?;
            }
            Ok(acc)
        }
    };
}

small_step!(small_step_plain);
small_step!(small_step_tracked, #[tensor_lifetime::track]);

/// The tensors of the rollout loop: one observation of 16 values.
pub const ROLLOUT_DIMS: usize = 16;

macro_rules! rollout_epoch {
    ($name:ident $(, #[$attr:meta])?) => {
        /// One epoch of the rollout loop: `steps` inner steps, each making an observation,
        /// a scaled copy and an action (tanh), and keeping the observation until the
        /// epoch's end; returns how many were kept.
        $(#[$attr])?
        pub fn $name(device: &Device, steps: usize) -> Result<usize> {
            let mut kept = Vec::with_capacity(steps);
            for _ in 0..steps {
                let obs = Tensor::randn(0f32, 1.0, ROLLOUT_DIMS, device)?;
                let scaled = (&obs * 0.5)?;
                let action = scaled.tanh()?;
                drop(action);
                kept.push(obs);
            }
            Ok(kept.len())
        }
    };
}

rollout_epoch!(rollout_epoch_plain);
rollout_epoch!(rollout_epoch_tracked, #[tensor_lifetime::track]);

/// The MLP of the benchmark.
#[derive(Debug)]
pub struct BenchMlp {
    fc1: Linear,
    fc2: Linear,
}

impl BenchMlp {
    pub fn new(varmap: &VarMap, device: &Device) -> Result<BenchMlp> {
        let vb = VarBuilder::from_varmap(varmap, DType::F32, device);
        Ok(BenchMlp {
            fc1: linear(784, 512, vb.pp("fc1"))?,
            fc2: linear(512, 10, vb.pp("fc2"))?,
        })
    }
}

macro_rules! mlp_step {
    ($name:ident $(, #[$attr:meta])?) => {
        /// One training step: forward, cross-entropy, backward, SGD update.
        $(#[$attr])?
        pub fn $name(model: &BenchMlp, opt: &mut SGD, x: &Tensor, y: &Tensor) -> Result<f32> {
            let h = model.fc1.forward(x)?.relu()?;
            let logits = model.fc2.forward(&h)?;
            let log_probs = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
            let loss = candle_nn::loss::nll(&log_probs, y)?;
            opt.backward_step(&loss)?;
            loss.to_scalar::<f32>()
        }
    };
}

mlp_step!(mlp_step_plain);
mlp_step!(mlp_step_tracked, #[tensor_lifetime::track]);

/// A batch for the MLP step: inputs `(256, 784)` and labels `(256,)`.
pub fn mlp_batch(device: &Device) -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn(0f32, 1.0, (256, 784), device)?;
    let ys: Vec<u32> = (0..256u32).map(|i| i % 10).collect();
    let y = Tensor::from_vec(ys, 256, device)?;
    Ok((x, y))
}

/// Which loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Small,
    Mlp,
    /// One step is an epoch of this many inner steps.
    Rollout(usize),
}

/// Runs `steps` steps after `warmup` unmeasured ones, tracked or not, and returns the
/// time of each measured step in nanoseconds: on CPU the process CPU time (all threads:
/// candle's CPU kernels are multi-threaded), since the benchmark machines are shared and
/// other processes' load changes wall time far more than CPU time; on a GPU the wall time.
/// The driving loop is tracked too in the tracked variant, as a user's training loop
/// would be.
pub fn run(
    workload: Workload,
    tracked: bool,
    device: &Device,
    warmup: usize,
    steps: usize,
) -> Result<Vec<u64>> {
    let (plain, tracked_times) = interleaved(
        workload,
        device,
        warmup,
        steps,
        1,
        if tracked { Only::Tracked } else { Only::Plain },
    )?;
    Ok(if tracked { tracked_times } else { plain })
}

/// Which variants [`interleaved`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    Plain,
    Tracked,
    Both,
}

/// Runs `rounds` blocks of `steps` measured steps of each variant in this process,
/// alternating plain and tracked blocks (A B B A A B ...: each round starts with the
/// variant the previous one ended with) on the same model and data, after `warmup`
/// unmeasured steps of each; returns the step times of each variant.
pub fn interleaved(
    workload: Workload,
    device: &Device,
    warmup: usize,
    steps: usize,
    rounds: usize,
    only: Only,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let varmap = VarMap::new();
    let mut mlp = match workload {
        Workload::Mlp => {
            let model = BenchMlp::new(&varmap, device)?;
            let opt = SGD::new(varmap.all_vars(), 0.01)?;
            Some((model, opt, mlp_batch(device)?))
        }
        Workload::Small | Workload::Rollout(_) => None,
    };
    let mut step = |tracked: bool| -> Result<()> {
        match (&mut mlp, tracked) {
            (None, false) => match workload {
                Workload::Rollout(n) => drop(rollout_epoch_plain(device, n)?),
                _ => drop(small_step_plain(device, SMALL_DIMS)?),
            },
            (None, true) => match workload {
                Workload::Rollout(n) => drop(rollout_epoch_tracked(device, n)?),
                _ => drop(small_step_tracked(device, SMALL_DIMS)?),
            },
            (Some((model, opt, (x, y))), false) => drop(mlp_step_plain(model, opt, x, y)?),
            (Some((model, opt, (x, y))), true) => drop(mlp_step_tracked(model, opt, x, y)?),
        }
        device.synchronize()
    };
    // On a GPU the CPU waits for the device in `synchronize`: wall time is the measure
    // (the GPU host is not shared).
    let clock = if device.is_cpu() {
        cpu_time_ns
    } else {
        wall_time_ns
    };
    let (mut plain, mut tracked) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let w = if round == 0 { warmup } else { 0 };
        // A B, then B A: a drift of the machine within a round (clocks, the device's
        // memory pool) favours neither variant.
        for tracked_block in [round % 2 == 1, round % 2 == 0] {
            if tracked_block && only != Only::Plain {
                tracked.extend(drive_tracked(&mut || step(true), clock, w, steps)?);
            } else if !tracked_block && only != Only::Tracked {
                plain.extend(drive_plain(&mut || step(false), clock, w, steps)?);
            }
        }
    }
    Ok((plain, tracked))
}

macro_rules! drive {
    ($name:ident $(, #[$attr:meta])?) => {
        /// Runs `step` `warmup + steps` times in a loop of its own (tracked in the tracked
        /// variant, as a user's training loop would be); returns the `clock` time of each
        /// of the last `steps`.
        $(#[$attr])?
        pub fn $name(
            step: &mut dyn FnMut() -> Result<()>,
            clock: fn() -> u64,
            warmup: usize,
            steps: usize,
        ) -> Result<Vec<u64>> {
            let mut times = Vec::with_capacity(steps);
            for i in 0..warmup + steps {
                let t0 = clock();
                step()?;
                if i >= warmup {
                    times.push(clock() - t0);
                }
            }
            Ok(times)
        }
    };
}

drive!(drive_plain);
drive!(drive_tracked, #[tensor_lifetime::track]);

/// CPU time of this process (all threads), in nanoseconds.
pub fn cpu_time_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter; CLOCK_PROCESS_CPUTIME_ID is always supported
    // on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic wall time in nanoseconds.
pub fn wall_time_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// Median of a sample.
pub fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    let n = values.len();
    if n == 0 {
        0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2
    }
}
