//! The judgement: which tensors outlive the iteration that made them, and whether that
//! is a leak.
//!
//! [`Analysis`] is a state machine over [`Input`]s (an [`Event`] or the tracker's
//! per-step calls make one). Its memory is bounded by the loop
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
//! A site whose count does not grow may still grow in **bytes**: each iteration replaces
//! its survivors by larger ones (a KV cache grown by `Tensor::cat` and never reset). The
//! same rule runs on the bytes at iteration ends, counting as growth events only the new
//! highs of iterations whose count made none, and asking them to be steady (one
//! iteration in two at least, [`growth`]): that is a `growing_tensor`, a leak.
//!
//! Then, per site and frame, the finding is the first that applies:
//! `graph_retention` (a survivor's autograd graph holds other tensors), `view_retention`
//! (survivors are small views pinning storages `view_ratio` times larger), `leak`
//! (growing), `growing_tensor` (growing in bytes only), `retained` (all survivors born in
//! one iteration and kept for `k` more).
//! The first two carry `growing` when the leak rule holds too; [`Finding::is_leak`](crate::report::Finding::is_leak) is
//! true for a `leak` and for a growing graph or view retention.
//!
//! When a nested loop frame ends, its growing sites wait for the enclosing frame's
//! iteration to end: if by then the site's survivors at that level make a new high (in
//! bytes too, for a growth in bytes), the
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
//! Two facts the macro reads in the source ([`SiteNote`](crate::model::SiteNote)) turn a growing site into
//! `retained` (growing, bounded: information, not a leak), named in its hint:
//!
//! - **Evicted**: the site's main holder (the holder of most of its survivors) is a store
//!   into a container that the tracked code also trims (`pop_front`, `pop`, `truncate`,
//!   `remove`, `drain`, `clear`, `retain`, `mem::take`, assigning a new container) on the
//!   same receiver text, in the same function or in another method of the same impl. A
//!   replay buffer that evicts when full grows until it fills and is not a leak even in a
//!   run too short to fill it; a container nothing trims (`examples/leaky_dataset`)
//!   stays a leak. A graph or view retention so held is reported, not as growing.
//! - **Product**: the frame belongs to a *construction loop*: an unlabeled loop that puts
//!   values into what its function hands out, and that runs outside any loop (or inside
//!   another construction loop). What a function hands out is a local at a value position
//!   of what it returns (`Ok(heads)`, `Self { blocks, .. }`), or one moved into the value
//!   of a `let` binding such a local (`let model = Self { weights }; Ok(model)`); a loop
//!   puts values into it by a storing call on it or on a field of it (`heads.push(..)`),
//!   or by a builder step, the local assigned its own method call with a part made in
//!   that call (`blocks = blocks.add(Block::new(..)?)`; adding a value made before the
//!   call is an accumulation). A labeled loop
//!   (`'epoch`, `'step`) names a phase of a run and is never one. What it builds is handed out (a
//!   model's layers), so its growth ends with the loop and is the function's value, not
//!   the run's. Survivors held by a store into another container stay judged as usual.
//!   The same loop run inside a training loop's iteration is judged as every nested loop
//!   is: its growth is confirmed per iteration of the enclosing loop, so a model rebuilt
//!   and kept every epoch is a leak.

use crate::event::Event;
use crate::model::{DeviceRoom, MemorySample, SiteInfo, SiteSweep};
use crate::post_mortem::PostMortem;
use crate::report::{Finding, FindingKey, LoopSummary, Report};
use crate::roles::{CallFrame, MemoryByRole, RoleBytes, RoleHistory};
use std::collections::BTreeMap;

mod by_site;
mod catalog;
mod findings;
pub mod forecast;
mod frames;
pub mod growth;
mod input;
mod judgement;
pub mod memory_findings;
pub mod ranks;
mod series;
mod verdict;

pub use catalog::{Births, Catalog};
pub use input::{Input, Roles};
pub use judgement::Judgement;
pub use series::Series;

use frames::Frames;
use memory_findings::MemoryFindings;

/// The analysis state. Feed it events with [`Analysis::apply`] (or inputs with
/// [`Analysis::step`]); ask for a [`Report`] at any time.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Sites, call paths and births per site.
    catalog: Catalog,
    /// The loop frames, open and ended, and their verdicts.
    frames: Frames,
    live_tensors: u64,
    live_bytes: u64,
    peak_live_bytes: u64,
    memory: BTreeMap<String, MemorySample>,
    /// Untracked growth and shape churn, judged from memory samples and births.
    memory_findings: MemoryFindings,
    /// Live bytes by role at the latest iteration end and at the peak.
    memory_by_role: RoleHistory,
    /// The latest post-mortem ([`Event::PostMortem`]).
    post_mortem: Option<Box<PostMortem>>,
    /// The sampled mode's interval, when the figures of loops outside leak-test sessions
    /// are estimates ([`Analysis::set_sample_interval`]).
    sample_interval: Option<u64>,
    /// What the device has left and the pace, for the leaks' forecasts.
    outlook: Option<forecast::Outlook>,
}

impl Analysis {
    pub fn new(judgement: Judgement) -> Self {
        Analysis {
            frames: Frames::new(judgement),
            ..Analysis::default()
        }
    }

    /// Says that the survivors of loops outside leak-test sessions are a sample taken
    /// every `interval` bytes on average, their counts and bytes scaled by the inverse
    /// probability (`None`: exact): the reports of every loop say they are estimates.
    pub fn set_sample_interval(&mut self, interval: Option<u64>) {
        self.sample_interval = interval;
    }

    /// The sampled mode's interval the figures are estimated at, once an input said so.
    pub fn sample_interval(&self) -> Option<u64> {
        self.sample_interval
    }

    /// The knobs in use.
    pub fn judgement(&self) -> Judgement {
        self.frames.judgement()
    }

    /// What the events declared: sites, call paths, births per site.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Applies one event (the events the judgement does not read change nothing).
    pub fn apply(&mut self, event: &Event) {
        if let Some(input) = Input::of(event) {
            self.step(input);
        }
    }

    /// The state machine's one entry: every event and every call of the tracker comes
    /// here.
    ///
    /// Inlined always: the tracker's calls make an input of a known kind, and the match
    /// on it (here and in the memory findings) then folds away, so a birth or a drop
    /// costs what its own bookkeeping does (measured: a non-inlined entry made a drop
    /// 25 times and a birth 2.5 times slower).
    #[inline(always)]
    pub fn step(&mut self, input: Input<'_>) {
        self.memory_findings.step(&input);
        match input {
            Input::Site { id, info } => self.catalog.declare_site(id, info),
            Input::CallPath { id, frames } => self.catalog.declare_call_path(id, frames),
            Input::Sampling { interval } => self.sample_interval = Some(interval),
            Input::PostMortem(post_mortem) => {
                self.post_mortem = Some(Box::new(post_mortem.clone()));
            }
            Input::LoopStart {
                frame,
                site,
                name,
                parent,
                session,
                warmup,
                window,
            } => {
                let note = self.catalog.site(site).and_then(|s| s.note.as_ref());
                let frames = &mut self.frames;
                frames.start(frame, site, name, parent, session, warmup, window, note);
            }
            // Its bytes go to the memory findings (above) and the births per site; live
            // bytes come from sweeps, which count each storage once.
            Input::Born {
                site,
                bytes,
                dropped,
                ..
            } => {
                match self.sample_interval {
                    None => self.catalog.born(site, bytes),
                    Some(interval) => {
                        let weight = crate::model::sample_weight(interval, bytes);
                        self.catalog.born_sampled(site, bytes, weight);
                    }
                }
                if !dropped {
                    // Saturating: `live_tensors` comes from the log's sweeps, which a
                    // corrupt log may set to anything.
                    self.live_tensors = self.live_tensors.saturating_add(1);
                }
            }
            Input::Dropped => self.live_tensors = self.live_tensors.saturating_sub(1),
            Input::IterationEnd {
                frame,
                iteration,
                live_tensors,
                live_bytes,
                sites,
                roles,
            } => {
                match roles {
                    Roles::Copied(roles) => self.memory_by_role.note(roles),
                    Roles::Taken(roles) => self.memory_by_role.note_owned(roles),
                }
                self.live_tensors = live_tensors;
                self.live_bytes = live_bytes;
                self.peak_live_bytes = self.peak_live_bytes.max(live_bytes);
                self.frames.iteration_end(frame, iteration, sites);
            }
            Input::LoopEnd { frame, iterations } => self.frames.end(frame, iterations),
            Input::Memory { device, sample } => {
                self.memory.insert(device.to_string(), sample.clone());
            }
        }
    }

    /// An iteration end, without building the event ([`Input::IterationEnd`]): `sites`
    /// are its sweep's survivors by site, `roles` its split by role (taken: it holds the
    /// previous iteration end's split afterwards, to be overwritten).
    pub fn note_iteration_end(
        &mut self,
        frame: u64,
        iteration: u64,
        live_tensors: u64,
        live_bytes: u64,
        sites: &[SiteSweep],
        roles: &mut Vec<RoleBytes>,
    ) {
        self.step(Input::IterationEnd {
            frame,
            iteration,
            live_tensors,
            live_bytes,
            sites,
            roles: Roles::Taken(roles),
        });
    }

    /// A birth, without building the event ([`Input::Born`]): `bytes` is the tensor's
    /// own size ([`memory_findings::own_bytes`]).
    #[inline]
    pub fn note_born_at(&mut self, site: u32, frame: Option<u64>, iteration: u64, bytes: u64) {
        self.note_birth(site, frame, iteration, bytes, false);
    }

    /// A birth and its drop together, for a tensor found dead when first seen
    /// ([`Input::Born`] with `dropped`).
    #[inline]
    pub fn note_born_dropped(&mut self, site: u32, frame: Option<u64>, iteration: u64, bytes: u64) {
        self.note_birth(site, frame, iteration, bytes, true);
    }

    /// A birth as its `born` event reads ([`Input::of`]), without building the event:
    /// `(site, frame, iteration)`, the storage's `bytes`, the `shape`, and the size of
    /// an element of its dtype (`dtype_size`, [`crate::model::dtype_size`] of the event's
    /// `dtype`); `dropped` when a `dropped` event of it follows at once (both counted
    /// here).
    #[inline]
    pub fn note_born_logged(
        &mut self,
        (site, frame, iteration): (u32, Option<u64>, u64),
        bytes: u64,
        shape: Option<&[usize]>,
        dtype_size: Option<u64>,
        dropped: bool,
    ) {
        self.step(Input::Born {
            site,
            frame,
            iteration,
            bytes: input::born_bytes(shape, dtype_size, bytes),
            shape,
            dropped,
        });
    }

    #[inline]
    fn note_birth(
        &mut self,
        site: u32,
        frame: Option<u64>,
        iteration: u64,
        bytes: u64,
        dropped: bool,
    ) {
        let shape = None;
        self.step(Input::Born {
            site,
            frame,
            iteration,
            bytes,
            shape,
            dropped,
        });
    }

    /// Counts a tensor found dropped ([`Input::Dropped`]).
    #[inline]
    pub fn note_dropped(&mut self) {
        self.step(Input::Dropped);
    }

    /// What `room`'s device has left now, the seconds per iteration of open loop frame
    /// `frame` lately (`pace`) and the decline of the device's free memory per iteration
    /// of that frame lately (`device_growth`): every report's leaks get a forecast from
    /// them ([`forecast::forecast`]).
    pub fn note_room(
        &mut self,
        room: DeviceRoom,
        pace: Option<(u64, f64)>,
        device_growth: Option<u64>,
    ) {
        let pace =
            pace.and_then(|(frame, seconds)| Some((self.frames.name(frame)?.to_string(), seconds)));
        self.outlook = Some(forecast::Outlook {
            room,
            pace,
            device_growth,
        });
    }

    /// Puts the forecasts of the latest [`Analysis::note_room`] on `report`'s leaks and on
    /// the report (every report of this analysis has them already).
    pub fn attach_forecasts(&self, report: &mut Report) {
        if let Some(outlook) = &self.outlook {
            forecast::attach(report, outlook);
        }
    }

    /// The iterations of open loop frame `frame` that have ended (the index of the one
    /// running now), or `None` when no such frame is open.
    pub fn iterations_ended(&self, frame: u64) -> Option<u64> {
        self.frames.iterations_ended(frame)
    }

    /// Site info by id, once declared ([`Catalog::site`]).
    pub fn site(&self, id: u32) -> Option<&SiteInfo> {
        self.catalog.site(id)
    }

    /// Tensors born at `site` so far ([`Catalog::births`]).
    pub fn births(&self, site: u32) -> u64 {
        self.catalog.births(site)
    }

    /// The frames of call path `id`, outermost first ([`Catalog::call_path`]).
    pub fn call_path(&self, id: u32) -> &[CallFrame] {
        self.catalog.call_path(id)
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

    /// The keys of the findings of [`Analysis::report`], sorted, without building it:
    /// what an automatic report compares with the keys of the one it printed last.
    pub fn finding_keys(&self) -> Vec<FindingKey> {
        let mut keys = findings::keys(&self.catalog, self.frames.verdicts(None));
        let memory = self.memory_findings.findings(|id| self.catalog.site(id));
        keys.extend(memory.iter().map(Finding::key));
        keys.sort_unstable();
        keys
    }

    /// The report of the loops of one session (a leak test), or of all.
    pub fn report_for(&self, session: Option<u64>) -> Report {
        let mut findings = findings::findings(&self.catalog, self.frames.verdicts(session));
        if session.is_none() {
            findings.extend(self.memory_findings.findings(|id| self.catalog.site(id)));
        }
        findings::sort_findings(&mut findings);
        let loops = self
            .frames
            .loops()
            .into_iter()
            .map(|(site, l)| LoopSummary {
                site: Some(self.catalog.site_ref(site)),
                ..l
            })
            .collect();
        let mut report = Report {
            findings,
            loops,
            live_tensors: self.live_tensors,
            live_bytes: self.live_bytes,
            peak_live_bytes: self.peak_live_bytes,
            sites_seen: self.catalog.sites_seen(),
            memory: self.memory.clone(),
            memory_by_role: self.memory_by_role(),
            post_mortem: self.post_mortem.clone(),
            // A session's loops are exact (leak tests never sample).
            estimated: session.is_none() && self.sample_interval.is_some(),
            sample_interval: self.sample_interval.filter(|_| session.is_none()),
            forecast: None,
        };
        self.attach_forecasts(&mut report);
        report
    }
}
