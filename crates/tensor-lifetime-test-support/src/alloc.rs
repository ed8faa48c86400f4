//! A counting global allocator, for measuring the tracker's own memory: install it in a
//! test or benchmark binary with
//! `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;` and read
//! [`live_bytes`]. Two atomic adds per allocation, the same for every variant measured.

// why: a global allocator is an `unsafe impl GlobalAlloc`; every call is forwarded to the
// system allocator unchanged, and only the sizes are counted.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Forwards to the system allocator and counts the live heap bytes.
#[derive(Debug)]
pub struct CountingAlloc;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Counts `delta` bytes when the allocation behind `p` succeeded.
fn count(p: *mut u8, delta: isize) -> *mut u8 {
    if !p.is_null() {
        LIVE.fetch_add(delta, Ordering::Relaxed);
    }
    p
}

// SAFETY: every call is forwarded to `System` with the caller's arguments; the counter
// has no effect on the allocations.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        count(unsafe { System.alloc(layout) }, layout.size() as isize)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        count(
            unsafe { System.alloc_zeroed(layout) },
            layout.size() as isize,
        )
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        count(p, new_size as isize - layout.size() as isize)
    }
}

/// Live heap bytes counted by [`CountingAlloc`] (0 where it is not the global allocator).
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}
