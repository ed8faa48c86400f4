//! The live tensors as a pprof profile ([`crate::write_pprof`]): a read-only query of
//! the records grouped by creation site, call path, role, device and holder (the holder
//! chosen by the findings' rule through [`sweep::live_holdings`]; each storage's bytes counted once,
//! for its oldest record), and the births per site from the judgement's catalog.

use super::inputs::MadeFrom;
use super::keep::FastMap;
use super::registry::Registry;
use super::roles;
use super::sink::Sink;
use super::sweep::{self, GraphInputs, Sample};
use super::tally::counted;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};
use tensor_lifetime_report::event::HolderSpec;
use tensor_lifetime_report::model::estimate_sentence;
use tensor_lifetime_report::pprof::{Allocated, LiveGroup, LiveProfile};

/// A group's key: site, call path, role code, device, holder (bytes and tensors are
/// summed per key, in a stable order).
type Group = (u32, u32, u8, String, HolderSpec);

/// The profile of the records of `registry` (sites and call paths named by `sink`, whose
/// call paths are declared); `duration_ns`: the tracker's clock now. In the sampled mode
/// (`sample`) each record stands for its weight, as pprof's heap profiles scale theirs,
/// and the comments say the figures are estimates.
pub(super) fn live_profile(
    registry: &Registry,
    made_from: &MadeFrom,
    sink: &Sink,
    (duration_ns, sample): (u64, Option<Sample>),
) -> LiveProfile {
    let holdings = sweep::live_holdings(GraphInputs {
        made_from,
        registry,
    });
    let mut groups: BTreeMap<Group, (f64, f64)> = BTreeMap::new();
    for h in &holdings {
        let r = h.record;
        let key = (r.site, r.path, r.role, r.device.to_string(), h.holder);
        let g = groups.entry(key).or_default();
        let w = sweep::weight_of(sample, r);
        if h.owns {
            g.0 += r.storage_bytes as f64 * w;
        }
        g.1 += w;
    }
    let catalog = sink.catalog();
    let mut live: Vec<LiveGroup> = groups
        .into_iter()
        .map(|((site, path, role, device, holder), (bytes, tensors))| {
            let tensors = counted(tensors);
            LiveGroup {
                site: sink.site_ref(site),
                call_path: sink.call_path(path),
                role: roles::role(role),
                device,
                holder: catalog.holder_ref(&holder, tensors).to_string(),
                bytes: counted(bytes),
                tensors,
            }
        })
        .collect();
    live.sort_by_key(|g| std::cmp::Reverse(g.bytes));
    // A site's call path: that of its first live record, if any.
    let mut paths: FastMap<u32, u32> = FastMap::default();
    for h in &holdings {
        paths.entry(h.record.site).or_insert(h.record.path);
    }
    let allocated = Allocated::by_site(catalog, |site| {
        paths
            .get(&site)
            .map(|p| sink.call_path(*p))
            .unwrap_or_default()
    });
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    LiveProfile {
        live,
        allocated,
        time_unix_ns: now,
        duration_ns: i64::try_from(duration_ns).unwrap_or(i64::MAX),
        comments: std::iter::once(format!(
            "tensor-lifetime: live tensors of process {} when write_pprof was called",
            std::process::id()
        ))
        .chain(sample.map(|s| estimate_sentence(Some(s.interval()))))
        .collect(),
    }
}
