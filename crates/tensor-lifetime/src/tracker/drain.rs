//! The probes' way into the registry (part of the root): the probe entry point, the
//! drain of every thread's ring under the state lock, and the merge of each probe (a
//! first probe makes a record or counts a temporary; a later one adds an alias or a
//! store, to a young record or, through the walks' aggregates, an old one). With an
//! event log the merge is the same, and writes each probe's events from what the probe
//! kept for them ([`Capture`]).

use super::probe::{self, LoggedProbe, Observed, Pending, View, RINGS};
use super::registry::Record;
use super::{roles, Input, State, Tracker};
use crate::device::DeviceId;
use crate::phase_timing::{ticks, timed, HotPhase};
use crate::sample;
use crate::site::Site;
use candle_core::{DType, Tensor};
use tensor_lifetime_report::event::BornRef;

/// What a probe kept for the event log, as the drain reads it: the probe's time in ns,
/// its thread, the storage, shape, dtype and device of its tensor.
struct Capture<'a> {
    t_ns: u64,
    thread: u64,
    storage: Observed,
    shape: &'a [usize],
    dtype: DType,
    device: DeviceId,
}

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
                (self.timed, ticks),
                || self.drain(&mut self.state.lock()),
            );
        });
    }

    /// Moves every thread's buffered probes into the registry. With an event log, the
    /// clock is read first (the probes' stamps are placed by it, [`super::clock`]) and
    /// the probes come from the log's rings.
    pub(super) fn drain(&self, st: &mut State) {
        st.parts.sink.sampling(sample::interval());
        if self.timed {
            st.clock.read();
            let mut merged = std::mem::take(&mut st.drained_logged);
            RINGS.drain_logged_with(&mut merged, |a, b, threaded| {
                st.merge_logged(a, b, threaded)
            });
            st.drained_logged = merged;
            super::keep::trim_vec(&mut st.drained_logged);
            return;
        }
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
        // A tensor's first probe needs no lookup: no record of it can exist. Except when
        // several threads probe: a later probe of it, on the thread it was handed to, may
        // have been drained first and made the record (see `merge`).
        for part in [a, b] {
            for p in part {
                if !threaded && p.first {
                    let site = self.site_id(p.site);
                    self.merge_fresh(p, site);
                } else {
                    self.merge(p, None);
                }
            }
        }
    }

    /// [`State::merge_drained`] with an event log: each probe with what it kept for the
    /// log (its [`probe::Logged`], in the same entry), merged the same way.
    #[inline(never)]
    fn merge_logged(&mut self, a: &mut [LoggedProbe], b: &mut [LoggedProbe], threaded: bool) {
        let mut shape = std::mem::take(&mut self.shape);
        for LoggedProbe {
            pending: p,
            logged: l,
        } in a.iter_mut().chain(b.iter_mut())
        {
            let capture = Capture {
                t_ns: self.clock.ns(l.stamp),
                thread: u64::from(l.thread),
                storage: l.storage,
                shape: l.shape(p, &mut shape),
                dtype: l.dtype,
                device: l.device,
            };
            if !threaded && p.first {
                let site = self.site_id(p.site);
                self.merge_fresh_logged(p, site, &capture);
            } else {
                self.merge(p, Some(&capture));
            }
        }
        self.shape = shape;
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

    /// [`State::merge_fresh`] with an event log (`c`: what the probe kept for it): the
    /// same, and its `born` event is written, with its `stored` and `dropped` events.
    fn merge_fresh_logged(&mut self, p: &mut Pending, site: u32, c: &Capture<'_>) {
        let id = self.next_record;
        self.next_record += 1;
        let frame = (p.frame != 0).then_some(u64::from(p.frame));
        let at = (frame, u64::from(p.iteration));
        let tensor = match p.weak.strong_count() {
            0 => None,
            _ => p.weak.upgrade(),
        };
        let Some(tensor) = tensor else {
            self.born_event(c, (id, site, p.store), at, true);
            self.parts.roles.temporary(p.role, c.storage.storage_bytes);
            return;
        };
        let view = View::of(&tensor);
        drop(tensor);
        self.born_event(c, (id, site, p.store), at, false);
        let key = p.weak.key();
        self.parts
            .registry
            .insert(key, Record::of(p, id, site, view, c.storage));
    }

    /// The `born` event of record `id` born at `site` (with its `stored` event when
    /// `store`, and its `dropped` event when `dropped`).
    fn born_event(
        &mut self,
        c: &Capture<'_>,
        (id, site, store): (u64, u32, bool),
        (frame, iteration): (Option<u64>, u64),
        dropped: bool,
    ) {
        let (index, device) = device_name(&mut self.device_names, c.device);
        let born = BornRef {
            t_ns: c.t_ns,
            tensor: id,
            site,
            frame,
            iteration,
            bytes: c.storage.storage_bytes,
            storage: c.storage.storage as u64,
            shape: Some(c.shape),
            dtype: c.dtype.as_str(),
            device,
            thread: c.thread,
            // The same (dtype, device) gets the same number.
            kind: index << 8 | c.dtype as u32,
        };
        self.parts
            .sink
            .born_logged(&born, store.then_some(site), dropped);
    }

    /// Merges one probe into the registry (`log`: what it kept for the event log).
    ///
    /// A key names one tensor for as long as a probe entry or a record holds its weak
    /// handle (the handle keeps the address allocated), so a probe's key finds its
    /// tensor's record if it has one.
    #[inline(never)]
    fn merge(&mut self, p: &mut Pending, log: Option<&Capture<'_>>) {
        let site = self.site_id(p.site);
        let key = p.weak.key();
        if let Some(r) = self.parts.registry.young_mut(key) {
            roles::upgrade(&mut r.role, p.role);
            if p.store {
                r.store = site;
                let tensor = r.id;
                if let Some(c) = log {
                    self.parts.sink.stored(c.t_ns, tensor, site);
                }
            } else if log.is_some() && r.site != site {
                let tensor = r.id;
                self.parts.sink.alias(tensor, site);
            }
            return;
        }
        if self.sweeper.generational() && self.merge_old(p, key, site, log) {
            return;
        }
        if p.weak.strong_count() == 0 && !p.first {
            // A later probe of a tensor that has no record and is gone: its first probe
            // found it dropped (and counted it), or a sweep removed its record since this
            // probe (another thread's, made while that sweep held the lock). Or, on
            // another thread, its first probe is still to be drained and will count it.
            return;
        }
        // A birth as of a first probe's.
        match log {
            None => self.merge_fresh(p, site),
            Some(c) => self.merge_fresh_logged(p, site, c),
        }
    }
}

impl State {
    /// A later probe of an old record (generational mode): a store moves its holder, an
    /// alias is logged. False when `key` is no old record.
    #[cold]
    fn merge_old(&mut self, p: &Pending, key: usize, site: u32, log: Option<&Capture<'_>>) -> bool {
        let store = p.store.then_some(site);
        let Some((first_site, tensor)) =
            self.sweeper
                .probe_old(&mut self.parts.registry, (key, p.serial), p.role, store)
        else {
            return false;
        };
        let Some(c) = log else {
            return true;
        };
        if p.store {
            self.parts.sink.stored(c.t_ns, tensor, site);
        } else if first_site != site {
            self.parts.sink.alias(tensor, site);
        }
        true
    }

    /// The iteration end's time and its iteration's duration (from `started`, its
    /// [`Tracker::stamp`]), with an event log (`timed`): the clock as the drain read it;
    /// else 0 (nothing reads them).
    pub(super) fn iteration_times(&self, timed: bool, started: u64) -> (u64, u64) {
        if !timed {
            return (0, 0);
        }
        let t_ns = self.clock.latest_ns();
        (t_ns, t_ns.saturating_sub(self.clock.ns(started)))
    }
}

/// The name of `device` in the event log, and its index (the first of a device formats
/// it once).
#[inline(always)]
fn device_name(names: &mut Vec<(DeviceId, String)>, device: DeviceId) -> (u32, &str) {
    let at = match names.iter().position(|(d, _)| *d == device) {
        Some(at) => at,
        None => new_device_name(names, device),
    };
    (at as u32, &names[at].1)
}

/// [`device_name`] of a device not named before.
#[cold]
fn new_device_name(names: &mut Vec<(DeviceId, String)>, device: DeviceId) -> usize {
    names.push((device, device.to_string()));
    names.len() - 1
}
