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
//! Untracked growth uses the leak rule of [`crate::analysis`] on the series
//! `u_i = used_i - tracked_i`, with a tolerance for noise: after the warm-up samples, a
//! *growth event* is a sample at least `tolerance` above the value of the previous growth
//! event (the first sample after warm-up is the baseline). The device is growing when it
//! has at least `k` growth events, the latest no older than `max(k, 2 x the longest gap
//! between growth events)` iterations, and the total growth is at least `k x tolerance`.
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

use crate::event::{Event, MemorySample, SiteInfo};
use crate::fast_hash::{HashMap, HashSet, SiteMap};
use crate::report::{Finding, FindingKind, SiteRef};
use crate::size::format_bytes;
use std::collections::BTreeMap;

/// A tensor's own bytes, its elements times their size, from a birth's shape and dtype
/// (candle's element sizes; its sub-byte types count 0, as candle counts them). `None`
/// without a shape or for a dtype not known here: the birth's storage bytes are used then.
pub fn own_bytes(shape: Option<&[usize]>, dtype: &str) -> Option<u64> {
    let size = match dtype {
        "u8" | "f8e4m3" | "f8e8m0" => 1,
        "i16" | "bf16" | "f16" => 2,
        "u32" | "i32" | "f32" => 4,
        "i64" | "f64" => 8,
        "f6e2m3" | "f6e3m2" | "f4" => 0,
        _ => return None,
    };
    // Saturating: a corrupt or hand-made log may hold any shape (tests/hostile_logs.rs).
    let elements = shape?
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        .unwrap_or(u64::MAX);
    Some(elements.saturating_mul(size))
}

/// Most distinct sizes remembered per site.
const MAX_SIZES_PER_SITE: usize = 4096;

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
    anchor: i64,
    growth_events: u64,
    first_growth: u64,
    last_growth: u64,
    longest_gap: u64,
    last: (u64, i64),
    /// The latest sample's numbers, for the finding's text.
    used: u64,
    tracked: u64,
}

/// The sizes one site has made.
#[derive(Debug, Clone, Default)]
struct Shapes {
    // First the fields every tensor reads (one cache line), then those of a new size.
    /// Iterations (frame, iteration) seen, and those that brought a new size.
    last_key: Option<(u64, u64)>,
    iterations: u64,
    /// Size of the latest tensor (a site usually repeats it: no set lookup then).
    last_bytes: Option<u64>,
    new_size_iterations: u64,
    last_new_key: Option<(u64, u64)>,
    sizes: HashSet<u64>,
    distinct: u64,
    largest: u64,
    smallest: u64,
    first_shape: Option<Vec<usize>>,
    last_new_shape: Option<Vec<usize>>,
}

impl Shapes {
    /// A tensor of another size than the site's latest: counts the size if it is new
    /// (out of line: [`MemoryFindings::born`]'s common case is a repeated size).
    #[inline(never)]
    fn size_changed(&mut self, key: (u64, u64), bytes: u64, shape: Option<&Vec<usize>>) {
        let new = if self.sizes.len() >= MAX_SIZES_PER_SITE {
            !self.sizes.contains(&bytes)
        } else {
            self.sizes.insert(bytes)
        };
        if !new {
            return;
        }
        if self.distinct == 0 {
            self.smallest = bytes;
            self.first_shape = shape.cloned();
        }
        self.distinct += 1;
        self.largest = self.largest.max(bytes);
        self.smallest = self.smallest.min(bytes);
        // The site's first iteration is the baseline: its sizes are not "new".
        if self.iterations > 1 && self.last_new_key != Some(key) {
            self.new_size_iterations += 1;
            self.last_new_key = Some(key);
        }
        if self.iterations > 1 {
            self.last_new_shape = shape.cloned();
        }
    }
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
    /// Loop site of each frame whose tensors a site made (for the finding's loop).
    frame_loops: HashMap<u64, u32>,
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
        match event {
            Event::LoopStart {
                frame, site, name, ..
            } => {
                self.frames.insert(*frame, FrameInfo { site: *site });
                // A log may reuse a frame id.
                self.last_frame = None;
                self.frame_loops.insert(*frame, *site);
                self.loop_names.insert(*site, name.clone());
            }
            Event::LoopEnd { frame, .. } => {
                self.frames.remove(frame);
                self.last_frame = None;
            }
            Event::IterationEnd { frame, .. } => self.iteration_end(*frame),
            Event::Born {
                site,
                frame,
                iteration,
                bytes,
                shape,
                dtype,
                ..
            } => {
                let own = own_bytes(shape.as_deref(), dtype).unwrap_or(*bytes);
                self.born(*site, *frame, *iteration, own, shape.as_ref())
            }
            Event::Memory { device, sample, .. } => self.memory(device, sample),
            _ => {}
        }
    }

    /// An iteration of `frame` ended (what [`Event::IterationEnd`] does here, without
    /// the event).
    #[inline]
    pub fn iteration_end(&mut self, frame: u64) {
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

    /// A tensor born at `site` (what [`Event::Born`] does; `shape` may be unknown).
    #[inline]
    pub fn born(
        &mut self,
        site: u32,
        frame: Option<u64>,
        iteration: u64,
        bytes: u64,
        shape: Option<&Vec<usize>>,
    ) {
        // Tensors born outside any loop cannot churn across iterations.
        let Some(frame) = frame else {
            return;
        };
        let key = (frame, iteration);
        let s = self.shapes.get_or_default(site);
        if s.last_key != Some(key) {
            s.iterations += 1;
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
        let tolerance = if pool {
            self.judgement.pool_tolerance
        } else {
            self.judgement.resident_tolerance
        } as i64;
        let u = self
            .untracked
            .entry(device.to_string())
            .or_insert_with(|| Untracked {
                pool,
                baseline: None,
                anchor: value,
                growth_events: 0,
                first_growth: at,
                last_growth: at,
                longest_gap: 0,
                last: (at, value),
                used,
                tracked: sample.tracked,
            });
        if u.baseline.is_none() {
            u.baseline = Some((at, value));
            u.anchor = value;
        } else if value >= u.anchor.saturating_add(tolerance) {
            if u.growth_events == 0 {
                u.first_growth = at;
            } else {
                u.longest_gap = u.longest_gap.max(at - u.last_growth);
            }
            u.growth_events += 1;
            u.last_growth = at;
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
        let tolerance = if u.pool {
            j.pool_tolerance
        } else {
            j.resident_tolerance
        } as i64;
        if u.growth_events < j.k.max(1) || u.last.1 - base < j.k as i64 * tolerance {
            return false;
        }
        let window = j.k.max(2 * u.longest_gap);
        u.last.0.saturating_sub(u.last_growth) < window
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
                    u.growth_events,
                    FindingKind::UntrackedGrowth.hint()
                ),
                ..Finding::at(FindingKind::UntrackedGrowth, SiteRef::default())
            });
        }
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
            let loop_site = s
                .last_key
                .and_then(|(f, _)| self.frame_loops.get(&f))
                .copied();
            let shapes = match (&s.first_shape, &s.last_new_shape) {
                (Some(a), Some(b)) => format!(" (e.g. {a:?} ... {b:?})"),
                _ => String::new(),
            };
            let capped = if s.sizes.len() >= MAX_SIZES_PER_SITE {
                "at least "
            } else {
                ""
            };
            out.push(Finding {
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
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::SiteKind;

    fn site_info(label: &str) -> SiteInfo {
        SiteInfo {
            file: "src/train.rs".into(),
            line: 42,
            column: 9,
            function: "train".into(),
            label: label.into(),
            kind: SiteKind::Binding,
            note: None,
        }
    }

    fn start(frame: u64, parent: Option<u64>) -> Event {
        Event::LoopStart {
            t_ns: 0,
            frame,
            site: 0,
            name: "'steps".into(),
            parent,
            parent_iteration: parent.map(|_| 0),
            thread: 1,
            session: 0,
            warmup: None,
            window: None,
        }
    }

    fn end(frame: u64, iteration: u64) -> Event {
        Event::IterationEnd {
            t_ns: 0,
            frame,
            iteration,
            duration_ns: 0,
            live_tensors: 0,
            live_bytes: 0,
            sites: Vec::new(),
            roles: Vec::new(),
        }
    }

    fn memory(tracked: u64, pool_used: u64) -> Event {
        Event::Memory {
            t_ns: 0,
            device: "cuda:0".into(),
            sample: MemorySample {
                tracked,
                pool_used: Some(pool_used),
                pool_reserved: Some(pool_used),
                ..MemorySample::default()
            },
        }
    }

    fn born(frame: u64, iteration: u64, bytes: u64, shape: Vec<usize>) -> Event {
        Event::Born {
            t_ns: 0,
            tensor: 0,
            site: 1,
            frame: Some(frame),
            iteration,
            bytes,
            storage: 0,
            shape: Some(shape),
            dtype: "f32".into(),
            device: "cuda:0".into(),
            thread: 1,
        }
    }

    const MIB: u64 = 1 << 20;

    /// One loop of `n` iterations; after iteration `i` a memory sample of
    /// `(tracked(i), used(i))`.
    fn run_memory(n: u64, sample: impl Fn(u64) -> (u64, u64)) -> Vec<Finding> {
        let mut m = MemoryFindings::default();
        m.apply(&start(1, None));
        for i in 0..n {
            m.apply(&end(1, i));
            let (tracked, used) = sample(i);
            m.apply(&memory(tracked, used));
        }
        let info = site_info("'steps");
        m.findings(|_| Some(&info))
    }

    #[test]
    fn untracked_growth_is_found_with_its_rate() {
        // 2 MiB per iteration allocated outside tracked code; tracked flat at 100 MiB.
        let f = run_memory(10, |i| (100 * MIB, 100 * MIB + 5 * MIB + 2 * MIB * i));
        assert_eq!(f.len(), 1, "{f:?}");
        let f = &f[0];
        assert_eq!(f.kind, FindingKind::UntrackedGrowth);
        assert_eq!(f.site.file, "cuda:0");
        assert_eq!(f.bytes_per_iteration, 2 * MIB);
        assert_eq!(f.bytes, 16 * MIB);
        assert_eq!(f.loop_name, "'steps");
        assert!(f.hint.contains("+16.0 MiB in 8 iterations"), "{}", f.hint);
    }

    #[test]
    fn growth_of_tracked_survivors_is_not_untracked_growth() {
        // A tracked leak: pool used grows exactly with tracked bytes.
        let f = run_memory(10, |i| (100 * MIB + 3 * MIB * i, 104 * MIB + 3 * MIB * i));
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn slow_untracked_leak_adds_up() {
        // 256 KiB per iteration, below the 1 MiB tolerance per sample.
        let f = run_memory(40, |i| (10 * MIB, 12 * MIB + (MIB / 4) * i));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].bytes_per_iteration, MIB / 4);
    }

    #[test]
    fn growth_under_a_sawtooth_of_step_sizes_is_found() {
        // As measured on an H200 (docs/gpu.md): +15 MiB per step, and the step's own
        // tensors, from 0 to 40 MiB with the batch size, cycling every 14 steps.
        let f = run_memory(61, |i| {
            (160 * MIB, 300 * MIB + 15 * MIB * i + 3 * MIB * (i % 14))
        });
        assert_eq!(f.len(), 1, "{f:?}");
        // The sample at the end is just past a drop: still growing.
        assert!(f[0].bytes_per_iteration > 14 * MIB, "{:?}", f[0]);
    }

    #[test]
    fn noise_and_a_plateau_are_not_growth() {
        // Temporaries still queued make +-0.5 MiB of noise.
        let noisy = run_memory(30, |i| (50 * MIB, 60 * MIB + (i % 3) * MIB / 4));
        assert!(noisy.is_empty(), "{noisy:?}");
        // A cache that fills for 5 iterations and then stays flat.
        let plateau = run_memory(30, |i| (50 * MIB, 60 * MIB + 4 * MIB * i.min(5)));
        assert!(plateau.is_empty(), "{plateau:?}");
    }

    #[test]
    fn resident_memory_has_its_own_tolerance() {
        let mut m = MemoryFindings::default();
        m.apply(&start(1, None));
        for i in 0..10u64 {
            m.apply(&end(1, i));
            m.apply(&Event::Memory {
                t_ns: 0,
                device: "cpu".into(),
                sample: MemorySample {
                    tracked: MIB,
                    // 4 MiB per iteration: under the 8 MiB tolerance each sample, but it
                    // adds up.
                    process_resident: Some(200 * MIB + 4 * MIB * i),
                    ..MemorySample::default()
                },
            });
        }
        let f = m.findings(|_| None);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].site.label, "resident memory - tracked");
        assert_eq!(f[0].bytes_per_iteration, 4 * MIB);
    }

    fn run_shapes(iterations: u64, sizes: impl Fn(u64) -> Vec<u64>) -> Vec<Finding> {
        let mut m = MemoryFindings::default();
        m.apply(&start(1, None));
        for i in 0..iterations {
            for b in sizes(i) {
                m.apply(&born(1, i, b, vec![32, (b / 128) as usize]));
            }
            m.apply(&end(1, i));
        }
        let info = site_info("x");
        m.findings(|_| Some(&info))
    }

    #[test]
    fn dynamic_sizes_are_shape_churn() {
        // A batch of variable sequence length: a new size almost every iteration.
        let f = run_shapes(20, |i| vec![128 * 1024 + 4096 * ((i * 7) % 13)]);
        assert_eq!(f.len(), 1, "{f:?}");
        let f = &f[0];
        assert_eq!(f.kind, FindingKind::ShapeChurn);
        assert_eq!(f.site.label, "x");
        assert_eq!(f.iterations, 20);
        assert!(f.hint.starts_with("13 distinct sizes from 128.0 KiB to 176.0 KiB in 20 iterations, 12 of which brought a new size (e.g. [32, 1024] ... [32, 1216])"), "{}", f.hint);
    }

    #[test]
    fn churn_is_judged_on_the_tensors_own_size() {
        // Views of varying length into one fixed 4 MiB storage: the birth events carry
        // the storage's bytes, always the same; the views' own sizes churn.
        let mut m = MemoryFindings::default();
        m.apply(&start(1, None));
        for i in 0..20u64 {
            let rows = 1024 + 32 * ((i * 7) % 13) as usize;
            m.apply(&born(1, i, 4 << 20, vec![rows, 32]));
            m.apply(&end(1, i));
        }
        let info = site_info("x");
        let f = m.findings(|_| Some(&info));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, FindingKind::ShapeChurn);
        assert!(
            f[0].hint.starts_with("13 distinct sizes from 128.0 KiB to"),
            "{}",
            f[0].hint
        );
    }

    #[test]
    fn own_bytes_follow_candle_element_sizes() {
        assert_eq!(own_bytes(Some(&[2, 3]), "f32"), Some(24));
        assert_eq!(own_bytes(Some(&[2, 3]), "bf16"), Some(12));
        assert_eq!(own_bytes(Some(&[5]), "i64"), Some(40));
        assert_eq!(own_bytes(Some(&[]), "u8"), Some(1), "a scalar");
        assert_eq!(
            own_bytes(Some(&[8]), "f4"),
            Some(0),
            "candle counts sub-byte types 0"
        );
        assert_eq!(own_bytes(None, "f32"), None);
        assert_eq!(own_bytes(Some(&[2]), "complex"), None);
        assert_eq!(
            own_bytes(Some(&[usize::MAX, 4]), "f32"),
            Some(u64::MAX),
            "saturates"
        );
    }

    #[test]
    fn same_sizes_every_iteration_are_not_churn() {
        // One size per layer, the same set each iteration.
        let f = run_shapes(20, |_| (1..=12).map(|l| l * 256 * 1024).collect());
        assert!(f.is_empty(), "{f:?}");
        // Few distinct sizes (bucketed shapes) are fine too.
        let f = run_shapes(20, |i| vec![(1 + i % 4) * 256 * 1024]);
        assert!(f.is_empty(), "{f:?}");
        // Small tensors do not matter.
        let f = run_shapes(20, |i| vec![4 * (i + 1)]);
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn renders_with_numbers() {
        let growth = run_memory(10, |i| (100 * MIB, 105 * MIB + 2 * MIB * i));
        let churn = run_shapes(20, |i| vec![128 * 1024 + 4096 * ((i * 7) % 13)]);
        let text = format!("{}{}", growth[0], churn[0]);
        let expected = "\
UNTRACKED cuda:0  pool used - tracked: +2.0 MiB per iteration in loop 'steps
         pool used 123.0 MiB with 100.0 MiB tracked: 23.0 MiB untracked now, +16.0 MiB in 8 iterations (8 growth events); annotate the code that allocates (#[track]) to find the site, or look for tensors kept by code outside tracked functions
CHURN    src/train.rs:42  `x` makes tensors of new sizes in loop 'steps, up to 176.0 KiB
         13 distinct sizes from 128.0 KiB to 176.0 KiB in 20 iterations, 12 of which brought a new size (e.g. [32, 1024] ... [32, 1216]); pad or bucket the shapes (e.g. sequence lengths to multiples of 64) so the pool can reuse its blocks
";
        assert_eq!(text, expected);
    }
}
