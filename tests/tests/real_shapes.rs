//! The shapes of real training code that gave false alarms or were never seen (issue
//! 15): a model built layer by layer in a loop, bounded buffers (a replay buffer, an
//! L-BFGS history), tensors stored inside user types (`Transition::new(state, ..)`,
//! `Box::new(Head { tril })`), a tensor that only lives in a struct literal, `if let` and
//! `match` bindings, and a trait's default method. Each is judged in its own leak session
//! (`check_leaks`), one at a time.

use candle_core::{DType, Device, Result, Tensor, Var};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use tensor_lifetime::{check_leaks, Finding, FindingKind, LeakTestOptions, LeakTestOutcome};
use tensor_lifetime_tests::line_of;

const SOURCE: &str = include_str!("real_shapes.rs");
const FILE: &str = "tests/tests/real_shapes.rs";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn run<R>(f: impl FnOnce() -> Result<R>) -> (R, LeakTestOutcome) {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = serial();
    let (value, outcome) = check_leaks(LeakTestOptions::default(), f).expect("tracking is on");
    (value.expect("the case runs"), outcome)
}

/// The finding at `marker`'s line with `label`.
fn finding<'a>(outcome: &'a LeakTestOutcome, marker: &str, label: &str) -> &'a Finding {
    let line = line_of(SOURCE, marker);
    outcome
        .report
        .findings
        .iter()
        .find(|f| f.site.file == FILE && f.site.line == line && f.site.label == label)
        .unwrap_or_else(|| panic!("no finding at {FILE}:{line} `{label}`:\n{}", outcome.report))
}

fn holder_labels(f: &Finding) -> Vec<String> {
    f.holders.iter().filter_map(|h| h.label.clone()).collect()
}

fn assert_no_leak(outcome: &LeakTestOutcome) {
    assert!(!outcome.report.has_leaks(), "{}", outcome.report);
    assert!(!outcome.failed(), "{}", outcome.message("clean"));
}

// ---------------------------------------------------------------------------------------
// 1. A model built layer by layer in a loop.

#[derive(Debug)]
pub struct Head {
    pub tril: Tensor,
}

#[tensor_lifetime::track]
impl Head {
    pub fn new(b: usize) -> Result<Self> {
        let tril = Tensor::tril2(b, DType::U32, &Device::Cpu)?; // shapes: head tril
        Ok(Self { tril })
    }
}

#[tensor_lifetime::track]
pub fn build_heads(n: usize) -> Result<Vec<Box<Head>>> {
    let mut heads = Vec::with_capacity(n);
    for _ in 0..n {
        heads.push(Box::new(Head::new(32)?));
    }
    Ok(heads)
}

/// The same, with the struct literal in the loop: the holder `heads` is seen.
#[tensor_lifetime::track]
pub fn build_heads_inline(n: usize) -> Result<Vec<Box<Head>>> {
    let mut heads = Vec::with_capacity(n);
    for _ in 0..n {
        let tril = Tensor::tril2(8, DType::F32, &Device::Cpu)?; // shapes: inline tril
        heads.push(Box::new(Head { tril })); // shapes: heads push
    }
    Ok(heads)
}

/// A model rebuilt every epoch and kept: a leak, judged per epoch.
#[tensor_lifetime::track]
pub fn rebuild_every_epoch(epochs: usize) -> Result<usize> {
    let mut models = Vec::new();
    for _epoch in 0..epochs {
        let heads = build_heads_inline(4)?;
        models.push(heads);
    }
    Ok(models.len())
}

#[test]
fn construction_loops_are_not_leaks() {
    for n in [4, 32, 80] {
        let (heads, outcome) = run(|| build_heads(n).map(|h| h.len()));
        assert_eq!(heads, n);
        assert_no_leak(&outcome);
        let f = finding(&outcome, "// shapes: head tril", "tril");
        assert_eq!(f.kind, FindingKind::Retained, "{}", outcome.report);
        assert!(f.hint.contains("heads"), "{}", f.hint);
    }
}

#[test]
fn construction_with_a_struct_literal_names_its_holder() {
    let (_, outcome) = run(|| build_heads_inline(32).map(|h| h.len()));
    assert_no_leak(&outcome);
    let f = finding(&outcome, "// shapes: inline tril", "tril");
    assert_eq!(holder_labels(f), ["heads"]);
    assert_eq!(
        f.holders[0].line,
        Some(line_of(SOURCE, "// shapes: heads push"))
    );
}

#[test]
fn a_model_rebuilt_and_kept_every_epoch_is_a_leak() {
    let (_, outcome) = run(|| rebuild_every_epoch(8));
    let f = finding(&outcome, "// shapes: inline tril", "tril");
    assert!(f.is_leak(), "{}", outcome.report);
}

// ---------------------------------------------------------------------------------------
// 2 and 3. Bounded buffers, and tensors stored inside user types.

#[derive(Debug)]
pub struct Transition {
    pub state: Tensor,
    pub action: u32,
    pub reward: f32,
}

impl Transition {
    pub fn new(state: Tensor, action: u32, reward: f32) -> Transition {
        Transition {
            state,
            action,
            reward,
        }
    }
}

#[derive(Debug)]
pub struct ReplayBuffer {
    pub buffer: VecDeque<Transition>,
    pub capacity: usize,
}

#[tensor_lifetime::track]
impl ReplayBuffer {
    pub fn add(&mut self, state: Tensor, action: u32, reward: f32) {
        if self.buffer.len() == self.capacity {
            self.buffer.pop_front(); // shapes: replay eviction
        }
        self.buffer
            .push_back(Transition::new(state, action, reward)); // shapes: replay push
    }
}

/// Fills a replay buffer of capacity `capacity` with `steps` transitions.
#[tensor_lifetime::track]
pub fn fill_replay(capacity: usize, steps: usize) -> Result<f32> {
    let mut replay = ReplayBuffer {
        buffer: VecDeque::new(),
        capacity,
    };
    let mut total = 0.0;
    for step in 0..steps {
        let state = Tensor::new(&[step as f32, 1.0, 2.0, 3.0], &Device::Cpu)?; // shapes: replay state
        replay.add(state, (step % 4) as u32, 0.5);
        total += replay.buffer.back().map_or(0.0, |t| t.reward);
    }
    Ok(total)
}

/// A buffer of transitions nothing trims: a leak, held by `self.kept`.
#[derive(Debug)]
pub struct Log {
    pub kept: Vec<Transition>,
}

#[tensor_lifetime::track]
impl Log {
    pub fn add(&mut self, state: Tensor) {
        self.kept.push(Transition::new(state, 0, 0.0)); // shapes: log push
    }
}

#[tensor_lifetime::track]
pub fn keep_every_transition(steps: usize) -> Result<usize> {
    let mut log = Log { kept: Vec::new() };
    for step in 0..steps {
        let state = Tensor::new(&[step as f32; 4], &Device::Cpu)?; // shapes: log state
        log.add(state);
    }
    Ok(log.kept.len())
}

// The run is 20 000 transitions; 2 000 shows the same (an iteration end walks
// every live record today, so 20 000 takes minutes: issue 16).
#[test]
fn a_replay_buffer_below_capacity_is_bounded_not_a_leak() {
    let (_, outcome) = run(|| fill_replay(100_000, 2_000));
    assert_no_leak(&outcome);
    let f = finding(&outcome, "// shapes: replay state", "state");
    assert_eq!(f.kind, FindingKind::Retained);
    assert!(f.growing);
    assert_eq!(holder_labels(f), ["self.buffer"]);
    assert_eq!(
        f.holders[0].line,
        Some(line_of(SOURCE, "// shapes: replay push"))
    );
    let eviction = line_of(SOURCE, "// shapes: replay eviction");
    assert!(f.hint.contains(&format!("{FILE}:{eviction}")), "{}", f.hint);
    assert!(f.hint.contains("pop_front"), "{}", f.hint);
}

#[test]
fn a_replay_buffer_above_capacity_is_bounded_not_a_leak() {
    let (_, outcome) = run(|| fill_replay(50, 200));
    assert_no_leak(&outcome);
}

#[test]
fn a_store_through_a_constructor_names_its_holder() {
    let (_, outcome) = run(|| keep_every_transition(12));
    let f = finding(&outcome, "// shapes: log state", "state");
    assert_eq!(f.kind, FindingKind::Leak, "{}", outcome.report);
    assert_eq!(holder_labels(f), ["self.kept"]);
    assert_eq!(
        f.holders[0].line,
        Some(line_of(SOURCE, "// shapes: log push"))
    );
}

/// L-BFGS: the (s, y) history capped at `memory` pairs.
#[derive(Debug)]
pub struct Lbfgs {
    pub history: VecDeque<(Tensor, Tensor)>,
    pub memory: usize,
}

#[tensor_lifetime::track]
impl Lbfgs {
    pub fn remember(&mut self, sk: Tensor, yk: Tensor) {
        self.history.push_back((sk, yk));
        if self.history.len() > self.memory {
            self.history.pop_front();
        }
    }
}

/// Minimizes `sum((x - 3)^2)` with steepest descent while keeping an L-BFGS history.
#[tensor_lifetime::track]
pub fn lbfgs_steps(steps: usize, memory: usize) -> Result<f32> {
    let x = Var::new(&[0f32, 1.0, 2.0, 5.0], &Device::Cpu)?;
    let mut opt = Lbfgs {
        history: VecDeque::new(),
        memory,
    };
    let mut prev: Option<(Tensor, Tensor)> = None;
    for _step in 0..steps {
        let loss = (x.as_tensor() - 3.0)?.sqr()?.sum_all()?;
        let grads = loss.backward()?;
        let g = grads.get(&x).expect("a gradient").clone();
        let xk = x.as_tensor().clone();
        if let Some((x_prev, g_prev)) = prev.take() {
            let sk = (&xk - &x_prev)?;
            let yk = (&g - &g_prev)?; // shapes: lbfgs yk
            opt.remember(sk, yk);
        }
        x.set(&(&xk - (&g * 0.1)?)?)?;
        prev = Some((xk.copy()?, g));
    }
    x.as_tensor().sum_all()?.to_scalar::<f32>()
}

#[test]
fn an_optimizer_history_with_a_cap_is_not_a_leak() {
    let (_, outcome) = run(|| lbfgs_steps(40, 100));
    assert_no_leak(&outcome);
}

// ---------------------------------------------------------------------------------------
// 4. A tensor that only lives in a struct literal.

#[tensor_lifetime::track]
pub fn keep_literal_transitions(steps: usize) -> Result<usize> {
    let dev = Device::Cpu;
    let mut kept = Vec::new();
    for _ in 0..steps {
        kept.push(Transition {
            state: Tensor::new(vec![0f32; 256], &dev)?, // shapes: literal state
            action: 0,
            reward: 0.0,
        });
    }
    Ok(kept.len())
}

#[test]
fn a_tensor_in_a_struct_literal_is_tagged_at_the_field() {
    let (n, outcome) = run(|| keep_literal_transitions(10));
    assert_eq!(n, 10);
    let f = finding(&outcome, "// shapes: literal state", "Transition.state");
    assert_eq!(f.kind, FindingKind::Leak, "{}", outcome.report);
    assert_eq!(holder_labels(f), ["kept"]);
}

// ---------------------------------------------------------------------------------------
// 6. `if let` / `match` bindings, and a trait's default method.

#[tensor_lifetime::track]
pub fn keep_from_if_let(steps: usize) -> Result<usize> {
    let mut kept = Vec::new();
    for step in 0..steps {
        if let Ok(row) = Tensor::new(&[step as f32; 8], &Device::Cpu) {
            // shapes: if-let row
            kept.push(row.clone());
        }
        match Tensor::new(&[step as u32; 8], &Device::Cpu) {
            Ok(ids) => kept.push(ids.to_dtype(DType::F32)?), // shapes: match ids
            Err(e) => return Err(e),
        }
    }
    Ok(kept.len())
}

#[test]
fn if_let_and_match_bindings_are_tagged() {
    let (_, outcome) = run(|| keep_from_if_let(10));
    let line = line_of(SOURCE, "// shapes: if-let row") - 1;
    let f = outcome
        .report
        .findings
        .iter()
        .find(|f| f.site.line == line && f.site.label == "row")
        .unwrap_or_else(|| panic!("no finding for `row`:\n{}", outcome.report));
    assert!(f.is_leak());
    assert_eq!(holder_labels(f), ["kept"]);
}

#[tensor_lifetime::track]
pub trait Collect {
    fn sink(&mut self) -> &mut Vec<Tensor>;

    fn collect_steps(&mut self, steps: usize) -> Result<usize> {
        for step in 0..steps {
            let t = Tensor::new(&[step as f32; 4], &Device::Cpu)?; // shapes: trait default
            self.sink().push(t);
        }
        Ok(self.sink().len())
    }
}

#[derive(Debug)]
pub struct Sink(Vec<Tensor>);

impl Collect for Sink {
    fn sink(&mut self) -> &mut Vec<Tensor> {
        &mut self.0
    }
}

#[test]
fn a_trait_default_method_is_tracked() {
    let (_, outcome) = run(|| Sink(Vec::new()).collect_steps(10));
    let f = finding(&outcome, "// shapes: trait default", "t");
    assert!(f.is_leak(), "{}", outcome.report);
}

// ---------------------------------------------------------------------------------------
// 5. A graph's inputs: a batch leads to no variable, so it is no node of the graph that
//    holds it; the macro names what each value is computed from.

/// A loss summed without `detach`, the batch fed through the layers by reassignment
/// (`h = h.matmul(..)`) or by a `let`: the graph of `total` holds every step's batch.
#[tensor_lifetime::track]
pub fn summed_loss_over_batches(steps: usize, by_let: bool) -> Result<f32> {
    let dev = Device::Cpu;
    let layers: Vec<Var> = (0..3)
        .map(|i| {
            Var::from_tensor(
                &Tensor::new(vec![0.01f32 * (i + 1) as f32; 4096], &dev)?.reshape((64, 64))?,
            )
        })
        .collect::<Result<_>>()?;
    let mut total = Tensor::zeros((), DType::F32, &dev)?;
    for step in 0..steps {
        let batch = Tensor::new(vec![step as f32; 8 * 64], &dev)?.reshape((8, 64))?; // shapes: batch
        let loss = if by_let {
            let first = batch.matmul(layers[0].as_tensor())?;
            first.sum_all()?
        } else {
            let mut h = batch;
            for layer in &layers {
                h = h.matmul(layer.as_tensor())?;
            }
            h.sum_all()?
        };
        total = (total + loss)?; // shapes: summed loss
    }
    total.to_scalar::<f32>()
}

#[test]
fn a_graph_holds_the_batches_it_was_computed_from() {
    for by_let in [true, false] {
        let (_, outcome) = run(|| summed_loss_over_batches(12, by_let));
        let total = finding(&outcome, "// shapes: summed loss", "total");
        assert_eq!(
            total.kind,
            FindingKind::GraphRetention,
            "{}",
            outcome.report
        );
        assert!(total.is_leak(), "{}", outcome.report);
        let held: Vec<&str> = total.held_sites.iter().map(|s| s.label.as_str()).collect();
        assert!(held.contains(&"batch"), "{held:?}\n{}", outcome.report);
        // Counted in the graph: 12 batches of 8 x 64 f32 at least.
        assert!(total.graph_bytes >= 12 * 8 * 64 * 4, "{}", outcome.report);
        // No leak of its own with no holder.
        let line = line_of(SOURCE, "// shapes: batch");
        assert!(
            !outcome
                .report
                .findings
                .iter()
                .any(|f| f.site.file == FILE && f.site.line == line),
            "{}",
            outcome.report
        );
    }
}

/// `summed_loss_over_batches` with each batch also cached in a list nothing trims: the
/// list is the batches' holder (what the code can let go of), not the graph.
#[tensor_lifetime::track]
pub fn summed_loss_and_cached_batches(steps: usize) -> Result<usize> {
    let dev = Device::Cpu;
    let w = Var::from_tensor(&Tensor::new(vec![0.5f32; 64 * 4], &dev)?.reshape((64, 4))?)?;
    let mut cache = Vec::new();
    let mut total = Tensor::zeros((), DType::F32, &dev)?;
    for step in 0..steps {
        let batch = Tensor::new(vec![step as f32; 8 * 64], &dev)?.reshape((8, 64))?; // shapes: cached batch
        let loss = batch.matmul(w.as_tensor())?.sum_all()?;
        cache.push(batch); // shapes: batch cache
        total = (total + loss)?;
    }
    Ok(cache.len())
}

#[test]
fn a_batch_kept_by_a_list_and_a_graph_is_the_lists() {
    let (_, outcome) = run(|| summed_loss_and_cached_batches(12));
    let f = finding(&outcome, "// shapes: cached batch", "batch");
    assert!(f.is_leak(), "{}", outcome.report);
    assert_eq!(holder_labels(f), ["cache"], "{}", outcome.report);
    assert_eq!(
        f.holders[0].line,
        Some(line_of(SOURCE, "// shapes: batch cache"))
    );
}
