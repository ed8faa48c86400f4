//! Where a probed tensor was born: its loop frame, iteration and session, read on the
//! probing thread without a lock ([`Birth`]), and the primary loop that threads with no
//! loop of their own (data loaders) lend their tensors to ([`PrimaryLoop`]).

use super::local::OpenLoop;
use std::sync::atomic::{AtomicU64, Ordering};

/// The primary loop: the first outermost loop opened, while it stays open. Tensors born
/// on threads with no loop of their own belong to its current iteration.
#[derive(Debug, Default)]
pub(in crate::tracker) struct PrimaryLoop {
    /// 0: none open.
    frame: AtomicU64,
    iteration: AtomicU64,
    session: AtomicU64,
    watermark: AtomicU64,
}

/// Where a probed tensor was born: its loop frame (0: outside any loop), iteration and
/// session.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Birth {
    pub(in crate::tracker) frame: u64,
    pub(in crate::tracker) iteration: u64,
    pub(in crate::tracker) session: u64,
}

impl Birth {
    pub(in crate::tracker) fn of(open: &OpenLoop, session: u64) -> Birth {
        Birth {
            frame: open.frame,
            iteration: open.iteration,
            session,
        }
    }

    pub(in crate::tracker) fn outside(session: u64) -> Birth {
        Birth {
            frame: 0,
            iteration: 0,
            session,
        }
    }
}

impl PrimaryLoop {
    /// The birth of a tensor (creation serial `serial`) probed on a thread with no open
    /// loop, in leak session `session` (0: none).
    #[inline]
    pub(in crate::tracker) fn birth(&self, serial: u64, session: u64) -> Birth {
        let frame = self.frame.load(Ordering::Acquire);
        let primary_session = self.session.load(Ordering::Relaxed);
        // A thread in a leak session of its own (a parallel leak test whose code runs no
        // loop) is not a loader of another session's loop: its tensors are not summarized
        // there (tests/tests/sessions/loopless.rs).
        if frame == 0
            || serial < self.watermark.load(Ordering::Relaxed)
            || (session != 0 && session != primary_session)
        {
            return Birth::outside(session);
        }
        Birth {
            frame,
            iteration: self.iteration.load(Ordering::Relaxed),
            session: if session == 0 {
                primary_session
            } else {
                session
            },
        }
    }

    /// Becomes `frame` if no primary loop is open.
    pub(in crate::tracker) fn open(&self, frame: u64, session: u64, watermark: u64) {
        if self
            .frame
            .compare_exchange(0, frame, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.iteration.store(0, Ordering::Relaxed);
            self.session.store(session, Ordering::Relaxed);
            self.watermark.store(watermark, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(in crate::tracker) fn set_iteration(&self, frame: u64, iteration: u64) {
        if self.frame.load(Ordering::Relaxed) == frame {
            self.iteration.store(iteration, Ordering::Relaxed);
        }
    }

    pub(in crate::tracker) fn close(&self, frame: u64) {
        if self
            .frame
            .compare_exchange(frame, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.iteration.store(0, Ordering::Relaxed);
            self.session.store(0, Ordering::Relaxed);
        }
    }
}
