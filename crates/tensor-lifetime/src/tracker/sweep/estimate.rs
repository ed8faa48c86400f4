//! A sampled sweep's figures made estimates. In the sampled mode a record stands for the
//! inverse of the probability that its tensor was sampled ([`Sample::of`], by its own
//! bytes, the law of the report crate's model), so what a walk counted of the records is
//! scaled by their weights: the live tensors (the sum of the weights), the live bytes per
//! device and per role (each counted once per storage by the walk, times its records'
//! mean weight per byte), the temporaries of each role, and each site's survivors. Exact
//! mode never comes here.

use super::SweepResult;
use crate::device::DeviceId;
use crate::tracker::registry::{Record, Registry};
use crate::tracker::roles;
use crate::tracker::tally::{counted, scaled, Devices, RoleTally, Weights};
use tensor_lifetime_report::event::SiteSweep;
use tensor_lifetime_report::model::sample_weight;
use tensor_lifetime_report::RoleBytes;

/// The sampled mode's interval, as the figures of a walk are estimated at it (the root
/// makes one while the tracker samples, outside a leak test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::tracker) struct Sample {
    interval: u64,
}

impl Sample {
    /// The sample at `interval` (`None`: exact, nothing to estimate).
    pub(in crate::tracker) fn at(interval: Option<u64>) -> Option<Sample> {
        interval.map(|interval| Sample { interval })
    }

    /// The interval in bytes.
    pub(in crate::tracker) fn interval(self) -> u64 {
        self.interval
    }

    /// What a sampled tensor of `bytes` own bytes stands for.
    fn weight(self, bytes: u64) -> f64 {
        sample_weight(self.interval, bytes)
    }

    /// What record `r` stands for: the inverse of its tensor's probability, by its own
    /// bytes; a record made in a leak test (which records every tensor) counts once.
    pub(in crate::tracker) fn of(self, r: &Record) -> f64 {
        self.of_with(r, |bytes| self.weight(bytes))
    }

    /// [`Sample::of`] with `weight` of an own size.
    #[inline]
    fn of_with(self, r: &Record, weight: impl FnOnce(u64) -> f64) -> f64 {
        if r.session != 0 {
            1.0
        } else {
            weight(r.view_bytes)
        }
    }
}

/// [`Sample::of`] over a walk's records, the weight of the latest own size kept: records
/// of one shape come in runs (a site's, an iteration's), so most of them reuse it rather
/// than compute an exponential.
struct Weigher {
    sample: Sample,
    last: (u64, f64),
}

impl Weigher {
    fn new(sample: Sample) -> Weigher {
        Weigher {
            sample,
            last: (0, sample.weight(0)),
        }
    }

    fn of(&mut self, r: &Record) -> f64 {
        let (sample, last) = (self.sample, &mut self.last);
        sample.of_with(r, |bytes| {
            if bytes != last.0 {
                *last = (bytes, sample.weight(bytes));
            }
            last.1
        })
    }
}

/// What record `r` stands for under `sample` (1 in exact mode).
pub(in crate::tracker) fn weight_of(sample: Option<Sample>, r: &Record) -> f64 {
    sample.map_or(1.0, |s| s.of(r))
}

/// Devices whose weights a sampled sweep keeps apart (a host's GPUs and its CPU).
const DEVICES: usize = 16;

/// Makes the figures of a sweep that just walked `registry` estimates: `result`, the
/// devices' live bytes (and their peaks) and the live split by role.
pub(in crate::tracker) fn estimate_live(
    registry: &Registry,
    (devices, roles): (&mut Devices, &mut RoleTally),
    result: &mut SweepResult,
    sample: Sample,
) {
    let mut tensors = 0.0;
    let mut by_role = [Weights::default(); 8];
    // A handful of devices: their weights on the stack (a sampled sweep allocates
    // nothing), the rare ones beyond counted as the last.
    let mut by_device = [(DeviceId::default(), Weights::default()); DEVICES];
    let mut seen = 0;
    let mut weigher = Weigher::new(sample);
    for r in registry.iter() {
        let w = weigher.of(r);
        tensors += w;
        let d = match by_device[..seen].iter().position(|(d, _)| *d == r.device) {
            Some(i) => i,
            None if seen < DEVICES => {
                by_device[seen].0 = r.device;
                seen += 1;
                seen - 1
            }
            None => DEVICES - 1,
        };
        by_device[d].1.add(w, r.storage_bytes);
        by_role[usize::from(r.role & roles::INDEX)].add(w, r.storage_bytes);
    }
    let by_device = &by_device[..seen];
    result.live_bytes = devices.scale_live(|device| {
        by_device
            .iter()
            .find(|(d, _)| *d == device)
            .map_or(1.0, |(_, w)| w.per_byte())
    });
    roles.scale_live(|role| by_role[role]);
    result.live_tensors = counted(tensors);
}

/// Makes an iteration end's temporaries estimates: each role's count and bytes times the
/// weight of a temporary of their mean own bytes (a role's temporaries of one loop body
/// mostly share a few shapes).
pub(in crate::tracker) fn estimate_temporaries(split: &mut [RoleBytes], sample: Sample) {
    for r in split.iter_mut().filter(|r| r.temporary_tensors > 0) {
        let w = sample.weight((r.temporary_bytes / r.temporary_tensors).max(1));
        r.temporary_tensors = scaled(r.temporary_tensors, w);
        r.temporary_bytes = scaled(r.temporary_bytes, w);
    }
}

/// Scales the survivors' summaries of a sampled sweep to estimates: each site's counts
/// and bytes times the weight of a tensor of its survivors' mean own bytes (a view's own
/// bytes are its view bytes; the sample chose by them). A site's tensors mostly share
/// one shape, so the mean is their size.
pub(in crate::tracker) fn estimate_sites(sites: &mut [SiteSweep], sample: Sample) {
    for s in sites.iter_mut().filter(|s| s.survivors > 0) {
        let own = if s.view_bytes > 0 {
            s.view_bytes
        } else {
            s.bytes
        };
        let w = sample.weight((own / s.survivors).max(1));
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
