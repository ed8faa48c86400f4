//! Loop scopes and iterations as RAII guards.
//!
//! A [`LoopScope`] is one run of a loop (a frame); [`LoopScope::iteration`] returns an
//! [`Iteration`] guard whose drop ends the iteration and runs the sweep. Because both are
//! guards, an iteration ends on every path out of it: the end of the body, `continue`,
//! `break`, `?`, `return` and a panic unwinding through it.
//!
//! ```
//! # fn main() -> candle_core::Result<()> {
//! use candle_core::{Device, Tensor};
//! let steps = tensor_lifetime::loop_scope!("'steps");
//! for _ in 0..3 {
//!     let _it = steps.iteration();
//!     let x = Tensor::ones(4, candle_core::DType::F32, &Device::Cpu)?;
//!     tensor_lifetime::tag!(x);
//! }
//! # Ok(()) }
//! ```

use crate::site::Site;
use crate::tracker::{self, Tracker};
use std::cell::Cell;
use std::marker::PhantomData;

/// One run of a tracked loop. Not `Send`: it belongs to the thread that opened it.
#[derive(Debug)]
#[must_use = "a loop scope ends when dropped"]
pub struct LoopScope {
    /// The tracker, the loop's frame and whether it is outermost on its thread.
    inner: Option<(&'static Tracker, u64, bool)>,
    next: Cell<u64>,
    /// Iterations ended (their [`Iteration`] dropped).
    ended: Cell<u64>,
    _not_send: PhantomData<*const ()>,
}

impl LoopScope {
    /// Opens a loop frame at `site` on this thread.
    pub fn enter(site: &'static Site) -> LoopScope {
        let inner = tracker::active().map(|t| {
            let (frame, outermost) = t.open_loop(site);
            (t, frame, outermost)
        });
        LoopScope {
            inner,
            next: Cell::new(0),
            ended: Cell::new(0),
            _not_send: PhantomData,
        }
    }

    /// Starts the next iteration; it ends when the returned guard drops.
    #[inline]
    pub fn iteration(&self) -> Iteration<'_> {
        let index = self.next.get();
        self.next.set(index + 1);
        let started_ns = match self.inner {
            // The end of the previous iteration moved this frame to this one already.
            Some((t, _, _)) if index > 0 && self.ended.get() == index => t.stamp(),
            Some((t, frame, _)) => t.begin_iteration(frame, index),
            None => 0,
        };
        Iteration {
            scope: self,
            index,
            started_ns,
        }
    }

    /// Iterations started so far.
    pub fn iterations(&self) -> u64 {
        self.next.get()
    }
}

impl Drop for LoopScope {
    fn drop(&mut self) {
        if let Some((t, frame, _)) = self.inner {
            t.close_loop(frame, self.next.get());
        }
    }
}

/// One iteration of a [`LoopScope`]; its drop is the iteration's end.
#[derive(Debug)]
#[must_use = "an iteration ends when dropped"]
pub struct Iteration<'a> {
    scope: &'a LoopScope,
    index: u64,
    /// Start time for the event log's iteration durations (0 when no log is written:
    /// nothing else reads it, and a clock read per iteration is not free on every host).
    started_ns: u64,
}

impl Iteration<'_> {
    /// 0-based index of this iteration.
    pub fn index(&self) -> u64 {
        self.index
    }
}

impl Drop for Iteration<'_> {
    fn drop(&mut self) {
        if let Some((t, frame, outermost)) = self.scope.inner {
            t.end_iteration(frame, self.index, self.started_ns, outermost);
        }
        self.scope.ended.set(self.index + 1);
    }
}
