//! The probes' way into the registry (part of the root): the probe entry point, the
//! drain of every thread's ring under the state lock, and the merge of each probe (a
//! first probe makes a record or counts a temporary; a later one adds an alias or a
//! store, to a young record or, through the walks' aggregates, an old one).

use super::probe::{self, Observed, Pending, View, RINGS};
use super::registry::Record;
use super::{roles, Input, State, Tracker};
use crate::phase_timing::{timed, HotPhase};
use crate::sample;
use crate::site::Site;
use candle_core::Tensor;
use std::fmt::Write as _;
use tensor_lifetime_report::event::Event;

impl Tracker {
    /// Whether the probes are sampled now ([`sample::scale`]). The probes of a value ask
    /// once, then call [`Tracker::probe`] (sampled) or [`Tracker::record_probe`] (exact)
    /// per tensor: exact mode's per-tensor code has no test of the sample.
    #[inline(always)]
    pub(crate) fn samples(&self) -> bool {
        sample::scale() != 0
    }

    /// A probe of `t` at `site` ([`Tracker::record_probe`]). In sampled mode a tensor
    /// the sample leaves out ([`probe::sampled_out`]) costs only that test.
    #[inline(always)]
    pub(crate) fn probe(&'static self, t: &Tensor, site: &'static Site, store: bool, hint: u8) {
        let scale = sample::scale();
        if scale != 0 {
            if !probe::sampled_out(t, scale) {
                self.note_sampled_probe();
                self.record_probe(t, site, store, hint);
            }
            return;
        }
        self.record_probe(t, site, store, hint);
    }

    /// [`Tracker::probe`] of a binding whose value the macro saw computed from `inputs`:
    /// a tensor with an autograd op keeps them as its graph's inputs
    /// ([`Tracker::made_from`]), in sampled mode only a sampled one.
    #[inline(always)]
    pub(crate) fn probe_made(&'static self, t: &Tensor, site: &'static Site, inputs: &[Input]) {
        let scale = sample::scale();
        if scale != 0 {
            if !probe::sampled_out(t, scale) {
                self.record_sampled_made(t, site, inputs);
            }
            return;
        }
        self.record_made(t, site, inputs);
    }

    /// [`Tracker::probe_made`] without the sample's test (exact mode).
    #[inline(always)]
    pub(crate) fn record_made(&'static self, t: &Tensor, site: &'static Site, inputs: &[Input]) {
        self.made_from(t, inputs);
        self.record_probe(t, site, false, 0);
    }

    /// [`Tracker::probe_made`] of a tensor the sample keeps: out of line, so that a
    /// binding's sampled-out path stays a few instructions.
    #[inline(never)]
    fn record_sampled_made(&'static self, t: &Tensor, site: &'static Site, inputs: &[Input]) {
        self.note_sampled_probe();
        self.made_from(t, inputs);
        self.record_probe(t, site, false, 0);
    }

    /// Records a tensor seen at `site` (a binding, or a store when `store`) with the
    /// role byte `hint` (0: none; else the site's role, [`roles::hint`]). Out of line:
    /// one copy of it for all of a loop body's probes.
    #[inline(never)]
    pub(crate) fn record_probe(
        &'static self,
        t: &Tensor,
        site: &'static Site,
        store: bool,
        hint: u8,
    ) {
        timed(HotPhase::Probe, || {
            probe::enter(
                t,
                (site, store, hint),
                &self.primary,
                (self.timed, || self.now_ns()),
                || self.drain(&mut self.state.lock()),
            );
        });
    }

    /// Moves every thread's buffered probes into the registry.
    pub(super) fn drain(&self, st: &mut State) {
        let mut merged = std::mem::take(&mut st.drained);
        RINGS.drain_with(&mut merged, |a, b, threaded| {
            st.merge_drained(a, b, threaded)
        });
        st.drained = merged;
        super::keep::trim_vec(&mut st.drained);
    }
}

impl State {
    /// Merges a drain's probes (`a` then `b`, in probe order) into the registry. The
    /// probes are the drain's: a record takes its probe's weak handle. `threaded`: more
    /// than one thread has probed.
    fn merge_drained(&mut self, a: &mut [Pending], b: &mut [Pending], threaded: bool) {
        let log = self.parts.sink.logs();
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
            self.parts
                .sink
                .born_dropped(site, frame, iteration, p.bytes);
            self.parts.roles.temporary(p.role, p.bytes);
            return;
        };
        let (view, storage) = (View::of(&tensor), Observed::of(&tensor));
        drop(tensor);
        self.parts.sink.born_alive(site, frame, iteration, p.bytes);
        let key = p.weak.key();
        self.parts
            .registry
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
        if let Some(r) = self.parts.registry.young_mut(key) {
            roles::upgrade(&mut r.role, p.role);
            if p.store {
                r.store = site;
                let tensor = r.id;
                if log {
                    self.parts.sink.emit(Event::Stored {
                        t_ns: p.logged.as_ref().map_or(0, |l| l.t_ns),
                        tensor,
                        site,
                    });
                }
            } else if log && r.site != site {
                let tensor = r.id;
                self.parts.sink.emit(Event::Alias { tensor, site });
            }
            return;
        }
        if self.sweeper.generational() && self.merge_old(p, key, site, log) {
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
        let mut born = self.born.take().unwrap_or_else(|| Event::Born {
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
        self.parts.sink.emit_ref(&born);
        self.born = Some(born);
        if p.store {
            self.parts.sink.emit(Event::Stored {
                t_ns,
                tensor: id,
                site,
            });
        }
        if alive {
            self.parts
                .registry
                .insert(key, Record::of(p, id, site, view, storage));
        } else {
            self.parts.sink.emit(Event::Dropped { t_ns, tensor: id });
            self.parts.roles.temporary(p.role, storage.storage_bytes);
        }
    }
}

impl State {
    /// A later probe of an old record (generational mode): a store moves its holder, an
    /// alias is logged. False when `key` is no old record.
    #[cold]
    fn merge_old(&mut self, p: &Pending, key: usize, site: u32, log: bool) -> bool {
        let store = p.store.then_some(site);
        let Some((first_site, tensor)) =
            self.sweeper
                .probe_old(&mut self.parts.registry, (key, p.serial), p.role, store)
        else {
            return false;
        };
        if !log {
            return true;
        }
        if p.store {
            self.parts.sink.emit(Event::Stored {
                t_ns: p.logged.as_ref().map_or(0, |l| l.t_ns),
                tensor,
                site,
            });
        } else if first_site != site {
            self.parts.sink.emit(Event::Alias { tensor, site });
        }
        true
    }
}
