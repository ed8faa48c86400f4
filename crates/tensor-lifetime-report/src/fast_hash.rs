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
}
