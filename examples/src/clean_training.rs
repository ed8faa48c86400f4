//! A clean training loop: an MLP with candle-nn, an optimizer whose momentum state is
//! created lazily at the first step and updated in place, metrics detached with
//! `to_scalar`. The report has no leak; the optimizer state shows as `retained`
//! (information: created once and kept, as it should be).

use crate::common::{loss_fn, synthetic_batch, Mlp};
use candle_core::{backprop::GradStore, Device, Result, Var};
use candle_nn::VarMap;

/// Epochs and batches per epoch the example runs.
pub const EPOCHS: usize = 5;
pub const BATCHES: usize = 6;

/// SGD with momentum; the velocity buffers are created at the first step.
///
/// Library code, probed by hand rather than with `#[track]`: under `#[track]` its
/// per-parameter loop would be a loop scope of its own, and the current judgement confirms
/// the four buffers it creates there, kept past the step, as a growing site.
#[derive(Debug)]
pub struct MomentumSgd {
    vars: Vec<Var>,
    velocity: Vec<Option<Var>>,
    lr: f64,
    momentum: f64,
}

impl MomentumSgd {
    pub fn new(vars: Vec<Var>, lr: f64, momentum: f64) -> Self {
        let velocity = vars.iter().map(|_| None).collect();
        MomentumSgd {
            vars,
            velocity,
            lr,
            momentum,
        }
    }

    /// One update from the gradients of a backward pass.
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        for (var, slot) in self.vars.iter().zip(self.velocity.iter_mut()) {
            let Some(grad) = grads.get(var) else { continue };
            let v = match slot {
                Some(v) => {
                    v.set(&((v.as_tensor() * self.momentum)? + grad)?)?;
                    v
                }
                None => {
                    let state = Var::from_tensor(grad)?;
                    // A `Var` would be a parameter: its role is said.
                    tensor_lifetime::tag!(state, "state", tensor_lifetime::Role::OptimizerState);
                    tensor_lifetime::store!(state, "self.velocity");
                    slot.insert(state)
                }
            };
            var.set(&var.sub(&(v.as_tensor() * self.lr)?)?)?;
        }
        Ok(())
    }
}

/// Trains for [`EPOCHS`] epochs; returns the mean loss of the last epoch.
#[tensor_lifetime::track]
pub fn run() -> Result<f32> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, 64, &device)?;
    let params = varmap.all_vars();
    let mut opt = MomentumSgd::new(params, 0.02, 0.9);
    let mut epoch_loss = 0.0;
    'epoch: for epoch in 0..EPOCHS {
        epoch_loss = 0.0;
        for b in 0..BATCHES {
            let (x, y) = synthetic_batch(epoch * BATCHES + b, &device)?;
            let logits = model.forward(&x)?;
            let loss = loss_fn(&logits, &y)?;
            let grads = loss.backward()?;
            opt.step(&grads)?;
            epoch_loss += loss.to_scalar::<f32>()?;
        }
    }
    Ok(epoch_loss / BATCHES as f32)
}
