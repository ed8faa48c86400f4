//! The sizes one site has made, for shape churn (see the rules in [`super`]).

use crate::fast_hash::HashSet;

/// Most distinct sizes remembered per site.
pub(super) const MAX_SIZES_PER_SITE: usize = 4096;

/// The sizes one site has made.
#[derive(Debug, Clone, Default)]
pub(super) struct Shapes {
    // First the fields every tensor reads (one cache line), then those of a new size.
    /// Iterations (frame, iteration) seen, and those that brought a new size.
    pub(super) last_key: Option<(u64, u64)>,
    /// The loop site of the latest iteration's frame (for the finding's loop).
    pub(super) last_loop: Option<u32>,
    pub(super) iterations: u64,
    /// Size of the latest tensor (a site usually repeats it: no set lookup then).
    pub(super) last_bytes: Option<u64>,
    pub(super) new_size_iterations: u64,
    pub(super) last_new_key: Option<(u64, u64)>,
    pub(super) sizes: HashSet<u64>,
    pub(super) distinct: u64,
    pub(super) largest: u64,
    pub(super) smallest: u64,
    pub(super) first_shape: Option<Vec<usize>>,
    pub(super) last_new_shape: Option<Vec<usize>>,
}

impl Shapes {
    /// A tensor of another size than the site's latest: counts the size if it is new
    /// (out of line: `MemoryFindings::born`'s common case is a repeated size).
    #[inline(never)]
    pub(super) fn size_changed(&mut self, key: (u64, u64), bytes: u64, shape: Option<&[usize]>) {
        let new = if self.sizes.len() >= MAX_SIZES_PER_SITE {
            !self.sizes.contains(&bytes)
        } else {
            self.sizes.insert(bytes)
        };
        if !new {
            return;
        }
        if self.distinct == 0 {
            self.smallest = bytes;
            self.first_shape = shape.map(<[usize]>::to_vec);
        }
        self.distinct += 1;
        self.largest = self.largest.max(bytes);
        self.smallest = self.smallest.min(bytes);
        // The site's first iteration is the baseline: its sizes are not "new".
        if self.iterations > 1 && self.last_new_key != Some(key) {
            self.new_size_iterations += 1;
            self.last_new_key = Some(key);
        }
        if self.iterations > 1 {
            self.last_new_shape = shape.map(<[usize]>::to_vec);
        }
    }
}
