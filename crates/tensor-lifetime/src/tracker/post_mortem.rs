//! The post-mortem: what is live now, by site, role and holder, the largest tensors, the
//! sites that grew most and what each device says of its memory
//! ([`tensor_lifetime_report::PostMortem`]). Written once per process, automatically,
//! when a tracked function returns candle's CUDA out-of-memory error ([`oom_seen`]):
//! on stderr, into the event log (a `post_mortem` event) and into the JSON report
//! (`TENSOR_LIFETIME_JSON`, its `post_mortem` field).

use super::holders::{self, GraphInputs};
use super::sink::write_json;
use super::{roles, FastMap, State, Tracker};
use crate::device::{Counters, DeviceId};
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, Ordering};
use tensor_lifetime_report::event::{Event, HolderSpec, MemorySample};
use tensor_lifetime_report::post_mortem::{
    DeviceMemory, Growth, HolderBytes, SiteBytes, TensorInfo,
};
use tensor_lifetime_report::report::{HolderKind, HolderRef};
use tensor_lifetime_report::{PostMortem, Role};

/// Sites, holders and tensors listed at most.
const TOP: usize = 10;

/// Per creation site: bytes, tensors, and the role and path of its first record.
#[derive(Default)]
struct SiteTally {
    bytes: u64,
    tensors: u64,
    role: Role,
    path: u32,
}

impl Tracker {
    /// What is live now (see the module docs); `reason` says why it is asked for.
    pub(crate) fn post_mortem(&self, reason: &str) -> PostMortem {
        let mut pm = {
            let (mut st, sweep) = self.settled();
            st.sink.declare_call_paths();
            let mut pm = st.live_by_origin();
            pm.reason = reason.to_string();
            pm.live_tensors = sweep.live_tensors;
            pm.live_bytes = sweep.live_bytes;
            pm.grew_most = st.grew_most();
            pm.devices = st
                .devices
                .iter()
                .map(|(d, live, _)| DeviceMemory {
                    device: d.to_string(),
                    memory: MemorySample {
                        tracked: live,
                        ..MemorySample::default()
                    },
                })
                .collect();
            pm
        };
        // The devices' own counters, read without the tracker's lock.
        let ids: Vec<DeviceId> = self.state.lock().devices.iter().map(|d| d.0).collect();
        for (d, id) in pm.devices.iter_mut().zip(ids) {
            if let Ok(c) = Counters::read(id, None) {
                d.memory = c.sample(d.memory.tracked);
            }
        }
        pm
    }

    /// Writes the post-mortem everywhere the tracker writes (stderr, the event log, the
    /// JSON report).
    pub(crate) fn write_post_mortem(&self, pm: &PostMortem) {
        eprint!("{pm}");
        let t_ns = self.now_ns();
        let report = {
            let mut st = self.state.lock();
            st.sink.emit(Event::PostMortem {
                t_ns,
                post_mortem: Box::new(pm.clone()),
            });
            st.sink.flush_log();
            st.sink.report()
        };
        write_json(&self.config, &report);
    }
}

/// Whether the out-of-memory post-mortem is still to be written (once per process):
/// true the first time only.
pub(crate) fn oom_seen() -> bool {
    static WRITTEN: AtomicBool = AtomicBool::new(false);
    !WRITTEN.swap(true, Ordering::AcqRel)
}

impl State {
    /// Live bytes by site, role and holder, and the largest tensors (each storage counted
    /// once, for its oldest record). Holders are chosen by the rule of the findings
    /// ([`holders::holder`]), graphs included.
    fn live_by_origin(&self) -> PostMortem {
        let mut records: Vec<_> = self.registry.iter().collect();
        records.sort_unstable_by_key(|r| r.id);
        // Graph holders as the findings see them: the graphs of every live record with an
        // autograd op are walked (a cost only the post-mortem pays).
        let graphs = holders::live_graphs(
            &records,
            GraphInputs {
                made_from: &self.made_from,
                registry: &self.registry,
            },
        );
        // Each storage's owner (its oldest record): its site.
        let mut owner_site: FastMap<usize, u32> = FastMap::default();
        let mut sites: Vec<(u32, SiteTally)> = Vec::new();
        let mut by_holder: Vec<(HolderSpec, (u64, u64))> = Vec::new();
        let mut pm = PostMortem::default();
        let mut owners = Vec::new();
        for r in &records {
            let (owns, owner) = match owner_site.entry(r.storage) {
                Entry::Occupied(o) => (false, *o.get()),
                Entry::Vacant(v) => (true, *v.insert(r.site)),
            };
            let bytes = if owns { r.storage_bytes } else { 0 };
            let role = roles::role(r.role);
            pm.by_role.add(role, bytes, 1);
            let s = match sites.iter_mut().find(|(s, _)| *s == r.site) {
                Some((_, s)) => s,
                None => {
                    sites.push((
                        r.site,
                        SiteTally {
                            role,
                            path: r.path,
                            ..SiteTally::default()
                        },
                    ));
                    &mut sites.last_mut().expect("just pushed").1
                }
            };
            s.bytes += bytes;
            s.tensors += 1;
            let graph = graphs.as_ref().and_then(|g| g.held.get(&r.id)).copied();
            let holder = holders::holder(r.store, graph, (!owns).then_some(owner));
            match by_holder.iter_mut().find(|(h, _)| *h == holder) {
                Some((_, (b, n))) => (*b, *n) = (*b + bytes, *n + 1),
                None => by_holder.push((holder, (bytes, 1))),
            }
            if owns {
                owners.push(*r);
            }
        }
        sites.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        pm.by_site = sites
            .iter()
            .take(TOP)
            .map(|(id, s)| SiteBytes {
                site: self.sink.site_ref(*id),
                role: s.role,
                bytes: s.bytes,
                tensors: s.tensors,
                call_path: self.sink.call_path(s.path),
            })
            .collect();
        by_holder.sort_by_key(|h| std::cmp::Reverse(h.1 .0));
        pm.by_holder = by_holder
            .iter()
            .take(TOP)
            .map(|(holder, (bytes, count))| {
                let (kind, site) = match *holder {
                    HolderSpec::Store { site } => (HolderKind::Store, site),
                    HolderSpec::Graph { site } => (HolderKind::Graph, site),
                    HolderSpec::View { site } => (HolderKind::View, site),
                    HolderSpec::Unknown => (HolderKind::Unknown, 0),
                };
                let site = (site != 0).then(|| self.sink.site_ref(site));
                HolderBytes {
                    holder: HolderRef {
                        kind,
                        file: site.as_ref().map(|s| s.file.clone()),
                        line: site.as_ref().map(|s| s.line),
                        label: site.map(|s| s.label),
                        count: *count,
                    },
                    bytes: *bytes,
                }
            })
            .collect();
        owners.sort_by(|a, b| b.storage_bytes.cmp(&a.storage_bytes).then(a.id.cmp(&b.id)));
        pm.largest = owners
            .iter()
            .take(TOP)
            .filter_map(|r| {
                let t = r.weak.upgrade()?;
                Some(TensorInfo {
                    site: self.sink.site_ref(r.site),
                    role: roles::role(r.role),
                    bytes: r.storage_bytes,
                    shape: t.dims().to_vec(),
                    dtype: format!("{:?}", t.dtype()).to_lowercase(),
                    device: r.device.to_string(),
                    call_path: self.sink.call_path(r.path),
                })
            })
            .collect();
        pm
    }

    /// The findings whose survivors grow, the fastest first.
    fn grew_most(&self) -> Vec<Growth> {
        let mut findings = self.sink.report().findings;
        findings.retain(|f| f.bytes_per_iteration > 0);
        findings.sort_by_key(|f| std::cmp::Reverse(f.bytes_per_iteration));
        findings
            .into_iter()
            .take(TOP)
            .map(|f| Growth {
                site: f.site,
                loop_name: f.loop_name,
                bytes: f.bytes,
                bytes_per_iteration: f.bytes_per_iteration,
                call_path: f.call_path,
            })
            .collect()
    }
}
