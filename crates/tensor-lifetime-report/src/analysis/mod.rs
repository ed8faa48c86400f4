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
//! The first two carry `growing` when the leak rule holds too; [`Finding::is_leak`](crate::report::Finding::is_leak) is
//! true for a `leak` and for a growing graph or view retention.
//!
//! When a nested loop frame ends, its growing sites wait for the enclosing frame's
//! iteration to end: if by then the site's survivors at that level make a new high, the
//! growth is confirmed; otherwise it was bounded by the enclosing iteration (per-epoch
//! accumulation released at its end, or state that an inner loop rebuilds to the same
//! height every iteration, such as per-parameter optimizer state) and is dropped, with
//! any earlier confirmation of it. A frame with no enclosing frame confirms at its end.
//! The warm-up iteration of the enclosing frame confirms nothing; but when an outermost
//! frame closes without having left its warm-up (a run of a single epoch), the nested
//! growth that outlived that iteration's end is confirmed then, its finding's hint saying
//! it was seen in one epoch (state filled in a first epoch and reused later would look
//! the same).
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

use crate::event::{Event, MemorySample, SiteInfo, SiteNote, SiteSweep};
use crate::fast_hash::{HashMap, SiteMap};
use crate::memory_findings::MemoryFindings;
use crate::report::{LoopSummary, Report};
use crate::roles::{CallFrame, MemoryByRole, RoleBytes, RoleHistory};
use std::collections::BTreeMap;

mod findings;
use findings::classify;

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
    /// Confirmed at the close of an outermost loop that never left its warm-up (a run of
    /// a single epoch): no later iteration could tell a leak from state filled once.
    single_epoch: bool,
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
    /// An outermost frame's nested growth that outlived a warm-up iteration's end:
    /// confirmed at its close if it never leaves the warm-up (see [`Analysis::loop_end`]).
    warmup_growth: Vec<(u32, Verdict)>,
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
    /// Live bytes by role at the latest iteration end and at the peak.
    memory_by_role: RoleHistory,
    /// Call paths by id ([`Event::CallPath`]).
    call_paths: HashMap<u32, Vec<CallFrame>>,
    /// The latest post-mortem ([`Event::PostMortem`]).
    post_mortem: Option<Box<crate::post_mortem::PostMortem>>,
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
            Event::PostMortem { post_mortem, .. } => {
                self.post_mortem = Some(post_mortem.clone());
            }
            Event::CallPath { id, frames } => {
                self.call_paths.insert(*id, frames.clone());
            }
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
                        warmup_growth: Vec::new(),
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
            // Its bytes go to the memory findings (applied above); live bytes come from sweeps.
            Event::Born { site, .. } => self.note_born(*site),
            Event::Dropped { .. } => self.note_dropped(),
            Event::IterationEnd {
                frame,
                iteration,
                live_tensors,
                live_bytes,
                sites,
                roles,
                ..
            } => {
                self.memory_by_role.note(roles);
                self.iteration_end(*frame, *iteration, *live_tensors, *live_bytes, sites)
            }
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
                let new_high = survivors > highs.get(&site).copied().unwrap_or(0);
                if iteration >= j.warmup && new_high {
                    verdict.running = false;
                    self.confirmed.insert(key, verdict);
                } else {
                    self.confirmed.remove(&key);
                    // Kept past the end of a warm-up iteration of an outermost loop: a
                    // leak if that loop never runs another iteration to tell.
                    if iteration < j.warmup && new_high && frame.parent.is_none() {
                        verdict.running = false;
                        verdict.single_epoch = true;
                        let loop_site = verdict.loop_site;
                        frame
                            .warmup_growth
                            .retain(|(s, v)| *s != site || v.loop_site != loop_site);
                        frame.warmup_growth.push((site, verdict));
                    }
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
        // An outermost loop that ended within its warm-up (one epoch): the growth of its
        // nested loops that outlived that iteration is confirmed now, said to be seen in
        // a single epoch (a cache filled once looks the same).
        if frame.parent.is_none() && frame.iterations <= j.warmup {
            for (site, verdict) in frame.warmup_growth {
                let key = (verdict.session, verdict.loop_site, site);
                self.confirmed.insert(key, verdict);
            }
        }
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
                single_epoch: false,
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
    /// `sites` are its sweep's survivors by site, `roles` its split by role (taken: it
    /// holds the previous iteration end's split afterwards, to be overwritten).
    pub fn note_iteration_end(
        &mut self,
        frame: u64,
        iteration: u64,
        live_tensors: u64,
        live_bytes: u64,
        sites: &[SiteSweep],
        roles: &mut Vec<RoleBytes>,
    ) {
        self.memory_findings.iteration_end(frame);
        self.memory_by_role.note_owned(roles);
        self.iteration_end(frame, iteration, live_tensors, live_bytes, sites);
    }

    /// Counts a live tensor born at `site`.
    ///
    /// Live bytes and their peak come only from sweeps ([`Event::IterationEnd`]), which
    /// count each storage once, so a birth's bytes are not counted here; the memory
    /// findings take them ([`Analysis::note_born_at`], or [`Analysis::apply`] with the
    /// [`Event::Born`]).
    #[inline]
    pub fn note_born(&mut self, site: u32) {
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
        self.note_born(site);
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

    /// The iterations of open loop frame `frame` that have ended (the index of the one
    /// running now), or `None` when no such frame is open.
    pub fn iterations_ended(&self, frame: u64) -> Option<u64> {
        self.frames.get(&frame).map(|f| f.iterations)
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
                        single_epoch: false,
                    },
                ));
            }
        }
        out
    }

    /// The frames of call path `id`, outermost first (empty when not declared).
    pub fn call_path(&self, id: u32) -> &[CallFrame] {
        self.call_paths.get(&id).map_or(&[], |v| v.as_slice())
    }

    /// Live bytes by role, now and at the peak.
    pub fn memory_by_role(&self) -> MemoryByRole {
        self.memory_by_role.memory_by_role()
    }

    /// Live tensors known now (from the latest sweep or born/dropped events).
    pub fn live_tensors(&self) -> u64 {
        self.live_tensors
    }

    /// The report as of the events applied so far.
    pub fn report(&self) -> Report {
        self.report_for(None)
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

#[cfg(test)]
mod tests;
