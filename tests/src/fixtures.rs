//! The model pieces that the judgement and reliability tests train with, written once:
//! seeded data, an attention head built layer by layer, transitions kept by a replay
//! buffer that evicts or by a log that never trims, an L-BFGS history with a cap, and the
//! loops that drive them. Real training code has these shapes, and each once gave a
//! false alarm or went unseen.
//!
//! The pieces are compiled twice (`twice!`): [`plain`] as written and [`tracked`] under
//! `#[tensor_lifetime::track]`, so a test can compare both runs and judge the tracked
//! one. Their sites are in this file ([`FIXTURES`]): a test finds them by the
//! `// fixtures: ...` comment on their line. The data a loop stores comes from a closure
//! of the test, so each test keeps its own data and sizes.

use crate::Source;
use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::VarMap;
use std::collections::VecDeque;

/// This file: where the fixtures' sites are.
pub const FIXTURES: Source = Source {
    file: "tests/src/fixtures.rs",
    text: include_str!("fixtures.rs"),
};

/// Features of an input row.
pub const FEATURES: usize = 8;
/// Hidden units of the tests' two-layer perceptrons.
pub const HIDDEN: usize = 16;
/// Classes of the targets.
pub const CLASSES: usize = 3;

/// A deterministic batch of `rows` rows: inputs `(rows, FEATURES)` and class ids
/// `(rows,)`, computed from the step index and `salt` (not from candle's unseedable
/// `randn`), so that two runs see the same numbers. Library code: not annotated.
pub fn batch(rows: usize, salt: usize, step: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    let xs: Vec<f32> = (0..rows * FEATURES)
        .map(|i| ((i * 7 + step * 31 + salt) as f32 * 0.37).sin())
        .collect();
    let ys: Vec<u32> = (0..rows)
        .map(|i| ((i + step + salt) % CLASSES) as u32)
        .collect();
    Ok((
        Tensor::from_vec(xs, (rows, FEATURES), device)?,
        Tensor::from_vec(ys, rows, device)?,
    ))
}

/// Overwrites the (randomly initialized) variables with a fixed pattern, in name order,
/// so that two runs start from the same weights.
pub fn fixed_init(varmap: &VarMap) -> Result<()> {
    let data = varmap.data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for (k, name) in names.into_iter().enumerate() {
        let var = &data[name];
        let values: Vec<f32> = (0..var.elem_count())
            .map(|i| ((i + 13 * k) as f32 * 0.71).cos() * 0.3)
            .collect();
        var.set(&Tensor::from_vec(values, var.shape(), var.device())?)?;
    }
    Ok(())
}

tensor_lifetime_test_support::twice! {
    types {
        /// One attention head's causal mask.
        #[derive(Debug)]
        pub struct Head {
            pub tril: Tensor,
        }

        /// A transition of a reinforcement-learning agent.
        #[derive(Debug)]
        pub struct Transition {
            pub state: Tensor,
            pub action: u32,
        }

        /// A replay buffer that evicts its oldest transition when full.
        #[derive(Debug)]
        pub struct ReplayBuffer {
            pub buffer: VecDeque<Transition>,
            pub capacity: usize,
        }

        /// A log of transitions that nothing trims.
        #[derive(Debug, Default)]
        pub struct TransitionLog {
            pub kept: Vec<Transition>,
        }

        /// L-BFGS: the (s, y) history capped at `memory` pairs.
        #[derive(Debug)]
        pub struct Lbfgs {
            pub history: VecDeque<(Tensor, Tensor)>,
            pub memory: usize,
        }
    }
    code {
        impl Head {
            pub fn new(block: usize) -> Result<Self> {
                let tril = Tensor::tril2(block, DType::F32, &Device::Cpu)?; // fixtures: head tril
                Ok(Self { tril })
            }
        }

        /// A model built layer by layer in a loop, kept in the returned `Vec`: the loop's
        /// product, not a leak, whatever the number of layers.
        pub fn build_heads(n: usize, block: usize) -> Result<Vec<Box<Head>>> {
            let mut heads = Vec::with_capacity(n);
            for _ in 0..n {
                heads.push(Box::new(Head::new(block)?));
            }
            Ok(heads)
        }

        impl Transition {
            pub fn new(state: Tensor, action: u32) -> Transition {
                Transition { state, action }
            }
        }

        impl ReplayBuffer {
            pub fn add(&mut self, state: Tensor, action: u32) {
                if self.buffer.len() == self.capacity {
                    self.buffer.pop_front(); // fixtures: replay eviction
                }
                self.buffer
                    .push_back(Transition::new(state, action)); // fixtures: replay push
            }
        }

        /// An agent filling a replay buffer of `capacity` with `steps` transitions, each
        /// state made by `state_of(step)`. Bounded: clean, below capacity or above it.
        pub fn fill_replay(
            capacity: usize,
            steps: usize,
            state_of: impl Fn(usize) -> Result<Tensor>,
        ) -> Result<usize> {
            let mut replay = ReplayBuffer {
                buffer: VecDeque::new(),
                capacity,
            };
            for step in 0..steps {
                let state = state_of(step)?; // fixtures: replay state
                replay.add(state, (step % 4) as u32);
            }
            Ok(replay.buffer.len() + replay.buffer.back().map_or(0, |t| t.action as usize))
        }

        impl TransitionLog {
            pub fn add(&mut self, state: Tensor) {
                self.kept.push(Transition::new(state, 1)); // fixtures: log push
            }
        }

        /// Transitions built by a constructor and kept by a log nothing trims: a leak at
        /// `state`, held by `self.kept`.
        pub fn keep_transitions(
            steps: usize,
            state_of: impl Fn(usize) -> Result<Tensor>,
        ) -> Result<usize> {
            let mut log = TransitionLog::default();
            for step in 0..steps {
                let state = state_of(step)?; // fixtures: log state
                log.add(state);
            }
            Ok(log.kept.len())
        }

        impl Lbfgs {
            pub fn remember(&mut self, sk: Tensor, yk: Tensor) {
                self.history.push_back((sk, yk));
                if self.history.len() > self.memory {
                    self.history.pop_front();
                }
            }
        }

        /// Minimizes `sum((w - 3)^2)` with steepest descent while keeping an L-BFGS
        /// history capped at `memory` pairs. Clean.
        pub fn lbfgs_steps(steps: usize, memory: usize) -> Result<f32> {
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
    }
}
