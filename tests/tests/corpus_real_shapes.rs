//! A corpus in the shapes of real training code (issue 15), each function compiled twice:
//! as written (`plain`) and with `#[tensor_lifetime::track]` (`tracked`), as
//! `tests/corpus.rs` does. Both must give identical results, and the tracked one must be
//! judged right: model construction in a loop, bounded buffers and decoding with a
//! per-request cache are clean; tensors kept in user types nothing trims, and caches kept
//! across requests, are leaks at their line, label and holder.

use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap, SGD};
use std::collections::VecDeque;
use std::sync::Mutex;
use tensor_lifetime::{check_leaks, FindingKind, LeakTestOptions, LeakTestOutcome};
use tensor_lifetime_tests::{line_of, serve_on_runtime};

const SOURCE: &str = include_str!("corpus_real_shapes.rs");
const FILE: &str = "tests/tests/corpus_real_shapes.rs";

pub const FEATURES: usize = 8;
pub const CLASSES: usize = 3;
pub const BATCH: usize = 8;

/// A deterministic synthetic batch (library code, not annotated).
pub fn batch(step: usize) -> Result<(Tensor, Tensor)> {
    let xs: Vec<f32> = (0..BATCH * FEATURES)
        .map(|i| ((i * 7 + step * 31) as f32 * 0.37).sin())
        .collect();
    let ys: Vec<u32> = (0..BATCH).map(|i| ((i + step) % CLASSES) as u32).collect();
    Ok((
        Tensor::from_vec(xs, (BATCH, FEATURES), &Device::Cpu)?,
        Tensor::from_vec(ys, BATCH, &Device::Cpu)?,
    ))
}

/// A linear classifier with fixed initial weights.
pub fn classifier(varmap: &VarMap) -> Result<Linear> {
    let vb = VarBuilder::from_varmap(varmap, DType::F32, &Device::Cpu);
    let layer = linear(FEATURES, CLASSES, vb.pp("fc"))?;
    let data = varmap.data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for (k, var) in names.into_iter().map(|n| &data[n]).enumerate() {
        let values: Vec<f32> = (0..var.elem_count())
            .map(|i| ((i + 13 * k) as f32 * 0.71).cos() * 0.3)
            .collect();
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    }
    Ok(layer)
}

tensor_lifetime_test_support::twice! {
    types {
        #[derive(Debug)]
        pub struct Head {
            pub tril: Tensor,
        }

        #[derive(Debug)]
        pub struct Transition {
            pub state: Tensor,
            pub action: u32,
        }

        #[derive(Debug)]
        pub struct Replay {
            pub buffer: VecDeque<Transition>,
            pub capacity: usize,
        }

        #[derive(Debug)]
        pub struct Lbfgs {
            pub history: VecDeque<(Tensor, Tensor)>,
            pub memory: usize,
        }

        #[derive(Debug, Default)]
        pub struct Log {
            pub kept: Vec<Transition>,
        }

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
        impl Head {
            pub fn new(block: usize) -> Result<Self> {
                let tril = Tensor::tril2(block, DType::F32, &Device::Cpu)?;
                Ok(Self { tril })
            }
        }

        pub fn build_heads(n: usize) -> Result<Vec<Box<Head>>> {
            let mut heads = Vec::with_capacity(n);
            for _ in 0..n {
                heads.push(Box::new(Head::new(16)?));
            }
            Ok(heads)
        }

        /// 1. A model built layer by layer, then trained. Clean.
        pub fn build_and_train(layers: usize, steps: usize) -> Result<f32> {
            let heads = build_heads(layers)?;
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
            Ok(last + heads.iter().map(|h| h.tril.dims()[0] as f32).sum::<f32>())
        }

        impl Replay {
            pub fn add(&mut self, state: Tensor, action: u32) {
                if self.buffer.len() == self.capacity {
                    self.buffer.pop_front();
                }
                self.buffer.push_back(Transition::new(state, action));
            }
        }

        impl Transition {
            pub fn new(state: Tensor, action: u32) -> Transition {
                Transition { state, action }
            }
        }

        /// 2. An agent filling a replay buffer that evicts when full. Clean.
        pub fn replay_agent(capacity: usize, steps: usize) -> Result<f32> {
            let mut replay = Replay {
                buffer: VecDeque::new(),
                capacity,
            };
            for step in 0..steps {
                let (x, _y) = batch(step)?;
                let state = x.mean(0)?;
                replay.add(state, (step % 4) as u32);
            }
            let sum = replay.buffer.iter().map(|t| t.action as f32).sum::<f32>();
            Ok(sum + replay.buffer.len() as f32)
        }

        impl Lbfgs {
            pub fn remember(&mut self, sk: Tensor, yk: Tensor) {
                self.history.push_back((sk, yk));
                if self.history.len() > self.memory {
                    self.history.pop_front();
                }
            }
        }

        /// 3. Steepest descent keeping an L-BFGS history capped at `memory` pairs. Clean.
        pub fn lbfgs(steps: usize, memory: usize) -> Result<f32> {
            let w = Var::new(&[0f32, 1.0, 2.0, 5.0], &Device::Cpu)?;
            let mut opt = Lbfgs {
                history: VecDeque::new(),
                memory,
            };
            let mut prev: Option<(Tensor, Tensor)> = None;
            for _step in 0..steps {
                let loss = (w.as_tensor() - 3.0)?.sqr()?.sum_all()?;
                let grads = loss.backward()?;
                let g = grads.get(&w).expect("a gradient").clone();
                let wk = w.as_tensor().clone();
                if let Some((w_prev, g_prev)) = prev.take() {
                    let sk = (&wk - &w_prev)?;
                    let yk = (&g - &g_prev)?;
                    opt.remember(sk, yk);
                }
                w.set(&(&wk - (&g * 0.1)?)?)?;
                prev = Some((wk.copy()?, g));
            }
            w.as_tensor().sum_all()?.to_scalar::<f32>()
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

        impl Log {
            pub fn add(&mut self, state: Tensor) {
                self.kept.push(Transition::new(state, 1)); // corpus: log push
            }
        }

        /// 5. Transitions built by a constructor, kept by a log. Leak at `state`.
        pub fn constructor_log(steps: usize) -> Result<usize> {
            let mut log = Log::default();
            for step in 0..steps {
                let (state, _y) = batch(step)?; // corpus: log state
                log.add(state);
            }
            Ok(log.kept.len())
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

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the plain and the tracked version; checks they agree exactly and returns the
/// tracked run's leak outcome.
fn compare<R: PartialEq + std::fmt::Debug>(
    plain: impl FnOnce() -> Result<R>,
    tracked: impl FnOnce() -> Result<R>,
) -> LeakTestOutcome {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let expected = plain().unwrap();
    let (got, outcome) = check_leaks(LeakTestOptions::default(), tracked).unwrap();
    assert_eq!(got.unwrap(), expected, "tracked and plain results differ");
    outcome
}

fn assert_clean(outcome: &LeakTestOutcome) {
    assert!(!outcome.report.has_leaks(), "{}", outcome.report);
    assert!(outcome.alive.is_empty(), "{}", outcome.message("clean"));
    assert!(!outcome.failed());
}

/// The one leak: at `marker`'s line, with `label`; returns its holders' labels.
fn assert_leak_at(outcome: &LeakTestOutcome, marker: &str, label: &str) -> Vec<String> {
    let line = line_of(SOURCE, marker);
    let leaks: Vec<_> = outcome.report.leaks().collect();
    assert_eq!(leaks.len(), 1, "{}", outcome.report);
    let f = leaks[0];
    assert_eq!(
        (f.site.file.as_str(), f.site.line),
        (FILE, line),
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
            || plain::build_and_train(layers, 6),
            || tracked::build_and_train(layers, 6),
        );
        assert_clean(&outcome);
    }
}

#[test]
fn r02_replay_buffers_below_and_above_capacity_are_clean() {
    // The shape: capacity 100 000 filled with 20 000 transitions (never full),
    // and a small buffer that evicts.
    for (capacity, steps) in [(100_000, 20_000), (16, 300)] {
        let outcome = compare(
            || plain::replay_agent(capacity, steps),
            || tracked::replay_agent(capacity, steps),
        );
        assert_clean(&outcome);
    }
}

#[test]
fn r03_capped_optimizer_history_is_clean() {
    let outcome = compare(|| plain::lbfgs(40, 100), || tracked::lbfgs(40, 100));
    assert_clean(&outcome);
}

#[test]
fn r04_struct_literals_kept_leak_at_the_field() {
    let outcome = compare(|| plain::kept_literals(10), || tracked::kept_literals(10));
    let holders = assert_leak_at(&outcome, "// corpus: literal state", "Transition.state");
    assert_eq!(holders, ["kept"]);
}

#[test]
fn r05_constructor_stores_leak_with_their_holder() {
    let outcome = compare(
        || plain::constructor_log(10),
        || tracked::constructor_log(10),
    );
    let holders = assert_leak_at(&outcome, "// corpus: log state", "state");
    assert_eq!(holders, ["self.kept"]);
    let store = &outcome.report.leaks().next().unwrap().holders[0];
    assert_eq!(store.line, Some(line_of(SOURCE, "// corpus: log push")));
}

#[test]
fn r06_decoding_with_a_per_request_cache_is_clean() {
    let outcome = compare(|| plain::serve(8, false), || tracked::serve(8, false));
    assert_clean(&outcome);
}

#[test]
fn r07_caches_kept_across_requests_leak() {
    let outcome = compare(|| plain::serve(8, true), || tracked::serve(8, true));
    let holders = assert_leak_at(&outcome, "// corpus: kv entry", "kv");
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
    let holders = assert_leak_at(&outcome, "// corpus: async features", "features");
    assert_eq!(holders, ["history"]);
    let leak = outcome.report.leaks().next().unwrap();
    assert_eq!(leak.survivors, 12, "{}", outcome.report);
    assert_eq!(leak.bytes, 12 * FEATURES as u64 * 4, "{}", outcome.report);
}
