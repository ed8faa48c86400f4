//! A streaming aggregator of a run's memory over time, for the HTML timeline.
//!
//! [`TimelineBuilder`] takes [`Event`]s one at a time (as [`crate::Analysis`] does) and
//! keeps, per iteration end of any loop, the live bytes of tracked tensors split by the
//! site that made them, and per device the pool used and reserved from memory samples.
//!
//! Memory stays bounded however long the run:
//! - the points are downsampled: once [`TimelineBuilder::new`]'s `max_points` are kept,
//!   neighbours are merged in pairs and each later point stands for twice as many
//!   iteration ends. A merged point keeps the iteration end with the most live bytes, so
//!   peaks survive downsampling;
//! - live bytes by site come from `born` and `dropped` events through a map of the live
//!   tensors and their storages (each storage counted once, at the site that made it):
//!   that is bounded by the live tensors, as the tracker itself is, not by the run;
//! - per-site statistics are bounded by the sites.
//!
//! Nothing here judges leaks: that is [`crate::Analysis`]'s, and the renderers take its
//! [`crate::Report`] beside this timeline.

use crate::event::Event;
use crate::model::{born_weight, estimate_count, MemorySample, SiteInfo, SiteRef, SiteSweep};
use crate::roles::RoleBytes;
use downsample::Downsampler;
use std::collections::{BTreeMap, HashMap};

mod downsample;

/// Points kept by default before downsampling (so between half and all of it after).
pub const DEFAULT_MAX_POINTS: usize = 2048;

/// Live memory at one iteration end (or the fullest of several, once downsampled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// When that iteration ended (the event's `t_ns`).
    pub t_ns: u64,
    /// The loop (index into [`Timeline::loops`]) and its iteration.
    pub loop_index: u32,
    pub iteration: u64,
    /// Live tracked tensors and bytes, as the tracker counted them at that iteration end.
    pub live_tensors: u64,
    pub live_bytes: u64,
    /// Live bytes by site, sorted by site id, zeros left out.
    pub sites: Vec<SiteBytes>,
    /// Live bytes by role ([`crate::roles::Role::ALL`] order, the six roles a tensor can
    /// have; zeros in logs written before roles).
    pub roles: [u64; 6],
    /// Iteration ends this point stands for.
    pub count: u64,
}

/// Live bytes of the storages that one site made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteBytes {
    pub site: u32,
    pub bytes: u64,
}

/// One memory sample of a device (or the highest of several, once downsampled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPoint {
    pub t_ns: u64,
    pub tracked: u64,
    pub pool_used: Option<u64>,
    pub pool_reserved: Option<u64>,
    /// Samples this point stands for.
    pub count: u64,
}

/// An iteration end of an outermost loop (an epoch), for marks on the time axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub t_ns: u64,
    pub loop_index: u32,
    pub iteration: u64,
}

/// What happened at one site over the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// Tensors born at the site, and their bytes (each birth counted).
    pub born: u64,
    pub born_bytes: u64,
    /// Times a tensor went through the site as a store site.
    pub stored: u64,
    /// Highest live bytes of storages made here, at an iteration end.
    pub peak_live_bytes: u64,
    /// Highest survivor count a sweep reported for the site.
    pub peak_survivors: u64,
    /// Live bytes at the end of the log.
    pub live_bytes: u64,
}

#[derive(Debug, Clone)]
struct LiveStorage {
    site: u32,
    bytes: u64,
    /// What it counts for in its site's live bytes: `bytes`, times its first tensor's
    /// weight in a sampled log.
    counted: u64,
    tensors: u32,
    generation: u32,
}

#[derive(Debug, Clone, Copy)]
struct OpenFrame {
    loop_index: u32,
    outermost: bool,
}

/// Builds a [`Timeline`] from events. See the module docs.
#[derive(Debug)]
pub struct TimelineBuilder {
    sites: BTreeMap<u32, SiteInfo>,
    stats: BTreeMap<u32, SiteStats>,
    loops: Vec<String>,
    loop_index: HashMap<(u32, String), u32>,
    frames: HashMap<u64, OpenFrame>,
    tensors: HashMap<u64, (u64, u32)>,
    storages: HashMap<u64, LiveStorage>,
    site_live: HashMap<u32, u64>,
    /// Births per site: the sums of their weights (tensors, bytes; each 1 in an exact log).
    births: HashMap<u32, (f64, f64)>,
    /// The log samples its tensors at this mean interval ([`Event::Sampling`]): a birth
    /// stands for the inverse of its probability.
    sample_interval: Option<u64>,
    points: Downsampler<Point>,
    memory: BTreeMap<String, Downsampler<MemoryPoint>>,
    marks: Downsampler<Mark>,
    max_points: usize,
    t_min: Option<u64>,
    t_max: u64,
    events: u64,
    iteration_ends: u64,
}

impl Default for TimelineBuilder {
    fn default() -> Self {
        TimelineBuilder::new(DEFAULT_MAX_POINTS)
    }
}

/// Devices with memory samples kept at most; later ones are left out.
const MAX_DEVICES: usize = 16;
/// Outermost-loop iteration ends kept at most.
const MAX_MARKS: usize = 256;

impl TimelineBuilder {
    /// Keeps at most `max_points` points (and as many memory samples per device).
    pub fn new(max_points: usize) -> Self {
        TimelineBuilder {
            sites: BTreeMap::new(),
            stats: BTreeMap::new(),
            loops: Vec::new(),
            loop_index: HashMap::new(),
            frames: HashMap::new(),
            tensors: HashMap::new(),
            storages: HashMap::new(),
            site_live: HashMap::new(),
            births: HashMap::new(),
            sample_interval: None,
            points: Downsampler::new(max_points),
            memory: BTreeMap::new(),
            marks: Downsampler::new(MAX_MARKS),
            max_points,
            t_min: None,
            t_max: 0,
            events: 0,
            iteration_ends: 0,
        }
    }

    fn time(&mut self, t_ns: u64) {
        self.t_min = Some(self.t_min.map_or(t_ns, |t| t.min(t_ns)));
        self.t_max = self.t_max.max(t_ns);
    }

    fn add_live(&mut self, site: u32, bytes: u64) {
        let live = self.site_live.entry(site).or_default();
        // Saturating here and below: byte counts come from the log (a corrupt one may
        // say anything; fuzz/fuzz_targets/event_log.rs).
        *live = live.saturating_add(bytes);
    }

    fn sub_live(&mut self, site: u32, bytes: u64) {
        if let Some(v) = self.site_live.get_mut(&site) {
            *v = v.saturating_sub(bytes);
            if *v == 0 {
                self.site_live.remove(&site);
            }
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, event: &Event) {
        self.events += 1;
        if let Some(t_ns) = event.t_ns() {
            self.time(t_ns);
        }
        match event {
            Event::Sampling { interval } => self.sample_interval = Some(*interval),
            Event::Header { .. }
            | Event::Alias { .. }
            | Event::CallPath { .. }
            | Event::PostMortem { .. } => {}
            Event::Site { id, info } => {
                self.sites.insert(*id, info.clone());
            }
            Event::LoopStart {
                frame,
                site,
                name,
                parent,
                ..
            } => self.loop_start(*frame, *site, name, parent.is_none()),
            Event::LoopEnd { frame, .. } => {
                self.frames.remove(frame);
            }
            Event::Born {
                tensor,
                site,
                bytes,
                storage,
                shape,
                dtype,
                ..
            } => {
                let weight = born_weight(self.sample_interval, shape.as_deref(), dtype, *bytes);
                self.born(*tensor, *site, (*bytes, weight), *storage)
            }
            Event::Stored { site, .. } => {
                self.stats.entry(*site).or_default().stored += 1;
            }
            Event::Dropped { tensor, .. } => self.dropped(*tensor),
            Event::IterationEnd {
                t_ns,
                frame,
                iteration,
                live_tensors,
                live_bytes,
                sites,
                roles,
                ..
            } => {
                let end = (*t_ns, *frame, *iteration, *live_tensors, *live_bytes);
                self.iteration_end(end, sites, roles)
            }
            Event::Memory {
                t_ns,
                device,
                sample,
            } => self.memory(*t_ns, device, sample),
        }
    }

    fn loop_start(&mut self, frame: u64, site: u32, name: &str, outermost: bool) {
        let next = self.loops.len() as u32;
        let loop_index = *self
            .loop_index
            .entry((site, name.to_string()))
            .or_insert(next);
        if loop_index == next {
            self.loops.push(name.to_string());
        }
        self.frames.insert(
            frame,
            OpenFrame {
                loop_index,
                outermost,
            },
        );
    }

    /// A birth: counted at its site, and its storage's bytes made live there unless it is
    /// a view of a live storage.
    /// A birth at `site` of a tensor of storage `bytes` that stands for `weight` tensors
    /// (1 but in a sampled log).
    fn born(&mut self, tensor: u64, site: u32, (bytes, weight): (u64, f64), storage: u64) {
        self.stats.entry(site).or_default();
        let births = self.births.entry(site).or_default();
        births.0 += weight;
        births.1 += weight * bytes as f64;
        if self.tensors.contains_key(&tensor) {
            return;
        }
        let (generation, share) = match self.storages.get(&storage) {
            // A view of a live storage: its bytes are counted already.
            Some(s) if s.bytes == bytes => (s.generation, true),
            // The address was freed and reused before the sweep saw the drop.
            Some(s) => (s.generation + 1, false),
            None => (0, false),
        };
        if share {
            if let Some(s) = self.storages.get_mut(&storage) {
                s.tensors += 1;
            }
        } else {
            if let Some(old) = self.storages.remove(&storage) {
                self.sub_live(old.site, old.counted);
            }
            let counted = estimate_count(bytes as f64 * weight);
            self.storages.insert(
                storage,
                LiveStorage {
                    site,
                    bytes,
                    counted,
                    tensors: 1,
                    generation,
                },
            );
            self.add_live(site, counted);
        }
        self.tensors.insert(tensor, (storage, generation));
    }

    /// A drop: the storage's bytes leave its site with its last tensor.
    fn dropped(&mut self, tensor: u64) {
        let Some((storage, generation)) = self.tensors.remove(&tensor) else {
            return;
        };
        let Some(s) = self.storages.get_mut(&storage) else {
            return;
        };
        if s.generation != generation {
            return;
        }
        s.tensors -= 1;
        if s.tensors == 0 {
            let (site, bytes) = (s.site, s.counted);
            self.storages.remove(&storage);
            self.sub_live(site, bytes);
        }
    }

    /// An iteration end: a point with the live bytes by site, and a mark if the loop is
    /// outermost.
    fn iteration_end(
        &mut self,
        (t_ns, frame, iteration, live_tensors, live_bytes): (u64, u64, u64, u64, u64),
        sites: &[SiteSweep],
        roles: &[RoleBytes],
    ) {
        let mut by_role = [0u64; 6];
        for r in roles {
            if let Some(b) = by_role.get_mut(r.role.index()) {
                *b = r.bytes;
            }
        }
        self.iteration_ends += 1;
        let open = self.frames.get(&frame).copied().unwrap_or(OpenFrame {
            loop_index: u32::MAX,
            outermost: false,
        });
        for s in sites {
            let stats = self.stats.entry(s.site).or_default();
            stats.peak_survivors = stats.peak_survivors.max(s.survivors);
        }
        let mut by_site: Vec<SiteBytes> = self
            .site_live
            .iter()
            .map(|(&site, &bytes)| SiteBytes { site, bytes })
            .collect();
        by_site.sort_unstable_by_key(|s| s.site);
        for s in &by_site {
            let stats = self.stats.entry(s.site).or_default();
            stats.peak_live_bytes = stats.peak_live_bytes.max(s.bytes);
        }
        self.points.push(Point {
            t_ns,
            loop_index: open.loop_index,
            iteration,
            live_tensors,
            live_bytes,
            sites: by_site,
            roles: by_role,
            count: 1,
        });
        if open.outermost {
            self.marks.push(Mark {
                t_ns,
                loop_index: open.loop_index,
                iteration,
            });
        }
    }

    fn memory(&mut self, t_ns: u64, device: &str, sample: &MemorySample) {
        if !self.memory.contains_key(device) && self.memory.len() >= MAX_DEVICES {
            return;
        }
        let max_points = self.max_points;
        self.memory
            .entry(device.to_string())
            .or_insert_with(|| Downsampler::new(max_points))
            .push(MemoryPoint {
                t_ns,
                tracked: sample.tracked,
                pool_used: sample.pool_used,
                pool_reserved: sample.pool_reserved,
                count: 1,
            });
    }

    /// The timeline of the events applied so far.
    pub fn finish(self) -> Timeline {
        let mut stats = self.stats;
        for (site, bytes) in &self.site_live {
            stats.entry(*site).or_default().live_bytes = *bytes;
        }
        for (site, (tensors, bytes)) in &self.births {
            let s = stats.entry(*site).or_default();
            (s.born, s.born_bytes) = (estimate_count(*tensors), estimate_count(*bytes));
        }
        let (points, stride) = self.points.finish();
        let (marks, _) = self.marks.finish();
        Timeline {
            sites: self.sites,
            stats,
            loops: self.loops,
            points,
            stride,
            memory: self
                .memory
                .into_iter()
                .map(|(d, s)| (d, s.finish().0))
                .collect(),
            marks,
            t_min: self.t_min.unwrap_or(0),
            t_max: self.t_max,
            events: self.events,
            iteration_ends: self.iteration_ends,
        }
    }
}

/// A run's memory over time, downsampled. Made by [`TimelineBuilder`].
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Sites declared in the log.
    pub sites: BTreeMap<u32, SiteInfo>,
    /// What happened at each site that made, stored or kept tensors.
    pub stats: BTreeMap<u32, SiteStats>,
    /// Loop names, indexed by [`Point::loop_index`].
    pub loops: Vec<String>,
    /// Iteration ends, in time order, downsampled.
    pub points: Vec<Point>,
    /// At most this many iteration ends per point.
    pub stride: u64,
    /// Memory samples by device, downsampled.
    pub memory: BTreeMap<String, Vec<MemoryPoint>>,
    /// Iteration ends of outermost loops (downsampled past a few hundred).
    pub marks: Vec<Mark>,
    /// First and last time seen in any event.
    pub t_min: u64,
    pub t_max: u64,
    /// Events applied and iteration ends among them.
    pub events: u64,
    pub iteration_ends: u64,
}

impl Timeline {
    /// The name of the loop of a point (`?` for a frame the log never opened).
    pub fn loop_name(&self, index: u32) -> &str {
        self.loops.get(index as usize).map_or("?", |s| s.as_str())
    }

    /// The `n` sites with the most live bytes at any kept point, most first.
    pub fn top_sites(&self, n: usize) -> Vec<u32> {
        let mut peak: HashMap<u32, u64> = HashMap::new();
        for p in &self.points {
            for s in &p.sites {
                let e = peak.entry(s.site).or_default();
                *e = (*e).max(s.bytes);
            }
        }
        let mut v: Vec<(u32, u64)> = peak.into_iter().filter(|(_, b)| *b > 0).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.into_iter().take(n).map(|(s, _)| s).collect()
    }

    /// Live bytes of `site` at point `index` (0 if none).
    pub fn site_bytes(&self, index: usize, site: u32) -> u64 {
        let sites = &self.points[index].sites;
        sites
            .binary_search_by_key(&site, |s| s.site)
            .map_or(0, |i| sites[i].bytes)
    }

    /// The site id of a report's site reference, if the log declared it.
    pub fn site_id(&self, site: &SiteRef) -> Option<u32> {
        self.sites
            .iter()
            .find(|(_, s)| site.refers_to(s))
            .map(|(id, _)| *id)
    }
}

#[cfg(test)]
mod tests {
    use super::downsample::Merge;
    use super::*;

    #[test]
    fn merged_points_keep_the_fullest_iteration_end() {
        let p = |t, live| Point {
            t_ns: t,
            loop_index: 0,
            iteration: t,
            live_tensors: 1,
            live_bytes: live,
            sites: vec![],
            roles: [0; 6],
            count: 1,
        };
        let m = p(1, 10).merge(p(2, 30)).merge(p(3, 20));
        assert_eq!((m.t_ns, m.live_bytes, m.count), (2, 30, 3));
    }

    #[test]
    fn a_reused_storage_address_is_a_new_storage() {
        let mut b = TimelineBuilder::default();
        let born = |tensor, site, bytes| Event::Born {
            t_ns: 1,
            tensor,
            site,
            frame: None,
            iteration: 0,
            bytes,
            storage: 0xa0,
            shape: None,
            dtype: "f32".into(),
            device: "cpu".into(),
            thread: 1,
        };
        b.apply(&born(1, 1, 100));
        b.apply(&born(2, 1, 100)); // a view of the same storage
        b.apply(&born(3, 2, 64)); // the address was reused by another storage
        b.apply(&Event::Dropped { t_ns: 2, tensor: 1 });
        b.apply(&Event::Dropped { t_ns: 2, tensor: 2 });
        let t = b.finish();
        assert_eq!(t.stats[&1].live_bytes, 0);
        assert_eq!(t.stats[&2].live_bytes, 64);
    }
}
