//! The cases of the reliability matrix: leaky and clean training loops, each a small but
//! realistic `#[track]`ed function of a case's seeded parameters (`Params`), with the
//! comment `// matrix: ...` on the line of each leak's site. The table of what each case
//! must show is in `main.rs`.
//!
//! Seeded: one seed (`SEED`, or `TL_MATRIX_SEED` to try another) draws each case's batch
//! rows and step count; the data is built from the step index, not from candle's
//! unseedable `randn`, so a run is reproducible. Tensors are tiny.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Result, Tensor, Var, D};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap, SGD};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use tensor_lifetime_tests::fixtures::tracked::{
    build_heads, fill_replay, keep_transitions, lbfgs_steps, Transition,
};
use tensor_lifetime_tests::fixtures::{self, CLASSES, FEATURES, HIDDEN};
use tensor_lifetime_tests::{serve_on_runtime, Source};

/// This file: where the cases' sites are.
pub const CASES: Source = Source {
    file: "tests/tests/reliability/cases.rs",
    text: include_str!("cases.rs"),
};

/// The matrix's seed; `TL_MATRIX_SEED` (decimal or 0x-hex) overrides it.
const SEED: u64 = 0x5eed_7e45_0a11_ce11;

/// Bytes of the model's parameters (f32): `fc1` and `fc2`, weights and biases.
pub const PARAM_BYTES: u64 = ((FEATURES * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES) * 4) as u64;

// ---------------------------------------------------------------------------------------
// Seeded parameters, data and model (library code: not annotated).

/// What the seed draws for one case.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Rows of a batch.
    pub rows: usize,
    /// Training steps (or epochs): at least 6, so a leak has 3 growth events after the
    /// warm-up iteration with room to spare.
    pub steps: usize,
    /// Drives the data and the initial weights.
    pub seed: u64,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn matrix_seed() -> u64 {
    match std::env::var("TL_MATRIX_SEED") {
        Ok(s) => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).expect("TL_MATRIX_SEED in hex"),
            None => s.parse().expect("TL_MATRIX_SEED a number"),
        },
        Err(_) => SEED,
    }
}

/// The parameters of case `name`: a hash of the name mixed with the seed.
pub fn params(name: &str) -> Params {
    let mut state = matrix_seed();
    for b in name.bytes() {
        state = state.rotate_left(5) ^ u64::from(b);
        splitmix(&mut state);
    }
    Params {
        rows: 4 + (splitmix(&mut state) % 5) as usize,
        steps: 6 + (splitmix(&mut state) % 4) as usize,
        seed: splitmix(&mut state),
    }
}

/// A deterministic batch: inputs `(rows, FEATURES)` and class ids `(rows,)`, salted by
/// the seed.
pub fn batch(p: &Params, step: usize) -> Result<(Tensor, Tensor)> {
    fixtures::batch(p.rows, (p.seed % 97) as usize, step, &Device::Cpu)
}

/// Bytes of one input batch.
pub fn batch_bytes(p: &Params) -> u64 {
    (p.rows * FEATURES * 4) as u64
}

/// A two-layer perceptron.
#[derive(Debug)]
pub struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
}

impl Mlp {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.forward(&self.fc1.forward(x)?.relu()?)
    }

    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        candle_nn::loss::cross_entropy(&self.forward(x)?, y)
    }
}

/// The model with weights drawn from the seed (not from `randn`).
pub fn setup(p: &Params) -> Result<(VarMap, Mlp)> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let model = Mlp {
        fc1: linear(FEATURES, HIDDEN, vb.pp("fc1"))?,
        fc2: linear(HIDDEN, CLASSES, vb.pp("fc2"))?,
    };
    let mut state = p.seed;
    for var in sorted_vars(&varmap) {
        let values: Vec<f32> = (0..var.elem_count())
            .map(|_| (splitmix(&mut state) % 2001) as f32 / 1000.0 - 1.0)
            .map(|v| v * 0.3)
            .collect();
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    }
    Ok((varmap, model))
}

/// A copy of the model's weights, in name order.
pub fn copy_weights(varmap: &VarMap) -> Result<Vec<Tensor>> {
    sorted_vars(varmap)
        .iter()
        .map(|v| v.as_tensor().copy())
        .collect()
}

/// Zeros shaped like each variable.
pub fn zeros_like_all(vars: &[Var]) -> Result<Vec<Tensor>> {
    vars.iter().map(|v| v.as_tensor().zeros_like()).collect()
}

/// The model's variables in name order.
pub fn sorted_vars(varmap: &VarMap) -> Vec<Var> {
    let data = varmap.data().lock().unwrap();
    let mut named: Vec<(&String, &Var)> = data.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    named.into_iter().map(|(_, v)| v.clone()).collect()
}

// ---------------------------------------------------------------------------------------
// The leaks.

/// L1: a dataset that caches every batch it serves.
#[derive(Debug)]
pub struct CachedDataset {
    pub p: Params,
    pub cache: Vec<Tensor>,
}

#[tensor_lifetime::track]
impl CachedDataset {
    pub fn get(&mut self, step: usize) -> Result<(Tensor, Tensor)> {
        let (x, y) = batch(&self.p, step)?; // matrix: L1 cached batch
        self.cache.push(x.clone());
        Ok((x, y))
    }
}

#[tensor_lifetime::track]
pub fn l1_dataset_cache(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut data = CachedDataset {
        p,
        cache: Vec::new(),
    };
    let mut last = 0.0;
    for step in 0..p.steps {
        let (x, y) = data.get(step)?;
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        last = loss.to_scalar::<f32>()?;
    }
    Ok(last)
}

/// L2: features memoized by a key that changes every step (the global step): the memo
/// never hits and never evicts.
// `contains_key` then `insert`, as memo code is often written (the `Entry` form would
// name the slot, not `memo`, as the holder).
#[allow(clippy::map_entry)]
#[tensor_lifetime::track]
pub fn l2_memo_by_step(p: Params) -> Result<f32> {
    let (_varmap, model) = setup(&p)?;
    let mut memo: HashMap<usize, Tensor> = HashMap::new();
    let mut norm = 0.0;
    for step in 0..p.steps {
        let key = 1000 + step;
        if !memo.contains_key(&key) {
            let (x, _y) = batch(&p, step)?;
            let features = model.fc1.forward(&x)?.relu()?.detach(); // matrix: L2 memo features
            memo.insert(key, features);
        }
        norm += memo[&key].sqr()?.sum_all()?.to_scalar::<f32>()?;
    }
    Ok(norm)
}

/// L3: a running loss summed without `detach`: `total` keeps every step's graph. The
/// data is loaded before the loop (an in-memory dataset), so only the graph grows.
#[tensor_lifetime::track]
pub fn l3_running_loss(p: Params) -> Result<Tensor> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let data: Vec<(Tensor, Tensor)> = (0..p.steps).map(|s| batch(&p, s)).collect::<Result<_>>()?;
    let mut total = Tensor::zeros((), DType::F32, &Device::Cpu)?;
    for step in 0..p.steps {
        let (x, y) = &data[step];
        let loss = model.loss(x, y)?;
        opt.backward_step(&loss)?;
        total = (total + &loss)?; // matrix: L3 running total
    }
    Ok(total)
}

/// L17: L3 with the batches made in the loop: `total`'s graph holds every step's batch
/// too (an input of its first op, no node of the graph: it leads to no variable).
#[tensor_lifetime::track]
pub fn l17_running_loss_with_batches(p: Params) -> Result<Tensor> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut total = Tensor::zeros((), DType::F32, &Device::Cpu)?;
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        total = (total + &loss)?; // matrix: L17 running total
    }
    Ok(total)
}

/// L4: the first row of every batch kept for a plot: a one-row view pins its batch.
#[tensor_lifetime::track]
pub fn l4_first_rows(p: Params) -> Result<usize> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut first_rows = Vec::new();
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        opt.backward_step(&model.loss(&x, &y)?)?;
        let row = x.narrow(0, 0, 1)?; // matrix: L4 first row
        first_rows.push(row);
    }
    Ok(first_rows.len())
}

/// L5: a process-wide cache in a `OnceLock` (a `static`).
static GLOBAL_CACHE: OnceLock<Mutex<Vec<Tensor>>> = OnceLock::new();

pub fn global_cache() -> MutexGuard<'static, Vec<Tensor>> {
    GLOBAL_CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

#[tensor_lifetime::track]
pub fn l5_global_cache(p: Params) -> Result<f32> {
    let (_varmap, model) = setup(&p)?;
    let mut sum = 0.0;
    for step in 0..p.steps {
        let (x, _y) = batch(&p, step)?;
        let embedding = model.fc1.forward(&x)?.detach(); // matrix: L5 global embedding
        sum += embedding.mean_all()?.to_scalar::<f32>()?;
        global_cache().push(embedding);
    }
    Ok(sum)
}

// L6: a per-thread cache in a `thread_local!`.
thread_local! {
    pub static THREAD_CACHE: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
}

#[tensor_lifetime::track]
pub fn l6_thread_local_cache(p: Params) -> Result<f32> {
    let mut sum = 0.0;
    for step in 0..p.steps {
        let (x, _y) = batch(&p, step)?;
        let column_means = x.mean_keepdim(0)?; // matrix: L6 thread-local stats
        sum += column_means.sum_all()?.to_scalar::<f32>()?;
        THREAD_CACHE.with(|cache| cache.borrow_mut().push(column_means.clone()));
    }
    Ok(sum)
}

/// L7: two nodes pointing at each other through `Rc<RefCell<..>>`: the cycle is never
/// freed, nor the hidden state it holds.
#[derive(Debug)]
pub struct Node {
    pub state: Option<Tensor>,
    pub peer: Option<Rc<RefCell<Node>>>,
}

#[tensor_lifetime::track]
pub fn l7_rc_cycle(p: Params) -> Result<usize> {
    let (_varmap, model) = setup(&p)?;
    let mut made = 0;
    for step in 0..p.steps {
        let (x, _y) = batch(&p, step)?;
        let hidden = model.fc1.forward(&x)?.relu()?.detach(); // matrix: L7 cycle state
        let a = Rc::new(RefCell::new(Node {
            state: Some(hidden),
            peer: None,
        }));
        let b = Rc::new(RefCell::new(Node {
            state: None,
            peer: Some(a.clone()),
        }));
        a.borrow_mut().peer = Some(b);
        made += 1;
    }
    Ok(made)
}

/// L8: hooks registered every step, each closure capturing a tensor.
pub type Hook = Box<dyn Fn(&Tensor) -> Result<Tensor>>;

#[tensor_lifetime::track]
pub fn l8_closure_callbacks(p: Params) -> Result<usize> {
    let mut hooks: Vec<Hook> = Vec::new();
    for step in 0..p.steps {
        let (x, _y) = batch(&p, step)?;
        let scale = (x.abs()?.max_keepdim(0)? + 1e-6)?; // matrix: L8 captured scale
        hooks.push(Box::new(move |t: &Tensor| t.broadcast_div(&scale)));
        let _normalized = hooks[step](&x)?;
    }
    Ok(hooks.len())
}

/// L9: activations sent to a logger thread over an unbounded channel; the logger
/// handles one message every third step and falls behind.
///
/// The logger is driven by a handshake (`tick`, `done`), so how far behind it is does
/// not depend on thread scheduling.
#[tensor_lifetime::track]
pub fn l9_unbounded_channel(p: Params) -> Result<usize> {
    let (_varmap, model) = setup(&p)?;
    let (tx, rx) = mpsc::channel::<Tensor>();
    let (tick_tx, tick_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let logger = std::thread::spawn(move || {
        let mut handled = 0;
        while tick_rx.recv().is_ok() {
            drop(rx.recv());
            handled += 1;
            let _ = done_tx.send(());
        }
        handled
    });
    for step in 0..p.steps {
        let (x, _y) = batch(&p, step)?;
        let activations = model.fc1.forward(&x)?.relu()?.detach(); // matrix: L9 queued activations
        tx.send(activations).expect("the logger is running");
        if step % 3 == 2 {
            tick_tx.send(()).expect("the logger is running");
            done_rx.recv().expect("the logger answers");
        }
    }
    drop(tick_tx);
    Ok(logger.join().expect("the logger thread panicked"))
}

/// Tensors still queued after `steps` steps of L9.
pub fn l9_backlog(steps: usize) -> u64 {
    (steps - steps / 3) as u64
}

/// L10: every step's gradient of the first layer kept "to plot its norm later".
#[tensor_lifetime::track]
pub fn l10_kept_gradients(p: Params) -> Result<usize> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut history = Vec::new();
    let weight = model.fc1.weight();
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        // The gradients are first seen here, in backward's `GradStore` (role gradient).
        let grads = model.loss(&x, &y)?.backward()?; // matrix: L10 kept gradient
        opt.step(&grads)?;
        let grad = grads.get(weight).expect("a gradient").clone();
        history.push(grad);
    }
    Ok(history.len())
}

/// L11: a snapshot of the weights at every epoch end, never dropped.
#[tensor_lifetime::track]
pub fn l11_epoch_snapshots(p: Params) -> Result<usize> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut snapshots = Vec::new();
    'epoch: for epoch in 0..p.steps {
        for step in 0..2 {
            let (x, y) = batch(&p, epoch * 2 + step)?;
            opt.backward_step(&model.loss(&x, &y)?)?;
        }
        let snapshot = copy_weights(&varmap)?; // matrix: L11 epoch snapshot
        snapshots.push(snapshot);
        if snapshots.len() > p.steps {
            break 'epoch;
        }
    }
    Ok(snapshots.len())
}

/// L12: a debugging buffer of hidden activations that is never flushed.
#[derive(Debug, Default)]
pub struct ActivationLog {
    pub buffer: Vec<Tensor>,
}

#[tensor_lifetime::track]
pub fn l12_activation_log(p: Params) -> Result<usize> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut log = ActivationLog::default();
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        let hidden = model.fc1.forward(&x)?.relu()?;
        let logged = hidden.detach(); // matrix: L12 logged activations
        log.buffer.push(logged);
        opt.backward_step(&model.loss(&x, &y)?)?;
    }
    Ok(log.buffer.len())
}

// ---------------------------------------------------------------------------------------
// The clean loops.

/// C1: momentum SGD written by hand, its velocity created lazily at the first step and
/// updated per parameter in a loop.
#[derive(Debug, Default)]
pub struct Momentum {
    pub velocity: Option<Vec<Tensor>>,
}

#[tensor_lifetime::track]
impl Momentum {
    pub fn step(&mut self, vars: &[Var], grads: &GradStore) -> Result<()> {
        if self.velocity.is_none() {
            let zeros = zeros_like_all(vars)?; // matrix: C1 lazy state
            self.velocity = Some(zeros);
        }
        let velocity = self.velocity.as_mut().expect("created above");
        for (v, var) in velocity.iter_mut().zip(vars) {
            let grad = grads
                .get(var.as_tensor())
                .expect("every parameter has a gradient");
            *v = ((&*v * 0.9)? + grad)?; // matrix: C1 velocity update
            var.set(&(var.as_tensor() - (&*v * 0.05)?)?)?;
        }
        Ok(())
    }
}

#[tensor_lifetime::track]
pub fn c1_lazy_optimizer_state(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let vars = sorted_vars(&varmap);
    let mut opt = Momentum::default();
    let mut last = 0.0;
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        let loss = model.loss(&x, &y)?;
        opt.step(&vars, &loss.backward()?)?;
        last = loss.to_scalar::<f32>()?;
    }
    Ok(last)
}

/// C2: the best weights so far, replaced whenever the training loss improves.
#[tensor_lifetime::track]
pub fn c2_best_checkpoint(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
    let mut best: Option<Vec<Tensor>> = None;
    let mut best_loss = f32::INFINITY;
    for step in 0..p.steps {
        let (x, y) = batch(&p, step % 2)?;
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        let value = loss.to_scalar::<f32>()?;
        if value < best_loss {
            let weights = copy_weights(&varmap)?;
            best = Some(weights);
            best_loss = value;
        }
    }
    drop(best);
    Ok(best_loss)
}

/// C3: an exponential moving average of the (detached) loss.
#[tensor_lifetime::track]
pub fn c3_loss_ema(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
    let mut ema: Option<Tensor> = None;
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        let current = loss.detach();
        ema = Some(match ema.take() {
            Some(avg) => ((avg * 0.9)? + (current * 0.1)?)?,
            None => current,
        });
    }
    ema.map_or(Ok(0.0), |e| e.to_scalar::<f32>())
}

/// C4: a window of the 4 most recent losses (detached), for a smoothed printout. It
/// fills in 4 steps, then stays flat.
#[tensor_lifetime::track]
pub fn c4_recent_losses(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
    let mut recent: VecDeque<Tensor> = VecDeque::with_capacity(4);
    let mut smoothed = 0.0;
    for step in 0..p.steps + 4 {
        let (x, y) = batch(&p, step)?;
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        if recent.len() == 4 {
            recent.pop_front();
        }
        recent.push_back(loss.detach());
        smoothed = Tensor::stack(recent.make_contiguous(), 0)?
            .mean_all()?
            .to_scalar::<f32>()?;
    }
    Ok(smoothed)
}

/// C5: a loader thread (no loop of its own: an iterator) preparing batches ahead through a
/// bounded queue of 2. Its tensors count in the training loop's iterations.
#[tensor_lifetime::track]
pub fn c5_prefetch_queue(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
    let (tx, rx) = mpsc::sync_channel::<(Tensor, Tensor)>(2);
    let steps = p.steps + 6;
    let loader = std::thread::spawn(move || {
        (0..steps).try_for_each(|step| {
            let pair = batch(&p, step)?;
            tx.send(pair).map_err(candle_core::Error::wrap)
        })
    });
    let mut last = 0.0;
    while let Ok((x, y)) = rx.recv() {
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        last = loss.to_scalar::<f32>()?;
    }
    loader.join().expect("the loader panicked")?;
    Ok(last)
}

/// C6: gradients accumulated over 4 micro-batches, then applied and cleared.
#[tensor_lifetime::track]
pub fn c6_gradient_accumulation(p: Params) -> Result<f32> {
    let (varmap, model) = setup(&p)?;
    let vars = sorted_vars(&varmap);
    let mut accumulated: Vec<Tensor> = Vec::new();
    let mut last = 0.0;
    for step in 0..4 * p.steps {
        let (x, y) = batch(&p, step)?;
        let loss = model.loss(&x, &y)?;
        let grads = loss.backward()?;
        let summed = vars
            .iter()
            .enumerate()
            .map(|(i, var)| {
                let g = grads.get(var.as_tensor()).expect("a gradient");
                match accumulated.get(i) {
                    Some(acc) => acc + g,
                    None => Ok(g.clone()),
                }
            })
            .collect::<Result<Vec<Tensor>>>()?;
        accumulated = summed;
        if step % 4 == 3 {
            vars.iter()
                .zip(&accumulated)
                .try_for_each(|(var, g)| var.set(&(var.as_tensor() - (g * 0.025)?)?))?;
            accumulated.clear();
        }
        last = loss.to_scalar::<f32>()?;
    }
    Ok(last)
}

/// C7: metrics taken off the graph: the loss as a detached scalar, accuracy as a count.
#[tensor_lifetime::track]
pub fn c7_detached_metrics(p: Params) -> Result<(Vec<f32>, u32)> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
    let mut losses = Vec::new();
    let mut correct = 0;
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        let logits = model.forward(&x)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &y)?;
        opt.backward_step(&loss)?;
        let metric = loss.detach();
        losses.push(metric.to_scalar::<f32>()?);
        let hits = logits.argmax(D::Minus1)?.eq(&y)?.to_dtype(DType::U32)?;
        correct += hits.sum_all()?.to_scalar::<u32>()?;
    }
    Ok((losses, correct))
}

/// C8: early stopping on a validation loss with a patience of 2; the learning rate is
/// frozen after two epochs, so the loss stops improving and the loop breaks early.
#[tensor_lifetime::track]
pub fn c8_early_stopping(p: Params) -> Result<usize> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
    let (vx, vy) = batch(&p, 999)?;
    let mut best = f32::INFINITY;
    let mut bad_epochs = 0;
    let mut epochs = 0;
    'epoch: for epoch in 0..3 * p.steps {
        epochs = epoch + 1;
        opt.set_learning_rate(if epoch < 2 { 0.1 } else { 0.0 });
        for step in 0..2 {
            let (x, y) = batch(&p, epoch * 2 + step)?;
            opt.backward_step(&model.loss(&x, &y)?)?;
        }
        let val = model.loss(&vx, &vy)?.to_scalar::<f32>()?;
        if val < best {
            best = val;
            bad_epochs = 0;
        } else {
            bad_epochs += 1;
            if bad_epochs > 2 {
                break 'epoch;
            }
        }
    }
    Ok(epochs)
}

// ---------------------------------------------------------------------------------------
// Shapes of real training code: construction loops, bounded buffers, stores through user
// types, decoding with and without a kept cache. The model pieces are the shared
// fixtures.

/// C9-C11: builds the model layer by layer in a loop (`build_heads`), then trains: the
/// heads live through the whole run.
#[tensor_lifetime::track]
pub fn c_construction(p: Params, layers: usize) -> Result<f32> {
    let heads = build_heads(layers, p.rows)?;
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut last = 0.0;
    for step in 0..p.steps {
        let (x, y) = batch(&p, step)?;
        let loss = model.loss(&x, &y)?;
        opt.backward_step(&loss)?;
        last = loss.to_scalar::<f32>()? + heads[step % layers].tril.dims()[0] as f32;
    }
    Ok(last)
}

/// C12, C13: transitions (each a batch's mean row) pushed into a replay buffer of
/// `capacity`, below or above it.
pub fn c_replay(p: Params, capacity: usize, steps: usize) -> Result<usize> {
    fill_replay(capacity, steps, |step| batch(&p, step)?.0.mean(0))
}

/// C14: an L-BFGS-style history of (s, y) pairs capped at `memory` pairs.
pub fn c_optimizer_history(p: Params, memory: usize) -> Result<f32> {
    lbfgs_steps(p.steps * 4, memory)
}

/// L13: transitions kept in a struct literal pushed into a list nothing trims.
#[tensor_lifetime::track]
pub fn l13_struct_literal_store(p: Params) -> Result<usize> {
    let mut kept = Vec::new();
    for step in 0..p.steps {
        kept.push(Transition {
            state: batch(&p, step)?.0, // matrix: L13 literal state
            action: 0,
        });
    }
    Ok(kept.len())
}

/// L14: a transition built by a constructor and kept by a log nothing trims (the
/// fixtures' `keep_transitions`: the site is there).
pub fn l14_constructor_store(p: Params) -> Result<usize> {
    keep_transitions(p.steps, |step| Ok(batch(&p, step)?.0))
}

/// Tokens a decoding request generates.
pub const TOKENS: usize = 4;

/// A server that decodes requests token by token with a KV cache per request.
#[derive(Debug, Default)]
pub struct Server {
    /// Caches kept "for reuse" across requests: nothing ever trims them.
    pub caches: Vec<Vec<Tensor>>,
}

#[tensor_lifetime::track]
impl Server {
    /// Decodes one request; keeps its cache when `keep`.
    pub fn decode(&mut self, p: &Params, request: usize, keep: bool) -> Result<f32> {
        let mut cache: Vec<Tensor> = Vec::new();
        let mut out = 0.0;
        for token in 0..TOKENS {
            let (x, _y) = batch(p, request * TOKENS + token)?;
            let kv = x.mean_keepdim(0)?; // matrix: L15 kv entry
            cache.push(kv);
            out += Tensor::cat(&cache, 0)?.sum_all()?.to_scalar::<f32>()?;
        }
        if keep {
            self.caches.push(cache);
        }
        Ok(out)
    }
}

/// C15 (`keep` false) and L15 (`keep` true): a request loop of decoding requests.
#[tensor_lifetime::track]
pub fn decoding(p: Params, keep: bool) -> Result<f32> {
    let mut server = Server::default();
    let mut total = 0.0;
    for request in 0..p.steps {
        total += server.decode(&p, request, keep)?;
    }
    Ok(total)
}

/// A server task serving decoding requests from a channel, on a multi-threaded runtime.
#[derive(Debug, Default)]
pub struct AsyncServer {
    /// Caches kept "for reuse" across requests: nothing ever trims them.
    pub caches: Vec<Vec<Tensor>>,
}

#[tensor_lifetime::track]
impl AsyncServer {
    /// Serves requests until the channel closes; each request decodes `TOKENS` tokens,
    /// yielding to the runtime after each (the task may resume on another thread).
    pub async fn serve(
        &mut self,
        p: Params,
        mut requests: tokio::sync::mpsc::Receiver<usize>,
        keep: bool,
    ) -> Result<f32> {
        let mut total = 0.0;
        while let Some(request) = requests.recv().await {
            let mut cache: Vec<Tensor> = Vec::new();
            for token in 0..TOKENS {
                let (x, _y) = batch(&p, request * TOKENS + token)?;
                let kv = x.mean_keepdim(0)?; // matrix: L16 async kv entry
                cache.push(kv);
                total += Tensor::cat(&cache, 0)?.sum_all()?.to_scalar::<f32>()?;
                tokio::task::yield_now().await;
            }
            if keep {
                self.caches.push(cache);
            }
        }
        Ok(total)
    }
}

/// C16 (`keep` false) and L16 (`keep` true): the server task spawned on a runtime of 4
/// worker threads, fed `p.steps` requests by another task.
pub fn async_decoding(p: Params, keep: bool) -> Result<f32> {
    serve_on_runtime(p.steps, move |rx| async move {
        let mut server = AsyncServer::default();
        server.serve(p, rx, keep).await
    })
}
