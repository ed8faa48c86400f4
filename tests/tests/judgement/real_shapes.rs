//! The shapes of real training code that gave false alarms or were never seen: a model
//! built layer by layer in a loop, bounded buffers (a replay buffer, an L-BFGS history),
//! tensors stored inside user types (`Transition::new(state, ..)`,
//! `Box::new(Head { tril })`), a tensor that only lives in a struct literal, `if let` and
//! `match` bindings, and a trait's default method. The model pieces are the shared
//! fixtures (their sites are in `tests/src/fixtures.rs`). Each case is judged in its own
//! leak session (`check_leaks`), one at a time.

use candle_core::{DType, Device, Result, Tensor, Var};
use tensor_lifetime::{Finding, FindingKind, LeakTestOutcome};
use tensor_lifetime_tests::fixtures::tracked::{
    build_heads, fill_replay, keep_transitions, lbfgs_steps, Head, Transition,
};
use tensor_lifetime_tests::fixtures::FIXTURES;
use tensor_lifetime_tests::{assert_clean, in_session, serial, Source};

const HERE: Source = Source {
    file: "tests/tests/judgement/real_shapes.rs",
    text: include_str!("real_shapes.rs"),
};

/// Runs a case in its own leak session, one case at a time.
fn run<R>(f: impl FnOnce() -> Result<R>) -> (R, LeakTestOutcome) {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = serial();
    in_session(f)
}

fn holder_labels(f: &Finding) -> Vec<String> {
    f.holders.iter().filter_map(|h| h.label.clone()).collect()
}

// ---------------------------------------------------------------------------------------
// 1. A model built layer by layer in a loop (`build_heads`, a fixture).

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
        let (heads, outcome) = run(|| build_heads(n, 32).map(|h| h.len()));
        assert_eq!(heads, n);
        assert_clean(&outcome);
        let f = FIXTURES.finding(&outcome, "// fixtures: head tril", "tril");
        assert_eq!(f.kind, FindingKind::Retained, "{}", outcome.report);
        assert!(f.hint.contains("heads"), "{}", f.hint);
    }
}

#[test]
fn construction_with_a_struct_literal_names_its_holder() {
    let (_, outcome) = run(|| build_heads_inline(32).map(|h| h.len()));
    assert_clean(&outcome);
    let f = HERE.finding(&outcome, "// shapes: inline tril", "tril");
    assert_eq!(holder_labels(f), ["heads"]);
    assert_eq!(f.holders[0].line, Some(HERE.line("// shapes: heads push")));
}

#[test]
fn a_model_rebuilt_and_kept_every_epoch_is_a_leak() {
    let (_, outcome) = run(|| rebuild_every_epoch(8));
    let f = HERE.finding(&outcome, "// shapes: inline tril", "tril");
    assert!(f.is_leak(), "{}", outcome.report);
}

// ---------------------------------------------------------------------------------------
// 2 and 3. Bounded buffers (the fixtures' replay buffer and L-BFGS history), and tensors
//    stored inside user types (`Transition::new(state, ..)` kept by a log).

/// A state of four floats, the first the step.
fn small_state(step: usize) -> Result<Tensor> {
    Tensor::new(&[step as f32, 1.0, 2.0, 3.0], &Device::Cpu)
}

// The reported run is 20 000 transitions; 2 000 shows the same in less time.
#[test]
fn a_replay_buffer_below_capacity_is_bounded_not_a_leak() {
    let (_, outcome) = run(|| fill_replay(100_000, 2_000, small_state));
    assert_clean(&outcome);
    let f = FIXTURES.finding(&outcome, "// fixtures: replay state", "state");
    assert_eq!(f.kind, FindingKind::Retained);
    assert!(f.growing);
    assert_eq!(holder_labels(f), ["self.buffer"]);
    assert_eq!(
        f.holders[0].line,
        Some(FIXTURES.line("// fixtures: replay push"))
    );
    let eviction = FIXTURES.line("// fixtures: replay eviction");
    let at = format!("{}:{eviction}", FIXTURES.file);
    assert!(f.hint.contains(&at), "{}", f.hint);
    assert!(f.hint.contains("pop_front"), "{}", f.hint);
}

#[test]
fn a_replay_buffer_above_capacity_is_bounded_not_a_leak() {
    let (_, outcome) = run(|| fill_replay(50, 200, small_state));
    assert_clean(&outcome);
}

#[test]
fn a_store_through_a_constructor_names_its_holder() {
    let (_, outcome) =
        run(|| keep_transitions(12, |step| Tensor::new(&[step as f32; 4], &Device::Cpu)));
    let f = FIXTURES.finding(&outcome, "// fixtures: log state", "state");
    assert_eq!(f.kind, FindingKind::Leak, "{}", outcome.report);
    assert_eq!(holder_labels(f), ["self.kept"]);
    assert_eq!(
        f.holders[0].line,
        Some(FIXTURES.line("// fixtures: log push"))
    );
}

#[test]
fn an_optimizer_history_with_a_cap_is_not_a_leak() {
    let (_, outcome) = run(|| lbfgs_steps(40, 100));
    assert_clean(&outcome);
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
        });
    }
    Ok(kept.len())
}

#[test]
fn a_tensor_in_a_struct_literal_is_tagged_at_the_field() {
    let (n, outcome) = run(|| keep_literal_transitions(10));
    assert_eq!(n, 10);
    let f = HERE.finding(&outcome, "// shapes: literal state", "Transition.state");
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
    let line = HERE.line("// shapes: if-let row") - 1;
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
    let f = HERE.finding(&outcome, "// shapes: trait default", "t");
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
        let total = HERE.finding(&outcome, "// shapes: summed loss", "total");
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
        let line = HERE.line("// shapes: batch");
        assert!(
            !outcome
                .report
                .findings
                .iter()
                .any(|f| f.site.file == HERE.file && f.site.line == line),
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
    let f = HERE.finding(&outcome, "// shapes: cached batch", "batch");
    assert!(f.is_leak(), "{}", outcome.report);
    assert_eq!(holder_labels(f), ["cache"], "{}", outcome.report);
    assert_eq!(f.holders[0].line, Some(HERE.line("// shapes: batch cache")));
}
