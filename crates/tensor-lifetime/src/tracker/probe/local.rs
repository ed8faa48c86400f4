//! The per-thread state: the thread's probe ring, its open loops and its leak-test
//! session. Only its own thread touches it (no lock); the tracker's global state is
//! reached from here only through the ring's drain.

use super::{LoggedProbe, Pending, RINGS};
use crate::probe_buffer::Producer;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

/// A loop open on this thread.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct OpenLoop {
    pub(in crate::tracker) frame: u64,
    /// The current iteration (or the next, between an iteration's end and the next
    /// one's start).
    pub(in crate::tracker) iteration: u64,
    /// Creation watermark: tensors with a smaller creation serial existed before the
    /// loop opened, so they were not born in it.
    pub(in crate::tracker) watermark: u64,
}

/// A thread's leak-test session and the creation watermark when it began (tensors
/// created before it are not the session's). Session 0: none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionMark {
    pub(crate) session: u64,
    pub(crate) watermark: u64,
    /// The session's probes are sampled like those outside sessions (the seeded
    /// detection tests); a leak test's are exact.
    pub(crate) sampled: bool,
}

pub(in crate::tracker) struct Local {
    pub(in crate::tracker) buf: Producer<Pending>,
    /// With an event log: the ring of each probe with what the log needs of it (in
    /// place of `buf`).
    pub(in crate::tracker) log: Producer<LoggedProbe>,
    /// Open loops on this thread, outermost first: read and written through
    /// [`Local::loops`].
    stack: RefCell<Vec<OpenLoop>>,
    pub(in crate::tracker) session: Cell<SessionMark>,
    pub(in crate::tracker) thread: u64,
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

impl Local {
    /// This thread's open loops, with the iteration a quiet iteration end left for later
    /// ([`set_iteration_later`]) written in first.
    #[inline]
    pub(in crate::tracker) fn loops(&self) -> &RefCell<Vec<OpenLoop>> {
        let (frame, iteration) = LATER.with(Cell::get);
        if frame != 0 {
            LATER.with(|later| later.set((0, 0)));
            write_iteration(&self.stack, frame, iteration);
        }
        &self.stack
    }
}

thread_local! {
    /// The sampled mode's quiet iteration ends: the iteration of a loop of this thread
    /// not yet written to its open loop (frame 0: none). A plain cell (no lazy state):
    /// a quiet end writes two words.
    static LATER: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

thread_local! {
    pub(crate) static LOCAL: Local = {
        // One ring registered, the one the probes use: the drain visits (and drops,
        // once their threads are gone) only those of its kind.
        let (buf, log, before) = if !RINGS.on.load(Ordering::Acquire) {
            (Producer::unregistered(), Producer::unregistered(), 0)
        } else if RINGS.logging.load(Ordering::Relaxed) {
            let (log, before) = RINGS.logged.register();
            (Producer::unregistered(), log, before)
        } else {
            let (buf, before) = RINGS.buffers.register();
            (buf, Producer::unregistered(), before)
        };
        if before > 0 {
            // From now on probes take a global order (see [`super::enter`]).
            RINGS.threaded.store(true, Ordering::Relaxed);
        }
        Local {
            buf,
            log,
            stack: RefCell::new(Vec::new()),
            session: Cell::new(SessionMark::default()),
            thread: NEXT_THREAD.fetch_add(1, Ordering::Relaxed),
        }
    };
}

/// Sets this thread's session (leak tests); returns the previous one.
pub(crate) fn set_session(session: SessionMark) -> SessionMark {
    let previous = LOCAL
        .try_with(|l| l.session.replace(session))
        .unwrap_or_default();
    match (previous.session != 0, session.session != 0) {
        (false, true) => {
            crate::sample::session_entered(1);
        }
        (true, false) => {
            crate::sample::session_entered(-1);
        }
        _ => {}
    }
    previous
}

/// Whether this thread runs a leak test (its probes are exact in sampled mode).
#[inline(always)]
pub(in crate::tracker) fn in_session() -> bool {
    crate::sample::sessions_running()
        && LOCAL
            .try_with(|l| {
                let mark = l.session.get();
                mark.session != 0 && !mark.sampled
            })
            .unwrap_or(false)
}

/// Sets this thread's iteration of `frame` (the innermost open loop of that frame).
#[inline]
pub(in crate::tracker) fn set_iteration(frame: u64, iteration: u64) {
    let _ = LOCAL.try_with(|l| write_iteration(l.loops(), frame, iteration));
}

/// [`set_iteration`], written to the open loop when this thread's loops are next read
/// ([`Local::loops`]): the sampled mode's quiet iteration end, which records nothing.
///
/// What waits is `frame`'s own or nothing: a quiet end is of the loop whose full end came
/// last (`Tracker::quiet_end`), and every full end, loop opened or closed and task switch
/// reads this thread's loops first, which writes what waited.
#[inline]
pub(in crate::tracker) fn set_iteration_later(frame: u64, iteration: u64) {
    LATER.set((frame, iteration));
}

#[inline]
fn write_iteration(stack: &RefCell<Vec<OpenLoop>>, frame: u64, iteration: u64) {
    if let Some(open) = stack
        .borrow_mut()
        .iter_mut()
        .rev()
        .find(|f| f.frame == frame)
    {
        open.iteration = iteration;
    }
}

/// What a task (a future that any thread may poll) carries of the per-thread state: the
/// loops it has open and its leak-test session. Each poll puts them on the polling
/// thread ([`TaskContext::enter`]) above the loops of whoever polls it, and takes them
/// back after ([`TaskContext::leave`]), so a loop that `.await`s judges its iterations
/// on whichever thread runs them, and no other task's tensors are counted as its own.
#[derive(Debug, Default)]
pub(crate) struct TaskContext {
    frames: Vec<OpenLoop>,
    session: SessionMark,
}

/// Where a poll put a task's state: the polling thread's stack height and session before.
#[derive(Debug)]
pub(crate) struct Entered {
    mark: usize,
    session: SessionMark,
}

impl TaskContext {
    /// A task that belongs to this thread's leak-test session (if any).
    pub(crate) fn current() -> TaskContext {
        TaskContext {
            frames: Vec::new(),
            session: LOCAL.try_with(|l| l.session.get()).unwrap_or_default(),
        }
    }

    /// Puts the task's loops on this thread's stack and its session in place.
    pub(crate) fn enter(&mut self) -> Entered {
        let session = self.session;
        LOCAL
            .try_with(|l| {
                let mut stack = l.loops().borrow_mut();
                let mark = stack.len();
                stack.append(&mut self.frames);
                let session = if session.session != 0 {
                    l.session.replace(session)
                } else {
                    l.session.get()
                };
                Entered { mark, session }
            })
            .unwrap_or(Entered {
                mark: usize::MAX,
                session: SessionMark::default(),
            })
    }

    /// Takes back what the poll left of the task's loops (a loop that ended is gone, one
    /// that opened is kept) and restores the thread's session.
    pub(crate) fn leave(&mut self, entered: Entered) {
        if entered.mark == usize::MAX {
            return;
        }
        let session = self.session;
        let _ = LOCAL.try_with(|l| {
            let mut stack = l.loops().borrow_mut();
            if entered.mark <= stack.len() {
                self.frames.extend(stack.drain(entered.mark..));
            }
            if session.session != 0 {
                l.session.set(entered.session);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Vec<(u64, u64)> {
        LOCAL.with(|l| {
            l.loops()
                .borrow()
                .iter()
                .map(|o| (o.frame, o.iteration))
                .collect()
        })
    }

    /// A quiet end's iteration reaches the open loop when the loops are next read; a
    /// full end of another loop writes the waiting one first; a full end's iteration
    /// replaces a waiting one of its loop.
    #[test]
    fn a_later_iteration_is_written_when_the_loops_are_read() {
        std::thread::spawn(|| {
            LOCAL.with(|l| {
                l.loops().borrow_mut().extend([7, 8].map(|frame| OpenLoop {
                    frame,
                    iteration: 0,
                    watermark: 0,
                }))
            });
            set_iteration_later(8, 2);
            set_iteration_later(8, 3);
            assert_eq!(LATER.with(Cell::get), (8, 3));
            set_iteration(7, 4);
            assert_eq!(LATER.with(Cell::get), (0, 0));
            assert_eq!(seen(), [(7, 4), (8, 3)]);
            set_iteration_later(8, 5);
            set_iteration(8, 9);
            assert_eq!(seen(), [(7, 4), (8, 9)]);
        })
        .join()
        .unwrap();
    }
}
