//! The per-(frame, site) counts of the old records' survivors: what an exact walk's
//! summary of a site says (survivors, distinct iterations, bytes, holders, roles and
//! creating call paths), kept up to date as old records are added, taken, change holder
//! or role, or move to an enclosing loop's frame, so that a partial sweep summarizes the
//! old survivors without walking them.

use super::holders::{majority, put_origin};
use crate::tracker::registry::Record;
use crate::tracker::roles;
use crate::tracker::tally::RoleCounts;
use std::collections::VecDeque;
use tensor_lifetime_report::event::{HolderSpec, SiteSweep};

/// The survivors of one (frame, site) among the old records.
#[derive(Debug, Default)]
pub(in crate::tracker) struct SiteAgg {
    survivors: u64,
    /// (iteration, survivors born in it), by iteration; the first and last are non-zero.
    iterations: VecDeque<(u32, u32)>,
    /// Entries of `iterations` with a non-zero count.
    distinct: u64,
    bytes: u64,
    view_bytes: u64,
    view_storage_bytes: u64,
    /// The largest strong count read when its records turned old (or at the latest full
    /// walk): shown, not judged.
    refcount: u64,
    holders: Vec<(HolderSpec, u64)>,
    /// Survivors per role (by role index): the summary's role is the most frequent, as
    /// an exact walk's.
    roles: [u32; 8],
    /// The role index of most survivors in `roles` (the lowest on a tie), kept as they
    /// change.
    major: u8,
    /// The call paths that created the survivors, with their counts: the first
    /// [`PATHS`] seen (an exact walk's summary keeps as many).
    paths: [(u32, u32); PATHS],
}

/// Call paths kept per site, as in an exact walk's summary.
pub(in crate::tracker) const PATHS: usize = 4;

impl SiteAgg {
    /// The survivors counted.
    pub(in crate::tracker) fn survivors(&self) -> u64 {
        self.survivors
    }

    /// Survivors per holder, unsorted.
    pub(in crate::tracker) fn holders(&self) -> &[(HolderSpec, u64)] {
        &self.holders
    }

    /// Counts old record `r`, held by `holder`, with strong count `refcount`.
    pub(in crate::tracker) fn add(&mut self, r: &Record, holder: HolderSpec, refcount: u64) {
        self.survivors += 1;
        let its = &mut self.iterations;
        match its.back_mut() {
            Some(last) if last.0 == r.iteration => {
                last.1 += 1;
                if last.1 == 1 {
                    self.distinct += 1;
                }
            }
            Some(last) if last.0 > r.iteration => {
                let i = match its.binary_search_by_key(&r.iteration, |e| e.0) {
                    Ok(i) => i,
                    Err(i) => {
                        its.insert(i, (r.iteration, 0));
                        i
                    }
                };
                its[i].1 += 1;
                if its[i].1 == 1 {
                    self.distinct += 1;
                }
            }
            // The common case: the latest iteration so far.
            _ => {
                its.push_back((r.iteration, 1));
                self.distinct += 1;
            }
        }
        if r.owns {
            self.bytes += r.storage_bytes;
            if r.storage_bytes > r.view_bytes {
                self.view_bytes += r.view_bytes;
                self.view_storage_bytes += r.storage_bytes;
            }
        }
        self.refcount = self.refcount.max(refcount);
        match self.holders.iter_mut().find(|(h, _)| *h == holder) {
            Some((_, n)) => *n += 1,
            None => self.holders.push((holder, 1)),
        }
        let i = r.role & roles::INDEX;
        self.roles[usize::from(i)] += 1;
        let (n, best) = (
            self.roles[usize::from(i)],
            self.roles[usize::from(self.major)],
        );
        if n > best || (n == best && i < self.major) {
            self.major = i;
        }
        self.add_path(r.path, 1);
    }

    fn add_path(&mut self, path: u32, n: u32) {
        if path == 0 {
            return;
        }
        if let Some(e) = self.paths.iter_mut().find(|e| e.0 == path) {
            e.1 += n;
        } else if let Some(e) = self.paths.iter_mut().find(|e| e.1 == 0) {
            *e = (path, n);
        }
    }

    /// The role of most survivors, and their call paths (most frequent first), into `s`.
    pub(in crate::tracker) fn origin_into(&self, s: &mut SiteSweep) {
        let mut paths = self.paths;
        let mut used = 0;
        for i in 0..PATHS {
            if paths[i].1 > 0 {
                paths[used] = paths[i];
                used += 1;
            }
        }
        debug_assert_eq!(self.major, majority(&self.roles));
        put_origin(s, self.major, &mut paths[..used]);
    }

    /// One survivor's role changed (a hint seen on an old record).
    pub(in crate::tracker) fn move_role(&mut self, from: u8, to: u8) {
        let n = &mut self.roles[usize::from(from & roles::INDEX)];
        *n = n.saturating_sub(1);
        self.roles[usize::from(to & roles::INDEX)] += 1;
        self.major = majority(&self.roles);
    }

    /// Takes old record `r` (found dead), counted as held by `holder`.
    pub(in crate::tracker) fn remove(&mut self, r: &Record, holder: HolderSpec) {
        self.survivors = self.survivors.saturating_sub(1);
        let its = &mut self.iterations;
        if let Ok(i) = its.binary_search_by_key(&r.iteration, |e| e.0) {
            its[i].1 -= 1;
            if its[i].1 == 0 {
                self.distinct -= 1;
                while its.front().is_some_and(|e| e.1 == 0) {
                    its.pop_front();
                }
                while its.back().is_some_and(|e| e.1 == 0) {
                    its.pop_back();
                }
                // Zeros in the middle are dropped when they are half the entries.
                if its.len() as u64 > 2 * self.distinct + 8 {
                    its.retain(|e| e.1 > 0);
                }
            }
        }
        if r.owns {
            self.bytes = self.bytes.saturating_sub(r.storage_bytes);
            if r.storage_bytes > r.view_bytes {
                self.view_bytes = self.view_bytes.saturating_sub(r.view_bytes);
                self.view_storage_bytes = self.view_storage_bytes.saturating_sub(r.storage_bytes);
            }
        }
        if let Some(i) = self.holders.iter().position(|(h, _)| *h == holder) {
            self.holders[i].1 -= 1;
            if self.holders[i].1 == 0 {
                self.holders.swap_remove(i);
            }
        }
        let role = &mut self.roles[usize::from(r.role & roles::INDEX)];
        *role = role.saturating_sub(1);
        self.major = majority(&self.roles);
        if let Some(e) = self.paths.iter_mut().find(|e| e.0 == r.path && e.1 > 0) {
            e.1 -= 1;
        }
    }

    /// Moves one survivor from holder `from` to `to` (a store seen on an old record).
    pub(in crate::tracker) fn move_holder(&mut self, from: HolderSpec, to: HolderSpec) {
        if let Some(i) = self.holders.iter().position(|(h, _)| *h == from) {
            self.holders[i].1 -= 1;
            if self.holders[i].1 == 0 {
                self.holders.swap_remove(i);
            }
        }
        match self.holders.iter_mut().find(|(h, _)| *h == to) {
            Some((_, n)) => *n += 1,
            None => self.holders.push((to, 1)),
        }
    }

    /// The summary of these survivors (holders not yet chosen: [`super::holders::finish_holders`]).
    #[cfg(test)]
    pub(in crate::tracker) fn summary(&self, site: u32) -> SiteSweep {
        let mut s = SiteSweep::default();
        self.summary_into(site, &mut s);
        s
    }

    /// [`SiteAgg::summary`] written over `slot`, an earlier summary whose holders and
    /// call paths are left as they are (their allocations kept; see
    /// [`SiteAgg::origin_into`] and [`super::holders::finish_holders`]), its role unset.
    #[inline]
    pub(in crate::tracker) fn summary_into(&self, site: u32, slot: &mut SiteSweep) {
        slot.site = site;
        slot.survivors = self.survivors;
        slot.bytes = self.bytes;
        slot.iterations = self.distinct;
        slot.first_iteration = self.iterations.front().map_or(0, |e| u64::from(e.0));
        slot.last_iteration = self.iterations.back().map_or(0, |e| u64::from(e.0));
        slot.refcount = self.refcount;
        slot.view_bytes = self.view_bytes;
        slot.view_storage_bytes = self.view_storage_bytes;
        slot.graph_tensors = 0;
        slot.graph_bytes = 0;
        slot.role = None;
    }

    /// Takes in `other`, the survivors of a closed nested loop at this site, now all
    /// born in `iteration` of this frame.
    pub(in crate::tracker) fn absorb(&mut self, other: SiteAgg, iteration: u32) {
        if other.survivors == 0 {
            return;
        }
        self.survivors += other.survivors;
        let n = other.survivors.min(u64::from(u32::MAX)) as u32;
        let its = &mut self.iterations;
        match its.binary_search_by_key(&iteration, |e| e.0) {
            Ok(i) => {
                if its[i].1 == 0 {
                    self.distinct += 1;
                }
                its[i].1 = its[i].1.saturating_add(n);
            }
            Err(i) => {
                its.insert(i, (iteration, n));
                self.distinct += 1;
            }
        }
        self.bytes += other.bytes;
        self.view_bytes += other.view_bytes;
        self.view_storage_bytes += other.view_storage_bytes;
        self.refcount = self.refcount.max(other.refcount);
        for (holder, count) in other.holders {
            match self.holders.iter_mut().find(|(h, _)| *h == holder) {
                Some((_, n)) => *n += count,
                None => self.holders.push((holder, count)),
            }
        }
        for (mine, theirs) in self.roles.iter_mut().zip(other.roles) {
            *mine += theirs;
        }
        self.major = majority(&self.roles);
        for (path, n) in other.paths {
            self.add_path(path, n);
        }
    }

    pub(in crate::tracker) fn has_iteration(&self, iteration: u32) -> bool {
        self.iterations
            .binary_search_by_key(&iteration, |e| e.0)
            .is_ok_and(|i| self.iterations[i].1 > 0)
    }
}

/// What the sweeps count of the old records, kept as they change: per frame, its sites'
/// survivors (sorted by site); per role, the old records and the bytes they own (their
/// bytes per device are [`crate::tracker::tally::Devices::old`]).
#[derive(Default)]
pub(in crate::tracker) struct Aggregates {
    /// By frame, in the order first counted: the frames with old survivors are few (the
    /// open loops), so a scan finds one sooner than a hash would.
    frames: Vec<(u32, Vec<(u32, SiteAgg)>)>,
    roles: RoleCounts,
}

impl Aggregates {
    /// Forgets every count (a full walk counts the old records again).
    pub(in crate::tracker) fn clear(&mut self) {
        self.frames.clear();
        self.roles = RoleCounts::default();
    }

    /// Old records and the bytes they own, per role.
    pub(in crate::tracker) fn roles(&self) -> &RoleCounts {
        &self.roles
    }

    /// Adds (`add` true) or takes one old record of role `code` owning `bytes`.
    pub(in crate::tracker) fn count_role(&mut self, code: u8, bytes: u64, add: bool) {
        self.roles.count(code, bytes, add);
    }

    /// The counts of `frame`'s sites, by site.
    pub(in crate::tracker) fn frame(&self, frame: u32) -> Option<&[(u32, SiteAgg)]> {
        self.frames
            .iter()
            .find(|(f, _)| *f == frame)
            .map(|(_, sites)| sites.as_slice())
    }

    /// A nested loop `frame` closed: the counts of its old survivors move to the
    /// enclosing frame's `iteration` (`parent` 0: none; records outside any loop are not
    /// counted), as its records do. What a full walk would rebuild, without the walk.
    pub(in crate::tracker) fn reframe(&mut self, frame: u32, parent: u32, iteration: u32) {
        let Some(i) = self.frames.iter().position(|(f, _)| *f == frame) else {
            return;
        };
        let (_, sites) = self.frames.swap_remove(i);
        if parent == 0 {
            return;
        }
        for (site, agg) in sites {
            self.site_mut(parent, site).absorb(agg, iteration);
        }
    }

    /// The counts of (`frame`, `site`), made empty when first asked for.
    pub(in crate::tracker) fn site_mut(&mut self, frame: u32, site: u32) -> &mut SiteAgg {
        let f = match self.frames.iter().position(|(f, _)| *f == frame) {
            Some(f) => f,
            None => {
                self.frames.push((frame, Vec::new()));
                self.frames.len() - 1
            }
        };
        let v = &mut self.frames[f].1;
        let i = match v.binary_search_by_key(&site, |e| e.0) {
            Ok(i) => i,
            Err(i) => {
                v.insert(i, (site, SiteAgg::default()));
                i
            }
        };
        &mut v[i].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::registry::tests::record;
    use candle_core::{DType, Device, Tensor};
    use tensor_lifetime_report::Role;

    /// A record of iteration `iteration`, role `role`, call path `path`, owning 100 bytes
    /// (its own view 40 of them) when `owns`.
    fn old(t: &Tensor, id: u64, iteration: u32, role: Role, path: u32, owns: bool) -> Record {
        let (_, mut r) = record(t, id);
        (r.iteration, r.role, r.path, r.owns) = (iteration, role.index() as u8, path, owns);
        (r.storage_bytes, r.view_bytes) = (100, 40);
        r
    }

    const STORE: HolderSpec = HolderSpec::Store { site: 9 };

    #[test]
    fn counts_follow_adds_removes_and_moves() {
        let t = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
        let a = old(&t, 1, 3, Role::Activation, 5, true);
        let b = old(&t, 2, 3, Role::Other, 5, true);
        let c = old(&t, 3, 1, Role::Other, 6, false);
        let mut agg = SiteAgg::default();
        agg.add(&a, HolderSpec::Unknown, 2);
        agg.add(&b, STORE, 1);
        // Out of order: iteration 1 after 3.
        agg.add(&c, HolderSpec::View { site: 4 }, 1);
        let s = agg.summary(7);
        assert_eq!((s.site, s.survivors, s.iterations), (7, 3, 2));
        assert_eq!((s.first_iteration, s.last_iteration), (1, 3));
        // Bytes of the owners only; view bytes of those whose storage is larger.
        assert_eq!(
            (s.bytes, s.view_bytes, s.view_storage_bytes),
            (200, 80, 200)
        );
        assert_eq!(s.refcount, 2);
        assert!(agg.has_iteration(1) && agg.has_iteration(3) && !agg.has_iteration(2));
        let mut holders = agg.holders().to_vec();
        holders.sort();
        assert_eq!(
            holders,
            [
                (STORE, 1),
                (HolderSpec::View { site: 4 }, 1),
                (HolderSpec::Unknown, 1)
            ]
        );
        let mut origin = SiteSweep::default();
        agg.origin_into(&mut origin);
        assert_eq!(origin.role, Some(Role::Other));
        assert_eq!(origin.call_paths, [5, 6]);

        // A store seen on `a`; `b` turns activation.
        agg.move_holder(HolderSpec::Unknown, STORE);
        agg.move_role(b.role, Role::Activation.index() as u8);
        let mut holders = agg.holders().to_vec();
        holders.sort();
        assert_eq!(holders, [(STORE, 2), (HolderSpec::View { site: 4 }, 1)]);
        agg.origin_into(&mut origin);
        assert_eq!(origin.role, Some(Role::Activation));

        // `c` dies: its iteration goes, its bytes were not counted.
        let mut c = c;
        c.role = Role::Other.index() as u8;
        agg.remove(&c, HolderSpec::View { site: 4 });
        let s = agg.summary(7);
        assert_eq!((s.survivors, s.iterations, s.first_iteration), (2, 1, 3));
        assert_eq!(s.bytes, 200);
        assert_eq!(agg.holders(), [(STORE, 2)]);
        agg.origin_into(&mut origin);
        assert_eq!(origin.call_paths, [5]);
        // Both others die: nothing is left.
        agg.remove(&a, STORE);
        let mut b = b;
        b.role = Role::Activation.index() as u8;
        agg.remove(&b, STORE);
        let s = agg.summary(7);
        assert_eq!(
            (s.survivors, s.iterations, s.bytes, s.view_bytes),
            (0, 0, 0, 0)
        );
        assert!(agg.holders().is_empty());
    }

    #[test]
    fn a_closed_loops_counts_move_to_the_enclosing_iteration() {
        let t = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
        let mut aggs = Aggregates::default();
        // Frame 2 (nested in 1) has two survivors of site 7, in iterations 0 and 4.
        for (id, iteration) in [(1, 0), (2, 4)] {
            let r = old(&t, id, iteration, Role::Input, 8, true);
            aggs.site_mut(2, 7).add(&r, STORE, 1);
        }
        // Frame 1 already has one at site 7, iteration 2.
        let r = old(&t, 3, 2, Role::Input, 8, true);
        aggs.site_mut(1, 7).add(&r, HolderSpec::Unknown, 3);
        aggs.reframe(2, 1, 5);
        assert!(aggs.frame(2).is_none());
        let sites = aggs.frame(1).expect("frame 1");
        assert_eq!(sites.len(), 1);
        let (site, agg) = &sites[0];
        let s = agg.summary(*site);
        // Now all born in iteration 5 of frame 1: iterations 2 and 5.
        assert_eq!((s.survivors, s.iterations), (3, 2));
        assert_eq!((s.first_iteration, s.last_iteration), (2, 5));
        assert_eq!((s.bytes, s.refcount), (300, 3));
        let mut holders = agg.holders().to_vec();
        holders.sort();
        assert_eq!(holders, [(STORE, 2), (HolderSpec::Unknown, 1)]);
        let mut origin = SiteSweep::default();
        agg.origin_into(&mut origin);
        assert_eq!(
            (origin.role, origin.call_paths.as_slice()),
            (Some(Role::Input), &[8][..])
        );
        // A loop outside any loop hands its counts to no frame.
        aggs.reframe(1, 0, 0);
        assert!(aggs.frame(1).is_none());
        // The role counts are kept apart, and cleared with the rest.
        aggs.count_role(Role::Input.index() as u8, 100, true);
        aggs.clear();
        assert!(aggs.frame(1).is_none());
    }
}
