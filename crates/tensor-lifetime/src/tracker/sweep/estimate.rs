//! A sampled sweep's figures made estimates. In the sampled mode a record stands for the
//! inverse of the probability that its tensor was sampled (`weight` of its own bytes:
//! the root passes [`crate::sample::weight`]), so what a walk counted of the records is
//! scaled by their weights: the
//! live tensors (the sum of the weights), the live bytes per device and per role (each
//! counted once per storage by the walk, times its records' mean weight per byte), the
//! temporaries of each role, and each site's survivors. Exact mode never comes here.

use super::SweepResult;
use crate::device::DeviceId;
use crate::tracker::registry::Registry;
use crate::tracker::roles;
use crate::tracker::tally::{scaled, Devices, RoleTally, Weights};
use tensor_lifetime_report::event::SiteSweep;
use tensor_lifetime_report::RoleBytes;

/// Makes the figures of a sweep that just walked `registry` estimates: `result`, the
/// devices' live bytes (and their peaks) and the live split by role.
pub(in crate::tracker) fn estimate_live(
    registry: &Registry,
    (devices, roles): (&mut Devices, &mut RoleTally),
    result: &mut SweepResult,
    weight: impl Fn(u64) -> f64,
) {
    let mut tensors = 0.0;
    let mut by_device: Vec<(DeviceId, Weights)> = Vec::new();
    let mut by_role = [Weights::default(); 8];
    for r in registry.iter() {
        let w = weight(r.view_bytes);
        tensors += w;
        let d = match by_device.iter().position(|(d, _)| *d == r.device) {
            Some(i) => i,
            None => {
                by_device.push((r.device, Weights::default()));
                by_device.len() - 1
            }
        };
        by_device[d].1.add(w, r.storage_bytes);
        by_role[usize::from(r.role & roles::INDEX)].add(w, r.storage_bytes);
    }
    result.live_bytes = devices.scale_live(|device| {
        by_device
            .iter()
            .find(|(d, _)| *d == device)
            .map_or(1.0, |(_, w)| w.per_byte())
    });
    roles.scale_live(|role| by_role[role]);
    result.live_tensors = tensors.round() as u64;
}

/// Makes an iteration end's temporaries estimates: each role's count and bytes times the
/// weight of a temporary of their mean own bytes (a role's temporaries of one loop body
/// mostly share a few shapes).
pub(in crate::tracker) fn estimate_temporaries(
    split: &mut [RoleBytes],
    weight: impl Fn(u64) -> f64,
) {
    for r in split.iter_mut().filter(|r| r.temporary_tensors > 0) {
        let w = weight((r.temporary_bytes / r.temporary_tensors).max(1));
        r.temporary_tensors = scaled(r.temporary_tensors, w);
        r.temporary_bytes = scaled(r.temporary_bytes, w);
    }
}

/// Scales the survivors' summaries of a sampled sweep to estimates: each site's counts
/// and bytes times the weight of a tensor of its survivors' mean own bytes (a view's own
/// bytes are its view bytes; the sample chose by them). A site's tensors mostly share
/// one shape, so the mean is their size.
pub(in crate::tracker) fn estimate_sites(sites: &mut [SiteSweep], weight: impl Fn(u64) -> f64) {
    for s in sites.iter_mut().filter(|s| s.survivors > 0) {
        let own = if s.view_bytes > 0 {
            s.view_bytes
        } else {
            s.bytes
        };
        let w = weight((own / s.survivors).max(1));
        for v in [
            &mut s.survivors,
            &mut s.bytes,
            &mut s.view_bytes,
            &mut s.view_storage_bytes,
        ] {
            *v = scaled(*v, w);
        }
        s.holders
            .iter_mut()
            .for_each(|h| h.count = scaled(h.count, w));
    }
}
