//! A corpus in the shapes of real training code, each function compiled twice: as written
//! (`plain`) and with `#[tensor_lifetime::track]` (`tracked`), as `corpus.rs` does; the
//! model pieces are the shared fixtures, compiled both ways too. Both must give identical
//! results, and the tracked one must be judged right: model construction in a loop, bounded buffers and decoding with a
//! per-request cache are clean; tensors kept in user types nothing trims, and caches kept
//! across requests, are leaks at their line, label and holder.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap, SGD};
use tensor_lifetime::{FindingKind, LeakTestOutcome};
use tensor_lifetime_tests::fixtures::tracked::Transition;
use tensor_lifetime_tests::fixtures::{self, fixed_init, CLASSES, FEATURES, FIXTURES};
use tensor_lifetime_tests::{assert_clean, compare, serve_on_runtime, Source};

const HERE: Source = Source {
    file: "tests/tests/judgement/corpus_real_shapes.rs",
    text: include_str!("corpus_real_shapes.rs"),
};

pub const BATCH: usize = 8;

/// A deterministic synthetic batch (library code, not annotated).
pub fn batch(step: usize) -> Result<(Tensor, Tensor)> {
    fixtures::batch(BATCH, 0, step, &Device::Cpu)
}

/// The state of a transition: the mean row of a batch.
fn mean_state(step: usize) -> Result<Tensor> {
    batch(step).and_then(|(x, _y)| x.mean(0))
}

/// A linear classifier with fixed initial weights.
pub fn classifier(varmap: &VarMap) -> Result<Linear> {
    let vb = VarBuilder::from_varmap(varmap, DType::F32, &Device::Cpu);
    let layer = linear(FEATURES, CLASSES, vb.pp("fc"))?;
    fixed_init(varmap)?;
    Ok(layer)
}

tensor_lifetime_test_support::twice! {
    types {
        #[derive(Debug, Default)]
        pub struct Server {
            pub caches: Vec<Vec<Tensor>>,
        }

        #[derive(Debug, Default)]
        pub struct Meter {
            pub losses: Vec<f32>,
        }
    }
    code {
        /// 1. A model (built layer by layer beforehand: the fixtures' `build_heads`)
        /// trained. Clean.
        pub fn train(steps: usize) -> Result<f32> {
            let varmap = VarMap::new();
            let model = classifier(&varmap)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
            let mut last = 0.0;
            for step in 0..steps {
                let (x, y) = batch(step)?;
                let loss = candle_nn::loss::cross_entropy(&model.forward(&x)?, &y)?;
                opt.backward_step(&loss)?;
                last = loss.to_scalar::<f32>()?;
            }
            Ok(last)
        }

        /// 4. Transitions kept in struct literals nothing trims. Leak at the field.
        pub fn kept_literals(steps: usize) -> Result<usize> {
            let mut kept = Vec::new();
            for step in 0..steps {
                kept.push(Transition {
                    state: Tensor::new(vec![step as f32; 64], &Device::Cpu)?, // corpus: literal state
                    action: 0,
                });
            }
            Ok(kept.len())
        }

        impl Server {
            pub fn decode(&mut self, request: usize, keep: bool) -> Result<f32> {
                let mut cache: Vec<Tensor> = Vec::new();
                let mut out = 0.0;
                for token in 0..4 {
                    let (x, _y) = batch(request * 4 + token)?;
                    let kv = x.mean_keepdim(0)?; // corpus: kv entry
                    cache.push(kv);
                    out += Tensor::cat(&cache, 0)?.sum_all()?.to_scalar::<f32>()?;
                }
                if keep {
                    self.caches.push(cache); // corpus: kept caches
                }
                Ok(out)
            }
        }

        /// 6 (`keep` false, clean) and 7 (`keep` true, leak at `kv`): a request loop
        /// decoding token by token with a KV cache per request.
        pub fn serve(requests: usize, keep: bool) -> Result<f32> {
            let mut server = Server::default();
            let mut total = 0.0;
            for request in 0..requests {
                total += server.decode(request, keep)?;
            }
            Ok(total)
        }

        /// 10 (`keep` false, clean) and 11 (`keep` true, leak at `features`): an async
        /// task serving requests from a channel on a multi-threaded runtime, yielding
        /// mid-request (it may resume on another thread); each request is an iteration.
        pub async fn serve_async(
            mut requests: tokio::sync::mpsc::Receiver<usize>,
            keep: bool,
        ) -> Result<f32> {
            let mut history: Vec<Tensor> = Vec::new();
            let mut total = 0.0;
            while let Some(request) = requests.recv().await {
                let (x, _y) = batch(request)?;
                let features = x.sqr()?.mean_keepdim(0)?; // corpus: async features
                tokio::task::yield_now().await;
                total += features.sum_all()?.to_scalar::<f32>()?;
                if keep {
                    history.push(features);
                }
            }
            Ok(total + history.len() as f32)
        }

        /// 8. Training whose batches go through `match` and `if let`. Clean.
        pub fn matched_batches(steps: usize) -> Result<f32> {
            let varmap = VarMap::new();
            let model = classifier(&varmap)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
            let mut last = 0.0;
            for step in 0..steps {
                let (x, y) = match batch(step) {
                    Ok((x, y)) => (x, y),
                    Err(e) => return Err(e),
                };
                if let Ok(loss) = candle_nn::loss::cross_entropy(&model.forward(&x)?, &y) {
                    opt.backward_step(&loss)?;
                    last = loss.to_scalar::<f32>()?;
                }
            }
            Ok(last)
        }

        /// 9. A trait's default method running the training loop. Clean.
        pub trait Trainer {
            fn model(&self) -> &Linear;

            fn meter(&mut self) -> &mut Meter;

            fn train(&mut self, opt: &mut SGD, steps: usize) -> Result<f32> {
                for step in 0..steps {
                    let (x, y) = batch(step)?;
                    let loss = candle_nn::loss::cross_entropy(&self.model().forward(&x)?, &y)?;
                    opt.backward_step(&loss)?;
                    let value = loss.to_scalar::<f32>()?;
                    self.meter().losses.push(value);
                }
                Ok(self.meter().losses.iter().sum())
            }
        }
    }
}

/// A trainer using the default method of each compilation of `Trainer`.
#[derive(Debug)]
pub struct Job {
    pub model: Linear,
    pub meter: plain::Meter,
}

impl plain::Trainer for Job {
    fn model(&self) -> &Linear {
        &self.model
    }
    fn meter(&mut self) -> &mut plain::Meter {
        &mut self.meter
    }
}

#[derive(Debug)]
pub struct TrackedJob {
    pub model: Linear,
    pub meter: tracked::Meter,
}

impl tracked::Trainer for TrackedJob {
    fn model(&self) -> &Linear {
        &self.model
    }
    fn meter(&mut self) -> &mut tracked::Meter {
        &mut self.meter
    }
}

/// The one leak: at `marker`'s line of `source`, with `label`; returns its holders'
/// labels.
fn assert_leak_at(
    outcome: &LeakTestOutcome,
    source: Source,
    marker: &str,
    label: &str,
) -> Vec<String> {
    let line = source.line(marker);
    let leaks: Vec<_> = outcome.report.leaks().collect();
    assert_eq!(leaks.len(), 1, "{}", outcome.report);
    let f = leaks[0];
    assert_eq!(
        (f.site.file.as_str(), f.site.line),
        (source.file, line),
        "{}",
        outcome.report
    );
    assert_eq!(f.site.label, label);
    assert_eq!(f.kind, FindingKind::Leak);
    f.holders.iter().filter_map(|h| h.label.clone()).collect()
}

#[test]
fn r01_construction_loops_then_training_are_clean() {
    for layers in [4, 32, 80] {
        let outcome = compare(
            || {
                let heads = fixtures::plain::build_heads(layers, 16)?;
                Ok(plain::train(6)? + heads.iter().map(|h| h.tril.dims()[0] as f32).sum::<f32>())
            },
            || {
                let heads = fixtures::tracked::build_heads(layers, 16)?;
                Ok(tracked::train(6)? + heads.iter().map(|h| h.tril.dims()[0] as f32).sum::<f32>())
            },
        );
        assert_clean(&outcome);
    }
}

#[test]
fn r02_replay_buffers_below_and_above_capacity_are_clean() {
    // The reported shape: capacity 100 000 filled with 20 000 transitions (never full),
    // and a small buffer that evicts.
    for (capacity, steps) in [(100_000, 20_000), (16, 300)] {
        let outcome = compare(
            || fixtures::plain::fill_replay(capacity, steps, mean_state),
            || fixtures::tracked::fill_replay(capacity, steps, mean_state),
        );
        assert_clean(&outcome);
    }
}

#[test]
fn r03_capped_optimizer_history_is_clean() {
    let outcome = compare(
        || fixtures::plain::lbfgs_steps(40, 100),
        || fixtures::tracked::lbfgs_steps(40, 100),
    );
    assert_clean(&outcome);
}

#[test]
fn r04_struct_literals_kept_leak_at_the_field() {
    let outcome = compare(|| plain::kept_literals(10), || tracked::kept_literals(10));
    let holders = assert_leak_at(
        &outcome,
        HERE,
        "// corpus: literal state",
        "Transition.state",
    );
    assert_eq!(holders, ["kept"]);
}

#[test]
fn r05_constructor_stores_leak_with_their_holder() {
    let state = |step| batch(step).map(|(x, _y)| x);
    let outcome = compare(
        || fixtures::plain::keep_transitions(10, state),
        || fixtures::tracked::keep_transitions(10, state),
    );
    let holders = assert_leak_at(&outcome, FIXTURES, "// fixtures: log state", "state");
    assert_eq!(holders, ["self.kept"]);
    let store = &outcome.report.leaks().next().unwrap().holders[0];
    assert_eq!(store.line, Some(FIXTURES.line("// fixtures: log push")));
}

#[test]
fn r06_decoding_with_a_per_request_cache_is_clean() {
    let outcome = compare(|| plain::serve(8, false), || tracked::serve(8, false));
    assert_clean(&outcome);
}

#[test]
fn r07_caches_kept_across_requests_leak() {
    let outcome = compare(|| plain::serve(8, true), || tracked::serve(8, true));
    let holders = assert_leak_at(&outcome, HERE, "// corpus: kv entry", "kv");
    assert_eq!(holders, ["self.caches"]);
}

#[test]
fn r08_match_and_if_let_training_is_clean() {
    let outcome = compare(|| plain::matched_batches(8), || tracked::matched_batches(8));
    assert_clean(&outcome);
}

#[test]
fn r09_trait_default_training_is_clean() {
    use plain::Trainer as _;
    use tracked::Trainer as _;
    let make = || -> Result<(VarMap, Linear, SGD)> {
        let varmap = VarMap::new();
        let model = classifier(&varmap)?;
        let opt = SGD::new(varmap.all_vars(), 0.1)?;
        Ok((varmap, model, opt))
    };
    let outcome = compare(
        || {
            let (_varmap, model, mut opt) = make()?;
            let meter = plain::Meter::default();
            Job { model, meter }.train(&mut opt, 8)
        },
        || {
            let (_varmap, model, mut opt) = make()?;
            let meter = tracked::Meter::default();
            TrackedJob { model, meter }.train(&mut opt, 8)
        },
    );
    assert_clean(&outcome);
}

#[test]
fn r10_async_request_loop_is_clean() {
    let outcome = compare(
        || serve_on_runtime(12, |rx| plain::serve_async(rx, false)),
        || serve_on_runtime(12, |rx| tracked::serve_async(rx, false)),
    );
    assert_clean(&outcome);
}

#[test]
fn r11_async_request_loop_keeping_results_leaks() {
    let outcome = compare(
        || serve_on_runtime(12, |rx| plain::serve_async(rx, true)),
        || serve_on_runtime(12, |rx| tracked::serve_async(rx, true)),
    );
    let holders = assert_leak_at(&outcome, HERE, "// corpus: async features", "features");
    assert_eq!(holders, ["history"]);
    let leak = outcome.report.leaks().next().unwrap();
    assert_eq!(leak.survivors, 12, "{}", outcome.report);
    assert_eq!(leak.bytes, 12 * FEATURES as u64 * 4, "{}", outcome.report);
}
