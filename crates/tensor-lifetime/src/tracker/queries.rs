//! The queries behind the public API: the report, the snapshot of live tensors, site
//! totals, tracked bytes per device (the post-mortem is [`super::post_mortem`]'s). Each
//! drains the probes and sweeps first, then reads the registry, the tally and the sink.

use super::sweep::{SweepResult, Walk};
use super::{State, Tracker};
use crate::device::DeviceId;
use crate::site::Site;
use tensor_lifetime_report::event::{Event, MemorySample};
use tensor_lifetime_report::Report;

/// Births and drops of one creation site so far, as [`crate::site_totals`] lists them.
#[derive(Debug, Clone, Copy)]
pub struct SiteTotals {
    pub site: &'static Site,
    /// Tensors first seen at this site.
    pub born: u64,
    /// Of those, the ones dropped by now.
    pub dropped: u64,
}

impl Tracker {
    /// The state with every pending probe drained and the records swept (as of now).
    pub(super) fn settled(&self) -> (parking_lot::MutexGuard<'_, State>, SweepResult) {
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.sink.logs();
        let sweep = st.sweep(Walk::Query, t_ns, log);
        (st, sweep)
    }

    /// The report as of now (drains pending probes first).
    pub(crate) fn report(&self, session: Option<u64>) -> Report {
        let (mut st, sweep) = self.settled();
        st.sink.flush_log();
        let mut report = st.sink.report_for(session);
        report.live_tensors = sweep.live_tensors;
        report.live_bytes = sweep.live_bytes;
        report
    }

    /// Live tracked tensors now, optionally only those born in `session`.
    pub(crate) fn live(&self, session: Option<u64>) -> Vec<LiveTensor> {
        let (st, _) = self.settled();
        let mut out: Vec<LiveTensor> = st
            .registry
            .iter()
            .filter(|r| session.is_none_or(|s| u64::from(r.session) == s))
            .map(|r| LiveTensor {
                site: st.site(r.site),
                store: (r.store != 0).then(|| st.site(r.store)),
                id: r.id,
                refcount: r.weak.strong_count(),
                storage_bytes: r.storage_bytes,
                view_bytes: r.view_bytes,
                device: r.device.to_string(),
                in_loop: r.frame != 0,
            })
            .collect();
        out.sort_by_key(|t| t.id);
        out
    }

    /// Per-site totals of tensors born and dropped, in source order.
    pub(crate) fn site_totals(&self) -> Vec<SiteTotals> {
        let (st, _) = self.settled();
        // Births are the analysis's count; the dropped are the births not alive now.
        let mut live = vec![0u64; st.sites.len()];
        for r in st.registry.iter() {
            live[r.site as usize - 1] += 1;
        }
        let mut v: Vec<_> = st
            .sites
            .iter()
            .zip(1u32..)
            .zip(live)
            .filter_map(|((site, id), live)| {
                let born = st.sink.births(id);
                (born > 0).then(|| {
                    let dropped = born.saturating_sub(live);
                    SiteTotals {
                        site,
                        born,
                        dropped,
                    }
                })
            })
            .collect();
        v.sort_by_key(|t| (t.site.file, t.site.line, t.site.column));
        v
    }

    /// Live and peak tracked bytes on `device`.
    pub(crate) fn tracked_bytes(&self, device: DeviceId) -> (u64, u64) {
        let (st, _) = self.settled();
        st.devices.live_peak(device)
    }

    /// Resets the peak of `device` to its current live bytes.
    pub(crate) fn reset_tracked_peak(&self, device: DeviceId) {
        self.state.lock().devices.reset_peak(device);
    }

    /// Records a memory sample (event log, analysis).
    pub(crate) fn record_memory(&self, device: DeviceId, sample: MemorySample) {
        let t_ns = self.now_ns();
        self.state.lock().sink.emit(Event::Memory {
            t_ns,
            device: device.to_string(),
            sample,
        });
    }
}

/// A live tracked tensor, as [`crate::snapshot`] lists it.
#[derive(Debug, Clone)]
pub struct LiveTensor {
    /// Creation site.
    pub site: &'static Site,
    /// Latest store site it went through.
    pub store: Option<&'static Site>,
    /// Order of first sighting.
    pub id: u64,
    /// Strong references now.
    pub refcount: usize,
    /// Bytes of its whole storage and of its own view.
    pub storage_bytes: u64,
    pub view_bytes: u64,
    /// `cpu`, `cuda:0`...
    pub device: String,
    /// Born inside a tracked loop.
    pub in_loop: bool,
}
