//! The probe: the hot path, no lock. A probe appends one entry ([`Pending`]) to its
//! thread's ring ([`enter`]); with an event log the entry also holds what the log's
//! events need of it ([`LoggedProbe`]: a [`Pending`] and a [`Logged`], in the thread's
//! second ring, which takes every probe while a log is written: no allocation); a drain
//! ([`Rings::drain_with`], [`Rings::drain_logged_with`]) hands every thread's entries,
//! in probe order, to the tracker's root, which merges them into the registry. The
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
use crate::device::DeviceId;
use crate::probe_buffer::Registry;
use crate::site::Site;
use crate::weak::{self, WeakTensor};
use candle_core::{DType, Tensor};
use observe::own_bytes;
use parking_lot::Mutex;
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
}

/// The dimensions a [`Logged`] entry holds in place (below 2^32 each); a larger shape
/// waits in [`LARGE_SHAPES`].
pub(in crate::tracker) const INLINE_RANK: usize = 6;

/// What only the event log's events carry of a probe (its `born` event, for a tensor
/// dropped before the drain too), read only when one is written, beside the probe's
/// [`Pending`] in one entry of the thread's second ring ([`LoggedProbe`]): no
/// allocation (a shape that does not fit in place excepted).
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Logged {
    /// When probed ([`crate::phase_timing::ticks`]; the drain turns it into ns).
    pub(in crate::tracker) stamp: u64,
    /// The storage as of the probe.
    pub(in crate::tracker) storage: Observed,
    pub(in crate::tracker) dims: [u32; INLINE_RANK],
    /// The rank, or [`Logged::LARGE`]: the shape is in [`LARGE_SHAPES`].
    pub(in crate::tracker) rank: u8,
    pub(in crate::tracker) thread: u32,
    pub(in crate::tracker) device: DeviceId,
    pub(in crate::tracker) dtype: DType,
}

/// A probe's entry while an event log is written: the probe and what the log needs of
/// it, together (the drain reads them side by side).
#[derive(Debug)]
pub(in crate::tracker) struct LoggedProbe {
    pub(in crate::tracker) pending: Pending,
    pub(in crate::tracker) logged: Logged,
}

/// The shapes of logged probes that do not fit in [`Logged`] (a rank above
/// [`INLINE_RANK`], a dimension of 2^32 or more), by probe order and key, until their
/// drain.
static LARGE_SHAPES: Mutex<Vec<LargeShape>> = Mutex::new(Vec::new());

/// A shape in [`LARGE_SHAPES`]: its probe's order and key, and the dims.
type LargeShape = (u64, usize, Box<[usize]>);

impl Logged {
    /// [`Logged::rank`] of a shape kept in [`LARGE_SHAPES`].
    const LARGE: u8 = u8::MAX;

    /// What the log needs of `t`, probed with order `seq` at `stamp` on `thread`.
    #[inline]
    fn of(t: &Tensor, seq: u64, stamp: u64, thread: u64) -> Logged {
        let shape = t.dims();
        let mut dims = [0u32; INLINE_RANK];
        let fits = shape.len() <= INLINE_RANK
            && shape.iter().zip(&mut dims).all(|(d, to)| {
                *to = *d as u32;
                *d <= u32::MAX as usize
            });
        if !fits {
            LARGE_SHAPES.lock().push((seq, weak::key(t), shape.into()));
        }
        Logged {
            stamp,
            storage: Observed::of(t),
            dims,
            rank: if fits {
                shape.len() as u8
            } else {
                Logged::LARGE
            },
            thread: thread as u32,
            device: DeviceId::of_location(t.device().location()),
            dtype: t.dtype(),
        }
    }

    /// The shape of probe `p` (whose entry this is), written into `to` when it is in
    /// place.
    #[inline]
    pub(in crate::tracker) fn shape<'a>(&self, p: &Pending, to: &'a mut Vec<usize>) -> &'a [usize] {
        to.clear();
        if self.rank == Logged::LARGE {
            let mut large = LARGE_SHAPES.lock();
            let of = (p.seq, p.weak.key());
            if let Some(at) = large.iter().position(|(seq, key, _)| (*seq, *key) == of) {
                to.extend_from_slice(&large.swap_remove(at).2);
            }
        } else {
            let dims = &self.dims[..usize::from(self.rank)];
            to.extend(dims.iter().map(|d| *d as usize));
        }
        to
    }
}

/// The threads' probe rings and the global probe order: process-wide, as the tracker
/// is, and reached without its lock.
pub(in crate::tracker) struct Rings {
    buffers: Registry<Pending>,
    /// With an event log: each thread's entries, one per probe, in place of
    /// [`Rings::buffers`]'s.
    logged: Registry<LoggedProbe>,
    /// Global probe order, counted once a second thread has a probe buffer.
    next_seq: AtomicU64,
    /// A second thread has a probe buffer (set before that thread's first probe; never
    /// cleared).
    threaded: AtomicBool,
    /// The tracker is on: a thread's first probe registers its ring (set once, before
    /// the tracker is published).
    on: AtomicBool,
    /// An event log is written: a thread's first probe registers its [`Rings::logged`]
    /// ring too (set with `on`).
    logging: AtomicBool,
}

pub(in crate::tracker) static RINGS: Rings = Rings {
    buffers: Registry::new(),
    logged: Registry::new(),
    next_seq: AtomicU64::new(1),
    threaded: AtomicBool::new(false),
    on: AtomicBool::new(false),
    logging: AtomicBool::new(false),
};

impl Rings {
    /// The tracker is on (writing an event log when `logging`): threads register their
    /// rings from now on.
    pub(in crate::tracker) fn start(&self, logging: bool) {
        self.logging.store(logging, Ordering::Relaxed);
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
        self.drain_rings(&self.buffers, merged, |p| p.seq, merge);
    }

    /// [`Rings::drain_with`] of an event log's probes (the rings that take every probe
    /// while a log is written).
    #[inline]
    pub(in crate::tracker) fn drain_logged_with(
        &self,
        merged: &mut Vec<LoggedProbe>,
        merge: impl FnOnce(&mut [LoggedProbe], &mut [LoggedProbe], bool),
    ) {
        self.drain_rings(&self.logged, merged, |p| p.pending.seq, merge);
    }

    /// The drain of one kind of ring, whose entries have the probe order `seq`.
    #[inline(always)]
    fn drain_rings<T: Send>(
        &self,
        rings: &Registry<T>,
        merged: &mut Vec<T>,
        seq: impl Fn(&T) -> u64,
        merge: impl FnOnce(&mut [T], &mut [T], bool),
    ) {
        rings.drain_with(
            merged,
            // In the order the probes were made, across threads: a tensor made on a
            // worker or loader thread and seen by the training thread right after keeps
            // the worker's site as its creation site, whichever thread's buffer is drained
            // first. Each buffer is in probe order already. Stable: the first thread's
            // probes from before `threaded` all have 0.
            |all| all.sort_by_key(seq),
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

/// Whether the probes' gate ([`crate::sample::gate`]: sampled mode, every record the
/// sample's) leaves `t` out: [`sampled_out`] without asking the thread, read first by
/// every probe of a tensor. False lets the probe take its full path, which decides.
#[inline(always)]
pub(crate) fn gated_out(t: &Tensor) -> bool {
    // Compiled out: the probes fold away.
    let gate = if cfg!(feature = "tracking") {
        crate::sample::gate()
    } else {
        0
    };
    gate != 0 && skips(t, gate)
}

/// The sample at `scale` skips `t` and no record or probe entry of it exists.
#[inline(always)]
fn skipped(t: &Tensor, scale: u64) -> bool {
    skips(t, scale) && weak::weak_count(t) == 0
}

/// The sample at `scale` skips `t`.
#[inline(always)]
fn skips(t: &Tensor, scale: u64) -> bool {
    crate::sample::skips(scale, weak::serial(t), own_bytes::<true>(t))
}

/// Records a tensor seen at `site` (a binding, or a store when `store`) with the role
/// byte `hint` (0: none; else the site's role, [`roles::hint`]) in this thread's ring.
/// `primary` is where a thread with no loop lends its tensors; `stamp` is the probe's
/// time stamp when an event log is written (`timed`); `drain` empties the rings when this
/// one is full.
#[inline(always)]
pub(in crate::tracker) fn enter(
    t: &Tensor,
    probe: (&'static Site, bool, u8),
    primary: &PrimaryLoop,
    (timed, stamp): (bool, impl Fn() -> u64),
    drain: impl Fn(),
) {
    if timed {
        enter_logged(t, probe, primary, stamp(), &drain);
    } else {
        enter_with::<false>(t, probe, primary, 0, drain);
    }
}

/// [`enter`] with an event log: the probe's entry holds what the log needs of it
/// ([`LoggedProbe`], in this thread's [`Rings::logged`] ring), stamped `stamp`. Out of
/// line: the probe without a log stays as short as it was.
#[inline(never)]
fn enter_logged(
    t: &Tensor,
    probe: (&'static Site, bool, u8),
    primary: &PrimaryLoop,
    stamp: u64,
    drain: &impl Fn(),
) {
    enter_with::<true>(t, probe, primary, stamp, drain);
}

/// [`enter`]'s one body: with `LOGGED` the entry goes to the log's ring with what the
/// log needs of the probe (stamped `stamp`), else to the thread's plain ring.
#[inline(always)]
fn enter_with<const LOGGED: bool>(
    t: &Tensor,
    (site, store, hint): (&'static Site, bool, u8),
    primary: &PrimaryLoop,
    stamp: u64,
    drain: impl Fn(),
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
        let (probe, at) = ((site, store, hint), (birth, serial, seq, first));
        // A full ring: the probes go to the registry now (the ring keeps its size).
        if LOGGED {
            let entry = || LoggedProbe {
                logged: Logged::of(t, seq, stamp, local.thread),
                pending: Pending::of(t, probe, at),
            };
            local.log.push_with(entry, &RINGS.logged, drain);
        } else {
            let pending = || Pending::of(t, probe, at);
            local.buf.push_with(pending, &RINGS.buffers, drain);
        }
    });
}

impl Pending {
    /// The entry of a probe of `t` at `site` (a store when `store`, role byte `hint`)
    /// of a tensor born at `birth` with creation serial `serial`, in probe order `seq`,
    /// its first probe when `first`.
    #[inline(always)]
    fn of(
        t: &Tensor,
        (site, store, hint): (&'static Site, bool, u8),
        (birth, serial, seq, first): (Birth, u64, u64, bool),
    ) -> Pending {
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
        }
    }
}
