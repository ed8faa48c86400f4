//! The registry: the one owner of the live records, in two tiers behind one API.
//!
//! *Young* records ([`young`]: a vector found by key, the tensor's address, which names
//! one tensor for as long as a probe entry or a record holds its weak handle; scanned
//! while few, indexed beyond) are walked at every sweep;
//! *old* ones ([`old`]: shards walked round robin) are walked by a partial sweep only a
//! shard at a time. Which records turn old, and when, is the sweep's rule; the registry
//! only keeps them: callers find a record by key (and creation serial), iterate or retain
//! every record, and move records between the tiers, never seeing how a tier stores them.

mod old;
mod young;

use super::keep::KEEP;
use super::probe::{Observed, Pending, View};
use crate::device::DeviceId;
use crate::weak::WeakTensor;
use old::Old;
use young::Young;

/// One tracked tensor. Kept small (80 bytes): frames, iterations and sessions are
/// stored as `u32` (4 billion of each per process is beyond any run).
#[derive(Debug)]
pub(super) struct Record {
    pub(super) weak: WeakTensor,
    pub(super) id: u64,
    pub(super) storage: usize,
    pub(super) storage_bytes: u64,
    pub(super) view_bytes: u64,
    pub(super) frame: u32,
    pub(super) iteration: u32,
    pub(super) session: u32,
    pub(super) site: u32,
    /// Latest store site (0: none).
    pub(super) store: u32,
    pub(super) device: DeviceId,
    /// It had an autograd op when tagged (ops never change afterwards).
    pub(super) has_graph: bool,
    /// The tensor's creation serial, cut to 32 bits (picks its shard when old).
    pub(super) serial: u32,
    /// It owns its storage, as of the walk that turned it old (generational mode); true
    /// until then.
    pub(super) owns: bool,
    /// Its role byte ([`super::roles`]).
    pub(super) role: u8,
    /// The call path of its first probe ([`crate::call_path`]; 0: none).
    pub(super) path: u32,
}

impl Record {
    /// The bytes this record's storage counts for it: all of them when it owns the
    /// storage (generational mode, `owns`), else none.
    #[inline]
    pub(super) fn owned_bytes(&self) -> u64 {
        if self.owns {
            self.storage_bytes
        } else {
            0
        }
    }

    /// The record of probe `p`'s tensor (it takes the probe's weak handle).
    #[inline(always)]
    pub(super) fn of(p: &mut Pending, id: u64, site: u32, view: View, storage: Observed) -> Record {
        Record {
            weak: p.weak.take(),
            id,
            site,
            store: if p.store { site } else { 0 },
            frame: p.frame,
            iteration: p.iteration,
            storage: storage.storage,
            storage_bytes: storage.storage_bytes,
            view_bytes: view.view_bytes,
            session: p.session,
            device: view.device,
            has_graph: view.has_graph,
            serial: p.serial,
            owns: true,
            role: p.role,
            path: p.path,
        }
    }

    pub(super) fn frame(&self) -> u64 {
        u64::from(self.frame)
    }
}

/// Which tier a record was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tier {
    Young,
    Old,
}

/// The live records, young and old (see the module docs).
#[derive(Default)]
pub(super) struct Registry {
    young: Young,
    old: Old,
    /// The old tier's shard bits when it was last emptied ([`Registry::make_all_young`]):
    /// the next old tier starts with as many shards.
    old_bits: u32,
}

impl Registry {
    /// Live records, young and old.
    pub(super) fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Live records in the old tier.
    #[cfg(test)]
    pub(super) fn old_len(&self) -> usize {
        self.old.len()
    }

    /// Shards of the old tier.
    #[cfg(test)]
    pub(super) fn old_shards(&self) -> usize {
        self.old.shards()
    }

    /// Adds a new (young) record: `key` has none.
    #[inline]
    pub(super) fn insert(&mut self, key: usize, r: Record) {
        self.young.insert(key, r);
    }

    /// The young record of `key` (a tensor's later probe finds its record here first).
    #[inline]
    pub(super) fn young_mut(&mut self, key: usize) -> Option<&mut Record> {
        self.young.get_mut(key)
    }

    /// The young record of `key`.
    #[inline]
    pub(super) fn young(&self, key: usize) -> Option<&Record> {
        self.young.get(key)
    }

    /// The record of `key` in either tier, if its tensor has creation serial `serial`.
    pub(super) fn get(&self, key: usize, serial: u32) -> Option<&Record> {
        self.young
            .get(key)
            .or_else(|| self.old.get(key, serial))
            .filter(|r| r.serial == serial)
    }

    /// The record of `key` in either tier, if its tensor has creation serial `serial`,
    /// and its tier.
    pub(super) fn get_mut(&mut self, key: usize, serial: u32) -> Option<(&mut Record, Tier)> {
        match self.young.get_mut(key) {
            Some(r) => Some((r, Tier::Young)).filter(|(r, _)| r.serial == serial),
            None => self
                .old
                .get_mut(key, serial)
                .filter(|r| r.serial == serial)
                .map(|r| (r, Tier::Old)),
        }
    }

    /// Every record (young, then old).
    pub(super) fn iter(&self) -> impl Iterator<Item = &Record> {
        self.young.values().chain(self.old.values())
    }

    /// Every record (young, then old), to change.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Record> {
        self.young.values_mut().chain(self.old.values_mut())
    }

    /// The young records.
    pub(super) fn young_iter_mut(&mut self) -> impl Iterator<Item = (&usize, &mut Record)> {
        self.young.iter_mut()
    }

    /// The old records, to change.
    pub(super) fn old_iter_mut(&mut self) -> impl Iterator<Item = &mut Record> {
        self.old.values_mut()
    }

    /// Keeps the records, in both tiers, for which `visit` is true (a full walk).
    #[inline]
    pub(super) fn retain(&mut self, visit: &mut impl FnMut(&usize, &mut Record) -> bool) {
        self.young.retain(|k, r| visit(k, r));
        self.old.retain_all(visit);
    }

    /// Walks the old shard due next, round robin (see [`old`]), keeping the records for
    /// which `visit` is true.
    pub(super) fn walk_old_shard(&mut self, visit: &mut impl FnMut(&mut Record) -> bool) {
        self.old.walk_next(visit);
    }

    /// Takes every young record out.
    #[cfg(test)]
    pub(super) fn drain_young(&mut self) -> impl Iterator<Item = (usize, Record)> + '_ {
        self.young.drain()
    }

    /// Keeps the young records for which `visit` is true.
    #[inline]
    pub(super) fn retain_young(&mut self, mut visit: impl FnMut(&mut Record) -> bool) {
        self.young.retain(|_, r| visit(r));
    }

    /// Turns old every young record but those for which `stay` is true, each after
    /// `turning` saw it; `buf` is a working buffer (left empty).
    #[inline]
    pub(super) fn turn_old_unless(
        &mut self,
        stay: impl Fn(&Record) -> bool,
        mut turning: impl FnMut(&mut Record),
        buf: &mut Vec<(usize, Record)>,
    ) {
        for (key, mut r) in self.young.drain() {
            if stay(&r) {
                buf.push((key, r));
            } else {
                turning(&mut r);
                self.old.insert(key, r);
            }
        }
        if !buf.is_empty() {
            self.young.extend(buf.drain(..));
        }
    }

    /// Makes young again the old records for which `f` is true; `buf` is a working
    /// buffer (left empty).
    pub(super) fn make_young_if(
        &mut self,
        f: impl Fn(&Record) -> bool,
        buf: &mut Vec<(usize, Record)>,
    ) {
        self.old.take_if(f, buf);
        self.young.extend(buf.drain(..));
    }

    /// Starts an old tier, with as many shards as the last one had.
    pub(super) fn start_old_tier(&mut self) {
        self.old = Old::with_bits(self.old_bits);
    }

    /// Makes every old record young again (the old tier is given back; its shard count
    /// is remembered for the next one).
    pub(super) fn make_all_young(&mut self) {
        self.old_bits = self.old.bits();
        self.young.reserve(self.old.len());
        for (key, r) in self.old.drain_all() {
            self.young.insert(key, r);
        }
    }

    /// Gives back the young tier's memory when it grew for a burst of records (a
    /// dataset or a model made in one iteration): after a full walk, all of it beyond
    /// what is live; after a partial one, down to half [`KEEP`] once few are young
    /// (otherwise a burst's room is kept for good).
    pub(super) fn trim_young(&mut self, full: bool) {
        let young = &mut self.young;
        if young.capacity() <= KEEP {
            return;
        }
        if full {
            young.shrink_to(0);
        } else if young.len() < KEEP / 2 {
            young.shrink_to(KEEP / 2);
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
