//! The post-mortem: what is live now, by site, role and holder, the largest tensors, the
//! sites that grew most and what each device says of its memory
//! ([`tensor_lifetime_report::PostMortem`]). Written once per process, automatically,
//! when a tracked function returns candle's CUDA out-of-memory error ([`oom_seen`]):
//! on stderr, into the event log (a `post_mortem` event) and into the JSON report
//! (`TENSOR_LIFETIME_JSON`, its `post_mortem` field).

use super::inputs::MadeFrom;
use super::registry::Registry;
use super::roles;
use super::sink::Sink;
use super::sweep::{self, GraphInputs, Holding, Sample};
use super::tally::{counted, Devices};
use crate::device::{Counters, DeviceId};
use std::sync::atomic::{AtomicBool, Ordering};
use tensor_lifetime_report::event::{HolderSpec, MemorySample};
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
    /// Sums of the records' weights (each 1 in exact mode).
    bytes: f64,
    tensors: f64,
    role: Role,
    path: u32,
}

/// Whether the out-of-memory post-mortem is still to be written (once per process):
/// true the first time only.
pub(crate) fn oom_seen() -> bool {
    static WRITTEN: AtomicBool = AtomicBool::new(false);
    !WRITTEN.swap(true, Ordering::AcqRel)
}

/// The devices the tracker has seen, with the bytes tracked on each now.
pub(super) fn devices(devices: &Devices) -> Vec<DeviceMemory> {
    devices
        .iter()
        .map(|(d, live, _)| DeviceMemory {
            device: d.to_string(),
            memory: MemorySample {
                tracked: live,
                ..MemorySample::default()
            },
        })
        .collect()
}

/// Fills each device's counters in (read without the tracker's lock).
pub(super) fn read_counters(pm: &mut PostMortem, ids: Vec<DeviceId>) {
    for (d, id) in pm.devices.iter_mut().zip(ids) {
        if let Ok(c) = Counters::read(id, None) {
            d.memory = c.sample(d.memory.tracked);
        }
    }
}

/// What the post-mortem says of the records of `registry`: live bytes by site, role and
/// holder, and the largest tensors (each storage counted once, for its oldest record).
/// Holders are chosen by the rule of the findings ([`sweep::live_holdings`]), graphs included
/// (`made_from`: the inputs the macro saw); sites and call paths are named by `sink`.
pub(super) fn live_by_origin(
    registry: &Registry,
    made_from: &MadeFrom,
    (sink, sample): (&Sink, Option<Sample>),
) -> PostMortem {
    let holdings = sweep::live_holdings(GraphInputs {
        made_from,
        registry,
    });
    let mut sites: Vec<(u32, SiteTally)> = Vec::new();
    let mut by_holder: Vec<(HolderSpec, (f64, f64))> = Vec::new();
    let mut pm = PostMortem::default();
    if let Some(s) = sample {
        pm.mark_estimated(s.interval());
    }
    let mut by_role = [(0.0, 0.0); Role::ALL.len()];
    let mut owners = Vec::new();
    for &Holding {
        record: r,
        owns,
        holder,
    } in &holdings
    {
        // What the record stands for: its weight in the sampled mode.
        let w = sweep::weight_of(sample, r);
        let bytes = if owns {
            r.storage_bytes as f64 * w
        } else {
            0.0
        };
        let role = roles::role(r.role);
        let slot = &mut by_role[role.index()];
        (slot.0, slot.1) = (slot.0 + bytes, slot.1 + w);
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
        s.tensors += w;
        match by_holder.iter_mut().find(|(h, _)| *h == holder) {
            Some((_, (b, n))) => (*b, *n) = (*b + bytes, *n + w),
            None => by_holder.push((holder, (bytes, w))),
        }
        if owns {
            owners.push(r);
        }
    }
    for (role, (bytes, tensors)) in Role::ALL.into_iter().zip(by_role) {
        if tensors > 0.0 {
            pm.by_role.add(role, counted(bytes), counted(tensors));
        }
    }
    sites.sort_by(|a, b| b.1.bytes.total_cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
    pm.by_site = sites
        .iter()
        .take(TOP)
        .map(|(id, s)| SiteBytes {
            site: sink.site_ref(*id),
            role: s.role,
            bytes: counted(s.bytes),
            tensors: counted(s.tensors),
            call_path: sink.call_path(s.path),
        })
        .collect();
    by_holder.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
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
            let site = (site != 0).then(|| sink.site_ref(site));
            HolderBytes {
                holder: HolderRef {
                    kind,
                    file: site.as_ref().map(|s| s.file.clone()),
                    line: site.as_ref().map(|s| s.line),
                    label: site.map(|s| s.label),
                    count: counted(*count),
                },
                bytes: counted(*bytes),
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
                site: sink.site_ref(r.site),
                role: roles::role(r.role),
                bytes: r.storage_bytes,
                shape: t.dims().to_vec(),
                dtype: format!("{:?}", t.dtype()).to_lowercase(),
                device: r.device.to_string(),
                call_path: sink.call_path(r.path),
            })
        })
        .collect();
    pm
}

/// The findings (of `sink`'s judgement) whose survivors grow, the fastest first.
pub(super) fn grew_most(sink: &Sink) -> Vec<Growth> {
    let mut findings = sink.report().findings;
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
