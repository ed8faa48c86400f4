//! Graph inputs: the tensors the macro saw a tensor with an autograd op computed from
//! (`let logits = model.forward(&x)?;` → `x`, see the macros' `inputs.rs`).
//!
//! candle keeps an op's inputs private (`Tensor::op` is `pub(crate)`), and
//! `Tensor::sorted_nodes`, which the graph walk of [`super::sweep`] reads, lists only
//! the nodes that lead to a variable: a batch, a mask or a target held by a kept graph
//! is not among them. The walk also reads this table at each node it visits, so a batch
//! that a kept loss's graph holds is held by that graph (and counted in its bytes)
//! instead of being a leak of its own with no holder. Only inputs made in the ending loop
//! (survivors of its sweep) are: one made before it (a dataset's tensor) is held by what
//! made it, and is not counted in the graph.
//!
//! An entry is noted when a tensor with an autograd op is first tagged, keyed by its
//! tensor's address and checked against its creation serial (an address is reused once a
//! tensor is freed, a serial never); the inputs are found the same way, among the live
//! records. Entries whose tensor has no record are pruned at sweeps. What the macro
//! names is what the value's expression passes to calls and operators, an
//! over-approximation of the op's inputs (a helper may use an argument for its shape
//! only): it decides a survivor's holder, never whether a site leaks.

use super::keep::{FastMap, KEEP};
use super::registry::Registry;
use crate::weak;
use candle_core::Tensor;

/// Inputs kept per tensor (the macro names as many at most).
const INPUTS_MAX: usize = 4;

/// A value a tensor was computed from, as the macro named it: its tensor's address and
/// creation serial (cut to 32 bits, as records keep it), or none (`key` 0: not a tensor).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Input {
    pub(crate) key: usize,
    pub(crate) serial: u32,
}

impl Input {
    #[inline]
    pub(crate) fn of(t: &Tensor) -> Input {
        Input {
            key: weak::key(t),
            serial: weak::serial(t) as u32,
        }
    }
}

/// The inputs noted per tensor, by the tensor's address.
#[derive(Debug, Default)]
pub(in crate::tracker) struct MadeFrom {
    map: FastMap<usize, Entry>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    serial: u32,
    len: u8,
    inputs: [Input; INPUTS_MAX],
}

impl MadeFrom {
    /// The inputs of the tensor at `key` with creation serial `serial` (none when it has
    /// no entry, or the entry is another tensor's that had its address).
    #[inline]
    pub(in crate::tracker) fn of(&self, key: usize, serial: u32) -> &[Input] {
        match self.map.get(&key) {
            Some(e) if e.serial == serial => &e.inputs[..usize::from(e.len)],
            _ => &[],
        }
    }

    pub(in crate::tracker) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Notes that `made` was computed from `inputs` (those that are tensors, other than
    /// itself).
    pub(in crate::tracker) fn note(&mut self, made: Input, inputs: &[Input]) {
        let mut e = Entry {
            serial: made.serial,
            len: 0,
            inputs: [Input::default(); INPUTS_MAX],
        };
        for i in inputs {
            if i.key != 0 && i.key != made.key && usize::from(e.len) < INPUTS_MAX {
                e.inputs[usize::from(e.len)] = *i;
                e.len += 1;
            }
        }
        if e.len > 0 {
            self.map.insert(made.key, e);
        }
    }

    /// Drops the entries of tensors that have no record in `registry` any more: at every
    /// full walk (`full`), and at a partial one when the table outgrows the records.
    #[inline]
    pub(in crate::tracker) fn prune(&mut self, registry: &Registry, full: bool) {
        if self.map.is_empty() || (!full && self.map.len() <= 2 * registry.len() + 1024) {
            return;
        }
        self.prune_now(registry);
    }

    #[inline(never)]
    fn prune_now(&mut self, registry: &Registry) {
        let map = &mut self.map;
        map.retain(|key, e| registry.get(*key, e.serial).is_some());
        if map.capacity() > 4 * map.len() + KEEP {
            map.shrink_to_fit();
        }
    }
}
