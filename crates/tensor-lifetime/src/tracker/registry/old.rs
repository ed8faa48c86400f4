//! The old tier of the registry: records that a partial sweep does not walk every time,
//! in shards of at most [`SHARD_MAX`] records walked round robin (less often while the
//! walks find none dead).
//!
//! A shard is a vector, not a table: a record turns old with a push (no hash), a walk
//! reads it in memory order, and the rare lookup of one old record (a store or an alias
//! seen on it) compares at most a few dozen keys. Shards are chosen by the top bits of a
//! hash of the tensor's creation serial (not of its address): which records a partial
//! sweep walks together is then the same in every run of a program, with or without an
//! event log.

use super::Record;

/// Old records per shard before the shards are split: a partial sweep walks one shard,
/// 14 to 28 records.
pub(super) const SHARD_MAX: usize = 28;

/// The most partial sweeps between two shard walks while old records do not die (a
/// rollout's observations, a model's weights): a dead old record is still found within
/// `shards × WALK_EVERY_MAX` inner iteration ends.
const WALK_EVERY_MAX: u32 = 16;

/// The most shard bits the old tier starts with (1 024 shards, 28 672 old records before
/// a split): see [`Old::with_bits`].
const START_BITS_MAX: u32 = 10;

/// One shard: its records in the order they turned old.
type Shard = Vec<(usize, Record)>;

/// The old records, in `1 << bits` shards.
#[derive(Default)]
pub(super) struct Old {
    shards: Vec<Shard>,
    bits: u32,
    /// Records in all shards.
    len: usize,
    /// The shard the next walk visits.
    cursor: usize,
    /// Partial sweeps between two shard walks: doubled (up to [`WALK_EVERY_MAX`]) by a
    /// walk that finds no dead record, back to 1 when one does.
    every: u32,
    /// Partial sweeps left before the next shard walk.
    wait: u32,
}

impl Old {
    #[inline]
    fn shard_of(serial: u32, bits: u32) -> usize {
        if bits == 0 {
            return 0;
        }
        (u64::from(serial).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - bits)) as usize
    }

    /// No old records, in as many shards as an earlier old tier had (`bits`, up to
    /// [`START_BITS_MAX`]; none allocated yet): a loop whose records all die at its
    /// epoch's end (a rollout) does not split its shards again, one doubling after the
    /// other, in every epoch.
    pub(super) fn with_bits(bits: u32) -> Old {
        let bits = bits.min(START_BITS_MAX);
        Old {
            shards: (0..1usize << bits).map(|_| Shard::new()).collect(),
            bits,
            ..Old::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn bits(&self) -> u32 {
        self.bits
    }

    #[cfg(test)]
    pub(super) fn shards(&self) -> usize {
        self.shards.len()
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
    /// from an earlier epoch, [`Old::with_bits`]) the few survivors of a long loop land in
    /// a different shard at every iteration, and kept capacities would add up to every
    /// shard's.
    pub(super) fn retain_all(&mut self, f: &mut impl FnMut(&usize, &mut Record) -> bool) {
        for s in &mut self.shards {
            s.retain_mut(|(k, r)| f(k, r));
            if s.is_empty() && s.capacity() > 0 {
                *s = Shard::new();
            }
        }
        self.len = self.shards.iter().map(|s| s.len()).sum();
    }

    /// Walks the next shard, round robin, when one is due: keeps the records for which
    /// `f` is true. Due at every call while walks find dead records; after a walk that
    /// finds none, the interval doubles up to [`WALK_EVERY_MAX`] calls.
    pub(super) fn walk_next(&mut self, f: &mut impl FnMut(&mut Record) -> bool) {
        let n = self.shards.len();
        let walk = n > 0 && self.wait == 0;
        self.wait = self.wait.saturating_sub(1);
        if !walk {
            return;
        }
        let i = self.cursor % n;
        self.cursor = (i + 1) % n;
        let shard = &mut self.shards[i];
        let before = shard.len();
        shard.retain_mut(|(_, r)| f(r));
        let found = before - shard.len();
        self.len -= found;
        self.every = if found > 0 {
            1
        } else {
            (self.every * 2).clamp(1, WALK_EVERY_MAX)
        };
        self.wait = self.every - 1;
    }

    /// Moves the records for which `f` is true to `out` (turned young again).
    pub(super) fn take_if(&mut self, f: impl Fn(&Record) -> bool, out: &mut Vec<(usize, Record)>) {
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

    pub(super) fn insert(&mut self, key: usize, r: Record) {
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
    pub(super) fn drain_all(&mut self) -> impl Iterator<Item = (usize, Record)> {
        self.len = 0;
        self.bits = 0;
        self.cursor = 0;
        self.every = 0;
        self.wait = 0;
        std::mem::take(&mut self.shards).into_iter().flatten()
    }
}
