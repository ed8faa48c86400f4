//! A corpus of small but realistic candle training functions, each compiled twice: as
//! written (`plain`) and with `#[tensor_lifetime::track]` (`tracked`). For each one the
//! tests check that both give bit-identical numbers, and that the tracked one is judged
//! right: the leaky ones are flagged at the line, label and holder of the leak, the clean
//! ones have no leak finding and leave no tensor alive.
//!
//! Each tracked run is its own leak session (`check_leaks`). The cases also take a lock so
//! they run one at a time: tensors born on a loader thread with no loop of its own belong
//! to the process's primary loop, and this file is about the macro, not about that rule
//! (the parallel-sessions test covers isolation).

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{linear, AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap, SGD};
use std::collections::{HashMap, VecDeque};
use tensor_lifetime::{check_leaks, FindingKind, LeakTestOptions, LeakTestOutcome};
use tensor_lifetime_tests::fixtures::{fixed_init, CLASSES, FEATURES, HIDDEN};
use tensor_lifetime_tests::{assert_clean, compare, serial, Source};

const HERE: Source = Source {
    file: "tests/tests/judgement/corpus.rs",
    text: include_str!("corpus.rs"),
};

pub const BATCH: usize = 16;
pub const STEPS: usize = 8;

/// A deterministic synthetic batch (library code, not annotated).
pub fn batch(step: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    tensor_lifetime_tests::fixtures::batch(BATCH, 0, step, device)
}

/// Sum of all variables, sorted by name: a fingerprint of the trained weights.
pub fn weights_sum(varmap: &VarMap) -> Result<f32> {
    let data = varmap.data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut sum = 0.0;
    for name in names {
        sum += data[name].as_tensor().sum_all()?.to_scalar::<f32>()?;
    }
    Ok(sum)
}

tensor_lifetime_test_support::twice! {
    types {
        /// A two-layer perceptron built with candle-nn layers.
        #[derive(Debug)]
        pub struct Mlp {
            pub fc1: Linear,
            pub fc2: Linear,
        }

        /// A dataset that keeps every batch it served "for later analysis": a leak.
        #[derive(Debug, Default)]
        pub struct CachedDataset {
            pub cache: Vec<Tensor>,
        }

        /// A dataset with a bounded cache of recent batches: fills, then stays flat.
        #[derive(Debug)]
        pub struct RecentBatches {
            pub recent: VecDeque<Tensor>,
            pub capacity: usize,
        }

        /// Features memoized per step and never evicted: a leak.
        #[derive(Debug, Default)]
        pub struct FeatureStore {
            pub features: HashMap<usize, Tensor>,
        }

        /// Early stopping that keeps a copy of the best weights.
        #[derive(Debug, Default)]
        pub struct EarlyStopping {
            pub best: Option<Vec<Tensor>>,
            pub best_loss: f32,
            pub bad_epochs: usize,
            pub patience: usize,
        }
    }
    code {
        impl Mlp {
            pub fn new(varmap: &VarMap, device: &Device) -> Result<Mlp> {
                let vb = VarBuilder::from_varmap(varmap, DType::F32, device);
                let fc1 = linear(FEATURES, HIDDEN, vb.pp("fc1"))?;
                let fc2 = linear(HIDDEN, CLASSES, vb.pp("fc2"))?;
                fixed_init(varmap)?;
                Ok(Mlp { fc1, fc2 })
            }

            pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
                let hidden = self.fc1.forward(x)?.relu()?;
                let logits = self.fc2.forward(&hidden)?;
                Ok(logits)
            }

            pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
                let logits = self.forward(x)?;
                candle_nn::loss::cross_entropy(&logits, y)
            }
        }

        impl CachedDataset {
            pub fn get(&mut self, step: usize, device: &Device) -> Result<(Tensor, Tensor)> {
                let (x, y) = batch(step, device)?; // corpus: cached x
                self.cache.push(x.clone()); // corpus: cache push
                Ok((x, y))
            }
        }

        impl RecentBatches {
            pub fn get(&mut self, step: usize, device: &Device) -> Result<(Tensor, Tensor)> {
                let (x, y) = batch(step, device)?;
                if self.recent.len() == self.capacity {
                    self.recent.pop_front();
                }
                self.recent.push_back(x.clone());
                Ok((x, y))
            }
        }

        impl FeatureStore {
            pub fn remember(&mut self, step: usize, features: Tensor) {
                self.features.entry(step).or_insert(features); // corpus: feature store
            }
        }

        impl EarlyStopping {
            /// Whether to stop; keeps a copy of the weights when the loss improves.
            pub fn update(&mut self, loss: f32, varmap: &VarMap) -> Result<bool> {
                if self.best.is_none() || loss < self.best_loss {
                    // An iterator, not a loop: a tracked loop over the parameters would
                    // see the weights first there, and a loop of 4 pushes whose Vec
                    // outlives the enclosing epoch is judged a leak (see the report).
                    let snapshot = sorted_vars(varmap)
                        .iter()
                        .map(|var| var.as_tensor().copy())
                        .collect::<Result<Vec<_>>>()?;
                    self.best = Some(snapshot);
                    self.best_loss = loss;
                    self.bad_epochs = 0;
                } else {
                    self.bad_epochs += 1;
                }
                Ok(self.bad_epochs > self.patience)
            }

            pub fn restore(&self, varmap: &VarMap) -> Result<()> {
                if let Some(best) = &self.best {
                    sorted_vars(varmap)
                        .iter()
                        .zip(best)
                        .try_for_each(|(var, value)| var.set(value))?;
                }
                Ok(())
            }
        }

        pub fn sorted_vars(varmap: &VarMap) -> Vec<candle_core::Var> {
            let data = varmap.data().lock().unwrap();
            let mut named: Vec<(String, candle_core::Var)> =
                data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            named.into_iter().map(|(_, v)| v).collect()
        }

        /// 1. The textbook loop: SGD over epochs of batches. Clean.
        pub fn sgd_epochs(epochs: usize) -> Result<Vec<f32>> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
            let mut losses = Vec::new();
            'epoch: for epoch in 0..epochs {
                let mut epoch_loss = 0.0f32;
                for step in 0..STEPS {
                    let (x, y) = batch(epoch * STEPS + step, &device)?;
                    let loss = model.loss(&x, &y)?;
                    opt.backward_step(&loss)?;
                    epoch_loss += loss.to_scalar::<f32>()?;
                    if !epoch_loss.is_finite() {
                        break 'epoch;
                    }
                }
                losses.push(epoch_loss / STEPS as f32);
            }
            losses.push(weights_sum(&varmap)?);
            Ok(losses)
        }

        /// 2. AdamW with a decaying learning rate, in a `while` loop. Clean (the
        /// optimizer's moments live as long as the optimizer).
        pub fn adamw_schedule(epochs: usize) -> Result<Vec<f32>> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let params = ParamsAdamW { lr: 0.01, ..Default::default() };
            let mut opt = AdamW::new(varmap.all_vars(), params)?;
            let mut losses = Vec::new();
            let mut epoch = 0;
            while epoch < epochs {
                let mut sum = 0.0;
                for step in 0..STEPS {
                    let (x, y) = batch(step, &device)?;
                    let loss = model.loss(&x, &y)?;
                    opt.backward_step(&loss)?;
                    sum += loss.to_scalar::<f32>()?;
                }
                opt.set_learning_rate(opt.learning_rate() * 0.5);
                losses.push(sum);
                epoch += 1;
            }
            losses.push(weights_sum(&varmap)?);
            Ok(losses)
        }

        /// 3. A dataset that caches every batch. Leak at `x` in `CachedDataset::get`,
        /// held by `self.cache`.
        pub fn cached_dataset(epochs: usize) -> Result<(Vec<f32>, usize)> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
            let mut data = CachedDataset::default();
            let mut losses = Vec::new();
            for epoch in 0..epochs {
                for step in 0..STEPS {
                    let (x, y) = data.get(epoch * STEPS + step, &device)?;
                    let loss = model.loss(&x, &y)?;
                    opt.backward_step(&loss)?;
                    losses.push(loss.to_scalar::<f32>()?);
                }
            }
            Ok((losses, data.cache.len()))
        }

        /// 4. A bounded cache of recent batches. Clean: it fills and stays flat.
        pub fn bounded_cache(epochs: usize) -> Result<Vec<f32>> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
            let mut data = RecentBatches { recent: VecDeque::new(), capacity: 3 };
            let mut losses = Vec::new();
            for epoch in 0..epochs {
                for step in 0..2 * STEPS {
                    let (x, y) = data.get(epoch * STEPS + step, &device)?;
                    let loss = model.loss(&x, &y)?;
                    opt.backward_step(&loss)?;
                    losses.push(loss.to_scalar::<f32>()?);
                }
            }
            Ok(losses)
        }

        /// 5. A data loader thread feeding batches through a bounded channel. Clean.
        pub fn loader_thread(batches: usize) -> Result<Vec<f32>> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Tensor, Tensor)>(2);
            let loader = std::thread::spawn(move || -> Result<()> {
                for step in 0..batches {
                    let pair = batch(step, &Device::Cpu)?;
                    if tx.send(pair).is_err() {
                        break;
                    }
                }
                Ok(())
            });
            let mut losses = Vec::new();
            while let Ok((x, y)) = rx.recv() {
                let loss = model.loss(&x, &y)?;
                opt.backward_step(&loss)?;
                losses.push(loss.to_scalar::<f32>()?);
            }
            loader.join().expect("the loader thread panicked")?;
            Ok(losses)
        }

        /// 6. Gradient accumulation over micro-batches: the sum grows inside a step and
        /// is released by `backward_step`. Clean.
        pub fn gradient_accumulation(steps: usize, micro: usize) -> Result<Vec<f32>> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
            let mut losses = Vec::new();
            for step in 0..steps {
                let mut acc: Option<Tensor> = None;
                for m in 0..micro {
                    let (x, y) = batch(step * micro + m, &device)?;
                    let loss = model.loss(&x, &y)?;
                    acc = Some(match acc {
                        Some(sum) => (sum + loss)?,
                        None => loss,
                    });
                }
                let mean = (acc.expect("micro > 0") / micro as f64)?;
                opt.backward_step(&mean)?;
                losses.push(mean.to_scalar::<f32>()?);
            }
            Ok(losses)
        }

        /// 7. A running loss summed without `detach`: `total` keeps every step's graph.
        /// Leak (growing graph retention) at the assignment to `total`.
        pub fn running_loss(steps: usize) -> Result<f32> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.1)?;
            let mut total = Tensor::zeros((), DType::F32, &device)?;
            for step in 0..steps {
                let (x, y) = batch(step, &device)?; // corpus: running x
                let loss = model.loss(&x, &y)?;
                opt.backward_step(&loss)?;
                total = (total + &loss)?; // corpus: running total
            }
            Ok(total.to_scalar::<f32>()? / steps as f32)
        }

        /// 8. Evaluation: accuracy and mean loss over validation batches. Clean.
        pub fn evaluate(batches: usize) -> Result<(f32, f32)> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut correct = 0u32;
            let mut loss_sum = 0.0;
            let mut seen = 0usize;
            for step in 0..batches {
                let (x, y) = batch(1000 + step, &device)?;
                let logits = model.forward(&x)?;
                let predictions = logits.argmax(D::Minus1)?;
                let hits = predictions.eq(&y)?.to_dtype(DType::U32)?.sum_all()?;
                correct += hits.to_scalar::<u32>()?;
                loss_sum += candle_nn::loss::cross_entropy(&logits, &y)?.to_scalar::<f32>()?;
                seen += BATCH;
            }
            Ok((correct as f32 / seen as f32, loss_sum / batches as f32))
        }

        /// 9. Features memoized per step through `entry().or_insert()`. Leak at
        /// `features`, held by `self.features`.
        pub fn memoized_features(steps: usize) -> Result<(f32, usize)> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut store = FeatureStore::default();
            let mut norm = 0.0;
            for step in 0..steps {
                let (x, _y) = batch(step, &device)?;
                let features = model.fc1.forward(&x)?.relu()?.detach(); // corpus: features
                norm += features.sqr()?.sum_all()?.to_scalar::<f32>()?;
                store.remember(step, features);
            }
            Ok((norm, store.features.len()))
        }

        /// 10. Early stopping that keeps the best weights and restores them. Clean: one
        /// copy of the weights at a time.
        pub fn early_stopping(max_epochs: usize) -> Result<(Vec<f32>, f32)> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.5)?;
            let mut stopper = EarlyStopping { patience: 1, ..Default::default() };
            let mut history = Vec::new();
            'epoch: for epoch in 0..max_epochs {
                for step in 0..STEPS {
                    let (x, y) = batch(step * 3 + epoch, &device)?;
                    let loss = model.loss(&x, &y)?;
                    opt.backward_step(&loss)?;
                }
                let (vx, vy) = batch(500, &device)?;
                let val = model.loss(&vx, &vy)?.to_scalar::<f32>()?;
                history.push(val);
                if stopper.update(val, &varmap)? {
                    break 'epoch;
                }
            }
            stopper.restore(&varmap)?;
            Ok((history, weights_sum(&varmap)?))
        }

        /// 11. Keeps the first row of every batch for a later plot: a one-row view pins
        /// the whole batch. Leak (growing view retention) at `first_row`.
        pub fn first_rows(steps: usize) -> Result<(usize, f32)> {
            let device = Device::Cpu;
            let mut rows = Vec::new();
            for step in 0..steps {
                let (x, _y) = batch(step, &device)?;
                let first_row = x.narrow(0, 0, 1)?; // corpus: first row
                rows.push(first_row);
            }
            let all = Tensor::cat(&rows, 0)?;
            Ok((rows.len(), all.sum_all()?.to_scalar::<f32>()?))
        }

        /// 12. Train until the loss is low enough, with `loop` and a labeled break
        /// carrying the step count. Clean.
        pub fn train_until(threshold: f32, max_steps: usize) -> Result<(usize, f32)> {
            let device = Device::Cpu;
            let varmap = VarMap::new();
            let model = Mlp::new(&varmap, &device)?;
            let mut opt = SGD::new(varmap.all_vars(), 0.2)?;
            let mut step = 0;
            let last = 'train: loop {
                let (x, y) = batch(step, &device)?;
                let loss = model.loss(&x, &y)?;
                opt.backward_step(&loss)?;
                let value = loss.to_scalar::<f32>()?;
                step += 1;
                if value < threshold || step == max_steps {
                    break 'train value;
                }
            };
            Ok((step, last))
        }
    }
}

/// The leak at `marker`'s line, with `label` and kind, and no other leak but at the
/// `also` markers; returns its holders' labels.
fn assert_leak_at(
    outcome: &LeakTestOutcome,
    marker: &str,
    label: &str,
    kind: FindingKind,
    also: &[&str],
) -> Vec<String> {
    assert!(outcome.failed(), "{}", outcome.report);
    let line = HERE.line(marker);
    let leaks: Vec<_> = outcome.report.leaks().collect();
    let found = leaks
        .iter()
        .find(|f| f.site.line == line)
        .unwrap_or_else(|| panic!("no leak at line {line}: {}", outcome.report));
    assert_eq!(found.site.file, HERE.file);
    assert_eq!(found.site.label, label);
    assert_eq!(found.kind, kind, "{}", outcome.report);
    // Nothing else is flagged as a leak.
    let allowed: Vec<u32> = also.iter().map(|m| HERE.line(m)).collect();
    assert!(
        leaks
            .iter()
            .all(|f| f.site.line == line || allowed.contains(&f.site.line)),
        "{}",
        outcome.report
    );
    found
        .holders
        .iter()
        .filter_map(|h| h.label.clone())
        .collect()
}

#[test]
fn c01_sgd_epochs_is_clean() {
    let outcome = compare(|| plain::sgd_epochs(3), || tracked::sgd_epochs(3));
    assert_clean(&outcome);
}

#[test]
fn c02_adamw_schedule_is_clean() {
    let outcome = compare(|| plain::adamw_schedule(3), || tracked::adamw_schedule(3));
    assert_clean(&outcome);
}

#[test]
fn c03_cached_dataset_leaks_at_the_cached_batch() {
    let outcome = compare(|| plain::cached_dataset(3), || tracked::cached_dataset(3));
    let holders = assert_leak_at(&outcome, "// corpus: cached x", "x", FindingKind::Leak, &[]);
    assert_eq!(holders, ["self.cache"]);
    let leak = outcome.report.leaks().next().unwrap();
    assert_eq!(
        leak.site.function,
        "judgement::corpus::tracked::CachedDataset::get"
    );
    let store = &leak.holders[0];
    assert_eq!(store.line, Some(HERE.line("// corpus: cache push")));
}

#[test]
fn c04_bounded_cache_is_clean() {
    let outcome = compare(|| plain::bounded_cache(2), || tracked::bounded_cache(2));
    assert_clean(&outcome);
}

#[test]
fn c05_loader_thread_is_clean() {
    let outcome = compare(|| plain::loader_thread(12), || tracked::loader_thread(12));
    assert_clean(&outcome);
}

#[test]
fn c06_gradient_accumulation_is_clean() {
    let outcome = compare(
        || plain::gradient_accumulation(6, 4),
        || tracked::gradient_accumulation(6, 4),
    );
    assert_clean(&outcome);
}

#[test]
fn c07_running_loss_leaks_its_graph() {
    let outcome = compare(|| plain::running_loss(10), || tracked::running_loss(10));
    let leak_holders = assert_leak_at(
        &outcome,
        "// corpus: running total",
        "total",
        FindingKind::GraphRetention,
        // The inputs are kept alive by that graph too, but as leaves without gradient
        // they are not among its nodes, so they are reported on their own (holder
        // unknown) rather than folded into `total` like `loss` and `logits`.
        &["// corpus: running x"],
    );
    // Each step's `total` is held by the graph of the next one.
    assert_eq!(leak_holders, ["total"]);
    let total = outcome
        .report
        .leaks()
        .find(|f| f.site.label == "total")
        .unwrap();
    let held: Vec<&str> = total.held_sites.iter().map(|s| s.label.as_str()).collect();
    assert!(
        held.contains(&"loss") && held.contains(&"logits"),
        "{held:?}"
    );
}

#[test]
fn c08_evaluate_is_clean() {
    let outcome = compare(|| plain::evaluate(6), || tracked::evaluate(6));
    assert_clean(&outcome);
}

#[test]
fn c09_memoized_features_leak() {
    let outcome = compare(
        || plain::memoized_features(10),
        || tracked::memoized_features(10),
    );
    let holders = assert_leak_at(
        &outcome,
        "// corpus: features",
        "features",
        FindingKind::Leak,
        &[],
    );
    assert_eq!(holders, ["self.features"]);
}

#[test]
fn c10_early_stopping_is_clean() {
    let outcome = compare(|| plain::early_stopping(8), || tracked::early_stopping(8));
    assert_clean(&outcome);
}

#[test]
fn c11_first_rows_pin_their_batches() {
    let outcome = compare(|| plain::first_rows(10), || tracked::first_rows(10));
    assert_leak_at(
        &outcome,
        "// corpus: first row",
        "first_row",
        FindingKind::ViewRetention,
        &[],
    );
}

#[test]
fn c12_train_until_is_clean() {
    let outcome = compare(
        || plain::train_until(0.2, 30),
        || tracked::train_until(0.2, 30),
    );
    assert_clean(&outcome);
}

/// A tensor is born where it was created, not where tracked code first sees it: a tracked
/// loop over the model's parameters (created before the loop, by untracked candle-nn code)
/// does not make the weights look born in that loop. The tracker compares each tensor's
/// creation serial (candle's `TensorId`) with the loop's creation watermark.
#[test]
fn parameters_first_seen_in_a_tracked_loop_are_not_born_there() {
    #[tensor_lifetime::track]
    fn scale_all(varmap: &VarMap) -> Result<()> {
        for var in sorted_vars_plain(varmap) {
            var.set(&(var.as_tensor() * 0.5)?)?; // corpus: parameter loop
        }
        Ok(())
    }
    fn sorted_vars_plain(varmap: &VarMap) -> Vec<candle_core::Var> {
        plain::sorted_vars(varmap)
    }
    let _serial = serial();
    let varmap = VarMap::new();
    let _model = plain::Mlp::new(&varmap, &Device::Cpu).unwrap();
    let (result, outcome) = check_leaks(LeakTestOptions::default(), || scale_all(&varmap)).unwrap();
    result.unwrap();
    assert!(!outcome.report.has_leaks(), "{}", outcome.report);
    assert!(
        outcome
            .report
            .findings
            .iter()
            .all(|f| f.site.label != "var"),
        "{}",
        outcome.report
    );
    assert!(!outcome.failed(), "{}", outcome.message("scale_all"));
}
