//! Findings that only memory statistics can give, judged from the same events as
//! [`crate::Analysis`]:
//!
//! - **untracked growth** ([`FindingKind::UntrackedGrowth`]): on a device, memory in use
//!   minus the live bytes of tracked tensors keeps growing with the iterations. Tracked
//!   survivors are subtracted, so what grows is held by code that is not annotated (or by
//!   a library). "In use" is the pool's used bytes on CUDA and the process's resident
//!   memory on CPU (noisier: the allocator keeps freed pages, so its tolerance is larger).
//!   Memory events come from the periodic monitor, `record_memory_sample` or
//!   `memory_summary`; each is placed at the count of iteration ends (of any tracked loop:
//!   the training steps) so far, as the monitor counts them.
//! - **shape churn** ([`FindingKind::ShapeChurn`]): a site whose tensors keep coming in
//!   sizes never seen before, iteration after iteration (dynamic shapes). A caching pool
//!   serves a freed block again only to a request that fits it, so each new size may take
//!   fresh memory and leave the old blocks to fragment. Pad or bucket the shapes.
//!
//! # The rules
//!
//! Untracked growth uses the leak rule ([`super::growth`]) on the series
//! `u_i = used_i - tracked_i`, with a tolerance for noise: after the warm-up samples, a
//! *growth event* is a sample at least `tolerance` above the value of the previous growth
//! event (the first sample after warm-up is the baseline). The device is growing when it
//! has at least `k` growth events, the latest no older than `max(k, 2 x the longest gap
//! between growth events)` iterations ([`Window::LongestGap`]), and the total growth is
//! at least `k x tolerance`.
//! The tolerance anchors on the last growth event, not on the last sample, so a slow leak
//! (less than `tolerance` per sample) still adds up to growth events. The window uses the
//! longest gap, not the mean one: samples taken while a step's tensors are alive move with
//! the step's size (dynamic shapes make a sawtooth over the growth, measured on an H200),
//! and the growth resumes only after a few steps once a large step is followed by a small
//! one.
//!
//! Shape churn counts, per site, the iterations (loop frame and iteration) that bore a
//! tensor of a byte size the site had not made before (the tensor's own size, elements
//! times element size: a view's, not its storage's). Its first iteration is the
//! baseline. A site churns when `churn_iterations` iterations brought new sizes, it made at
//! least `churn_sizes` distinct sizes, and its largest tensor is at least
//! `churn_min_bytes` (small tensors do not fragment a pool that matters). A site that
//! makes the same set of sizes every iteration (one per layer, say) brings no new size
//! after its first iteration and never churns. Memory is bounded: at most
//! `MAX_SIZES_PER_SITE` sizes are kept per site; past that every new size is counted as
//! new.
//!
//! The churning sites of one loop are one problem: a dynamic shape enters at one site
//! and flows on. They are grouped per loop; the site where the shape starts is the one
//! no other churning site of the same function flows into (the locals each `let` is
//! computed from, as `#[track]` read them: `SiteInfo::from`), the first seen when
//! several are. Its finding names how many sites follow it; theirs carry `follows` and
//! appear in the JSON report only (the text report leaves them out).

use super::growth::{Growth, Window};
use super::input::Input;
use crate::event::Event;
use crate::fast_hash::{HashMap, SiteMap};
pub use crate::model::own_bytes;
use crate::model::{MemorySample, SiteInfo, SiteRef};
use crate::report::{Finding, FindingKind};
use crate::size::format_bytes;
use shapes::{Shapes, MAX_SIZES_PER_SITE};
use std::collections::BTreeMap;

mod shapes;

/// The knobs of the memory findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryJudgement {
    /// Memory samples placed at or before this many iteration ends are warm-up (lazy
    /// state, first kernels, cuBLAS handles).
    pub warmup: u64,
    /// Growth events needed (and the least recency window).
    pub k: u64,
    /// Noise tolerance of a pool's used bytes (CUDA).
    pub pool_tolerance: u64,
    /// Noise tolerance of resident memory (CPU).
    pub resident_tolerance: u64,
    /// Iterations bringing new sizes needed for shape churn.
    pub churn_iterations: u64,
    /// Distinct sizes needed for shape churn.
    pub churn_sizes: u64,
    /// Smallest "largest tensor" of a churning site.
    pub churn_min_bytes: u64,
}

impl MemoryJudgement {
    /// The noise tolerance of a pool's used bytes (`pool`) or of resident memory.
    fn tolerance(&self, pool: bool) -> i64 {
        if pool {
            self.pool_tolerance as i64
        } else {
            self.resident_tolerance as i64
        }
    }
}

impl Default for MemoryJudgement {
    fn default() -> Self {
        MemoryJudgement {
            warmup: 1,
            k: 3,
            pool_tolerance: 1 << 20,
            resident_tolerance: 8 << 20,
            churn_iterations: 4,
            churn_sizes: 8,
            churn_min_bytes: 64 << 10,
        }
    }
}

/// The untracked-bytes series of one device, summarized.
#[derive(Debug, Clone)]
struct Untracked {
    /// Whether the series is pool used (CUDA) or resident memory (CPU).
    pool: bool,
    baseline: Option<(u64, i64)>,
    /// The value of the latest growth event (the baseline's before the first).
    anchor: i64,
    growth: Growth,
    last: (u64, i64),
    /// The latest sample's numbers, for the finding's text.
    used: u64,
    tracked: u64,
}

#[derive(Debug, Clone)]
struct FrameInfo {
    site: u32,
}

/// The state. Feed it every event with [`MemoryFindings::apply`]; ask for
/// [`MemoryFindings::findings`] at any time.
#[derive(Debug, Default)]
pub struct MemoryFindings {
    judgement: MemoryJudgement,
    frames: HashMap<u64, FrameInfo>,
    /// The frame of the latest iteration end and its loop site.
    last_frame: Option<(u64, u32)>,
    /// Loop names by loop site, kept after their frames end.
    loop_names: HashMap<u32, String>,
    /// Iteration ends so far (any loop), and per loop site.
    steps: u64,
    steps_by_loop: SiteMap<u64>,
    untracked: BTreeMap<String, Untracked>,
    shapes: SiteMap<Shapes>,
}

impl MemoryFindings {
    pub fn new(judgement: MemoryJudgement) -> Self {
        MemoryFindings {
            judgement,
            ..MemoryFindings::default()
        }
    }

    /// Applies one event (all kinds are accepted; most are ignored).
    pub fn apply(&mut self, event: &Event) {
        if let Some(input) = Input::of(event) {
            self.step(&input);
        }
    }

    /// Takes one input of the analysis (its one path: [`super::Analysis::step`] and
    /// [`MemoryFindings::apply`] come here). Inlined always, as `Analysis::step`.
    #[inline(always)]
    pub fn step(&mut self, input: &Input<'_>) {
        match *input {
            Input::LoopStart {
                frame, site, name, ..
            } => self.loop_start(frame, site, name),
            Input::LoopEnd { frame, .. } => {
                self.frames.remove(&frame);
                self.last_frame = None;
            }
            Input::IterationEnd { frame, .. } => self.iteration_end(frame),
            Input::Born {
                site,
                frame,
                iteration,
                bytes,
                shape,
                ..
            } => self.born(site, frame, iteration, bytes, shape),
            Input::Memory { device, sample } => self.memory(device, sample),
            Input::Site { .. }
            | Input::CallPath { .. }
            | Input::Sampling { .. }
            | Input::PostMortem(_) => {}
            Input::Dropped => {}
        }
    }

    fn loop_start(&mut self, frame: u64, site: u32, name: &str) {
        self.frames.insert(frame, FrameInfo { site });
        // A log may reuse a frame id.
        self.last_frame = None;
        if self.loop_names.get(&site).is_none_or(|n| n != name) {
            self.loop_names.insert(site, name.to_string());
        }
    }

    /// An iteration of `frame` ended.
    #[inline]
    fn iteration_end(&mut self, frame: u64) {
        self.steps += 1;
        // Iteration ends come in runs of one frame: its loop site is kept.
        let site = match self.last_frame {
            Some((f, site)) if f == frame => Some(site),
            _ => {
                let site = self.frames.get(&frame).map(|f| f.site);
                self.last_frame = site.map(|s| (frame, s));
                site
            }
        };
        if let Some(site) = site {
            *self.steps_by_loop.get_or_default(site) += 1;
        }
    }

    /// A tensor of `bytes` (its own size) born at `site`; `shape` may be unknown. Inlined
    /// always: a birth of every probe comes here (`Analysis::step`, inlined always too).
    #[inline(always)]
    fn born(
        &mut self,
        site: u32,
        frame: Option<u64>,
        iteration: u64,
        bytes: u64,
        shape: Option<&[usize]>,
    ) {
        // Tensors born outside any loop cannot churn across iterations.
        let Some(frame) = frame else {
            return;
        };
        let key = (frame, iteration);
        let s = self.shapes.get_or_default(site);
        if s.last_key != Some(key) {
            s.iterations += 1;
            // A frame's loop, looked up at the frame's first iteration seen here.
            if s.last_key.is_none_or(|(f, _)| f != frame) {
                s.last_loop = self.frames.get(&frame).map(|f| f.site);
            }
            s.last_key = Some(key);
        }
        if s.last_bytes == Some(bytes) {
            return;
        }
        s.last_bytes = Some(bytes);
        s.size_changed(key, bytes, shape);
    }

    fn memory(&mut self, device: &str, sample: &MemorySample) {
        let (used, pool) = match (sample.pool_used, sample.process_resident) {
            (Some(u), _) => (u, true),
            (None, Some(r)) => (r, false),
            (None, None) => return,
        };
        let at = self.steps;
        if at <= self.judgement.warmup {
            return;
        }
        // Saturating: the sizes come from the log (fuzz/fuzz_targets/event_log.rs).
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let value = signed(used).saturating_sub(signed(sample.tracked));
        let tolerance = self.judgement.tolerance(pool);
        let u = self
            .untracked
            .entry(device.to_string())
            .or_insert_with(|| Untracked {
                pool,
                baseline: None,
                anchor: value,
                growth: Growth::default(),
                last: (at, value),
                used,
                tracked: sample.tracked,
            });
        if u.baseline.is_none() {
            u.baseline = Some((at, value));
            u.anchor = value;
        } else if value >= u.anchor.saturating_add(tolerance) {
            u.growth.event(at);
            u.anchor = value;
        }
        u.last = (at, value);
        u.used = used;
        u.tracked = sample.tracked;
    }

    fn growing(&self, u: &Untracked) -> bool {
        let j = &self.judgement;
        let Some((_, base)) = u.baseline else {
            return false;
        };
        // Still up by `k` tolerances: noise around a plateau makes growth events too.
        u.last.1 - base >= j.k as i64 * j.tolerance(u.pool)
            && u.growth.holds(u.last.0, j.k, Window::LongestGap)
    }

    /// The findings as of the events applied so far. `site` looks up site infos (the
    /// [`crate::Analysis`] keeps them).
    pub fn findings<'a>(&self, site: impl Fn(u32) -> Option<&'a SiteInfo>) -> Vec<Finding> {
        let mut out = Vec::new();
        // The loop whose iterations the samples count: the one that ended most often.
        let loop_site = self
            .steps_by_loop
            .iter()
            .max_by_key(|(site, n)| (**n, std::cmp::Reverse(*site)))
            .map(|(site, _)| site);
        let loop_name = loop_site
            .and_then(|s| self.loop_names.get(&s))
            .cloned()
            .unwrap_or_default();
        for (device, u) in &self.untracked {
            if !self.growing(u) {
                continue;
            }
            let (base_at, base) = u.baseline.expect("growing has a baseline");
            let span = u.last.0.saturating_sub(base_at).max(1);
            let growth = (u.last.1 - base).max(0) as u64;
            let per_iteration = growth / span;
            let used_name = if u.pool {
                "pool used"
            } else {
                "resident memory"
            };
            out.push(Finding {
                kind: FindingKind::UntrackedGrowth,
                growing: true,
                site: SiteRef {
                    file: device.clone(),
                    line: 0,
                    column: 0,
                    function: String::new(),
                    label: format!("{used_name} - tracked"),
                },
                loop_name: loop_name.clone(),
                loop_site: loop_site.and_then(&site).map(SiteRef::from),
                iteration: u.last.0.saturating_sub(1),
                iterations: span,
                first_iteration: base_at.saturating_sub(1),
                bytes: growth,
                bytes_per_iteration: per_iteration,
                hint: format!(
                    "{used_name} {} with {} tracked: {} untracked now, +{} in {} iterations \
                     ({} growth events); {}",
                    format_bytes(u.used),
                    format_bytes(u.tracked),
                    format_bytes(u.last.1.max(0) as u64),
                    format_bytes(growth),
                    span,
                    u.growth.events(),
                    FindingKind::UntrackedGrowth.hint()
                ),
                ..Finding::at(FindingKind::UntrackedGrowth, SiteRef::default())
            });
        }
        out.extend(group_churn(self.churn(&site), &site));
        out
    }

    /// One shape churn finding per churning site, with its site id and loop site.
    fn churn<'a>(
        &self,
        site: &impl Fn(u32) -> Option<&'a SiteInfo>,
    ) -> Vec<(u32, Option<u32>, Finding)> {
        let mut out = Vec::new();
        let j = &self.judgement;
        let mut sites: Vec<(u32, &Shapes)> = self.shapes.iter().collect();
        sites.sort_by_key(|(id, _)| *id);
        for (id, s) in sites {
            if s.new_size_iterations < j.churn_iterations
                || s.distinct < j.churn_sizes
                || s.largest < j.churn_min_bytes
            {
                continue;
            }
            let Some(info) = site(id) else {
                continue;
            };
            let loop_site = s.last_loop;
            let shapes = match (&s.first_shape, &s.last_new_shape) {
                (Some(a), Some(b)) => format!(" (e.g. {a:?} ... {b:?})"),
                _ => String::new(),
            };
            let capped = if s.sizes.len() >= MAX_SIZES_PER_SITE {
                "at least "
            } else {
                ""
            };
            let finding = Finding {
                kind: FindingKind::ShapeChurn,
                growing: false,
                site: SiteRef::from(info),
                loop_name: loop_site
                    .and_then(|l| self.loop_names.get(&l))
                    .cloned()
                    .unwrap_or_default(),
                loop_site: loop_site.and_then(&site).map(SiteRef::from),
                iteration: s.last_key.map_or(0, |(_, i)| i),
                iterations: s.iterations,
                bytes: s.largest,
                hint: format!(
                    "{capped}{} distinct sizes from {} to {} in {} iterations, {} of which \
                     brought a new size{shapes}; {}",
                    s.distinct,
                    format_bytes(s.smallest),
                    format_bytes(s.largest),
                    s.iterations,
                    s.new_size_iterations,
                    FindingKind::ShapeChurn.hint()
                ),
                ..Finding::at(FindingKind::ShapeChurn, SiteRef::default())
            };
            out.push((id, loop_site, finding));
        }
        out
    }
}

/// The churn findings grouped per loop (see the module docs): the start of each group
/// names how many sites follow it; the others get `follows`.
fn group_churn<'a>(
    mut churn: Vec<(u32, Option<u32>, Finding)>,
    site: &impl Fn(u32) -> Option<&'a SiteInfo>,
) -> Vec<Finding> {
    let mut loops: Vec<Option<u32>> = churn.iter().map(|(_, l, _)| *l).collect();
    loops.dedup();
    loops.sort_unstable();
    loops.dedup();
    for l in loops {
        let group: Vec<usize> = (0..churn.len()).filter(|i| churn[*i].1 == l).collect();
        if group.len() < 2 {
            continue;
        }
        // A site another churning site of its function flows into follows it.
        let fed = |i: usize| {
            let Some(info) = site(churn[i].0) else {
                return false;
            };
            group.iter().any(|&o| {
                o != i
                    && site(churn[o].0).is_some_and(|other| {
                        other.function == info.function && info.from.contains(&other.label)
                    })
            })
        };
        // Ids follow the order sites were first seen: the first root, else the first.
        let start = group
            .iter()
            .copied()
            .filter(|&i| !fed(i))
            .min_by_key(|&i| churn[i].0)
            .unwrap_or(group[0]);
        let start_ref = churn[start].2.site.clone();
        for &i in &group {
            if i != start {
                churn[i].2.follows = Some(start_ref.clone());
            }
        }
        let n = group.len() - 1;
        let f = &mut churn[start].2;
        f.hint = format!(
            "the dynamic shape starts here: {n} more {} (listed in the JSON report); {}",
            if n == 1 {
                "site of this loop follows it"
            } else {
                "sites of this loop follow it"
            },
            f.hint
        );
    }
    churn.into_iter().map(|(_, _, f)| f).collect()
}
