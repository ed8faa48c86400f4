//! Hash maps keyed by small integers (site ids, frame ids, addresses) with a
//! multiplicative hash instead of SipHash: the tracker updates them for every tensor, and
//! the keys come from counters and the allocator, not from an adversary.

use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of integer keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(K);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // Multiply spreads the key into the high bits; the rotation brings them down to
        // the low bits hashbrown indexes with, keeping high bits for its control bytes.
        self.0 = (n ^ self.0).wrapping_mul(K).rotate_left(29);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// `HashMap` with [`FastHasher`]; make one with `HashMap::default()`.
pub type HashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// `HashSet` with [`FastHasher`]; make one with `HashSet::default()`.
pub type HashSet<K> = std::collections::HashSet<K, BuildHasherDefault<FastHasher>>;

/// Values keyed by site id. The tracker numbers its sites 1, 2, 3...: ids below
/// [`SiteMap::DENSE`] index a vector (no hashing on the per-tensor paths); any other id
/// (a log can hold anything) goes to a hash map.
#[derive(Debug, Clone)]
pub struct SiteMap<V> {
    dense: Vec<Option<V>>,
    /// Values in `dense`.
    dense_len: usize,
    sparse: HashMap<u32, V>,
}

impl<V> Default for SiteMap<V> {
    fn default() -> Self {
        SiteMap {
            dense: Vec::new(),
            dense_len: 0,
            sparse: HashMap::default(),
        }
    }
}

impl<V> SiteMap<V> {
    /// Ids below this are stored densely.
    pub const DENSE: u32 = 4096;

    /// The value of `site`, inserting `V::default()` if it has none.
    #[inline]
    pub fn get_or_default(&mut self, site: u32) -> &mut V
    where
        V: Default,
    {
        let i = site as usize;
        if site < Self::DENSE && self.dense.get(i).is_some_and(Option::is_some) {
            // The common case, kept small enough to inline: the site has its value.
            return self.dense[i].as_mut().expect("checked above");
        }
        self.insert_default(site)
    }

    /// [`SiteMap::get_or_default`] for a site that may have no value yet.
    #[inline(never)]
    fn insert_default(&mut self, site: u32) -> &mut V
    where
        V: Default,
    {
        if site >= Self::DENSE {
            return self.sparse.entry(site).or_default();
        }
        let i = site as usize;
        if i >= self.dense.len() {
            self.dense.resize_with(i + 1, || None);
        }
        let slot = &mut self.dense[i];
        if slot.is_none() {
            self.dense_len += 1;
        }
        slot.get_or_insert_with(V::default)
    }

    /// Sites with a value.
    pub fn len(&self) -> usize {
        self.dense_len + self.sparse.len()
    }

    /// No site has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `site`, if any.
    pub fn get(&self, site: u32) -> Option<&V> {
        if site >= Self::DENSE {
            self.sparse.get(&site)
        } else {
            self.dense.get(site as usize).and_then(Option::as_ref)
        }
    }

    /// All (site, value) pairs: dense ids in order, then the others in no given order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &V)> {
        self.dense
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().map(|v| (i as u32, v)))
            .chain(self.sparse.iter().map(|(k, v)| (*k, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_sequential_and_aligned_keys() {
        let mut low_bits = HashSet::default();
        for k in 0..4096u64 {
            let mut h = FastHasher::default();
            h.write_u64(k * 16); // aligned addresses
            low_bits.insert(h.finish() & 0xfff);
        }
        // Most of the 4096 buckets are hit: no clustering on aligned keys.
        assert!(low_bits.len() > 2500, "{}", low_bits.len());
    }

    #[test]
    fn site_map_keeps_dense_and_sparse_ids() {
        let mut m: SiteMap<u64> = SiteMap::default();
        for site in [3, 0, SiteMap::<u64>::DENSE, u32::MAX, 3] {
            *m.get_or_default(site) += 1;
        }
        assert_eq!(m.get(3), Some(&2));
        assert_eq!(m.get(0), Some(&1));
        assert_eq!(m.get(1), None);
        assert_eq!(m.get(u32::MAX), Some(&1));
        assert_eq!(m.len(), 4);
        let mut all: Vec<(u32, u64)> = m.iter().map(|(k, v)| (k, *v)).collect();
        all.sort();
        assert_eq!(
            all,
            vec![(0, 1), (3, 2), (SiteMap::<u64>::DENSE, 1), (u32::MAX, 1)]
        );
    }
}
