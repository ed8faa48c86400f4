//! A counting global allocator for measuring the tracker's own memory (`bench_loops
//! memory`, `tests/tests/tracker_memory.rs`): install it in a binary with
//! `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;` and read
//! [`live_bytes`]. Two atomic adds per allocation, the same for every variant measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Forwards to the system allocator and counts the live heap bytes.
#[derive(Debug)]
pub struct CountingAlloc;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Live heap bytes counted by [`CountingAlloc`] (0 where it is not the global allocator).
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}
