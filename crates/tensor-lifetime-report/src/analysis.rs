//! The judgement: which tensors outlive the iteration that made them, and whether that
//! is a leak.
//!
//! [`Analysis`] is a state machine over [`Event`]s. Its memory is bounded by the loop
//! frames open now and the sites seen, not by the length of the run: per (loop frame,
//! site) it keeps a [`Series`] summary of the survivor counts, never the whole history.
//!
//! # The rules
//!
//! At the end of iteration `i` of a loop frame the tracker reports, per site, how many
//! tensors born in that frame (or in loops nested in it) are still alive: the survivor
//! count `c_i`. Iteration 0 is the warm-up. A *growth event* is an iteration `i >= warmup`
//! whose count exceeds every earlier count of the frame. A site is **growing** (a leak) when
//!
//! 1. it has at least `k` growth events (`k = 3` by default), and
//! 2. the latest growth event is recent: no older than `max(k, 2 x the mean gap between
//!    growth events)` iterations, and
//! 3. the count now is above the highest count before the latest growth event (a bounded
//!    queue whose fill level reached a new high late, with thread timing, and is draining
//!    now, is not growing).
//!
//! A bounded cache or window fills (growth events) and then stays flat; once it has been
//! flat for that long it is not growing, whatever it did before. Gradient accumulation
//! that fills to the same height and is cleared makes no new maximum, so no growth events.
//! Nothing in the counts tells a window that is still filling from a leak: a window larger
//! than `k` iterations is reported as growing until it fills.
//!
//! Then, per site and frame, the finding is the first that applies:
//! `graph_retention` (a survivor's autograd graph holds other tensors), `view_retention`
//! (survivors are small views pinning storages `view_ratio` times larger), `leak`
//! (growing), `retained` (all survivors born in one iteration and kept for `k` more).
//! The first two carry `growing` when the leak rule holds too; [`Finding::is_leak`] is
//! true for a `leak` and for a growing graph or view retention.
//!
//! When a nested loop frame ends, its growing sites wait for the enclosing frame's
//! iteration to end: if by then the site's survivors at that level make a new high, the
//! growth is confirmed; otherwise it was bounded by the enclosing iteration (per-epoch
//! accumulation released at its end, or state that an inner loop rebuilds to the same
//! height every iteration, such as per-parameter optimizer state) and is dropped, with
//! any earlier confirmation of it. A frame with no enclosing frame confirms at its end.
//!
//! ## Bounded containers and construction loops
//!
//! Two facts the macro reads in the source ([`SiteNote`]) turn a growing site into
//! `retained` (growing, bounded: information, not a leak), named in its hint:
//!
//! - **Evicted**: the site's main holder (the holder of most of its survivors) is a store
//!   into a container that the tracked code also trims (`pop_front`, `pop`, `truncate`,
//!   `remove`, `drain`, `clear`, `retain`, `mem::take`, assigning a new container) on the
//!   same receiver text, in the same function or in another method of the same impl. A
//!   replay buffer that evicts when full grows until it fills and is not a leak even in a
//!   run too short to fill it; a container nothing trims (`examples/leaky_dataset`)
//!   stays a leak. A graph or view retention so held is reported, not as growing.
//! - **Product**: the frame belongs to a *construction loop*: an unlabeled loop that
//!   stores into a local its function returns (`heads.push(..)` ... `Ok(heads)`), and
//!   that runs outside any loop (or inside another construction loop). A labeled loop
//!   (`'epoch`, `'step`) names a phase of a run and is never one. What it builds is handed out (a
//!   model's layers), so its growth ends with the loop and is the function's value, not
//!   the run's. Survivors held by a store into another container stay judged as usual.
//!   The same loop run inside a training loop's iteration is judged as every nested loop
//!   is: its growth is confirmed per iteration of the enclosing loop, so a model rebuilt
//!   and kept every epoch is a leak.

use crate::event::{Event, HolderSpec, MemorySample, SiteInfo, SiteNote, SiteSweep};
use crate::fast_hash::{HashMap, SiteMap};
use crate::memory_findings::MemoryFindings;
use crate::report::{Finding, FindingKind, HolderRef, LoopSummary, Report, SiteRef};
use std::collections::BTreeMap;

/// The knobs of the judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judgement {
    /// Iterations at the start of each loop frame whose growth is not counted.
    pub warmup: u64,
    /// Growth events needed (and the recency window, at least) for a leak.
    pub k: u64,
    /// A survivor whose storage is at least this many times its own size is a view
    /// retention.
    pub view_ratio: u64,
}

impl Default for Judgement {
    fn default() -> Self {
        Judgement {
            warmup: 1,
            k: 3,
            view_ratio: 2,
        }
    }
}

/// Survivor counts of one site in one loop frame, summarized.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Highest count so far and the count at the latest sweep.
    max: u64,
    current: u64,
    /// Growth events and the iterations of the first and last one.
    growth_events: u64,
    first_growth: u64,
    last_growth: u64,
    /// The highest count before the latest growth event.
    plateau: u64,
    /// The first sweep seen, to compute bytes per iteration.
    first: SiteSweep,
    first_iteration: u64,
    /// The latest sweep of this site in this frame.
    last: SiteSweep,
}

impl Series {
    fn observe(&mut self, iteration: u64, sweep: Option<&SiteSweep>, j: &Judgement) {
        let count = sweep.map_or(0, |s| s.survivors);
        if count > self.max {
            if iteration >= j.warmup {
                if self.growth_events == 0 {
                    self.first_growth = iteration;
                }
                self.growth_events += 1;
                self.last_growth = iteration;
                self.plateau = self.max;
            }
            self.max = count;
        }
        self.current = count;
        match sweep {
            // `clone_from`: the holders' allocation is reused at every iteration end.
            Some(s) => self.last.clone_from(s),
            None => {
                self.last.survivors = 0;
                self.last.bytes = 0;
                self.last.holders.clear();
                self.last.graph_tensors = 0;
                self.last.graph_bytes = 0;
                self.last.view_bytes = 0;
                self.last.view_storage_bytes = 0;
            }
        }
    }

    /// The leak rule (see the module docs) at `iteration`.
    pub fn growing(&self, iteration: u64, j: &Judgement) -> bool {
        // A count back at or under the level it had before the latest growth event is
        // not growing: a bounded queue that filled late and is draining.
        if self.growth_events < j.k.max(1) || self.current <= self.plateau {
            return false;
        }
        // Saturating: a corrupt or hand-made log (iterations going backwards, near
        // u64::MAX) must not panic the reader (tests/judgement_regressions.rs).
        let mean_gap =
            self.last_growth.saturating_sub(self.first_growth) / (self.growth_events - 1).max(1);
        let window = j.k.max(mean_gap.saturating_mul(2));
        iteration.saturating_sub(self.last_growth) < window
    }
}

#[derive(Debug, Clone)]
struct Verdict {
    judgement: Judgement,
    session: u64,
    loop_site: u32,
    loop_name: String,
    depth: u32,
    iteration: u64,
    running: bool,
    series: Series,
    growing: bool,
    /// The returned local the loop (or its outermost loop) builds, for a construction
    /// loop (see the module docs).
    product: Option<String>,
}

#[derive(Debug)]
struct Frame {
    site: u32,
    name: String,
    parent: Option<u64>,
    depth: u32,
    session: u64,
    judgement: Judgement,
    iterations: u64,
    series: SeriesBySite,
    /// Growing sites of nested frames that ended, waiting for this frame's iteration end.
    pending: Vec<(u32, Verdict)>,
    /// The local this frame's loop builds (`Ok(heads)`), when it is not nested in a loop
    /// that builds nothing (see the module docs).
    product: Option<String>,
}

/// The analysis state. Feed it events with [`Analysis::apply`]; ask for a
/// [`Report`] at any time.
#[derive(Debug, Default)]
pub struct Analysis {
    judgement: Judgement,
    sites: HashMap<u32, SiteInfo>,
    frames: HashMap<u64, Frame>,
    loops: BTreeMap<u32, LoopSummary>,
    /// Confirmed verdicts of ended frames, by (session, loop site, tensor site).
    confirmed: BTreeMap<(u64, u32, u32), Verdict>,
    /// Tensors born per site.
    born: SiteMap<u64>,
    live_tensors: u64,
    live_bytes: u64,
    peak_live_bytes: u64,
    memory: BTreeMap<String, MemorySample>,
    /// Untracked growth and shape churn, judged from memory samples and births.
    memory_findings: MemoryFindings,
}

impl Analysis {
    pub fn new(judgement: Judgement) -> Self {
        Analysis {
            judgement,
            ..Analysis::default()
        }
    }

    /// The knobs in use.
    pub fn judgement(&self) -> Judgement {
        self.judgement
    }

    /// Site info by id, once declared.
    pub fn site(&self, id: u32) -> Option<&SiteInfo> {
        self.sites.get(&id)
    }

    /// Applies one event.
    pub fn apply(&mut self, event: &Event) {
        self.memory_findings.apply(event);
        match event {
            Event::Header { .. } | Event::Alias { .. } | Event::Stored { .. } => {}
            Event::Site { id, info } => {
                self.sites.insert(*id, info.clone());
            }
            Event::LoopStart {
                frame,
                site,
                name,
                parent,
                session,
                warmup,
                window,
                ..
            } => {
                let judgement = Judgement {
                    warmup: warmup.unwrap_or(self.judgement.warmup),
                    k: window.unwrap_or(self.judgement.k),
                    ..self.judgement
                };
                let depth = parent
                    .and_then(|p| self.frames.get(&p))
                    .map_or(0, |p| p.depth + 1);
                // A construction loop is one outside any loop, or inside one.
                let product = match parent {
                    None => match self.sites.get(site).and_then(|s| s.note.as_ref()) {
                        Some(SiteNote::Fills { holder }) => Some(holder.clone()),
                        _ => None,
                    },
                    Some(p) => self.frames.get(p).and_then(|p| p.product.clone()),
                };
                self.frames.insert(
                    *frame,
                    Frame {
                        site: *site,
                        name: name.clone(),
                        parent: *parent,
                        depth,
                        session: *session,
                        judgement,
                        iterations: 0,
                        series: SeriesBySite::default(),
                        pending: Vec::new(),
                        product,
                    },
                );
                let summary = self.loops.entry(*site).or_insert_with(|| LoopSummary {
                    name: name.clone(),
                    site: None,
                    runs: 0,
                    iterations: 0,
                    running: 0,
                });
                summary.runs += 1;
                summary.running += 1;
            }
            Event::Born { site, bytes, .. } => self.note_born(*site, *bytes),
            Event::Dropped { .. } => self.note_dropped(),
            Event::IterationEnd {
                frame,
                iteration,
                live_tensors,
                live_bytes,
                sites,
                ..
            } => self.iteration_end(*frame, *iteration, *live_tensors, *live_bytes, sites),
            Event::LoopEnd { frame, .. } => self.loop_end(*frame),
            Event::Memory { device, sample, .. } => {
                self.memory.insert(device.clone(), sample.clone());
            }
        }
    }

    fn iteration_end(
        &mut self,
        frame_id: u64,
        iteration: u64,
        live_tensors: u64,
        live_bytes: u64,
        sites: &[SiteSweep],
    ) {
        self.live_tensors = live_tensors;
        self.live_bytes = live_bytes;
        self.peak_live_bytes = self.peak_live_bytes.max(live_bytes);
        let Some(frame) = self.frames.get_mut(&frame_id) else {
            return;
        };
        let j = frame.judgement;
        frame.iterations = frame.iterations.max(iteration.saturating_add(1));
        let by_site = SiteLookup::new(sites);
        for s in sites {
            frame.series.insert_with(s.site, || Series {
                first_iteration: iteration,
                first: s.clone(),
                ..Series::default()
            });
        }
        // This level's highs before this iteration, for the growth of nested frames.
        let highs: Option<HashMap<u32, u64>> = (!frame.pending.is_empty()).then(|| {
            frame
                .pending
                .iter()
                .map(|(site, _)| (*site, frame.series.get(*site).map_or(0, |s| s.max)))
                .collect()
        });
        for (site, series) in frame.series.0.iter_mut() {
            series.observe(iteration, by_site.get(*site), &j);
        }
        // Growth of nested frames that ended: confirmed if it makes a new high at this
        // level too. Growth released by this iteration's end (per-epoch accumulation), or
        // rebuilt to the same height each iteration (state that an inner loop over the
        // parameters replaces every step), is bounded: not confirmed, and an earlier
        // confirmation of it is withdrawn.
        if let Some(highs) = highs {
            for (site, mut verdict) in std::mem::take(&mut frame.pending) {
                let key = (verdict.session, verdict.loop_site, site);
                let survivors = by_site.get(site).map_or(0, |s| s.survivors);
                // Not in the warm-up iteration: state created once, lazily, in the first
                // iteration (optimizer buffers) makes its only high there.
                if iteration >= j.warmup && survivors > highs.get(&site).copied().unwrap_or(0) {
                    verdict.running = false;
                    self.confirmed.insert(key, verdict);
                } else {
                    self.confirmed.remove(&key);
                }
            }
        }
        if let Some(summary) = self.loops.get_mut(&frame.site) {
            summary.iterations += 1;
        }
    }

    fn loop_end(&mut self, frame_id: u64) {
        let Some(frame) = self.frames.remove(&frame_id) else {
            return;
        };
        if let Some(summary) = self.loops.get_mut(&frame.site) {
            summary.running = summary.running.saturating_sub(1);
        }
        let j = frame.judgement;
        let last_iteration = frame.iterations.saturating_sub(1);
        let parent = frame.parent.and_then(|p| self.frames.get_mut(&p));
        let mut parent = parent;
        for (site, series) in frame.series.0 {
            let growing = series.growing(last_iteration, &j);
            let verdict = Verdict {
                judgement: j,
                session: frame.session,
                loop_site: frame.site,
                loop_name: frame.name.clone(),
                depth: frame.depth,
                iteration: last_iteration,
                running: false,
                growing,
                series,
                product: frame.product.clone(),
            };
            let key = (frame.session, frame.site, site);
            if classify(&verdict, &j, None).is_none() {
                self.confirmed.remove(&key);
                continue;
            }
            match parent.as_deref_mut() {
                Some(p) if growing => p.pending.push((site, verdict)),
                _ => {
                    self.confirmed.insert(key, verdict);
                }
            }
        }
    }

    /// An iteration end (what [`Event::IterationEnd`] does, without building the event):
    /// `sites` are its sweep's survivors by site.
    pub fn note_iteration_end(
        &mut self,
        frame: u64,
        iteration: u64,
        live_tensors: u64,
        live_bytes: u64,
        sites: &[SiteSweep],
    ) {
        self.memory_findings.iteration_end(frame);
        self.iteration_end(frame, iteration, live_tensors, live_bytes, sites);
    }

    /// Counts a tensor born at `site` (what [`Event::Born`] does, without the event).
    ///
    /// Live bytes and their peak come only from sweeps ([`Event::IterationEnd`]), which
    /// count each storage once; `bytes` is not added here.
    #[inline]
    pub fn note_born(&mut self, site: u32, _bytes: u64) {
        *self.born.get_or_default(site) += 1;
        // Saturating: `live_tensors` comes from the log's sweeps, which a corrupt log may
        // set to anything.
        self.live_tensors = self.live_tensors.saturating_add(1);
    }

    /// A birth with what the memory findings need (what [`Event::Born`] does, without
    /// building the event): `bytes` is the tensor's own size
    /// ([`crate::memory_findings::own_bytes`]).
    #[inline]
    pub fn note_born_at(&mut self, site: u32, frame: Option<u64>, iteration: u64, bytes: u64) {
        self.note_born(site, bytes);
        self.memory_findings
            .born(site, frame, iteration, bytes, None);
    }

    /// A birth and its drop together ([`Analysis::note_born_at`] then
    /// [`Analysis::note_dropped`]), for a tensor found dead when first seen.
    #[inline]
    pub fn note_born_dropped(&mut self, site: u32, frame: Option<u64>, iteration: u64, bytes: u64) {
        *self.born.get_or_default(site) += 1;
        self.memory_findings
            .born(site, frame, iteration, bytes, None);
    }

    /// Tensors born at `site` so far.
    pub fn births(&self, site: u32) -> u64 {
        self.born.get(site).copied().unwrap_or(0)
    }

    /// Counts a tensor found dropped (what [`Event::Dropped`] does).
    #[inline]
    pub fn note_dropped(&mut self) {
        self.live_tensors = self.live_tensors.saturating_sub(1);
    }

    fn frame_verdicts(&self, session: Option<u64>) -> Vec<(u32, Verdict)> {
        let mut out = Vec::new();
        for frame in self.frames.values() {
            if session.is_some_and(|s| frame.session != s) {
                continue;
            }
            let iteration = frame.iterations.saturating_sub(1);
            let j = frame.judgement;
            for (site, series) in &frame.series.0 {
                out.push((
                    *site,
                    Verdict {
                        session: frame.session,
                        loop_site: frame.site,
                        loop_name: frame.name.clone(),
                        depth: frame.depth,
                        iteration,
                        running: true,
                        growing: series.growing(iteration, &j),
                        judgement: j,
                        series: series.clone(),
                        product: frame.product.clone(),
                    },
                ));
            }
        }
        out
    }

    /// Live tensors known now (from the latest sweep or born/dropped events).
    pub fn live_tensors(&self) -> u64 {
        self.live_tensors
    }

    /// The report as of the events applied so far.
    pub fn report(&self) -> Report {
        self.report_for(None)
    }

    /// The report of the loops of one session (a leak test), or of all.
    pub fn report_for(&self, session: Option<u64>) -> Report {
        let mut candidates: Vec<(u32, Verdict)> = self.frame_verdicts(session);
        for ((s, _, site), verdict) in &self.confirmed {
            if session.is_none_or(|want| want == *s) {
                candidates.push((*site, verdict.clone()));
            }
        }
        // One finding per site: the most serious kind, then the outermost loop.
        let mut best: BTreeMap<u32, (FindingKind, Verdict, Option<Bound>)> = BTreeMap::new();
        for (site, mut verdict) in candidates {
            let bound = self.bound(&verdict);
            let Some(kind) = classify(&verdict, &verdict.judgement, bound.as_ref()) else {
                continue;
            };
            // A bounded graph or view retention is not growing without end.
            if bound.is_some() && kind != FindingKind::Retained {
                verdict.growing = false;
            }
            let better = match best.get(&site) {
                None => true,
                Some((k, v, _)) => {
                    let rank = |k: FindingKind, v: &Verdict| {
                        (
                            !(v.growing || k == FindingKind::Leak),
                            k.severity_rank(),
                            v.depth,
                            !v.running,
                        )
                    };
                    rank(kind, &verdict) < rank(*k, v)
                }
            };
            if better {
                best.insert(site, (kind, verdict, bound));
            }
        }
        // Growth held by the graph of a bounded site is bounded with it (the inputs of a
        // capped optimizer history's differences).
        let bounded_roots: BTreeMap<u32, Bound> = best
            .iter()
            .filter_map(|(site, (_, _, b))| b.clone().map(|b| (*site, b)))
            .collect();
        for (kind, verdict, bound) in best.values_mut() {
            if bound.is_some() {
                continue;
            }
            let top = verdict.series.last.holders.first().map(|h| h.holder);
            if let Some(HolderSpec::Graph { site: root }) = top {
                if let Some(b) = bounded_roots.get(&root) {
                    *bound = Some(b.clone());
                    if *kind == FindingKind::Leak {
                        *kind = FindingKind::Retained;
                    } else {
                        verdict.growing = false;
                    }
                }
            }
        }
        // Leaks held only by the graph of a reported graph retention fold into it.
        let roots: Vec<u32> = best
            .iter()
            .filter(|(_, (k, _, _))| *k == FindingKind::GraphRetention)
            .map(|(s, _)| *s)
            .collect();
        let mut held: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        best.retain(|site, (kind, verdict, _)| {
            if *kind == FindingKind::GraphRetention || verdict.series.last.holders.is_empty() {
                return true;
            }
            let root = verdict.series.last.holders.iter().try_fold(None, |acc, h| {
                match (&h.holder, acc) {
                    (HolderSpec::Graph { site: r }, None) if roots.contains(r) && r != site => {
                        Ok(Some(*r))
                    }
                    (HolderSpec::Graph { site: r }, Some(prev)) if *r == prev => Ok(Some(prev)),
                    _ => Err(()),
                }
            });
            match root {
                Ok(Some(r)) => {
                    held.entry(r).or_default().push(*site);
                    false
                }
                _ => true,
            }
        });
        let mut findings: Vec<Finding> = best
            .into_iter()
            .map(|(site, (kind, verdict, bound))| {
                let held_sites = held
                    .get(&site)
                    .map(|v| v.iter().map(|s| self.site_ref(*s)).collect())
                    .unwrap_or_default();
                self.finding(site, kind, &verdict, held_sites, bound.as_ref())
            })
            .collect();
        if session.is_none() {
            findings.extend(self.memory_findings.findings(|id| self.sites.get(&id)));
        }
        findings.sort_by(|a, b| {
            (
                !a.is_leak(),
                a.kind.severity_rank(),
                std::cmp::Reverse(a.bytes),
            )
                .cmp(&(
                    !b.is_leak(),
                    b.kind.severity_rank(),
                    std::cmp::Reverse(b.bytes),
                ))
                .then_with(|| (&a.site.file, a.site.line).cmp(&(&b.site.file, b.site.line)))
        });
        let loops = self
            .loops
            .iter()
            .map(|(site, l)| LoopSummary {
                site: Some(self.site_ref(*site)),
                ..l.clone()
            })
            .collect();
        Report {
            findings,
            loops,
            live_tensors: self.live_tensors,
            live_bytes: self.live_bytes,
            peak_live_bytes: self.peak_live_bytes,
            sites_seen: self.born.len() as u64,
            memory: self.memory.clone(),
        }
    }

    /// Whether a verdict's survivors are bounded: their main holder is a store into a
    /// container the code trims, or they are a construction loop's product (and not held
    /// by a store into something else).
    fn bound(&self, v: &Verdict) -> Option<Bound> {
        let top = v.series.last.holders.first().map(|h| h.holder);
        let store = match top {
            Some(HolderSpec::Store { site }) => self.sites.get(&site),
            _ => None,
        };
        if let Some(info) = store {
            if let Some(SiteNote::Evicted { line, call }) = &info.note {
                return Some(Bound::Evicted {
                    holder: info.label.clone(),
                    file: info.file.clone(),
                    line: *line,
                    call: call.clone(),
                });
            }
        }
        let holder = v.product.as_ref()?;
        match store {
            Some(info) if info.label != *holder => None,
            _ => Some(Bound::Product {
                holder: holder.clone(),
            }),
        }
    }

    fn site_ref(&self, id: u32) -> SiteRef {
        match self.sites.get(&id) {
            Some(info) => SiteRef::from(info),
            None => SiteRef {
                file: "<unknown>".into(),
                line: 0,
                column: 0,
                function: String::new(),
                label: format!("site #{id}"),
            },
        }
    }

    fn holder_ref(&self, h: &HolderSpec, count: u64) -> HolderRef {
        let (kind, site) = match h {
            HolderSpec::Store { site } => ("store", Some(*site)),
            HolderSpec::Graph { site } => ("graph", Some(*site)),
            HolderSpec::View { site } => ("view", Some(*site)),
            HolderSpec::Unknown => ("unknown", None),
        };
        let site = site.map(|s| self.site_ref(s));
        HolderRef {
            kind: kind.to_string(),
            file: site.as_ref().map(|s| s.file.clone()),
            line: site.as_ref().map(|s| s.line),
            label: site.map(|s| s.label),
            count,
        }
    }

    fn finding(
        &self,
        site: u32,
        kind: FindingKind,
        v: &Verdict,
        held_sites: Vec<SiteRef>,
        bound: Option<&Bound>,
    ) -> Finding {
        let last = &v.series.last;
        let span = v.iteration.saturating_sub(v.series.first_iteration).max(1);
        let held = |s: &SiteSweep| match kind {
            FindingKind::GraphRetention => s.graph_bytes.max(s.bytes),
            FindingKind::ViewRetention => s.view_storage_bytes.max(s.bytes),
            _ => s.bytes,
        };
        let bytes = held(last);
        let bytes_per_iteration = if v.growing || kind == FindingKind::Leak {
            bytes.saturating_sub(held(&v.series.first)) / span
        } else {
            0
        };
        Finding {
            kind,
            growing: v.growing,
            site: self.site_ref(site),
            loop_name: v.loop_name.clone(),
            loop_site: Some(self.site_ref(v.loop_site)),
            iteration: v.iteration,
            survivors: last.survivors,
            iterations: last.iterations,
            first_iteration: last.first_iteration,
            bytes,
            bytes_per_iteration,
            refcount: last.refcount,
            holders: last
                .holders
                .iter()
                .map(|h| self.holder_ref(&h.holder, h.count))
                .collect(),
            graph_tensors: last.graph_tensors,
            graph_bytes: last.graph_bytes,
            view_bytes: last.view_bytes,
            view_storage_bytes: last.view_storage_bytes,
            held_sites,
            hint: match bound {
                Some(bound) => bound.hint(),
                None => kind.hint().to_string(),
            },
        }
    }
}

/// An iteration end's summaries by site. The tracker writes them sorted by site (looked
/// up by binary search, nothing built); a log written otherwise gets a map.
/// The series of one frame, sorted by site: an iteration end walks them all, and finds or
/// adds a handful by binary search (no hashing on the per-iteration path).
#[derive(Debug, Default)]
struct SeriesBySite(Vec<(u32, Series)>);

impl SeriesBySite {
    fn get(&self, site: u32) -> Option<&Series> {
        self.0
            .binary_search_by_key(&site, |(s, _)| *s)
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Adds `site`'s series made by `make` if it has none.
    fn insert_with(&mut self, site: u32, make: impl FnOnce() -> Series) {
        if let Err(i) = self.0.binary_search_by_key(&site, |(s, _)| *s) {
            self.0.insert(i, (site, make()));
        }
    }
}

enum SiteLookup<'a> {
    Sorted(&'a [SiteSweep]),
    Map(HashMap<u32, &'a SiteSweep>),
}

impl<'a> SiteLookup<'a> {
    fn new(sites: &'a [SiteSweep]) -> Self {
        if sites.is_sorted_by_key(|s| s.site) {
            SiteLookup::Sorted(sites)
        } else {
            SiteLookup::Map(sites.iter().map(|s| (s.site, s)).collect())
        }
    }

    fn get(&self, site: u32) -> Option<&'a SiteSweep> {
        match self {
            SiteLookup::Sorted(sites) => sites
                .binary_search_by_key(&site, |s| s.site)
                .ok()
                .map(|i| &sites[i]),
            SiteLookup::Map(map) => map.get(&site).copied(),
        }
    }
}

/// Why a growing site is bounded (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    /// Held by a store into a container the code trims at `line` with `call`.
    Evicted {
        holder: String,
        file: String,
        line: u32,
        call: String,
    },
    /// Built by a construction loop into `holder`, which its function returns.
    Product { holder: String },
}

impl Bound {
    fn hint(&self) -> String {
        match self {
            Bound::Evicted {
                holder,
                file,
                line,
                call,
            } => format!(
                "bounded: `{holder}` is trimmed at {file}:{line} (`{call}`); it grows until it fills, then stays flat"
            ),
            Bound::Product { holder } => format!(
                "built by a construction loop into `{holder}`, which its function returns (model state, not a leak)"
            ),
        }
    }
}

fn classify(v: &Verdict, j: &Judgement, bound: Option<&Bound>) -> Option<FindingKind> {
    let last = &v.series.last;
    if last.survivors == 0 {
        return None;
    }
    if last.graph_tensors > 0 {
        return Some(FindingKind::GraphRetention);
    }
    if last.view_bytes > 0 && last.view_storage_bytes >= j.view_ratio * last.view_bytes {
        return Some(FindingKind::ViewRetention);
    }
    if v.growing {
        return Some(match bound {
            Some(_) => FindingKind::Retained,
            None => FindingKind::Leak,
        });
    }
    if last.iterations == 1 && v.iteration.saturating_sub(last.last_iteration) >= j.k {
        return Some(FindingKind::Retained);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{HolderCount, SiteKind};

    fn site(id: u32, label: &str) -> Event {
        Event::Site {
            id,
            info: SiteInfo {
                file: "src/train.rs".into(),
                line: 10 + id,
                column: 5,
                function: "train".into(),
                label: label.into(),
                kind: SiteKind::Binding,
                note: None,
            },
        }
    }

    fn start(frame: u64, site: u32, parent: Option<u64>) -> Event {
        Event::LoopStart {
            t_ns: 0,
            frame,
            site,
            name: format!("loop{site}"),
            parent,
            parent_iteration: parent.map(|_| 0),
            thread: 1,
            session: 0,
            warmup: None,
            window: None,
        }
    }

    fn sweep(site: u32, survivors: u64, first: u64, last: u64) -> SiteSweep {
        SiteSweep {
            site,
            survivors,
            bytes: survivors * 1024,
            iterations: last - first + 1,
            first_iteration: first,
            last_iteration: last,
            refcount: 1,
            ..SiteSweep::default()
        }
    }

    fn end(frame: u64, iteration: u64, sites: Vec<SiteSweep>) -> Event {
        Event::IterationEnd {
            t_ns: 0,
            frame,
            iteration,
            duration_ns: 0,
            live_tensors: 0,
            live_bytes: 0,
            sites,
        }
    }

    /// Runs one loop frame whose site 1 has `counts[i]` survivors after iteration `i`.
    fn run(counts: &[u64]) -> Analysis {
        let mut a = Analysis::default();
        a.apply(&site(0, "'loop"));
        a.apply(&site(1, "t"));
        a.apply(&start(1, 0, None));
        for (i, &c) in counts.iter().enumerate() {
            let sites = if c > 0 {
                vec![sweep(1, c, 0, i as u64)]
            } else {
                vec![]
            };
            a.apply(&end(1, i as u64, sites));
        }
        a
    }

    fn kinds(a: &Analysis) -> Vec<(FindingKind, bool)> {
        a.report()
            .findings
            .iter()
            .map(|f| (f.kind, f.is_leak()))
            .collect()
    }

    #[test]
    fn steady_growth_is_a_leak_after_warmup_and_k() {
        assert!(kinds(&run(&[1, 2, 3])).is_empty(), "only 2 growth events");
        let a = run(&[1, 2, 3, 4]);
        assert_eq!(kinds(&a), vec![(FindingKind::Leak, true)]);
        let f = &a.report().findings[0];
        assert_eq!(f.survivors, 4);
        assert_eq!(f.bytes, 4096);
        assert_eq!(f.bytes_per_iteration, 1024);
    }

    #[test]
    fn sparse_growth_is_still_a_leak() {
        let a = run(&[1, 1, 2, 2, 3, 3, 4, 4, 5, 5]);
        assert_eq!(kinds(&a), vec![(FindingKind::Leak, true)]);
    }

    #[test]
    fn bounded_window_is_not_a_leak_once_flat() {
        let a = run(&[1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5]);
        assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
        // While it fills it cannot be told from a leak.
        assert_eq!(
            kinds(&run(&[1, 2, 3, 4, 5])),
            vec![(FindingKind::Leak, true)]
        );
    }

    #[test]
    fn accumulate_then_clear_is_not_a_leak() {
        let a = run(&[1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
        assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
    }

    #[test]
    fn state_created_once_is_retained_not_leak() {
        let mut a = Analysis::default();
        a.apply(&site(0, "'loop"));
        a.apply(&site(1, "m"));
        a.apply(&start(1, 0, None));
        for i in 0..6 {
            a.apply(&end(1, i, vec![sweep(1, 4, 0, 0)]));
        }
        assert_eq!(kinds(&a), vec![(FindingKind::Retained, false)]);
    }

    #[test]
    fn loop_carried_value_is_no_finding() {
        let mut a = Analysis::default();
        a.apply(&site(0, "'loop"));
        a.apply(&site(1, "prev"));
        a.apply(&start(1, 0, None));
        for i in 0..10 {
            a.apply(&end(1, i, vec![sweep(1, 1, i, i)]));
        }
        assert!(kinds(&a).is_empty());
    }

    #[test]
    fn per_epoch_accumulation_in_nested_loop_is_dropped() {
        let mut a = Analysis::default();
        a.apply(&site(0, "'epoch"));
        a.apply(&site(2, "'batch"));
        a.apply(&site(1, "pred"));
        a.apply(&start(1, 0, None));
        for epoch in 0..2u64 {
            let inner = 10 + epoch;
            a.apply(&start(inner, 2, Some(1)));
            for b in 0..8 {
                a.apply(&end(inner, b, vec![sweep(1, b + 1, 0, b)]));
            }
            assert_eq!(
                kinds(&a),
                vec![(FindingKind::Leak, true)],
                "growing mid-epoch"
            );
            a.apply(&Event::LoopEnd {
                t_ns: 0,
                frame: inner,
                iterations: 8,
            });
            // The epoch iteration ends after the predictions were dropped.
            a.apply(&end(1, epoch, vec![]));
            assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
        }
    }

    #[test]
    fn nested_growth_that_survives_the_epoch_is_confirmed_at_outermost_loop() {
        let mut a = Analysis::default();
        a.apply(&site(0, "'epoch"));
        a.apply(&site(2, "'batch"));
        a.apply(&site(1, "t"));
        a.apply(&start(1, 0, None));
        for epoch in 0..2u64 {
            let inner = 10 + epoch;
            a.apply(&start(inner, 2, Some(1)));
            for b in 0..8 {
                a.apply(&end(inner, b, vec![sweep(1, b + 1, 0, b)]));
            }
            a.apply(&Event::LoopEnd {
                t_ns: 0,
                frame: inner,
                iterations: 8,
            });
            a.apply(&end(1, epoch, vec![sweep(1, 8 * (epoch + 1), 0, epoch)]));
            if epoch == 0 {
                // The warm-up epoch confirms nothing (lazily created state grows there).
                assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
            }
        }
        let r = a.report();
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].kind, FindingKind::Leak);
        assert_eq!(r.findings[0].loop_name, "loop2");
    }

    #[test]
    fn graph_held_leaks_fold_into_the_graph_retention() {
        let mut a = Analysis::default();
        a.apply(&site(0, "'loop"));
        a.apply(&site(1, "total"));
        a.apply(&site(2, "loss"));
        a.apply(&start(1, 0, None));
        for i in 0..5u64 {
            let mut total = sweep(1, i + 1, 0, i);
            total.graph_tensors = 3 * (i + 1);
            total.graph_bytes = 4096 * (i + 1);
            let mut loss = sweep(2, i + 1, 0, i);
            loss.holders = vec![HolderCount {
                holder: HolderSpec::Graph { site: 1 },
                count: i + 1,
            }];
            a.apply(&end(1, i, vec![total, loss]));
        }
        let r = a.report();
        assert_eq!(r.findings.len(), 1, "{r}");
        let f = &r.findings[0];
        assert_eq!(f.kind, FindingKind::GraphRetention);
        assert!(f.is_leak());
        assert_eq!(f.graph_tensors, 15);
        assert_eq!(f.bytes, 5 * 4096);
        assert_eq!(f.held_sites.len(), 1);
        assert_eq!(f.held_sites[0].label, "loss");
    }

    #[test]
    fn small_views_of_large_storages_are_view_retention() {
        let mut a = Analysis::default();
        a.apply(&site(0, "'loop"));
        a.apply(&site(1, "row"));
        a.apply(&start(1, 0, None));
        for i in 0..5u64 {
            let mut s = sweep(1, i + 1, 0, i);
            s.view_bytes = 16 * (i + 1);
            s.view_storage_bytes = 4096 * (i + 1);
            s.bytes = s.view_storage_bytes;
            a.apply(&end(1, i, vec![s]));
        }
        let r = a.report();
        assert_eq!(r.findings[0].kind, FindingKind::ViewRetention);
        assert!(r.findings[0].is_leak());
        assert_eq!(r.findings[0].bytes, 5 * 4096);
    }
}
