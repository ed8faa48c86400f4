//! The read-only answers behind the public API: the snapshot of live tensors and the
//! site totals (the post-mortem is [`super::post_mortem`]'s). The tracker's root drains
//! the probes and sweeps first, then asks these with the registry and the sink.

use super::registry::Registry;
use super::sink::Sink;
use super::sweep::{weight_of, Sample};
use super::tally::counted;
use crate::site::Site;

/// Births and drops of one creation site so far, as [`crate::site_totals`] lists them.
#[derive(Debug, Clone, Copy)]
pub struct SiteTotals {
    pub site: &'static Site,
    /// Tensors first seen at this site.
    pub born: u64,
    /// Of those, the ones dropped by now.
    pub dropped: u64,
}

/// Live tracked tensors in `registry` now (sites by id from `sites`), optionally only
/// those born in `session`, in the order they were first seen.
pub(super) fn live(
    registry: &Registry,
    sites: &[&'static Site],
    session: Option<u64>,
) -> Vec<LiveTensor> {
    let site = |id: u32| sites[id as usize - 1];
    let mut out: Vec<LiveTensor> = registry
        .iter()
        .filter(|r| session.is_none_or(|s| u64::from(r.session) == s))
        .map(|r| LiveTensor {
            site: site(r.site),
            store: (r.store != 0).then(|| site(r.store)),
            id: r.id,
            refcount: r.weak.strong_count(),
            storage_bytes: r.storage_bytes,
            view_bytes: r.view_bytes,
            device: r.device.to_string(),
            in_loop: r.frame != 0,
        })
        .collect();
    out.sort_by_key(|t| t.id);
    out
}

/// Per-site totals of tensors born (the judgement's count, from `sink`) and dropped
/// (the births not alive in `registry` now), in source order. In the sampled mode
/// (`sample`) both are estimates: a live record counts for its weight, as a birth does.
pub(super) fn site_totals(
    registry: &Registry,
    sites: &[&'static Site],
    (sink, sample): (&Sink, Option<Sample>),
) -> Vec<SiteTotals> {
    let mut weights = vec![0.0; sites.len()];
    for r in registry.iter() {
        weights[r.site as usize - 1] += weight_of(sample, r);
    }
    let live = weights.into_iter().map(counted);
    let mut v: Vec<_> = sites
        .iter()
        .zip(1u32..)
        .zip(live)
        .filter_map(|((site, id), live)| {
            let born = sink.births(id);
            (born > 0).then(|| {
                let dropped = born.saturating_sub(live);
                SiteTotals {
                    site,
                    born,
                    dropped,
                }
            })
        })
        .collect();
    v.sort_by_key(|t| (t.site.file, t.site.line, t.site.column));
    v
}

/// A live tracked tensor, as [`crate::snapshot`] lists it.
#[derive(Debug, Clone)]
pub struct LiveTensor {
    /// Creation site.
    pub site: &'static Site,
    /// Latest store site it went through.
    pub store: Option<&'static Site>,
    /// Order of first sighting.
    pub id: u64,
    /// Strong references now.
    pub refcount: usize,
    /// Bytes of its whole storage and of its own view.
    pub storage_bytes: u64,
    pub view_bytes: u64,
    /// `cpu`, `cuda:0`...
    pub device: String,
    /// Born inside a tracked loop.
    pub in_loop: bool,
}
