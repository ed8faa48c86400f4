//! The probe: the hot path, no lock. A probe appends one entry ([`Pending`]) to its
//! thread's ring ([`enter`]); a drain ([`Rings::drain_with`]) hands every thread's entries, in
//! probe order, to the tracker's root, which merges them into the registry. The
//! per-thread state ([`local`]: the ring, the open loops, the session), where a tensor
//! was born ([`birth`]) and what is read of a tensor ([`observe`]) are here too.

mod birth;
mod local;
mod observe;

pub(in crate::tracker) use birth::{Birth, PrimaryLoop};
pub(in crate::tracker) use local::{
    in_session, set_iteration, set_iteration_later, OpenLoop, LOCAL,
};
pub(crate) use local::{set_session, Entered, SessionMark, TaskContext};
pub(in crate::tracker) use observe::{Observed, View};

use super::roles;
use crate::probe_buffer::Registry;
use crate::site::Site;
use crate::weak::{self, WeakTensor};
use candle_core::Tensor;
use observe::own_bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One probe's observation, buffered per thread until the next sweep. One cache line,
/// aligned to one: a probe writes a single line of its ring.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Pending {
    /// The tensor (its key is the handle's address, [`WeakTensor::key`]).
    pub(in crate::tracker) weak: WeakTensor,
    pub(in crate::tracker) site: &'static Site,
    pub(in crate::tracker) store: bool,
    /// No weak handle of the tracker's existed for the tensor when probed: no record and
    /// no earlier probe entry, so this is the tensor's first probe. (Two threads probing
    /// one tensor at the same instant can both see none. With several threads probing,
    /// the drain looks every probe up, so only a tensor already dropped at the drain is
    /// then counted twice.)
    pub(in crate::tracker) first: bool,
    /// The tensor's role byte ([`super::roles`]).
    pub(in crate::tracker) role: u8,
    /// The call path when probed ([`crate::call_path`]; 0: none).
    pub(in crate::tracker) path: u32,
    // u32 like the records' (see [`Record`]): the buffer entry stays small.
    pub(in crate::tracker) frame: u32,
    pub(in crate::tracker) iteration: u32,
    pub(in crate::tracker) session: u32,
    /// The tensor's creation serial, cut to 32 bits: it picks an old record's shard
    /// (the same in every run of a program, unlike the tensor's address).
    pub(in crate::tracker) serial: u32,
    /// Global probe order (the drain merges threads' buffers by it; 0 before a second
    /// thread probed).
    pub(in crate::tracker) seq: u64,
    /// The tensor's own bytes (elements times element size; its view, not its storage):
    /// the size the shape-churn finding judges. Read without the storage's lock.
    pub(in crate::tracker) bytes: u64,
    /// What only the event log needs, read only when one is written.
    pub(in crate::tracker) logged: Option<Box<Logged>>,
}

/// The part of a probe only the event log's events carry.
#[derive(Debug)]
pub(in crate::tracker) struct Logged {
    pub(in crate::tracker) t_ns: u64,
    pub(in crate::tracker) thread: u32,
    pub(in crate::tracker) view: View,
    pub(in crate::tracker) dims: Vec<usize>,
    /// The storage as of the probe (a birth's event carries it even for a tensor dropped
    /// before the drain).
    pub(in crate::tracker) storage: Observed,
}

/// The threads' probe rings and the global probe order: process-wide, as the tracker
/// is, and reached without its lock.
pub(in crate::tracker) struct Rings {
    buffers: Registry<Pending>,
    /// Global probe order, counted once a second thread has a probe buffer.
    next_seq: AtomicU64,
    /// A second thread has a probe buffer (set before that thread's first probe; never
    /// cleared).
    threaded: AtomicBool,
    /// The tracker is on: a thread's first probe registers its ring (set once, before
    /// the tracker is published).
    on: AtomicBool,
}

pub(in crate::tracker) static RINGS: Rings = Rings {
    buffers: Registry::new(),
    next_seq: AtomicU64::new(1),
    threaded: AtomicBool::new(false),
    on: AtomicBool::new(false),
};

impl Rings {
    /// The tracker is on: threads register their rings from now on.
    pub(in crate::tracker) fn start(&self) {
        self.on.store(true, Ordering::Release);
    }

    /// Hands every thread's buffered probes to `merge` (`a` then `b`, in probe order,
    /// and whether more than one thread has probed); `merged` is the buffer several
    /// rings' entries are moved to.
    #[inline]
    pub(in crate::tracker) fn drain_with(
        &self,
        merged: &mut Vec<Pending>,
        merge: impl FnOnce(&mut [Pending], &mut [Pending], bool),
    ) {
        self.buffers.drain_with(
            merged,
            // In the order the probes were made, across threads: a tensor made on a
            // worker or loader thread and seen by the training thread right after keeps
            // the worker's site as its creation site, whichever thread's buffer is drained
            // first. Each buffer is in probe order already. Stable: the first thread's
            // probes from before `threaded` all have 0.
            |all| all.sort_by_key(|p| p.seq),
            // One thread's probes are read in place, in its ring.
            |a, b| merge(a, b, self.threaded.load(Ordering::Relaxed)),
        );
    }
}

/// Whether the sampled mode (at `scale`, [`crate::sample::scale`], not 0) leaves `t`
/// out: the sample skips it ([`crate::sample::skips`]: its creation serial and own
/// bytes), it has no record (no weak handle of ours: a record or a probe entry), and this
/// thread runs no leak test (leak tests are exact). Such a tensor gets no entry, no
/// record, no graph input and no holder.
#[inline(always)]
pub(in crate::tracker) fn sampled_out(t: &Tensor, scale: u64) -> bool {
    skipped(t, scale) && !in_session()
}

/// Whether the probes' gate ([`crate::sample::gate`]: sampled mode, no leak test
/// running) leaves `t` out: [`sampled_out`] without asking the thread, read first by
/// every probe of a tensor. False lets the probe take its full path, which decides.
#[inline(always)]
pub(crate) fn gated_out(t: &Tensor) -> bool {
    // Compiled out: the probes fold away.
    let gate = if cfg!(feature = "tracking") {
        crate::sample::gate()
    } else {
        0
    };
    gate != 0 && skipped(t, gate)
}

/// The sample at `scale` skips `t` and no record or probe entry of it exists.
#[inline(always)]
fn skipped(t: &Tensor, scale: u64) -> bool {
    crate::sample::skips(scale, weak::serial(t), own_bytes::<true>(t)) && weak::weak_count(t) == 0
}

/// Records a tensor seen at `site` (a binding, or a store when `store`) with the role
/// byte `hint` (0: none; else the site's role, [`roles::hint`]) in this thread's ring.
/// `primary` is where a thread with no loop lends its tensors; `now` is the clock read
/// when an event log is written (`timed`); `drain` empties the rings when this one is
/// full.
#[inline(always)]
pub(in crate::tracker) fn enter(
    t: &Tensor,
    (site, store, hint): (&'static Site, bool, u8),
    primary: &PrimaryLoop,
    (timed, now): (bool, impl Fn() -> u64),
    drain: impl FnOnce(),
) {
    // One counter for all threads: its order agrees with every thread's program
    // order and with hand-offs between threads (a tensor made on a loader thread and
    // probed by the training thread after it was sent there). While only one thread
    // has a probe buffer its probes take 0 (an atomic increment less per probe): they
    // come before any other thread's, since a second thread sets `threaded` before
    // its first probe, and a hand-off from it makes the receiver see the flag.
    let seq = if RINGS.threaded.load(Ordering::Relaxed) {
        RINGS.next_seq.fetch_add(1, Ordering::Relaxed)
    } else {
        0
    };
    let serial = weak::serial(t);
    // Before this probe's own handle is made.
    let first = weak::weak_count(t) == 0;
    let _ = LOCAL.try_with(|local| {
        let mark = local.session.get();
        // A tensor created before its session began was not born in it.
        let session = if serial >= mark.watermark {
            mark.session
        } else {
            0
        };
        let stack = local.loops().borrow();
        // Born in the innermost open loop that existed when it was created: a
        // tensor first seen in a loop but created before it (weights, a dataset)
        // was not born there.
        let birth = if stack.is_empty() {
            primary.birth(serial, session)
        } else {
            match stack.iter().rev().find(|l| l.watermark <= serial) {
                Some(l) => Birth::of(l, session),
                None => Birth::outside(session),
            }
        };
        drop(stack);
        let logged = timed.then(|| {
            Box::new(Logged {
                t_ns: now(),
                thread: local.thread as u32,
                view: View::of(t),
                dims: t.dims().to_vec(),
                storage: Observed::of(t),
            })
        });
        local.buf.push(
            Pending {
                weak: WeakTensor::new(t),
                site,
                store,
                frame: birth.frame as u32,
                iteration: birth.iteration as u32,
                session: birth.session as u32,
                serial: serial as u32,
                seq,
                first,
                role: roles::at_probe(t, hint, site.role),
                path: crate::call_path::current(),
                bytes: own_bytes::<false>(t),
                logged,
            },
            &RINGS.buffers,
            // Full: the probes go to the registry now (the buffer keeps its size).
            drain,
        );
    });
}
