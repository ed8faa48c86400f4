//! The probe: the hot path, no lock. A probe appends one entry ([`Pending`]) to its
//! thread's ring ([`enter`]), with an event log also what the log's events need of it
//! ([`Logged`], in the same ring: no allocation); a drain ([`Rings::drain_with`]) hands every thread's entries, in
//! probe order, to the tracker's root, which merges them into the registry. The
//! per-thread state ([`local`]: the ring, the open loops, the session), where a tensor
//! was born ([`birth`]) and what is read of a tensor ([`observe`]) are here too.

mod birth;
mod local;
mod observe;

pub(in crate::tracker) use birth::{Birth, PrimaryLoop};
use local::Local;
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One entry of a thread's ring: a probe, or (with an event log) what the log needs of
/// the probe just before it, pushed with it as one group. One cache line, aligned to
/// one: a probe writes a single line of its ring (two with a log).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) enum Entry {
    Probe(Pending),
    Logged(Logged),
    /// The shape of the probe before, when [`Logged`] cannot hold it (a rank above
    /// [`INLINE_RANK`], or a dimension of 2^32 or more): its probe order, the rank and
    /// the dims (up to [`SHAPE_RANK`]). No variant but the probe's needs dropping.
    Shape(u64, u8, [u64; SHAPE_RANK]),
}

impl Entry {
    /// The global probe order of the entry's probe (the entries that complete a probe
    /// carry its order, so a stable sort keeps them after it).
    #[inline]
    pub(in crate::tracker) fn seq(&self) -> u64 {
        match self {
            Entry::Probe(p) => p.seq,
            Entry::Logged(l) => l.seq,
            Entry::Shape(seq, ..) => *seq,
        }
    }
}

/// One probe's observation, buffered per thread until the next sweep.
#[derive(Debug)]
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

/// The dimensions an [`Entry::Shape`] holds: a larger rank is written without its shape
/// (a `born` event's shape is optional).
pub(in crate::tracker) const SHAPE_RANK: usize = 6;

/// The dimensions a [`Logged`] entry holds in place.
pub(in crate::tracker) const INLINE_RANK: usize = 4;

/// What only the event log's events carry of a probe (its `born` event, for a tensor
/// dropped before the drain too), read only when one is written. Its shape is in place
/// up to [`INLINE_RANK`] dimensions below 2^32; a larger one follows as an
/// [`Entry::Shape`] (`rank` is then [`Logged::SHAPE_FOLLOWS`]).
#[derive(Debug)]
pub(in crate::tracker) struct Logged {
    /// The probe's order (as its [`Pending::seq`]).
    pub(in crate::tracker) seq: u64,
    /// When probed ([`crate::phase_timing::ticks`]; the drain turns it into ns).
    pub(in crate::tracker) stamp: u64,
    /// The storage as of the probe.
    pub(in crate::tracker) storage: Observed,
    pub(in crate::tracker) dims: [u32; INLINE_RANK],
    pub(in crate::tracker) thread: u32,
    pub(in crate::tracker) device: DeviceId,
    pub(in crate::tracker) dtype: DType,
    pub(in crate::tracker) rank: u8,
}

impl Logged {
    /// [`Logged::rank`] of a shape that follows as an [`Entry::Shape`].
    pub(in crate::tracker) const SHAPE_FOLLOWS: u8 = u8::MAX;

    /// What the log needs of `t`, probed with order `seq` at `stamp` on `thread`; the
    /// shape that does not fit in place, apart.
    #[inline]
    fn of(t: &Tensor, seq: u64, stamp: u64, thread: u64) -> (Logged, Option<Entry>) {
        let shape = t.dims();
        let mut dims = [0u32; INLINE_RANK];
        let fits = shape.len() <= INLINE_RANK
            && shape.iter().zip(&mut dims).all(|(d, to)| {
                *to = *d as u32;
                *d <= u32::MAX as usize
            });
        let logged = Logged {
            seq,
            stamp,
            storage: Observed::of(t),
            dims,
            thread: thread as u32,
            device: DeviceId::of_location(t.device().location()),
            dtype: t.dtype(),
            rank: if fits {
                shape.len() as u8
            } else {
                Logged::SHAPE_FOLLOWS
            },
        };
        let apart = (!fits).then(|| {
            let mut dims = [0u64; SHAPE_RANK];
            for (to, d) in dims.iter_mut().zip(shape) {
                *to = *d as u64;
            }
            let rank = if shape.len() <= SHAPE_RANK {
                shape.len() as u8
            } else {
                u8::MAX
            };
            Entry::Shape(seq, rank, dims)
        });
        (logged, apart)
    }
}

/// The threads' probe rings and the global probe order: process-wide, as the tracker
/// is, and reached without its lock.
pub(in crate::tracker) struct Rings {
    buffers: Registry<Entry>,
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
        merged: &mut Vec<Entry>,
        merge: impl FnOnce(&mut [Entry], &mut [Entry], bool),
    ) {
        self.buffers.drain_with(
            merged,
            // In the order the probes were made, across threads: a tensor made on a
            // worker or loader thread and seen by the training thread right after keeps
            // the worker's site as its creation site, whichever thread's buffer is drained
            // first. Each buffer is in probe order already. Stable: the first thread's
            // probes from before `threaded` all have 0.
            |all| all.sort_by_key(Entry::seq),
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
    crate::sample::skips(scale, weak::serial(t), own_bytes::<true>(t))
        && weak::weak_count(t) == 0
        && !in_session()
}

/// Records a tensor seen at `site` (a binding, or a store when `store`) with the role
/// byte `hint` (0: none; else the site's role, [`roles::hint`]) in this thread's ring.
/// `primary` is where a thread with no loop lends its tensors; `stamp` is the probe's
/// time stamp when an event log is written (`timed`); `drain` empties the rings when this
/// one is full.
#[inline(always)]
pub(in crate::tracker) fn enter(
    t: &Tensor,
    (site, store, hint): (&'static Site, bool, u8),
    primary: &PrimaryLoop,
    (timed, stamp): (bool, impl Fn() -> u64),
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
        let probe = Probe {
            site,
            store,
            hint,
            birth,
            serial,
            seq,
            first,
        };
        if timed {
            return logged(t, probe, (stamp(), local), drain);
        }
        // Full: the probes go to the registry now (the buffer keeps its size).
        local
            .buf
            .push_with(|| probe.entry(t), &RINGS.buffers, drain);
    });
}

/// What [`enter`] read of a probe before its entry is made.
struct Probe {
    site: &'static Site,
    store: bool,
    hint: u8,
    birth: Birth,
    serial: u64,
    seq: u64,
    first: bool,
}

impl Probe {
    /// The probe's entry (read now: the role, the call path, the own bytes).
    #[inline(always)]
    fn entry(self, t: &Tensor) -> Entry {
        Entry::Probe(Pending {
            weak: WeakTensor::new(t),
            site: self.site,
            store: self.store,
            frame: self.birth.frame as u32,
            iteration: self.birth.iteration as u32,
            session: self.birth.session as u32,
            serial: self.serial as u32,
            seq: self.seq,
            first: self.first,
            role: roles::at_probe(t, self.hint, self.site.role),
            path: crate::call_path::current(),
            bytes: own_bytes::<false>(t),
        })
    }
}

/// [`enter`] with an event log: the probe and what the log needs of it (stamped
/// `stamp`), pushed as one group. Out of line: the path without a log stays short.
#[inline(never)]
fn logged(t: &Tensor, probe: Probe, (stamp, local): (u64, &Local), drain: impl FnOnce()) {
    let seq = probe.seq;
    let (logged, shape) = Logged::of(t, seq, stamp, local.thread);
    let group = (probe.entry(t), Entry::Logged(logged), shape);
    local.buf.push_group(group, &RINGS.buffers, drain);
}
