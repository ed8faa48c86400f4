//! What leaves the tracker: the event log file, the automatic reports at the end of
//! outermost iterations and loops, and the queries behind the public API (report,
//! snapshot, site totals, tracked bytes per device).

use super::sweep::{SweepResult, Walk};
use super::{State, Tracker};
use crate::config::{Config, ReportMode};
use crate::device::DeviceId;
use crate::site::Site;
use std::fs::File;
use std::io::{BufWriter, Write};
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

/// What an automatic report printed of a finding: a new report is printed when this list
/// changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PrintedFinding {
    file: String,
    line: u32,
    kind: &'static str,
    leak: bool,
}

/// Creates the event log (`TENSOR_LIFETIME_LOG`) and writes its header; `None` without
/// one, or when it cannot be created (said once on stderr).
pub(super) fn open_log(config: &Config) -> Option<BufWriter<File>> {
    let path = config.log.as_ref().filter(|_| config.enabled)?;
    match File::create(path) {
        Ok(file) => {
            let mut w = BufWriter::with_capacity(1 << 16, file);
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let header = Event::rank_header(
                std::process::id(),
                started,
                config.rank.rank,
                config.rank.world_size,
                config.rank.host.clone(),
            );
            let _ = header.write_line(&mut w);
            let _ = w.flush();
            Some(w)
        }
        Err(e) => {
            eprintln!(
                "tensor-lifetime: cannot create the event log {} (TENSOR_LIFETIME_LOG): {e}",
                path.display()
            );
            None
        }
    }
}

impl Tracker {
    /// Prints / writes the report at the end of an outermost iteration (when the findings
    /// changed) and at the end of an outermost loop.
    pub(super) fn auto_report(&self, st: &mut State, frame: u64, iterations: u64, loop_end: bool) {
        let report = st.analysis.report();
        let printed: Vec<PrintedFinding> = report
            .findings
            .iter()
            .map(|f| PrintedFinding {
                file: f.site.file.clone(),
                line: f.site.line,
                kind: f.kind.as_str(),
                leak: f.is_leak(),
            })
            .collect();
        let Some(fs) = st.frames.get_mut(&frame) else {
            return;
        };
        let changed = fs.printed != printed;
        if !(changed || loop_end) {
            return;
        }
        fs.printed = printed;
        let started = fs.started;
        if changed {
            for f in report.leaks() {
                tracing::warn!(
                    target: "tensor_lifetime",
                    kind = f.kind.as_str(),
                    file = %f.site.file,
                    line = f.site.line,
                    label = %f.site.label,
                    survivors = f.survivors,
                    bytes = f.bytes,
                    bytes_per_iteration = f.bytes_per_iteration,
                    "tensor leak: `{}` at {}:{}",
                    f.site.label,
                    f.site.file,
                    f.site.line
                );
            }
        }
        if let Some(path) = &self.config.json {
            if let Err(e) = std::fs::write(path, report.to_json()) {
                eprintln!(
                    "tensor-lifetime: cannot write {} (TENSOR_LIFETIME_JSON): {e}",
                    path.display()
                );
            }
        }
        if self.config.report == ReportMode::Stderr && (!report.findings.is_empty() || loop_end) {
            let name = st.frame_label(frame);
            let when = if loop_end {
                format!(
                    "loop {name} ended after {} iterations in {:.2?}",
                    iterations,
                    started.elapsed()
                )
            } else {
                format!("loop {name}, iteration {iterations} ended")
            };
            eprint!("tensor-lifetime: {when}\n{report}");
        }
    }

    /// The state with every pending probe drained and the records swept (as of now).
    pub(super) fn settled(&self) -> (parking_lot::MutexGuard<'_, State>, SweepResult) {
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.log.is_some();
        let sweep = st.sweep(Walk::Query, t_ns, log);
        (st, sweep)
    }

    /// The report as of now (drains pending probes first).
    pub(crate) fn report(&self, session: Option<u64>) -> Report {
        let (mut st, sweep) = self.settled();
        st.flush_log();
        let mut report = st.analysis.report_for(session);
        report.live_tensors = sweep.live_tensors;
        report.live_bytes = sweep.live_bytes;
        report
    }

    /// Live tracked tensors now, optionally only those born in `session`.
    pub(crate) fn live(&self, session: Option<u64>) -> Vec<LiveTensor> {
        let (st, _) = self.settled();
        let mut out: Vec<LiveTensor> = st
            .all_records()
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
        for r in st.all_records() {
            live[r.site as usize - 1] += 1;
        }
        let mut v: Vec<_> = st
            .sites
            .iter()
            .zip(1u32..)
            .zip(live)
            .filter_map(|((site, id), live)| {
                let born = st.analysis.births(id);
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
        st.devices
            .iter()
            .find(|(d, _)| *d == device)
            .map_or((0, 0), |(_, b)| (b.live, b.peak))
    }

    /// Resets the peak of `device` to its current live bytes.
    pub(crate) fn reset_tracked_peak(&self, device: DeviceId) {
        let mut st = self.state.lock();
        if let Some((_, b)) = st.devices.iter_mut().find(|(d, _)| *d == device) {
            b.peak = b.live;
        }
    }

    /// Records a memory sample (event log, analysis).
    pub(crate) fn record_memory(&self, device: DeviceId, sample: MemorySample) {
        let t_ns = self.now_ns();
        self.state.lock().emit(Event::Memory {
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
