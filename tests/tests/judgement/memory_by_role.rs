//! Roles: an MLP trained with an optimizer (its own Adam, an `impl Optimizer` under
//! `#[track]`) over a `VarMap`. The JSON report's `memory_by_role` has the parameters'
//! bytes equal to the model's weights, the optimizer's two moments per parameter, the
//! gradients of one backward pass at the peak, and activations and inputs at the peak.
//!
//! The peak is mid-step: the optimizer's loop over the parameters is a loop of its own,
//! and at its iteration ends the forward pass, the batch and the gradients are alive.
//! The JSON report is set before the tracker starts: the test runs alone in its process.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap};
use tensor_lifetime_tests::{json_report_env, read_json};

const FEATURES: usize = 32;
const HIDDEN: usize = 48;
const CLASSES: usize = 4;
const BATCH: usize = 16;
const STEPS: usize = 6;

/// Adam without bias correction: two moments per parameter, made in `new`, updated in
/// place in `step`.
struct Adam {
    vars: Vec<Var>,
    m: Vec<Var>,
    v: Vec<Var>,
    lr: f64,
}

#[tensor_lifetime::track]
impl Optimizer for Adam {
    type Config = f64;

    fn new(vars: Vec<Var>, lr: f64) -> Result<Self> {
        let m = vars
            .iter()
            .map(|p| Var::zeros(p.shape(), p.dtype(), p.device()))
            .collect::<Result<Vec<_>>>()?;
        let v = vars
            .iter()
            .map(|p| Var::zeros(p.shape(), p.dtype(), p.device()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Adam { vars, m, v, lr })
    }

    fn step(&mut self, grads: &GradStore) -> Result<()> {
        for i in 0..self.vars.len() {
            let Some(g) = grads.get(self.vars[i].as_tensor()) else {
                continue;
            };
            let m = ((self.m[i].as_tensor() * 0.9)? + (g * 0.1)?)?;
            let v = ((self.v[i].as_tensor() * 0.999)? + (g.sqr()? * 0.001)?)?;
            let update = (&m / (v.sqrt()? + 1e-8)?)?;
            self.vars[i].set(&(self.vars[i].as_tensor() - (update * self.lr)?)?)?;
            self.m[i].set(&m)?;
            self.v[i].set(&v)?;
        }
        Ok(())
    }

    fn learning_rate(&self) -> f64 {
        self.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }
}

struct Data {
    device: Device,
}

impl Data {
    fn next_batch(&self, step: usize) -> Result<(Tensor, Tensor)> {
        let x = Tensor::rand(0f32, 1.0, (BATCH, FEATURES), &self.device)?;
        let y = Tensor::new(
            (0..BATCH)
                .map(|i| ((i + step) % CLASSES) as u32)
                .collect::<Vec<_>>(),
            &self.device,
        )?;
        Ok((x, y))
    }
}

#[tensor_lifetime::track]
fn train(varmap: &VarMap, l1: &Linear, l2: &Linear) -> Result<(u64, u64, u64)> {
    let params = varmap.all_vars();
    let param_bytes: u64 = params
        .iter()
        .map(|p| (p.elem_count() * p.dtype().size_in_bytes()) as u64)
        .sum();
    let mut opt = Adam::new(params, 0.01)?;
    let data = Data {
        device: Device::Cpu,
    };
    let (mut grad_bytes, mut grad_tensors) = (0, 0);
    'step: for step in 0..STEPS {
        let (x, y) = data.next_batch(step)?;
        let h = l1.forward(&x)?.relu()?;
        let logits = l2.forward(&h)?;
        let log_probs = candle_nn::ops::log_softmax(&logits, 1)?;
        let loss = candle_nn::loss::nll(&log_probs, &y)?;
        let grads = loss.backward()?;
        // What backward returned: a gradient per parameter, and candle's gradient of
        // the batch it multiplied (kept in the store too).
        (grad_bytes, grad_tensors) = (0, 0);
        for id in grads.get_ids() {
            let g = grads.get_id(*id).unwrap();
            grad_bytes += (g.elem_count() * g.dtype().size_in_bytes()) as u64;
            grad_tensors += 1;
        }
        opt.step(&grads)?;
    }
    Ok((param_bytes, grad_bytes, grad_tensors))
}

#[test]
fn an_mlp_with_an_optimizer_splits_by_role() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "an_mlp_with_an_optimizer_splits_by_role",
    ) {
        return;
    }
    let json_path = json_report_env("memory_by_role.json");
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let l1 = linear(FEATURES, HIDDEN, vb.pp("l1")).unwrap();
    let l2 = linear(HIDDEN, CLASSES, vb.pp("l2")).unwrap();
    let (param_bytes, grad_bytes, grad_tensors) = train(&varmap, &l1, &l2).unwrap();
    let expected = (FEATURES * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES) as u64 * 4;
    assert_eq!(param_bytes, expected);

    let json = read_json(&json_path);
    let split = &json["memory_by_role"];
    let now = &split["now"];
    let peak = &split["peak"];
    // The weights: four parameters (two weights, two biases).
    assert_eq!(now["parameter"]["bytes"], expected, "{split:#}");
    assert_eq!(now["parameter"]["tensors"], 4, "{split:#}");
    // Two moments per parameter, alive across iterations.
    assert_eq!(now["optimizer_state"]["bytes"], 2 * expected, "{split:#}");
    assert_eq!(now["optimizer_state"]["tensors"], 8, "{split:#}");
    // Gradients die within each step: none now; at the peak, those of one backward
    // pass (at least one per parameter).
    assert_eq!(now["gradient"]["bytes"], 0, "{split:#}");
    assert!(grad_bytes >= expected && grad_tensors >= 4);
    assert_eq!(peak["gradient"]["bytes"], grad_bytes, "{split:#}");
    assert_eq!(peak["gradient"]["tensors"], grad_tensors, "{split:#}");
    // The forward pass and the batch at the peak; they are temporaries.
    let activation = peak["activation"]["bytes"].as_u64().unwrap();
    assert!(activation > 0, "{split:#}");
    assert!(
        activation >= (BATCH * (HIDDEN + CLASSES) * 4) as u64,
        "{split:#}"
    );
    assert_eq!(
        peak["input"]["bytes"],
        (BATCH * FEATURES * 4 + BATCH * 4) as u64,
        "{split:#}"
    );
    assert!(
        peak["temporary"]["bytes"].as_u64().unwrap() > 0,
        "{split:#}"
    );
    assert_eq!(peak["parameter"], now["parameter"], "{split:#}");
}
