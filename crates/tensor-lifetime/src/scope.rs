//! Loop scopes and iterations as RAII guards.
//!
//! A [`LoopScope`] is one run of a loop (a frame); [`LoopScope::iteration`] returns an
//! [`Iteration`] guard whose drop ends the iteration and runs the sweep. Because both are
//! guards, an iteration ends on every path out of it: the end of the body, `continue`,
//! `break`, `?`, `return` and a panic unwinding through it.
//!
//! A loop that `.await`s (a request loop in a server task) may run its iterations on
//! several threads: it is an [`AsyncLoopScope`] (`Send`), inside a future wrapped by
//! [`in_task`], which carries the task's open loops and leak-test session from poll to
//! poll and puts them on the polling thread while it runs (as `tracing`'s `Instrumented`
//! enters its span). `#[track]` does both for an `async fn` or `async` block whose loops
//! await.
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
use crate::tracker::{self, TaskContext, Tracker};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// What both loop scopes are: the tracker, the loop's frame and whether it is outermost
/// on its thread; the iterations started and ended. Relaxed atomics (plain loads and
/// stores: only the scope's own task touches them) make it `Sync`, so that an
/// [`Iteration`] of an async loop may live across an `.await`.
#[derive(Debug)]
struct Frame {
    inner: Option<(&'static Tracker, u64, bool)>,
    next: AtomicU64,
    /// The iterations ended, [`NONE_ENDED`] before the first end.
    ended: AtomicU64,
}

/// [`Frame::ended`] before any iteration ended: the first iteration is not the one that
/// follows an end.
const NONE_ENDED: u64 = u64::MAX;

impl Frame {
    fn enter(site: &'static Site) -> Frame {
        let inner = tracker::active().map(|t| {
            let (frame, outermost) = t.open_loop(site);
            (t, frame, outermost)
        });
        Frame {
            inner,
            next: AtomicU64::new(0),
            ended: AtomicU64::new(NONE_ENDED),
        }
    }

    #[inline]
    fn iteration(&self) -> Iteration<'_> {
        let index = self.next.load(Ordering::Relaxed);
        self.next.store(index + 1, Ordering::Relaxed);
        let started_ns = match self.inner {
            // The end of the previous iteration moved this frame to this one already.
            Some((t, _, _)) if self.ended.load(Ordering::Relaxed) == index => t.stamp(),
            Some((t, frame, _)) => t.begin_iteration(frame, index),
            None => 0,
        };
        Iteration {
            frame: self,
            index,
            started_ns,
        }
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        if let Some((t, frame, _)) = self.inner {
            t.close_loop(frame, self.next.load(Ordering::Relaxed));
        }
    }
}

/// One run of a tracked loop. Not `Send`: it belongs to the thread that opened it.
#[derive(Debug)]
#[must_use = "a loop scope ends when dropped"]
pub struct LoopScope {
    frame: Frame,
    _not_send: PhantomData<*const ()>,
}

impl LoopScope {
    /// Opens a loop frame at `site` on this thread.
    pub fn enter(site: &'static Site) -> LoopScope {
        LoopScope {
            frame: Frame::enter(site),
            _not_send: PhantomData,
        }
    }

    /// Starts the next iteration; it ends when the returned guard drops.
    #[inline]
    pub fn iteration(&self) -> Iteration<'_> {
        self.frame.iteration()
    }

    /// Iterations started so far.
    pub fn iterations(&self) -> u64 {
        self.frame.next.load(Ordering::Relaxed)
    }
}

/// One run of a tracked loop that `.await`s: `Send`, for a future that moves between
/// threads. Open it inside a future wrapped by [`in_task`] (or a `#[track]`ed `async fn`,
/// which does): its iterations count the tensors the task creates, on any thread.
#[derive(Debug)]
#[must_use = "a loop scope ends when dropped"]
pub struct AsyncLoopScope {
    frame: Frame,
}

impl AsyncLoopScope {
    /// Opens a loop frame at `site` in the current task.
    pub fn enter(site: &'static Site) -> AsyncLoopScope {
        AsyncLoopScope {
            frame: Frame::enter(site),
        }
    }

    /// Starts the next iteration; it ends when the returned guard drops.
    #[inline]
    pub fn iteration(&self) -> Iteration<'_> {
        self.frame.iteration()
    }

    /// Iterations started so far.
    pub fn iterations(&self) -> u64 {
        self.frame.next.load(Ordering::Relaxed)
    }
}

/// One iteration of a [`LoopScope`] or an [`AsyncLoopScope`]; its drop is the
/// iteration's end.
#[derive(Debug)]
#[must_use = "an iteration ends when dropped"]
pub struct Iteration<'a> {
    frame: &'a Frame,
    index: u64,
    /// Start stamp for the event log's iteration durations (`Tracker::stamp`, turned
    /// into nanoseconds at the iteration end; 0 when no log is written: nothing else
    /// reads it, and a clock read per iteration is not free on every host).
    started_ns: u64,
}

impl Iteration<'_> {
    /// 0-based index of this iteration.
    pub fn index(&self) -> u64 {
        self.index
    }
}

impl Drop for Iteration<'_> {
    #[inline]
    fn drop(&mut self) {
        // First: the iteration end is then the last call (only `Frame::iteration` reads it).
        self.frame.ended.store(self.index + 1, Ordering::Relaxed);
        if let Some((t, frame, outermost)) = self.frame.inner {
            t.end_iteration(frame, self.index, self.started_ns, outermost);
        }
    }
}

/// Wraps a future so that the loops it opens and its leak-test session follow it from
/// thread to thread: each poll puts them on the polling thread, above the loops of
/// whoever polls it, and takes them back after. The future is boxed (once per call of
/// a function whose loops await, not per poll) so that no unsafe pinning is needed.
///
/// ```
/// # fn main() -> candle_core::Result<()> {
/// use candle_core::{Device, Tensor};
/// let served = tensor_lifetime::in_task(async {
///     let requests = tensor_lifetime::async_loop_scope!("'requests");
///     for _ in 0..3 {
///         let _it = requests.iteration();
///         std::future::ready(()).await;
///         let x = Tensor::ones(4, candle_core::DType::F32, &Device::Cpu)?;
///         tensor_lifetime::tag!(x);
///     }
///     Ok::<_, candle_core::Error>(requests.iterations())
/// });
/// # let _ = served;
/// # Ok(()) }
/// ```
pub fn in_task<F: Future>(future: F) -> InTask<F> {
    InTask {
        future: Box::pin(future),
        context: TaskContext::current(),
    }
}

/// A future wrapped by [`in_task`].
#[must_use = "futures do nothing unless polled"]
pub struct InTask<F> {
    future: Pin<Box<F>>,
    context: TaskContext,
}

impl<F> std::fmt::Debug for InTask<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InTask")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for InTask<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        /// Takes the task's state back on every path out of the poll (a panic too).
        struct Leave<'a>(&'a mut TaskContext, Option<tracker::Entered>);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                if let Some(entered) = self.1.take() {
                    self.0.leave(entered);
                }
            }
        }
        let entered = this.context.enter();
        let _leave = Leave(&mut this.context, Some(entered));
        this.future.as_mut().poll(cx)
    }
}
