//! The tracker's answers to the public API (part of the root: it holds the lock, drains,
//! sweeps, then asks the parts): the report, the snapshot, site totals, tracked bytes,
//! memory samples and the post-mortem.

use super::sink::write_json;
use super::sweep::{SweepResult, Walk};
use super::{post_mortem, profile, queries, sampling_now, LiveTensor, SiteTotals, State, Tracker};
use crate::device::DeviceId;
use tensor_lifetime_report::event::{Event, MemorySample};
use tensor_lifetime_report::pprof::LiveProfile;
use tensor_lifetime_report::{PostMortem, Report};

impl Tracker {
    /// The state with every pending probe drained and the records swept (as of now).
    pub(super) fn settled(&self) -> (parking_lot::MutexGuard<'_, State>, SweepResult) {
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.parts.sink.logs();
        let sweep = st.sweep(Walk::Query, t_ns, log);
        (st, sweep)
    }

    /// The report as of now (drains pending probes first).
    pub(crate) fn report(&self, session: Option<u64>) -> Report {
        let (mut st, sweep) = self.settled();
        st.parts.sink.flush_log();
        let mut report = st.parts.sink.report_for(session);
        report.live_tensors = sweep.live_tensors;
        report.live_bytes = sweep.live_bytes;
        report
    }

    /// Live tracked tensors now, optionally only those born in `session`.
    pub(crate) fn live(&self, session: Option<u64>) -> Vec<LiveTensor> {
        let (st, _) = self.settled();
        queries::live(&st.parts.registry, &st.sites, session)
    }

    /// Per-site totals of tensors born and dropped, in source order.
    pub(crate) fn site_totals(&self) -> Vec<SiteTotals> {
        let (st, _) = self.settled();
        let sink = (&st.parts.sink, sampling_now());
        queries::site_totals(&st.parts.registry, &st.sites, sink)
    }

    /// Live and peak tracked bytes on `device`.
    pub(crate) fn tracked_bytes(&self, device: DeviceId) -> (u64, u64) {
        let (st, _) = self.settled();
        st.parts.devices.live_peak(device)
    }

    /// Resets the peak of `device` to its current live bytes.
    pub(crate) fn reset_tracked_peak(&self, device: DeviceId) {
        self.state.lock().parts.devices.reset_peak(device);
    }

    /// Records a memory sample (event log, analysis).
    pub(crate) fn record_memory(&self, device: DeviceId, sample: MemorySample) {
        let t_ns = self.now_ns();
        self.state.lock().parts.sink.emit(Event::Memory {
            t_ns,
            device: device.to_string(),
            sample,
        });
    }

    /// What is live now ([`post_mortem`]'s module docs); `reason` says why it is asked
    /// for.
    pub(crate) fn post_mortem(&self, reason: &str) -> PostMortem {
        let mut pm = {
            let (mut st, sweep) = self.settled();
            st.parts.sink.declare_call_paths();
            let sample = sampling_now();
            let mut pm = post_mortem::live_by_origin(
                &st.parts.registry,
                &st.parts.made_from,
                (&st.parts.sink, sample),
            );
            pm.reason = reason.to_string();
            pm.live_tensors = sweep.live_tensors;
            pm.live_bytes = sweep.live_bytes;
            pm.grew_most = post_mortem::grew_most(&st.parts.sink);
            pm.devices = post_mortem::devices(&st.parts.devices);
            pm
        };
        // The devices' own counters, read without the tracker's lock.
        let ids: Vec<DeviceId> = self
            .state
            .lock()
            .parts
            .devices
            .iter()
            .map(|d| d.0)
            .collect();
        post_mortem::read_counters(&mut pm, ids);
        pm
    }

    /// What is live now as a pprof profile (drains and sweeps first).
    pub(crate) fn live_profile(&self) -> LiveProfile {
        let (mut st, _) = self.settled();
        st.parts.sink.declare_call_paths();
        let p = &st.parts;
        let now = (self.now_ns(), sampling_now());
        profile::live_profile(&p.registry, &p.made_from, &p.sink, now)
    }

    /// Writes the post-mortem everywhere the tracker writes (stderr, the event log, the
    /// JSON report).
    pub(crate) fn write_post_mortem(&self, pm: &PostMortem) {
        eprint!("{pm}");
        let t_ns = self.now_ns();
        let report = {
            let mut st = self.state.lock();
            st.parts.sink.emit(Event::PostMortem {
                t_ns,
                post_mortem: Box::new(pm.clone()),
            });
            st.parts.sink.flush_log();
            st.parts.sink.report()
        };
        write_json(&self.config, &report);
    }
}
