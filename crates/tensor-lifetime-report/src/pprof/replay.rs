//! The live tensors of an event log at a chosen moment: births and drops replayed up to
//! it, each storage's bytes counted once (for its oldest live tensor, as the tracker
//! counts), the role, call path and holder of each site from its latest sweep.

use super::{Allocated, LiveGroup, LiveProfile};
use crate::event::Event;
use crate::fast_hash::HashMap;
use crate::model::{born_weight, estimate_count, HolderSpec};
use crate::roles::Role;
use crate::Analysis;
use std::collections::BTreeMap;

/// The moment of a log that a profile is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The end of the log.
    End,
    /// The end of iteration `n` (counted from 0, as reports print it) of the first
    /// outermost loop that has one.
    Iteration(u64),
    /// After the log's first `n` events (a first pass's [`LiveReplay::peak_event`]).
    Event(u64),
}

/// One live tensor of the log.
#[derive(Debug, Clone, Copy)]
struct Tensor {
    site: u32,
    storage: u64,
    bytes: u64,
    device: u32,
    /// The latest store it went through (0: none).
    store: u32,
    /// The tensors it stands for: 1, or in a sampled log the inverse of its probability.
    weight: f64,
}

/// What the latest sweep said of a site's survivors.
#[derive(Debug, Clone, Copy, Default)]
struct SiteSeen {
    role: Option<Role>,
    holder: Option<HolderSpec>,
    call_path: Option<u32>,
}

/// Replays a log's events into the live tensors of one moment ([`At`]).
#[derive(Debug)]
pub struct LiveReplay {
    at: At,
    /// The moment is reached: later events are not applied.
    done: bool,
    analysis: Analysis,
    live: HashMap<u64, Tensor>,
    /// Live tensors of each storage, and its bytes (times its first tensor's weight in a
    /// sampled log).
    storages: HashMap<u64, (u64, u64)>,
    /// The log samples its tensors at this mean interval ([`Event::Sampling`]).
    sample_interval: Option<u64>,
    devices: Vec<String>,
    sites: HashMap<u32, SiteSeen>,
    outermost: Vec<u64>,
    live_bytes: u64,
    peak: (u64, u64),
    events: u64,
    started_unix_ms: u64,
    t_ns: u64,
}

impl LiveReplay {
    pub fn new(at: At) -> Self {
        LiveReplay {
            at,
            done: matches!(at, At::Event(0)),
            analysis: Analysis::default(),
            live: HashMap::default(),
            storages: HashMap::default(),
            sample_interval: None,
            devices: Vec::new(),
            sites: HashMap::default(),
            outermost: Vec::new(),
            live_bytes: 0,
            peak: (0, 0),
            events: 0,
            started_unix_ms: 0,
            t_ns: 0,
        }
    }

    /// Applies the next event of the log, unless the moment is already reached.
    pub fn apply(&mut self, event: &Event) {
        if self.done {
            return;
        }
        self.analysis.apply(event);
        self.events += 1;
        match event {
            Event::Header {
                started_unix_ms, ..
            } => self.started_unix_ms = *started_unix_ms,
            Event::Sampling { interval } => self.sample_interval = Some(*interval),
            Event::Born {
                t_ns,
                tensor,
                site,
                bytes,
                storage,
                device,
                shape,
                dtype,
                ..
            } => {
                let weight = born_weight(self.sample_interval, shape.as_deref(), dtype, *bytes);
                let counted = estimate_count(*bytes as f64 * weight);
                self.t_ns = *t_ns;
                self.drop_tensor(*tensor);
                let device = match self.devices.iter().position(|d| d == device) {
                    Some(i) => i,
                    None => {
                        self.devices.push(device.clone());
                        self.devices.len() - 1
                    }
                } as u32;
                let s = self.storages.entry(*storage).or_insert((0, counted));
                if s.0 == 0 {
                    s.1 = counted;
                    self.live_bytes = self.live_bytes.saturating_add(counted);
                }
                s.0 += 1;
                let t = Tensor {
                    site: *site,
                    storage: *storage,
                    bytes: *bytes,
                    device,
                    store: 0,
                    weight,
                };
                self.live.insert(*tensor, t);
                if self.live_bytes > self.peak.0 {
                    self.peak = (self.live_bytes, self.events);
                }
            }
            Event::Stored { t_ns, tensor, site } => {
                self.t_ns = *t_ns;
                if let Some(t) = self.live.get_mut(tensor) {
                    t.store = *site;
                }
            }
            Event::Dropped { t_ns, tensor } => {
                self.t_ns = *t_ns;
                self.drop_tensor(*tensor);
            }
            Event::LoopStart {
                t_ns,
                frame,
                parent,
                ..
            } => {
                self.t_ns = *t_ns;
                if parent.is_none() {
                    self.outermost.push(*frame);
                }
            }
            Event::IterationEnd {
                t_ns,
                frame,
                iteration,
                sites,
                ..
            } => {
                self.t_ns = *t_ns;
                for s in sites {
                    let seen = self.sites.entry(s.site).or_default();
                    seen.role = s.role.or(seen.role);
                    seen.holder = s.holders.first().map(|h| h.holder).or(seen.holder);
                    seen.call_path = s.call_paths.first().copied().or(seen.call_path);
                }
                if self.at == At::Iteration(*iteration) && self.outermost.contains(frame) {
                    self.done = true;
                }
            }
            Event::LoopEnd { t_ns, .. } | Event::Memory { t_ns, .. } => self.t_ns = *t_ns,
            _ => {}
        }
        if self.at == At::Event(self.events) {
            self.done = true;
        }
    }

    fn drop_tensor(&mut self, tensor: u64) {
        let Some(t) = self.live.remove(&tensor) else {
            return;
        };
        if let Some(s) = self.storages.get_mut(&t.storage) {
            s.0 = s.0.saturating_sub(1);
            if s.0 == 0 {
                self.live_bytes = self.live_bytes.saturating_sub(s.1);
                self.storages.remove(&t.storage);
            }
        }
    }

    /// Whether the moment was reached (always false for [`At::End`]).
    pub fn reached(&self) -> bool {
        self.done
    }

    /// Live bytes now, each storage counted once.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// The most live bytes so far, and after how many events: `At::Event` of the peak.
    pub fn peak_event(&self) -> (u64, u64) {
        self.peak
    }

    /// The analysis of the events applied (the report as of the moment).
    pub fn analysis(&self) -> &Analysis {
        &self.analysis
    }

    /// The profile of the moment; `what` names it in the profile's comments.
    pub fn profile(&self, what: &str) -> LiveProfile {
        let catalog = self.analysis.catalog();
        let mut tensors: Vec<(&u64, &Tensor)> = self.live.iter().collect();
        tensors.sort_unstable_by_key(|(id, _)| **id);
        let mut owned: HashMap<u64, ()> = HashMap::default();
        // (site, device, holder) -> (bytes, tensors), in a stable order: sums of the
        // tensors' weights (each 1 in an exact log).
        let mut groups: BTreeMap<(u32, u32, HolderSpec), (f64, f64)> = BTreeMap::new();
        for (_, t) in tensors {
            let owns = owned.insert(t.storage, ()).is_none();
            let seen = self.sites.get(&t.site).copied().unwrap_or_default();
            let holder = match seen.holder {
                Some(h) => h,
                None if t.store != 0 => HolderSpec::Store { site: t.store },
                None => HolderSpec::Unknown,
            };
            let g = groups.entry((t.site, t.device, holder)).or_default();
            if owns {
                g.0 += t.bytes as f64 * t.weight;
            }
            g.1 += t.weight;
        }
        let path = |site: u32| {
            let seen = self.sites.get(&site).copied().unwrap_or_default();
            seen.call_path
                .map(|p| catalog.call_path(p).to_vec())
                .unwrap_or_default()
        };
        let mut live: Vec<LiveGroup> = groups
            .into_iter()
            .map(|((site, device, holder), (bytes, tensors))| LiveGroup {
                site: catalog.site_ref(site),
                call_path: path(site),
                role: self
                    .sites
                    .get(&site)
                    .and_then(|s| s.role)
                    .unwrap_or_default(),
                device: self.devices[device as usize].clone(),
                holder: catalog
                    .holder_ref(&holder, estimate_count(tensors))
                    .to_string(),
                bytes: estimate_count(bytes),
                tensors: estimate_count(tensors),
            })
            .collect();
        live.sort_by_key(|g| std::cmp::Reverse(g.bytes));
        let allocated = Allocated::by_site(catalog, path);
        let start_ns = i64::try_from(self.started_unix_ms)
            .unwrap_or(0)
            .saturating_mul(1_000_000);
        let t_ns = i64::try_from(self.t_ns).unwrap_or(i64::MAX);
        LiveProfile {
            live,
            allocated,
            time_unix_ns: start_ns.saturating_add(t_ns),
            duration_ns: t_ns,
            comments: std::iter::once(format!("tensor-lifetime: live tensors {what}"))
                .chain(
                    self.sample_interval
                        .map(|i| crate::model::estimate_sentence(Some(i))),
                )
                .collect(),
        }
    }
}
