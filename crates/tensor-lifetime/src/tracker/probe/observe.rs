//! What the tracker reads of a tensor, and when. Reading the storage takes its lock, so
//! a probe reads only the shape (its own bytes); the storage and the rest are read at the
//! drain for the tensors still alive then (the only ones that get a record); the storage
//! also at the probe when an event log is written (a birth's event carries it).

use crate::compat::storage_bytes;
use crate::device::DeviceId;
use candle_core::{Storage, Tensor};

/// A tensor's storage: its identity (address) and its whole size.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Observed {
    pub(in crate::tracker) storage: usize,
    pub(in crate::tracker) storage_bytes: u64,
}

/// A tensor's own bytes: its elements times their size (no lock). `by_rank`: the common
/// ranks' products without an iterator's set-up, for the sampled mode's gate, which
/// computes it at every probe; the exact path's record keeps the plain product, which
/// measured cheaper there (callgrind, the rollout: 46 instructions a step).
#[inline(always)]
pub(in crate::tracker) fn own_bytes<const BY_RANK: bool>(t: &Tensor) -> u64 {
    // The product of the dims inline (candle's `elem_count` is out of line).
    let dims = t.dims();
    let elems = match dims.len() {
        // A vector, a matrix: no iterator (a scalar's empty product is 1).
        1 if BY_RANK => dims[0],
        2 if BY_RANK => dims[0] * dims[1],
        _ => dims.iter().product::<usize>(),
    };
    (elems * t.dtype().size_in_bytes()) as u64
}

impl Observed {
    /// Takes the storage's read lock, so a probe reads it only when an event log is
    /// written; otherwise the drain reads it from the tensors still alive, the only ones
    /// that get a record.
    #[inline(always)]
    pub(in crate::tracker) fn of(t: &Tensor) -> Observed {
        let (guard, _) = t.storage_and_layout();
        let storage = &*guard as *const Storage as usize;
        let bytes = storage_bytes(&guard, t.dtype());
        drop(guard);
        Observed {
            storage,
            storage_bytes: bytes.unwrap_or_else(|| own_bytes::<false>(t)),
        }
    }
}

/// What a record keeps of a tensor besides its storage. None of it changes in a tensor's
/// life, so the drain reads it from the tensors still alive, the only ones that get a
/// record.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct View {
    pub(in crate::tracker) view_bytes: u64,
    pub(in crate::tracker) device: DeviceId,
    /// It had an autograd op (ops never change afterwards).
    pub(in crate::tracker) has_graph: bool,
}

impl View {
    #[inline]
    pub(in crate::tracker) fn of(t: &Tensor) -> View {
        View {
            view_bytes: own_bytes::<false>(t),
            device: DeviceId::of_location(t.device().location()),
            has_graph: t.track_op() && !t.is_variable(),
        }
    }
}
