//! Generations: what keeps an inner iteration end's cost bounded when many records are
//! alive (issue 16; the rule is in [`super::sweep`]'s module docs).
//!
//! Above `TENSOR_LIFETIME_EXACT_MAX` (16) live records the registry is split in two. The
//! *young* records (`State::records`: made since the latest sweep, every record whose
//! tensor had an autograd op, and those born in an iteration still running that the walk
//! may not turn old, [`super::loops::running_iterations`]) are walked at every sweep; the
//! *old* ones ([`Old`]) live in shards of at most [`SHARD_MAX`] records (vectors: turning
//! old is a push), and a partial sweep walks one shard of them, round robin. The mode
//! starts again with as many shards as it last had, so a rollout whose records all die at
//! each epoch's end does not split its shards anew in every epoch. What the summaries need
//! of the old records is kept in running aggregates ([`Aggregates`]: per (frame, site)
//! survivors, their iterations, bytes, holders, roles and creating call paths; per device,
//! the bytes they own), added to when a record turns old and taken from when a walk finds
//! it dead. A full walk rebuilds all of it from the records.

use super::loops::born_running;
use super::roles::{self, RoleCounts};
use super::sweep::{device_index, Claim, DeviceBytes, Scratch, SweepResult};
use super::{FastMap, Record, State};
use std::collections::VecDeque;
use tensor_lifetime_report::event::{HolderSpec, SiteSweep};

/// Old records per shard before the shards are split: a partial sweep walks one shard,
/// 14 to 28 records.
const SHARD_MAX: usize = 28;

/// One shard: its records in the order they turned old. A vector, not a table: a record
/// turns old with a push (no hash), a walk reads it in memory order, and the rare lookup
/// of one old record (a store or an alias seen on it) compares at most a few dozen keys.
type Shard = Vec<(usize, Record)>;

/// The old records, in shards chosen by the top bits of a hash of their tensor's creation
/// serial (not of its address: which records a partial sweep walks together is then the
/// same in every run of a program, with or without an event log).
#[derive(Default)]
pub(super) struct Old {
    shards: Vec<Shard>,
    bits: u32,
    len: usize,
    cursor: usize,
    /// Partial sweeps between two shard walks: doubled (up to [`WALK_EVERY_MAX`]) by a
    /// walk that finds no dead record, back to 1 when one does.
    every: u32,
    /// Partial sweeps left before the next shard walk.
    wait: u32,
}

/// The most partial sweeps between two shard walks while old records do not die (a
/// rollout's observations, a model's weights): a dead old record is still found within
/// `shards × WALK_EVERY_MAX` inner iteration ends.
const WALK_EVERY_MAX: u32 = 16;

impl Old {
    #[inline]
    fn shard_of(serial: u32, bits: u32) -> usize {
        if bits == 0 {
            return 0;
        }
        (u64::from(serial).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - bits)) as usize
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get_mut(&mut self, key: usize, serial: u32) -> Option<&mut Record> {
        let i = Old::shard_of(serial, self.bits);
        let shard = self.shards.get_mut(i)?;
        shard.iter_mut().find(|(k, _)| *k == key).map(|(_, r)| r)
    }

    pub(super) fn get(&self, key: usize, serial: u32) -> Option<&Record> {
        let i = Old::shard_of(serial, self.bits);
        let shard = self.shards.get(i)?;
        shard.iter().find(|(k, _)| *k == key).map(|(_, r)| r)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Record> {
        self.shards.iter().flatten().map(|(_, r)| r)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Record> {
        self.shards.iter_mut().flatten().map(|(_, r)| r)
    }

    /// Keeps the records for which `f` is true, in every shard (a full walk). A shard it
    /// empties gives its memory back: with more shards than old records (the count kept
    /// from an earlier epoch, [`Generations::with_shard_bits`]) the few survivors of a
    /// long loop land in a different shard at every iteration, and kept capacities would
    /// add up to every shard's.
    pub(super) fn retain_all(&mut self, f: &mut impl FnMut(&usize, &mut Record) -> bool) {
        for s in &mut self.shards {
            s.retain_mut(|(k, r)| f(k, r));
            if s.is_empty() && s.capacity() > 0 {
                *s = Shard::new();
            }
        }
        self.len = self.shards.iter().map(|s| s.len()).sum();
    }

    /// Moves the records for which `f` is true to `out` (turned young again).
    fn take_if(&mut self, f: impl Fn(&Record) -> bool, out: &mut Vec<(usize, Record)>) {
        for s in &mut self.shards {
            let mut i = 0;
            while i < s.len() {
                if f(&s[i].1) {
                    out.push(s.swap_remove(i));
                    self.len -= 1;
                } else {
                    i += 1;
                }
            }
        }
    }

    /// No old records, in `1 << bits` shards (none allocated yet).
    fn with_bits(bits: u32) -> Old {
        Old {
            shards: (0..1usize << bits).map(|_| Shard::new()).collect(),
            bits,
            ..Old::default()
        }
    }

    fn insert(&mut self, key: usize, r: Record) {
        if self.shards.is_empty() {
            self.shards.push(Shard::new());
        }
        let i = Old::shard_of(r.serial, self.bits);
        // A full shard's room at once where shards fill (at least one record per shard
        // on average), not 4, 8, 16, 32 one copy after the other; a sparse table grows
        // its shards as `Vec` does.
        let dense = self.len >= self.shards.len();
        let shard = &mut self.shards[i];
        if dense && shard.len() == shard.capacity() {
            shard.reserve_exact(SHARD_MAX.max(2 * shard.len()) - shard.len());
        }
        shard.push((key, r));
        self.len += 1;
        if self.len > SHARD_MAX << self.bits {
            self.split();
        }
    }

    /// Doubles the shards: shard `i` becomes `2i` and `2i + 1` (one more top bit).
    #[cold]
    fn split(&mut self) {
        let bits = self.bits + 1;
        let old = std::mem::take(&mut self.shards);
        let mut shards: Vec<Shard> = Vec::with_capacity(old.len() * 2);
        for shard in old {
            let (mut lo, mut hi) = (
                Shard::with_capacity(SHARD_MAX),
                Shard::with_capacity(SHARD_MAX),
            );
            for (key, r) in shard {
                if Old::shard_of(r.serial, bits) & 1 == 0 {
                    lo.push((key, r));
                } else {
                    hi.push((key, r));
                }
            }
            shards.push(lo);
            shards.push(hi);
        }
        self.shards = shards;
        self.bits = bits;
        self.cursor = (self.cursor * 2) % self.shards.len();
    }

    /// Every record, shard by shard (the shards are given back).
    fn drain_all(&mut self) -> impl Iterator<Item = (usize, Record)> {
        self.len = 0;
        self.bits = 0;
        self.cursor = 0;
        self.every = 0;
        self.wait = 0;
        std::mem::take(&mut self.shards).into_iter().flatten()
    }
}

/// The owner of a storage that more than one record uses, as of the latest full walk (or
/// found among the records turned old together since).
#[derive(Debug, Clone, Copy)]
pub(super) struct Owner {
    id: u64,
    site: u32,
}

/// The survivors of one (frame, site) among the old records.
#[derive(Debug, Default)]
pub(super) struct SiteAgg {
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
    /// The call paths that created the survivors, with their counts: the first
    /// [`PATHS`] seen (an exact walk's summary keeps as many).
    paths: [(u32, u32); PATHS],
}

/// Call paths kept per site, as in an exact walk's summary.
const PATHS: usize = 4;

impl SiteAgg {
    fn add(&mut self, r: &Record, holder: HolderSpec, refcount: u64) {
        self.survivors += 1;
        let its = &mut self.iterations;
        let i = match its.back() {
            Some(last) if last.0 == r.iteration => its.len() - 1,
            Some(last) if last.0 > r.iteration => {
                match its.binary_search_by_key(&r.iteration, |e| e.0) {
                    Ok(i) => i,
                    Err(i) => {
                        its.insert(i, (r.iteration, 0));
                        i
                    }
                }
            }
            _ => {
                its.push_back((r.iteration, 0));
                its.len() - 1
            }
        };
        its[i].1 += 1;
        if its[i].1 == 1 {
            self.distinct += 1;
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
        self.roles[usize::from(r.role & roles::INDEX)] += 1;
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
    fn origin_into(&self, s: &mut SiteSweep) {
        let mut paths = self.paths;
        let mut used = 0;
        for i in 0..PATHS {
            if paths[i].1 > 0 {
                paths[used] = paths[i];
                used += 1;
            }
        }
        let role = super::holders::majority(&self.roles);
        super::holders::put_origin(s, role, &mut paths[..used]);
    }

    /// One survivor's role changed (a hint seen on an old record).
    fn move_role(&mut self, from: u8, to: u8) {
        let n = &mut self.roles[usize::from(from & roles::INDEX)];
        *n = n.saturating_sub(1);
        self.roles[usize::from(to & roles::INDEX)] += 1;
    }

    fn remove(&mut self, r: &Record, holder: HolderSpec) {
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
        if let Some(e) = self.paths.iter_mut().find(|e| e.0 == r.path && e.1 > 0) {
            e.1 -= 1;
        }
    }

    /// Moves one survivor from holder `from` to `to` (a store seen on an old record).
    fn move_holder(&mut self, from: HolderSpec, to: HolderSpec) {
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

    /// The summary of these survivors (holders not yet chosen: [`finish`]).
    fn summary(&self, site: u32) -> SiteSweep {
        SiteSweep {
            site,
            survivors: self.survivors,
            bytes: self.bytes,
            iterations: self.distinct,
            first_iteration: self.iterations.front().map_or(0, |e| u64::from(e.0)),
            last_iteration: self.iterations.back().map_or(0, |e| u64::from(e.0)),
            refcount: self.refcount,
            view_bytes: self.view_bytes,
            view_storage_bytes: self.view_storage_bytes,
            ..SiteSweep::default()
        }
    }

    /// Takes in `other`, the survivors of a closed nested loop at this site, now all
    /// born in `iteration` of this frame.
    fn absorb(&mut self, other: SiteAgg, iteration: u32) {
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
        for (path, n) in other.paths {
            self.add_path(path, n);
        }
    }

    fn has_iteration(&self, iteration: u32) -> bool {
        self.iterations
            .binary_search_by_key(&iteration, |e| e.0)
            .is_ok_and(|i| self.iterations[i].1 > 0)
    }
}

/// What the sweeps count of the old records, kept as they change: per frame, its sites'
/// survivors (sorted by site); per role, the old records and the bytes they own; per
/// device, the bytes they own (in [`DeviceBytes`]). All are added to and taken from in
/// [`Generations::count`].
#[derive(Default)]
pub(super) struct Aggregates {
    frames: FastMap<u32, Vec<(u32, SiteAgg)>>,
    roles: RoleCounts,
}

impl Aggregates {
    fn site_mut(&mut self, frame: u32, site: u32) -> &mut SiteAgg {
        let v = self.frames.entry(frame).or_default();
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

impl Generations {
    /// The generational mode starting again, with as many shards as it had when it last
    /// ended (`bits`, up to [`START_BITS_MAX`]): a loop whose records all die at its
    /// epoch's end (a rollout) does not split its shards again, one doubling after the
    /// other, in every epoch.
    fn with_shard_bits(bits: u32) -> Generations {
        Generations {
            old: Old::with_bits(bits.min(START_BITS_MAX)),
            ..Generations::default()
        }
    }

    /// A nested loop `frame` closed: the aggregates of its old survivors move to the
    /// enclosing frame's `iteration` (`parent` 0: none; records outside any loop have no
    /// aggregates), as its records do. What a full walk would rebuild, without the walk.
    pub(super) fn reframe(&mut self, frame: u32, parent: u32, iteration: u32) {
        let Some(sites) = self.aggs.frames.remove(&frame) else {
            return;
        };
        if parent == 0 {
            return;
        }
        for (site, agg) in sites {
            self.aggs.site_mut(parent, site).absorb(agg, iteration);
        }
    }
}

/// The most shard bits the generational mode starts with (1 024 shards, 28 672 old
/// records before a split): see [`Generations::with_shard_bits`].
const START_BITS_MAX: u32 = 10;

/// The generational registry's parts beside the young records (`State::records`).
#[derive(Default)]
pub(super) struct Generations {
    pub(super) old: Old,
    aggs: Aggregates,
    /// Storages of more than one record, by address: their owners.
    shared: FastMap<usize, Owner>,
}

impl Generations {
    /// `r`'s holder as its aggregate counts it (stores first; a view of a storage
    /// another record owns; else unknown).
    fn holder(&self, r: &Record) -> HolderSpec {
        holder_of(&self.shared, r)
    }

    /// Adds (`sign` true) or takes (`false`) old record `r` from the aggregates: its
    /// (frame, site) survivors and the bytes it owns on its device.
    fn count(
        &mut self,
        devices: &mut Vec<(super::DeviceId, DeviceBytes)>,
        r: &Record,
        add: bool,
        refcount: u64,
    ) {
        self.aggs.roles.count(r.role, r.owned_bytes(), add);
        if r.owns {
            let d = device_index(devices, r.device);
            let old = &mut devices[d].1.old;
            *old = if add {
                *old + r.storage_bytes
            } else {
                old.saturating_sub(r.storage_bytes)
            };
        }
        if r.frame == 0 {
            return;
        }
        let holder = self.holder(r);
        let agg = self.aggs.site_mut(r.frame, r.site);
        if add {
            agg.add(r, holder, refcount);
        } else {
            agg.remove(r, holder);
        }
    }
}

impl State {
    /// Live records now (young and old).
    pub(super) fn live_len(&self) -> usize {
        self.records.len() + self.gens.as_ref().map_or(0, |g| g.old.len())
    }

    /// Every live record (young, then old).
    pub(super) fn all_records(&self) -> impl Iterator<Item = &Record> {
        let old = self.gens.as_ref().into_iter().flat_map(|g| g.old.values());
        self.records.values().chain(old)
    }

    /// A store seen on old record `key`: its latest store site becomes `site`, and its
    /// aggregate's holders follow. Returns the record's id.
    pub(super) fn store_on_old(&mut self, key: usize, serial: u32, site: u32) -> Option<u64> {
        let gens = self.gens.as_mut()?;
        let r = gens.old.get_mut(key, serial)?;
        let (id, frame, rsite) = (r.id, r.frame, r.site);
        if r.store == site {
            return Some(id);
        }
        let from = holder_of(&gens.shared, r);
        r.store = site;
        if frame != 0 {
            let to = HolderSpec::Store { site };
            gens.aggs.site_mut(frame, rsite).move_holder(from, to);
        }
        Some(id)
    }

    /// A hinted probe of old record `key`: its role may change ([`roles::upgrade`]), and
    /// the role aggregates follow.
    pub(super) fn upgrade_old_role(&mut self, key: usize, serial: u32, probe: u8) {
        let Some(gens) = self.gens.as_mut() else {
            return;
        };
        let Some(r) = gens.old.get_mut(key, serial) else {
            return;
        };
        let before = r.role;
        roles::upgrade(&mut r.role, probe);
        if r.role != before {
            gens.aggs.roles.count(before, r.owned_bytes(), false);
            gens.aggs.roles.count(r.role, r.owned_bytes(), true);
            let (frame, site, after) = (r.frame, r.site, r.role);
            if frame != 0 {
                gens.aggs.site_mut(frame, site).move_role(before, after);
            }
        }
    }

    /// The site and id of old record `key`, if it is one.
    pub(super) fn old_record(&mut self, key: usize, serial: u32) -> Option<(u32, u64)> {
        let r = self.gens.as_mut()?.old.get_mut(key, serial)?;
        Some((r.site, r.id))
    }

    /// After an exact walk that built the claims table for every live record (more than
    /// `State::exact_max` of them), or after a full walk in generational mode: every record
    /// turns old but those with an autograd op and those born in a running iteration that
    /// `settled` does not let turn old ([`super::loops::running_iterations`]), which are
    /// young again if they were old; the aggregates are rebuilt from the records. A full
    /// walk that found few records goes back to exact sweeps.
    pub(super) fn rebuild_generations(&mut self, settled: Option<u64>) {
        let total = self.live_len();
        // A full walk that finds half the threshold or fewer goes back to exact sweeps.
        if total <= self.exact_max / 2 {
            if let Some(mut gens) = self.gens.take() {
                self.old_bits = gens.old.bits;
                self.records.reserve(gens.old.len());
                for (key, r) in gens.old.drain_all() {
                    self.records.insert(key, r);
                }
            }
            return;
        }
        let bits = self.old_bits;
        let gens = self
            .gens
            .get_or_insert_with(|| Generations::with_shard_bits(bits));
        gens.aggs.frames.clear();
        gens.aggs.roles = RoleCounts::default();
        gens.shared.clear();
        for (storage, c) in self.claims.iter().filter(|(_, c)| c.shared) {
            gens.shared.insert(
                *storage,
                Owner {
                    id: c.owner,
                    site: c.owner_site,
                },
            );
        }
        for (_, d) in &mut self.devices {
            d.old = 0;
        }
        let owns = |claims: &FastMap<usize, Claim>, r: &Record| {
            claims.get(&r.storage).is_none_or(|c| c.owner == r.id)
        };
        for r in self.records.values_mut() {
            r.owns = owns(&self.claims, r);
        }
        // Those with an autograd op stay young (their graphs are walked at every sweep),
        // and so do those born in a running iteration.
        let mut running = std::mem::take(&mut self.scratch.running);
        super::loops::running_iterations(&self.frames, &self.analysis, settled, &mut running);
        let mut stay = std::mem::take(&mut self.scratch.promote);
        for (key, r) in self.records.drain() {
            if r.has_graph || born_running(&running, &r) {
                stay.push((key, r));
            } else {
                gens.old.insert(key, r);
            }
        }
        if !running.is_empty() {
            gens.old.take_if(|r| born_running(&running, r), &mut stay);
        }
        self.scratch.running = running;
        self.records.extend(stay.drain(..));
        self.scratch.promote = stay;
        super::sweep::trim_vec(&mut self.scratch.promote);
        let mut old = std::mem::take(&mut gens.old);
        for r in old.values_mut() {
            r.owns = owns(&self.claims, r);
            let refcount = r.weak.strong_count() as u64;
            gens.count(&mut self.devices, r, true, refcount);
        }
        gens.old = old;
        if self.records.capacity() > Scratch::KEEP {
            self.records.shrink_to_fit();
        }
    }

    /// A partial sweep (generational mode, an inner iteration end of `frame`): the young
    /// records are walked (the dead removed, the rest but those with an autograd op
    /// turned old), then one shard of the old ones; the survivors of `frame` are summed
    /// up from the aggregates and the young records.
    pub(super) fn partial_sweep(&mut self, frame: u64, t_ns: u64, log: bool) -> SweepResult {
        let State {
            records,
            scratch,
            devices,
            gens,
            roles,
            frames,
            analysis,
            ..
        } = self;
        let gens = gens.as_mut().expect("generational mode");
        scratch.dead.clear();
        scratch.survivors.clear();
        let mut promote = std::mem::take(&mut scratch.promote);
        promote.clear();
        let mut dropped = 0u64;
        // Records of a loop other than this one and those enclosing it on this thread
        // (another thread's, most often): those born in its running iteration stay young.
        let mut foreign = false;
        for (key, r) in records.drain() {
            foreign |= r.frame != frame as u32 && r.frame != 0;
            if r.weak.strong_count() == 0 {
                dropped += 1;
                // Born and dead within the iteration: a temporary of its role.
                roles.dead(r.id, r.role, r.storage_bytes);
                if log {
                    scratch.dead.push(r.id);
                }
            } else {
                promote.push((key, r));
            }
        }
        // Those with an autograd op stay young (their graphs are walked at every sweep),
        // and those born in another thread's running iteration.
        let running = &mut scratch.running;
        if foreign {
            super::loops::running_iterations(frames, analysis, Some(frame), running);
        }
        let mut i = 0;
        while i < promote.len() {
            let r = &promote[i].1;
            if r.has_graph || (foreign && born_running(running, r)) {
                let (key, r) = promote.swap_remove(i);
                records.insert(key, r);
            } else {
                i += 1;
            }
        }
        // The young records that stay (autograd ops): walked, summarized exactly.
        for (_, d) in devices.iter_mut() {
            d.tally = 0;
        }
        for (key, r) in records.iter_mut() {
            let refcount = r.weak.strong_count();
            r.owns = gens.shared.get(&r.storage).is_none_or(|o| o.id == r.id);
            roles.tensor(r.role);
            if r.owns {
                let d = device_index(devices, r.device);
                devices[d].1.tally += r.storage_bytes;
                roles.bytes(r.role, r.storage_bytes);
            }
            if Some(r.frame()) == Some(frame) {
                scratch
                    .survivors
                    .push(super::sweep::Survivor::of(*key, r, refcount));
            }
        }
        // Turned old: a storage shared with an older record turned old with it (or known
        // shared at the latest full walk) is that record's; otherwise the record owns it.
        if promote.len() > 1 {
            promote.sort_unstable_by_key(|(_, r)| r.id);
            let firsts = &mut scratch.storages;
            firsts.clear();
            for (_, r) in promote.iter_mut() {
                match firsts.get(&r.storage) {
                    Some(owner) if !gens.shared.contains_key(&r.storage) => {
                        gens.shared.insert(r.storage, *owner);
                    }
                    Some(_) => {}
                    None => {
                        firsts.insert(
                            r.storage,
                            Owner {
                                id: r.id,
                                site: r.site,
                            },
                        );
                    }
                }
            }
            super::sweep::trim_map(firsts);
        }
        for (key, mut r) in promote.drain(..) {
            r.owns = gens.shared.get(&r.storage).is_none_or(|o| o.id == r.id);
            let refcount = r.weak.strong_count() as u64;
            gens.count(devices, &r, true, refcount);
            gens.old.insert(key, r);
        }
        scratch.promote = promote;
        super::sweep::trim_vec(&mut scratch.promote);
        // The young map's capacity is that of the most records made between two sweeps
        // (a dataset or a model built in one iteration): given back, or every drain
        // walks and clears it.
        if records.capacity() > Scratch::KEEP && records.len() < Scratch::KEEP / 2 {
            records.shrink_to(Scratch::KEEP / 2);
        }
        // One shard of the old records, round robin; less often while walks find none
        // dead.
        let n = gens.old.shards.len();
        let walk = n > 0 && gens.old.wait == 0;
        gens.old.wait = gens.old.wait.saturating_sub(1);
        if walk {
            let i = gens.old.cursor % n;
            gens.old.cursor = (i + 1) % n;
            let mut shard = std::mem::take(&mut gens.old.shards[i]);
            let before = shard.len();
            shard.retain_mut(|(_, r)| {
                let refcount = r.weak.strong_count();
                if refcount == 0 {
                    dropped += 1;
                    if log {
                        scratch.dead.push(r.id);
                    }
                    gens.count(devices, r, false, 0);
                    return false;
                }
                true
            });
            let found = before - shard.len();
            gens.old.len -= found;
            gens.old.shards[i] = shard;
            let old = &mut gens.old;
            old.every = if found > 0 {
                1
            } else {
                (old.every * 2).clamp(1, WALK_EVERY_MAX)
            };
            old.wait = old.every - 1;
        }
        // The split by role: the young records walked above and the old ones' aggregates.
        roles.add_counts(&gens.aggs.roles);
        roles.finish_sweep();
        let mut live_bytes = 0;
        for (_, d) in devices.iter_mut() {
            d.live = d.old + std::mem::take(&mut d.tally);
            d.peak = d.peak.max(d.live);
            live_bytes += d.live;
        }
        self.note_drops(dropped, t_ns, log);
        let inputs = super::holders::GraphInputs {
            made_from: &self.made_from,
            old: self.gens.as_ref().map(|g| &g.old),
        };
        super::holders::summarize_survivors(&self.records, &mut self.scratch, None, inputs);
        self.prune_made_from(false);
        self.merge_aggregates(frame as u32);
        self.scratch.trim_sweep();
        SweepResult {
            live_tensors: self.live_len() as u64,
            live_bytes,
        }
    }

    /// Adds the aggregates of `frame`'s old survivors to the summaries of its young ones
    /// (`scratch.sites`, from the sorted `scratch.survivors`).
    fn merge_aggregates(&mut self, frame: u32) {
        let Some(gens) = self.gens.as_ref() else {
            return;
        };
        let Some(aggs) = gens.aggs.frames.get(&frame) else {
            return;
        };
        let Scratch {
            sites,
            survivors,
            holders,
            merged,
            ..
        } = &mut self.scratch;
        // `merged` holds the summaries of an earlier sweep: their slots are refilled, so
        // their holders keep their allocations.
        let mut used = 0;
        let (mut i, mut j) = (0, 0);
        while i < aggs.len() || j < sites.len() {
            let agg = aggs.get(i).filter(|a| a.1.survivors > 0);
            if aggs.get(i).is_some_and(|a| a.1.survivors == 0) {
                i += 1;
                continue;
            }
            let young = sites.get(j);
            let take_agg = match (agg, young) {
                (Some(a), Some(y)) => a.0 <= y.site,
                (Some(_), None) => true,
                _ => false,
            };
            let both = matches!((agg, young), (Some(a), Some(y)) if a.0 == y.site);
            if !take_agg {
                std::mem::swap(next_slot(merged, &mut used), &mut sites[j]);
                j += 1;
                continue;
            }
            let (site, a) = (agg.unwrap().0, &agg.unwrap().1);
            let mut s = a.summary(site);
            let mut young_paths = [0u32; PATHS];
            holders.clear();
            holders.extend_from_slice(&a.holders);
            if both {
                let y = std::mem::take(&mut sites[j]);
                j += 1;
                for (to, p) in young_paths.iter_mut().zip(&y.call_paths) {
                    *to = *p;
                }
                // Distinct iterations: the young survivors' that the old ones lack.
                let mut last = None;
                let mut extra = 0;
                for v in survivors.iter().filter(|v| v.site == site) {
                    if last != Some(v.iteration) {
                        last = Some(v.iteration);
                        if !a.has_iteration(v.iteration) {
                            extra += 1;
                        }
                    }
                }
                s.survivors += y.survivors;
                s.iterations += extra;
                s.first_iteration = s.first_iteration.min(y.first_iteration);
                s.last_iteration = s.last_iteration.max(y.last_iteration);
                s.bytes += y.bytes;
                s.view_bytes += y.view_bytes;
                s.view_storage_bytes += y.view_storage_bytes;
                s.refcount = s.refcount.max(y.refcount);
                s.graph_tensors = y.graph_tensors;
                s.graph_bytes = y.graph_bytes;
                for h in &y.holders {
                    match holders.iter_mut().find(|(x, _)| *x == h.holder) {
                        Some((_, n)) => *n += h.count,
                        None => holders.push((h.holder, h.count)),
                    }
                }
            }
            i += 1;
            let slot = next_slot(merged, &mut used);
            let (kept, paths) = (
                std::mem::take(&mut slot.holders),
                std::mem::take(&mut slot.call_paths),
            );
            *slot = SiteSweep {
                holders: kept,
                call_paths: paths,
                ..s
            };
            // The old survivors' role and call paths; then the young ones' paths.
            a.origin_into(slot);
            for p in young_paths.into_iter().filter(|p| *p != 0) {
                if slot.call_paths.len() < PATHS && !slot.call_paths.contains(&p) {
                    slot.call_paths.push(p);
                }
            }
            super::holders::finish_holders(slot, holders);
        }
        merged.truncate(used);
        std::mem::swap(sites, merged);
        super::sweep::trim_vec(merged);
    }
}

/// The next slot of `v` to fill (`used` of them are filled): an earlier summary, whose
/// holders and call paths keep their allocations, or a new one.
fn next_slot<'a>(v: &'a mut Vec<SiteSweep>, used: &mut usize) -> &'a mut SiteSweep {
    if *used == v.len() {
        v.push(SiteSweep::default());
    }
    *used += 1;
    &mut v[*used - 1]
}

/// `r`'s holder as its aggregate counts it: its latest store; else, when another record
/// owns its storage, a view of that record's; else unknown.
fn holder_of(shared: &FastMap<usize, Owner>, r: &Record) -> HolderSpec {
    if r.store != 0 {
        HolderSpec::Store { site: r.store }
    } else if !r.owns {
        HolderSpec::View {
            site: shared.get(&r.storage).map_or(0, |o| o.site),
        }
    } else {
        HolderSpec::Unknown
    }
}
