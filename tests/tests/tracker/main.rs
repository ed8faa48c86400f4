//! The tracker as the whole process sees it: its own heap (a counting global allocator,
//! installed for this binary), the live tensors, refcounts and per-site totals of the
//! process, and the order of probes when a second thread starts probing. Each test runs
//! alone in a child process of this binary
//! ([`tensor_lifetime_tests::process::alone`]): what it counts is process-wide.

use tensor_lifetime_test_support::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

pub mod concurrent_tagging;
pub mod handoff;
pub mod long_run;
pub mod memory;
pub mod pprof;
pub mod refcounts;
