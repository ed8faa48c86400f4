//! The sink: the one path from the tracker to the report crate. Every event goes to the
//! event log (`TENSOR_LIFETIME_LOG`, when one is written) and to the judgement
//! ([`Analysis`]): the rare ones built and applied ([`Sink::emit`]); the per-step ones
//! (births, drops, stores, aliases, iteration ends) written from their fields
//! ([`StepEvent`]) and handed to the analysis directly, as the same event applied from
//! the saved log would be. The
//! automatic reports (stderr, `TENSOR_LIFETIME_JSON`, `tracing`) and the reads of the
//! judgement (reports, births, sites, call paths) are here too.

use super::outlook::Outlook;
use super::tally::Devices;
use crate::config::{Config, ReportMode};
use crate::site::Site;
use std::fs::File;
use std::time::Instant;
use tensor_lifetime_report::analysis::Catalog;
use tensor_lifetime_report::event::{BornRef, Event, EventWriter, LogFormat, SiteSweep, StepEvent};
use tensor_lifetime_report::report::SiteRef;
use tensor_lifetime_report::{Analysis, CallFrame, FindingKey, Judgement, Report, RoleBytes};

/// The longest an inner iteration end's events wait in the log's buffer (50 ms).
const LOG_FLUSH_EVERY_NS: u64 = 50_000_000;

/// The event log's writer: binary, or JSON lines for a `*.jsonl` path (`LogFormat`).
pub(super) type LogWriter = EventWriter<File>;

/// The event log and the judgement.
pub(super) struct Sink {
    analysis: Analysis,
    log: Option<LogWriter>,
    /// Writing the log failed (said once on stderr).
    log_error: bool,
    /// When the log was last flushed at an inner iteration end (`t_ns`).
    log_flushed_ns: u64,
    /// Call paths declared to the analysis (and the log) so far: ids `1..=declared`.
    declared_paths: u32,
    /// The pace of the outermost loop and the device's room, for the forecasts.
    outlook: Outlook,
    /// The dtype of the latest logged birth (the low byte of its `kind`) and the size of
    /// its elements as the analysis reads it.
    dtype_size: (u32, Option<u64>),
}

/// What an automatic report printed: a new report is printed when this changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Printed {
    /// Its findings' keys, sorted ([`Analysis::finding_keys`]).
    findings: Vec<FindingKey>,
    /// Where the report's forecast took its growth from (the leaks', the device's).
    growth_from: Option<String>,
}

impl Sink {
    /// A sink writing `log` (if any).
    pub(super) fn new(log: Option<LogWriter>) -> Sink {
        Sink {
            analysis: Analysis::new(Judgement::default()),
            log,
            log_error: false,
            log_flushed_ns: 0,
            declared_paths: 0,
            outlook: Outlook::default(),
            dtype_size: (u32::MAX, None),
        }
    }

    /// Creates the event log (`TENSOR_LIFETIME_LOG`, in the format its name chooses) and
    /// writes its header; `None` without one, or when it cannot be created (said once on
    /// stderr).
    pub(super) fn open_log(config: &Config) -> Option<LogWriter> {
        let path = config.log.as_ref().filter(|_| config.enabled)?;
        match File::create(path) {
            Ok(file) => {
                let mut w = EventWriter::new(LogFormat::for_path(path), file);
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
                let _ = w.write(&header);
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

    /// An event log is written.
    #[inline]
    pub(super) fn logs(&self) -> bool {
        self.log.is_some()
    }

    pub(super) fn emit(&mut self, event: Event) {
        self.emit_ref(&event);
    }

    /// Writes `event` to the log and applies it to the analysis.
    #[inline]
    pub(super) fn emit_ref(&mut self, event: &Event) {
        if let Some(w) = self.log.as_mut() {
            if let Err(e) = w.write(event) {
                self.write_failed(e);
            }
        }
        self.analysis.apply(event);
    }

    /// Writes a per-step event to the log (the caller counts it in the analysis).
    #[inline]
    fn log_step(&mut self, event: StepEvent<'_>) {
        if let Some(w) = self.log.as_mut() {
            if let Err(e) = w.write_step(event) {
                self.write_failed(e);
            }
        }
    }

    /// Says once that the log cannot be written.
    #[cold]
    fn write_failed(&mut self, e: std::io::Error) {
        if !self.log_error {
            eprintln!("tensor-lifetime: cannot write the event log: {e}");
            self.log_error = true;
        }
    }

    /// With a log: a birth's `born` event, then a `stored` event at `store` (a first
    /// probe at a store site) and a `dropped` event (a tensor dropped before its drain),
    /// counted in the analysis as the saved log's events are (a birth and its drop
    /// together). The low byte of `born.kind` names its dtype.
    #[inline]
    pub(super) fn born_logged(&mut self, born: &BornRef<'_>, store: Option<u32>, dropped: bool) {
        self.log_step(StepEvent::Born(*born));
        let (t_ns, tensor) = (born.t_ns, born.tensor);
        if let Some(site) = store {
            self.log_step(StepEvent::Stored { t_ns, tensor, site });
        }
        if dropped {
            self.log_step(StepEvent::Dropped { t_ns, tensor });
        }
        // The dtype's element size, read again only for another dtype.
        let dtype = born.kind & 0xff;
        if self.dtype_size.0 != dtype {
            self.dtype_size = (dtype, tensor_lifetime_report::model::dtype_size(born.dtype));
        }
        self.analysis.note_born_logged(
            (born.site, born.frame, born.iteration),
            born.bytes,
            born.shape,
            self.dtype_size.1,
            dropped,
        );
    }

    /// With a log: a `stored` event (the judgement reads none).
    #[inline]
    pub(super) fn stored(&mut self, t_ns: u64, tensor: u64, site: u32) {
        self.log_step(StepEvent::Stored { t_ns, tensor, site });
    }

    /// With a log: an `alias` event (the judgement reads none).
    #[inline]
    pub(super) fn alias(&mut self, tensor: u64, site: u32) {
        self.log_step(StepEvent::Alias { tensor, site });
    }

    pub(super) fn flush_log(&mut self) {
        if let Some(w) = self.log.as_mut() {
            let _ = w.flush();
        }
    }

    /// At an iteration end at `t_ns`: the log is flushed at every outermost one, and at
    /// an inner one when [`LOG_FLUSH_EVERY_NS`] have passed since the last flush there
    /// (a write per inner step would cost a rollout's step more than the step itself).
    fn flush_log_at_iteration_end(&mut self, t_ns: u64, outermost: bool) {
        if outermost || t_ns.saturating_sub(self.log_flushed_ns) >= LOG_FLUSH_EVERY_NS {
            self.log_flushed_ns = t_ns;
            self.flush_log();
        }
    }

    /// Declares the call paths made since the last declaration (before a summary refers
    /// to them): a `call_path` event each. Inlined: at most iteration ends none is new.
    #[inline]
    pub(super) fn declare_call_paths(&mut self) {
        let count = crate::call_path::count();
        if self.declared_paths < count {
            self.declare_paths_to(count);
        }
    }

    #[cold]
    fn declare_paths_to(&mut self, count: u32) {
        while self.declared_paths < count {
            self.declared_paths += 1;
            let id = self.declared_paths;
            let frames = crate::call_path::frames(id);
            self.emit(Event::CallPath { id, frames });
        }
    }

    /// A first probe's tensor dropped before its drain, without a log (a temporary).
    #[inline(always)]
    pub(super) fn born_dropped(
        &mut self,
        site: u32,
        frame: Option<u64>,
        iteration: u64,
        bytes: u64,
    ) {
        self.analysis
            .note_born_dropped(site, frame, iteration, bytes);
    }

    /// A first probe's tensor alive at its drain, without a log.
    #[inline(always)]
    pub(super) fn born_alive(&mut self, site: u32, frame: Option<u64>, iteration: u64, bytes: u64) {
        self.analysis.note_born_at(site, frame, iteration, bytes);
    }

    /// `dropped` records found dead; with a log, the `dropped` events of `ids` (counted
    /// as the saved log's events are, one each).
    pub(super) fn drops(&mut self, dropped: u64, ids: &mut Vec<u64>, t_ns: u64) {
        if self.logs() {
            return self.logged_drops(ids, t_ns);
        }
        for _ in 0..dropped {
            self.analysis.note_dropped();
        }
    }

    /// [`Sink::drops`] with a log.
    #[inline(never)]
    fn logged_drops(&mut self, ids: &mut Vec<u64>, t_ns: u64) {
        for tensor in ids.drain(..) {
            self.log_step(StepEvent::Dropped { t_ns, tensor });
            self.analysis.note_dropped();
        }
    }

    /// The end of iteration `iteration` of `frame` (at `t_ns`, after `duration_ns`): the
    /// sweep's counts (`live_tensors`, `live_bytes`), its summaries `sites` and the split
    /// by role `roles`. Both are handed back, their allocations kept for the next sweep.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn iteration_end(
        &mut self,
        (t_ns, duration_ns): (u64, u64),
        frame: u64,
        iteration: u64,
        (live_tensors, live_bytes): (u64, u64),
        sites: &mut Vec<SiteSweep>,
        roles: &mut Vec<RoleBytes>,
        outermost: bool,
    ) {
        if self.logs() {
            // The log lists the roles that have tensors; the analysis takes the same.
            roles.retain(|r| r.tensors + r.temporary_tensors > 0);
            self.log_step(StepEvent::IterationEnd {
                t_ns,
                frame,
                iteration,
                duration_ns,
                live_tensors,
                live_bytes,
                sites,
                roles,
            });
            self.flush_log_at_iteration_end(t_ns, outermost);
        }
        self.analysis
            .note_iteration_end(frame, iteration, live_tensors, live_bytes, sites, roles);
    }

    /// The sampled mode's interval now (`None`: exact), said at every drain: once it is a
    /// new interval, the judgement's survivors outside leak tests are estimates from a
    /// sample taken every `interval` bytes on average. Reports say so, and so does the
    /// log: its `sampling` event comes before the births the drain writes and the sweeps
    /// it scales.
    #[inline]
    pub(super) fn sampling(&mut self, interval: Option<u64>) {
        if let Some(interval) = interval {
            if self.analysis.sample_interval() != Some(interval) {
                self.sampling_from(interval);
            }
        }
    }

    #[cold]
    fn sampling_from(&mut self, interval: u64) {
        self.emit(Event::Sampling { interval });
    }

    /// The report of every loop now.
    pub(super) fn report(&self) -> Report {
        self.analysis.report()
    }

    /// The report of `session`'s loops (`None`: every loop).
    pub(super) fn report_for(&self, session: Option<u64>) -> Report {
        self.analysis.report_for(session)
    }

    /// Tensors born at `site` so far.
    pub(super) fn births(&self, site: u32) -> u64 {
        self.analysis.births(site)
    }

    /// What the judgement declared: sites, call paths, births per site, holders named.
    pub(super) fn catalog(&self) -> &Catalog {
        self.analysis.catalog()
    }

    /// Site `id` as reports name it.
    pub(super) fn site_ref(&self, id: u32) -> SiteRef {
        match self.analysis.site(id) {
            Some(info) => SiteRef::from(info),
            None => SiteRef::default(),
        }
    }

    /// The frames of call path `id` (declared).
    pub(super) fn call_path(&self, id: u32) -> Vec<CallFrame> {
        self.analysis.call_path(id).to_vec()
    }

    /// Prints / writes the report at the end of an outermost iteration of the loop frame
    /// `frame_id` at `site` (started at `started`) when the findings or where the
    /// forecast's growth was measured changed since `printed_last` (what it printed last,
    /// updated here), and at the end of an outermost loop (`loop_end`), with the forecasts
    /// from `devices`; sets the metrics. New findings are also `tracing` warnings.
    ///
    /// The report is built only when something reads it: at a loop's end, when the
    /// findings' keys changed, when a leak needs its forecast, when metrics are published.
    /// Otherwise the keys alone tell that nothing is to be printed.
    pub(super) fn auto_report(
        &mut self,
        config: &Config,
        (frame_id, site, started): (u64, &'static Site, Instant),
        printed_last: &mut Printed,
        devices: &Devices,
        iterations: u64,
        loop_end: bool,
    ) {
        self.outlook.iteration_end(frame_id, loop_end);
        let keys = self.analysis.finding_keys();
        let leaks = keys.iter().any(FindingKey::is_leak);
        let new_findings = keys != printed_last.findings;
        if !(loop_end || leaks || super::metrics::PUBLISHED || new_findings) {
            return;
        }
        let mut report = self.analysis.report();
        if leaks && !loop_end {
            let limit = config.memory_limit;
            let at = (frame_id, iterations);
            (self.outlook).forecast(&mut self.analysis, &mut report, at, devices, limit);
        }
        super::metrics::publish(&report, devices, loop_end);
        let growth_from = report.forecast.as_ref().map(|f| f.growth_from.clone());
        if !(new_findings || growth_from != printed_last.growth_from || loop_end) {
            return;
        }
        *printed_last = Printed {
            findings: keys,
            growth_from,
        };
        if new_findings {
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
                    estimated = report.estimated,
                    "tensor leak: `{}` at {}:{}",
                    f.site.label,
                    f.site.file,
                    f.site.line
                );
            }
        }
        write_json(config, &report);
        if config.report == ReportMode::Stderr && (!report.findings.is_empty() || loop_end) {
            let name = loop_label(site);
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
}

/// `'epoch (file:line)`, or `at file:line` for a loop without a label.
fn loop_label(site: &Site) -> String {
    if site.label.is_empty() {
        format!("at {}", site.location())
    } else {
        format!("{} ({})", site.label, site.location())
    }
}

/// Writes `report` as the JSON report (`TENSOR_LIFETIME_JSON`), when one is asked for.
pub(super) fn write_json(config: &Config, report: &Report) {
    if let Some(path) = &config.json {
        if let Err(e) = std::fs::write(path, report.to_json()) {
            eprintln!(
                "tensor-lifetime: cannot write {} (TENSOR_LIFETIME_JSON): {e}",
                path.display()
            );
        }
    }
}
