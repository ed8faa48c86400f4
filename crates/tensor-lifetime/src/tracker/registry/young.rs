//! The young tier of the registry: the records every sweep walks, in a vector in the
//! order they came, found by key with a scan while few (an iteration's new records,
//! the common case: no hashing on the way in, a plain pass on the way out) and through
//! an index of positions by key once there are more than [`LINEAR`] of them.

use super::Record;
use crate::tracker::keep::FastMap;

/// Young records found by a scan of their keys; above this many, through the index.
const LINEAR: usize = 16;

/// The young records (see the module docs). The index holds every record's position
/// exactly when there are more than [`LINEAR`] records; it is empty otherwise.
#[derive(Default)]
pub(super) struct Young {
    recs: Vec<(usize, Record)>,
    index: FastMap<usize, usize>,
}

impl Young {
    pub(super) fn len(&self) -> usize {
        self.recs.len()
    }

    pub(super) fn capacity(&self) -> usize {
        self.recs.capacity()
    }

    fn indexed(&self) -> bool {
        self.recs.len() > LINEAR
    }

    /// The position of `key`'s record.
    #[inline]
    fn position(&self, key: usize) -> Option<usize> {
        if self.indexed() {
            self.index.get(&key).copied()
        } else {
            self.recs.iter().position(|(k, _)| *k == key)
        }
    }

    /// Adds the record of `key`, which has none: a key names one tensor while a record
    /// holds its weak handle, and a record is made only for a tensor that has none.
    #[inline]
    pub(super) fn insert(&mut self, key: usize, r: Record) {
        debug_assert!(self.position(key).is_none(), "one record per key");
        self.recs.push((key, r));
        let n = self.recs.len();
        if n > LINEAR + 1 {
            self.index.insert(key, n - 1);
        } else if n == LINEAR + 1 {
            self.reindex();
        }
    }

    /// Rebuilds the index after records moved (or cleared it when few are left).
    fn reindex(&mut self) {
        self.index.clear();
        if self.indexed() {
            self.index.reserve(self.recs.len());
            for (i, (key, _)) in self.recs.iter().enumerate() {
                self.index.insert(*key, i);
            }
        }
    }

    #[inline]
    pub(super) fn get(&self, key: usize) -> Option<&Record> {
        self.position(key).map(|i| &self.recs[i].1)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, key: usize) -> Option<&mut Record> {
        self.position(key).map(|i| &mut self.recs[i].1)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Record> {
        self.recs.iter().map(|(_, r)| r)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Record> {
        self.recs.iter_mut().map(|(_, r)| r)
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&usize, &mut Record)> {
        self.recs.iter_mut().map(|(k, r)| (&*k, r))
    }

    /// Keeps the records for which `f` is true.
    #[inline]
    pub(super) fn retain(&mut self, mut f: impl FnMut(&usize, &mut Record) -> bool) {
        // By hand: a few records are the common case, and `Vec::retain_mut`'s fixed
        // cost is several times a record's.
        let recs = &mut self.recs;
        let before = recs.len();
        let mut kept = 0;
        for i in 0..before {
            let (k, r) = &mut recs[i];
            if f(k, r) {
                if kept != i {
                    recs.swap(kept, i);
                }
                kept += 1;
            }
        }
        if kept != before {
            recs.truncate(kept);
            self.reindex();
        }
    }

    /// Takes every record out.
    #[inline]
    pub(super) fn drain(&mut self) -> std::vec::Drain<'_, (usize, Record)> {
        self.index.clear();
        self.recs.drain(..)
    }

    /// Room for `n` more records.
    pub(super) fn reserve(&mut self, n: usize) {
        self.recs.reserve(n);
    }

    /// Gives back the memory beyond the records (and the index's when few are left).
    pub(super) fn shrink_to(&mut self, n: usize) {
        self.recs.shrink_to(n);
        if !self.indexed() {
            self.index = FastMap::default();
        } else {
            self.index.shrink_to(n);
        }
    }
}

impl Extend<(usize, Record)> for Young {
    fn extend<I: IntoIterator<Item = (usize, Record)>>(&mut self, iter: I) {
        for (key, r) in iter {
            self.insert(key, r);
        }
    }
}
