//! The working buffers' hash map and how much of their capacity is kept: a steady loop
//! allocates nothing at its iteration ends, and a buffer that grew large is given back,
//! so steady-state memory stays the records alone.

/// A hash map keyed by small integers or addresses (the report crate's fast hasher).
pub(crate) type FastMap<K, V> = tensor_lifetime_report::fast_hash::HashMap<K, V>;

/// Working buffers above this capacity are given back rather than kept.
pub(crate) const KEEP: usize = 8192;

/// Gives `v`'s allocation back when it grew above [`KEEP`].
pub(crate) fn trim_vec<T>(v: &mut Vec<T>) {
    if v.capacity() > KEEP {
        *v = Vec::new();
    }
}

/// Gives `m`'s allocation back when it grew above [`KEEP`].
pub(crate) fn trim_map<K, V>(m: &mut FastMap<K, V>) {
    if m.capacity() > KEEP {
        *m = FastMap::default();
    }
}
