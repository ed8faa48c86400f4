//! The hot path: a probe appends one entry to its thread's ring; a drain takes every
//! thread's entries into the registry, in probe order, and merges them (a first probe
//! makes a record or counts a temporary; a later one adds an alias or a store).

use super::frames::Birth;
use super::local::{in_session, LOCAL};
use super::observe::{own_bytes, Observed, View};
use super::registry::Record;
use super::{roles, Input, State, Tracker};
use crate::phase_timing::{timed, HotPhase};
use crate::sample;
use crate::site::Site;
use crate::weak::{self, WeakTensor};
use candle_core::Tensor;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use tensor_lifetime_report::event::Event;

/// One probe's observation, buffered per thread until the next sweep. One cache line,
/// aligned to one: a probe writes a single line of its ring.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Pending {
    /// The tensor (its key is the handle's address, [`WeakTensor::key`]).
    pub(super) weak: WeakTensor,
    site: &'static Site,
    pub(super) store: bool,
    /// No weak handle of the tracker's existed for the tensor when probed: no record and
    /// no earlier probe entry, so this is the tensor's first probe. (Two threads probing
    /// one tensor at the same instant can both see none. With several threads probing,
    /// the drain looks every probe up, so only a tensor already dropped at the drain is
    /// then counted twice.)
    first: bool,
    /// The tensor's role byte ([`super::roles`]).
    pub(super) role: u8,
    /// The call path when probed ([`crate::call_path`]; 0: none).
    pub(super) path: u32,
    // u32 like the records' (see [`Record`]): the buffer entry stays small.
    pub(super) frame: u32,
    pub(super) iteration: u32,
    pub(super) session: u32,
    /// The tensor's creation serial, cut to 32 bits: it picks an old record's shard
    /// (the same in every run of a program, unlike the tensor's address).
    pub(super) serial: u32,
    /// Global probe order (the drain merges threads' buffers by it; 0 before a second
    /// thread probed).
    seq: u64,
    /// The tensor's own bytes (elements times element size; its view, not its storage):
    /// the size the shape-churn finding judges. Read without the storage's lock.
    bytes: u64,
    /// What only the event log needs, read only when one is written.
    logged: Option<Box<Logged>>,
}

/// The part of a probe only the event log's events carry.

#[derive(Debug)]
struct Logged {
    t_ns: u64,
    thread: u32,
    view: View,
    dims: Vec<usize>,
    /// The storage as of the probe (a birth's event carries it even for a tensor dropped
    /// before the drain).
    storage: Observed,
}

impl Tracker {
    /// A probe of `t` at `site` ([`Tracker::record_probe`]). In sampled mode a tensor
    /// with no record that the sample leaves out ([`Tracker::sampled_out`]) costs only
    /// that test: no entry, no record.
    #[inline(always)]
    pub(crate) fn probe(&'static self, t: &Tensor, site: &'static Site, store: bool, hint: u8) {
        let scale = sample::scale();
        if scale != 0 {
            if self.sampled_out(t, scale) {
                return;
            }
            self.note_sampled_probe();
        }
        self.record_probe(t, site, store, hint);
    }

    /// [`Tracker::probe`] of a binding whose value the macro saw computed from `inputs`:
    /// a tensor with an autograd op keeps them as its graph's inputs
    /// ([`Tracker::made_from`]).
    #[inline(always)]
    pub(crate) fn probe_made(&'static self, t: &Tensor, site: &'static Site, inputs: &[Input]) {
        let scale = sample::scale();
        if scale != 0 {
            if self.sampled_out(t, scale) {
                return;
            }
            self.note_sampled_probe();
        }
        self.made_from(t, inputs);
        self.record_probe(t, site, false, 0);
    }

    /// Whether the sampled mode (at `scale`, [`sample::scale`]) leaves `t` out: the
    /// sample skips it ([`sample::skips`]: its creation serial and own bytes), it has no
    /// record (no weak handle of ours), and this thread runs no leak test (leak tests are
    /// exact).
    #[inline(always)]
    pub(super) fn sampled_out(&self, t: &Tensor, scale: u64) -> bool {
        sample::skips(scale, weak::serial(t), own_bytes(t))
            && weak::weak_count(t) == 0
            && !in_session()
    }

    /// Records a tensor seen at `site` (a binding, or a store when `store`) with the
    /// role byte `hint` (0: none; else the site's role, [`roles::hint`]). Out of line:
    /// one copy of it for all of a loop body's probes.
    #[inline(never)]
    fn record_probe(&'static self, t: &Tensor, site: &'static Site, store: bool, hint: u8) {
        timed(HotPhase::Probe, || {
            // One counter for all threads: its order agrees with every thread's program
            // order and with hand-offs between threads (a tensor made on a loader thread and
            // probed by the training thread after it was sent there). While only one thread
            // has a probe buffer its probes take 0 (an atomic increment less per probe): they
            // come before any other thread's, since a second thread sets `threaded` before
            // its first probe, and a hand-off from it makes the receiver see the flag.
            let seq = if self.threaded.load(Ordering::Relaxed) {
                self.next_seq.fetch_add(1, Ordering::Relaxed)
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
                let stack = local.stack.borrow();
                // Born in the innermost open loop that existed when it was created: a
                // tensor first seen in a loop but created before it (weights, a dataset)
                // was not born there.
                let birth = if stack.is_empty() {
                    self.primary.birth(serial, session)
                } else {
                    match stack.iter().rev().find(|l| l.watermark <= serial) {
                        Some(l) => Birth::of(l, session),
                        None => Birth::outside(session),
                    }
                };
                drop(stack);
                let logged = self.timed.then(|| {
                    Box::new(Logged {
                        t_ns: self.now_ns(),
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
                        bytes: own_bytes(t),
                        logged,
                    },
                    &self.buffers,
                    // Full: the probes go to the registry now (the buffer keeps its size).
                    || self.drain(&mut self.state.lock()),
                );
            });
        });
    }

    /// Moves every thread's buffered probes into the registry.
    pub(super) fn drain(&self, st: &mut State) {
        let mut merged = std::mem::take(&mut st.scratch.drained);
        self.buffers.drain_with(
            &mut merged,
            // In the order the probes were made, across threads: a tensor made on a
            // worker or loader thread and seen by the training thread right after keeps
            // the worker's site as its creation site, whichever thread's buffer is drained
            // first. Each buffer is in probe order already. Stable: the first thread's
            // probes from before `threaded` all have 0.
            |all| all.sort_by_key(|p| p.seq),
            // One thread's probes are read in place, in its ring.
            |a, b| st.merge_drained(a, b, self.threaded.load(Ordering::Relaxed)),
        );
        st.scratch.drained = merged;
        st.scratch.trim_drain();
    }
}

impl State {
    /// Merges a drain's probes (`a` then `b`, in probe order) into the registry. The
    /// probes are the drain's: a record takes its probe's weak handle. `threaded`: more
    /// than one thread has probed.
    fn merge_drained(&mut self, a: &mut [Pending], b: &mut [Pending], threaded: bool) {
        let log = self.sink.logs();
        // A tensor's first probe needs no lookup: no record of it can exist. Except when
        // several threads probe: a later probe of it, on the thread it was handed to, may
        // have been drained first and made the record (see `merge`).
        let fast = !(log || threaded);
        for part in [a, b] {
            for p in part {
                if fast && p.first {
                    let site = self.site_id(p.site);
                    self.merge_fresh(p, site);
                } else {
                    self.merge(p, log);
                }
            }
        }
    }

    /// Merges the probe of a tensor that has no record, with no event log: a loop body's
    /// temporary, dropped by now, is counted and forgotten; a tensor alive now gets a
    /// record with what it needs of the tensor read now (a tensor dropped on another
    /// thread meanwhile is counted as dropped).
    #[inline(always)]
    fn merge_fresh(&mut self, p: &mut Pending, site: u32) {
        let id = self.next_record;
        self.next_record += 1;
        let frame = (p.frame != 0).then_some(u64::from(p.frame));
        let iteration = u64::from(p.iteration);
        // Upgraded only when alive: a dead handle's count is one load.
        let tensor = match p.weak.strong_count() {
            0 => None,
            // Dropped on another thread since the line above: `None`.
            _ => p.weak.upgrade(),
        };
        let Some(tensor) = tensor else {
            self.sink.born_dropped(site, frame, iteration, p.bytes);
            self.roles.temporary(p.role, p.bytes);
            return;
        };
        let (view, storage) = (View::of(&tensor), Observed::of(&tensor));
        drop(tensor);
        self.sink.born_alive(site, frame, iteration, p.bytes);
        let key = p.weak.key();
        self.registry
            .insert(key, Record::of(p, id, site, view, storage));
    }

    /// Merges one probe into the registry.
    ///
    /// A key names one tensor for as long as a probe entry or a record holds its weak
    /// handle (the handle keeps the address allocated), so a probe's key finds its
    /// tensor's record if it has one.
    #[inline(never)]
    fn merge(&mut self, p: &mut Pending, log: bool) {
        let site = self.site_id(p.site);
        let key = p.weak.key();
        if let Some(r) = self.registry.young_mut(key) {
            roles::upgrade(&mut r.role, p.role);
            if p.store {
                r.store = site;
                let tensor = r.id;
                if log {
                    self.sink.emit(Event::Stored {
                        t_ns: p.logged.as_ref().map_or(0, |l| l.t_ns),
                        tensor,
                        site,
                    });
                }
            } else if log && r.site != site {
                let tensor = r.id;
                self.sink.emit(Event::Alias { tensor, site });
            }
            return;
        }
        if self.gens.is_some() && self.merge_old(p, key, site, log) {
            return;
        }
        let alive = p.weak.strong_count() > 0;
        if !alive && !p.first {
            // A later probe of a tensor that has no record and is gone: its first probe
            // found it dropped (and counted it), or a sweep removed its record since this
            // probe (another thread's, made while that sweep held the lock). Or, on
            // another thread, its first probe is still to be drained and will count it.
            return;
        }
        // With a log every probe read what the log needs (`timed` is whether it opened).
        debug_assert_eq!(log, p.logged.is_some());
        let Some(l) = p.logged.as_deref().filter(|_| log) else {
            // No event log: a birth as of a first probe's.
            self.merge_fresh(p, site);
            return;
        };
        let id = self.next_record;
        self.next_record += 1;
        let (frame, iteration) = (u64::from(p.frame), u64::from(p.iteration));
        let (t_ns, view, storage) = (l.t_ns, l.view, l.storage);
        // The event of the previous birth, refilled: its shape and strings keep their
        // allocations.
        let mut born = self.scratch.born.take().unwrap_or_else(|| Event::Born {
            t_ns: 0,
            tensor: 0,
            site: 0,
            frame: None,
            iteration: 0,
            bytes: 0,
            storage: 0,
            shape: None,
            dtype: String::new(),
            device: String::new(),
            thread: 0,
        });
        if let Event::Born {
            t_ns: b_t_ns,
            tensor,
            site: b_site,
            frame: b_frame,
            iteration: b_iteration,
            bytes,
            storage: b_storage,
            shape,
            dtype,
            device,
            thread,
        } = &mut born
        {
            (*b_t_ns, *tensor, *b_site) = (t_ns, id, site);
            (*b_frame, *b_iteration) = ((frame != 0).then_some(frame), iteration);
            (*bytes, *b_storage) = (storage.storage_bytes, storage.storage as u64);
            let shape = shape.get_or_insert_with(Vec::new);
            shape.clear();
            shape.extend_from_slice(&l.dims);
            dtype.clear();
            dtype.push_str(view.dtype.as_str());
            device.clear();
            let _ = write!(device, "{}", view.device);
            *thread = u64::from(l.thread);
        }
        self.sink.emit_ref(&born);
        self.scratch.born = Some(born);
        if p.store {
            self.sink.emit(Event::Stored {
                t_ns,
                tensor: id,
                site,
            });
        }
        if alive {
            self.registry
                .insert(key, Record::of(p, id, site, view, storage));
        } else {
            self.sink.emit(Event::Dropped { t_ns, tensor: id });
            self.roles.temporary(p.role, storage.storage_bytes);
        }
    }
}

impl State {
    /// A later probe of an old record (generational mode): a store moves its holder, an
    /// alias is logged. False when `key` is no old record.
    #[cold]
    fn merge_old(&mut self, p: &Pending, key: usize, site: u32, log: bool) -> bool {
        let store = p.store.then_some(site);
        let Some((first_site, tensor)) = self.probe_old(key, p.serial, p.role, store) else {
            return false;
        };
        if !log {
            return true;
        }
        if p.store {
            self.sink.emit(Event::Stored {
                t_ns: p.logged.as_ref().map_or(0, |l| l.t_ns),
                tensor,
                site,
            });
        } else if first_site != site {
            self.sink.emit(Event::Alias { tensor, site });
        }
        true
    }
}
