//! Tracked bytes per device and per role: the one place that writes them. A walk counts
//! into them ([`Devices::count`], [`RoleTally::tensor`] / [`RoleTally::bytes`]) and
//! finishes its count; the old records of the generational mode are kept counted as they
//! change ([`Devices::old`], [`RoleCounts`]), and a partial walk adds them to what it
//! counted.

use crate::device::DeviceId;
use tensor_lifetime_report::{Role, RoleBytes};

/// Tracked bytes of one device.
#[derive(Debug, Default, Clone, Copy)]
struct DeviceBytes {
    live: u64,
    peak: u64,
    /// Live bytes being counted by a walk (0 between walks).
    tally: u64,
    /// Generational mode: the bytes the old records own, kept as they change.
    old: u64,
}

/// Tracked bytes per device, sorted by device (a handful of devices at most).
#[derive(Debug, Default)]
pub(super) struct Devices {
    list: Vec<(DeviceId, DeviceBytes)>,
    /// The device looked up last and its index: records come mostly from one device,
    /// whose entry is then looked up once per run of it.
    last: Option<(DeviceId, usize)>,
}

impl Devices {
    /// Starts a count over (the claims' count after a walk that counted): a walk starts
    /// from the zeros the previous count left ([`Devices::finish_count`]).
    pub(super) fn start_count(&mut self) {
        for (_, d) in &mut self.list {
            d.tally = 0;
        }
    }

    /// Counts `bytes` of a live storage on `device`.
    #[inline]
    pub(super) fn count(&mut self, device: DeviceId, bytes: u64) {
        let i = self.index(device);
        self.list[i].1.tally += bytes;
    }

    /// Ends a count: what it counted is live (with the old records' bytes when
    /// `with_old`: a partial walk did not walk them), the peak follows. Returns the live
    /// bytes of all devices.
    pub(super) fn finish_count(&mut self, with_old: bool) -> u64 {
        let mut live = 0;
        for (_, d) in &mut self.list {
            let old = if with_old { d.old } else { 0 };
            d.live = old + std::mem::take(&mut d.tally);
            d.peak = d.peak.max(d.live);
            live += d.live;
        }
        live
    }

    /// Adds (`add` true) or takes the `bytes` an old record owns on `device`.
    #[inline]
    pub(super) fn old(&mut self, device: DeviceId, bytes: u64, add: bool) {
        let i = self.index(device);
        let old = &mut self.list[i].1.old;
        *old = if add {
            *old + bytes
        } else {
            old.saturating_sub(bytes)
        };
    }

    /// A sampled sweep's live bytes made estimates: each device's times `per_byte` of it
    /// (its peak follows). Returns the live bytes of all devices.
    pub(super) fn scale_live(&mut self, per_byte: impl Fn(DeviceId) -> f64) -> u64 {
        let mut live = 0;
        for (device, d) in &mut self.list {
            d.live = scaled(d.live, per_byte(*device));
            d.peak = d.peak.max(d.live);
            live += d.live;
        }
        live
    }

    /// Forgets the old records' bytes (they are counted again).
    pub(super) fn clear_old(&mut self) {
        for (_, d) in &mut self.list {
            d.old = 0;
        }
    }

    /// Live and peak bytes of `device`.
    pub(super) fn live_peak(&self, device: DeviceId) -> (u64, u64) {
        self.list
            .iter()
            .find(|(d, _)| *d == device)
            .map_or((0, 0), |(_, b)| (b.live, b.peak))
    }

    /// The peak of `device` starts over from its live bytes.
    pub(super) fn reset_peak(&mut self, device: DeviceId) {
        if let Some((_, b)) = self.list.iter_mut().find(|(d, _)| *d == device) {
            b.peak = b.live;
        }
    }

    /// Each device seen, with its live and peak bytes.
    pub(super) fn iter(&self) -> impl Iterator<Item = (DeviceId, u64, u64)> + '_ {
        self.list.iter().map(|(d, b)| (*d, b.live, b.peak))
    }

    /// The index of `device`, added in device order when first seen.
    #[inline]
    fn index(&mut self, device: DeviceId) -> usize {
        match self.last {
            Some((d, i)) if d == device => i,
            _ => {
                let i = self.index_slow(device);
                self.last = Some((device, i));
                i
            }
        }
    }

    fn index_slow(&mut self, device: DeviceId) -> usize {
        let list = &mut self.list;
        match list.iter().position(|(d, _)| *d >= device) {
            Some(i) if list[i].0 == device => i,
            Some(i) => {
                list.insert(i, (device, DeviceBytes::default()));
                i
            }
            None => {
                list.push((device, DeviceBytes::default()));
                list.len() - 1
            }
        }
    }
}

/// Per role: live tensors and the bytes they own. A sweep counts into one as it walks
/// ([`RoleTally`]); the old records of the generational registry keep one as records
/// change ([`super::site_counts`]), so that a partial sweep's split by role covers the
/// records it does not walk.
#[derive(Debug, Default, Clone)]
pub(super) struct RoleCounts {
    tensors: [u64; SLOTS],
    bytes: [u64; SLOTS],
}

impl RoleCounts {
    /// Adds (`add` true) or takes one record of role `code` owning `bytes`.
    #[inline]
    pub(super) fn count(&mut self, code: u8, bytes: u64, add: bool) {
        let i = slot(code);
        if add {
            self.tensors[i] += 1;
            self.bytes[i] += bytes;
        } else {
            self.tensors[i] = self.tensors[i].saturating_sub(1);
            self.bytes[i] = self.bytes[i].saturating_sub(bytes);
        }
    }
}

/// Slots of the per-role arrays: the six roles a tensor can have, indexed by the role
/// byte's low bits (masked, so no bounds check).
const SLOTS: usize = 8;

/// Per role: the tensors and bytes being counted by a sweep, and the split of the latest
/// sweep (live tensors and bytes) with the temporaries (born since the latest iteration
/// end and dead since), kept in the split handed to the analysis at iteration ends.
#[derive(Debug)]
pub(super) struct RoleTally {
    counting: RoleCounts,
    /// Records with an id from here on were born since the latest iteration end.
    watermark: u64,
    /// One entry per role, in role order (its roles never change, only the counts).
    split: Vec<RoleBytes>,
}

impl Default for RoleTally {
    fn default() -> Self {
        RoleTally {
            counting: RoleCounts::default(),
            watermark: 0,
            split: new_split(),
        }
    }
}

fn new_split() -> Vec<RoleBytes> {
    (0..ROLES)
        .map(|i| RoleBytes {
            role: Role::from_index(i),
            ..RoleBytes::default()
        })
        .collect()
}

impl RoleTally {
    /// A live record of role `code` (its bytes are counted by [`RoleTally::bytes`], once
    /// per storage).
    #[inline]
    pub(super) fn tensor(&mut self, code: u8) {
        self.counting.tensors[slot(code)] += 1;
    }

    /// A live storage's bytes, for its owner's role.
    #[inline]
    pub(super) fn bytes(&mut self, code: u8, bytes: u64) {
        self.counting.bytes[slot(code)] += bytes;
    }

    /// Forgets the bytes counted so far in this sweep (its storages are claimed again).
    pub(super) fn reset_bytes(&mut self) {
        self.counting.bytes = [0; SLOTS];
    }

    /// A record found dead: a temporary if born since the latest iteration end.
    #[inline]
    pub(super) fn dead(&mut self, id: u64, code: u8, bytes: u64) {
        if id >= self.watermark {
            self.temporary(code, bytes);
        }
    }

    /// A tensor born and dead since the latest iteration end.
    #[inline]
    pub(super) fn temporary(&mut self, code: u8, bytes: u64) {
        if let Some(r) = self.split.get_mut(slot(code)) {
            r.temporary_tensors += 1;
            r.temporary_bytes += bytes;
        }
    }

    /// The end of a sweep: what it counted, with the counts kept elsewhere in `old` (the
    /// old records a partial sweep does not walk), becomes the live split.
    #[inline]
    pub(super) fn finish_sweep(&mut self, old: Option<&RoleCounts>) {
        let none = RoleCounts::default();
        let old = old.unwrap_or(&none);
        let counted = &mut self.counting;
        let sums =
            (counted.tensors.iter().zip(&old.tensors)).zip(counted.bytes.iter().zip(&old.bytes));
        for (r, ((t, ot), (b, ob))) in self.split.iter_mut().zip(sums) {
            r.tensors = t + ot;
            r.bytes = b + ob;
        }
        *counted = RoleCounts::default();
    }

    /// A sampled sweep's split made estimates: each role's tensors are the weights of
    /// its records, its bytes what the sweep counted times their weight per byte
    /// (`weights` by role index).
    pub(super) fn scale_live(&mut self, weights: impl Fn(usize) -> Weights) {
        for r in &mut self.split {
            let w = weights(r.role.index());
            r.tensors = counted(w.tensors);
            r.bytes = scaled(r.bytes, w.per_byte());
        }
    }

    /// An iteration end: its split, one entry per role (give it back with
    /// [`RoleTally::put_back`], which starts the temporaries over from `next_record`).
    #[inline]
    pub(super) fn iteration_end(&mut self) -> Vec<RoleBytes> {
        std::mem::take(&mut self.split)
    }

    /// Takes back an iteration end's split (or makes a new one if it was changed); the
    /// temporaries start over from `next_record`.
    #[inline]
    pub(super) fn put_back(&mut self, mut split: Vec<RoleBytes>, next_record: u64) {
        if split.len() != ROLES {
            split = new_split();
        }
        for r in &mut split {
            r.temporary_tensors = 0;
            r.temporary_bytes = 0;
        }
        self.split = split;
        self.watermark = next_record;
    }
}

/// The six roles a tensor can have (not `temporary`).
const ROLES: usize = 6;

#[inline]
fn slot(code: u8) -> usize {
    usize::from(code) & (SLOTS - 1)
}

/// What the records of one device or one role weigh: their weights, and their storages'
/// bytes as counted and weighted.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Weights {
    pub(super) tensors: f64,
    bytes: f64,
    weighted: f64,
}

impl Weights {
    pub(super) fn add(&mut self, weight: f64, bytes: u64) {
        self.tensors += weight;
        self.bytes += bytes as f64;
        self.weighted += weight * bytes as f64;
    }

    /// What a byte of these records stands for: 1 when they have none.
    pub(super) fn per_byte(&self) -> f64 {
        if self.bytes > 0.0 {
            self.weighted / self.bytes
        } else {
            1.0
        }
    }
}

/// `v` scaled by `factor`, rounded ([`counted`]).
pub(super) fn scaled(v: u64, factor: f64) -> u64 {
    counted(v as f64 * factor)
}

/// A sum of weights (the sampled mode's estimates) as a count (the report crate's rule).
pub(super) use tensor_lifetime_report::model::estimate_count as counted;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_count_adds_the_old_bytes_and_an_exact_one_does_not() {
        let gpu = DeviceId::of_location(candle_core::DeviceLocation::Cuda { gpu_id: 0 });
        let mut d = Devices::default();
        d.count(gpu, 10);
        d.count(DeviceId::CPU, 5);
        assert_eq!(d.finish_count(false), 15);
        // Sorted by device, whatever the order seen.
        let seen: Vec<_> = d.iter().collect();
        assert_eq!(seen, [(DeviceId::CPU, 5, 5), (gpu, 10, 10)]);
        d.old(gpu, 100, true);
        d.old(gpu, 40, false);
        d.start_count();
        d.count(gpu, 1);
        assert_eq!(d.finish_count(true), 61);
        assert_eq!(d.live_peak(gpu), (61, 61));
        // An exact count walks the old records itself.
        d.count(gpu, 2);
        assert_eq!(d.finish_count(false), 2);
        assert_eq!(d.live_peak(gpu), (2, 61));
        d.reset_peak(gpu);
        assert_eq!(d.live_peak(gpu), (2, 2));
        d.clear_old();
        d.start_count();
        assert_eq!(d.finish_count(true), 0);
    }
}
