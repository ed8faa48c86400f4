//! What the tests of tensor-lifetime share, kept out of the product crates (as tracing
//! keeps `tracing-mock` and serde its `test_suite`). Not published.
//!
//! - [`synth`]: synthetic event logs, a training loop simulated event by event without
//!   candle, for the renderers', the CLI's and the benchmarks' tests.
//! - [`events`]: builders of single events (`loop_start(frame, site)`,
//!   `iteration_end(frame, i).site(s).survivors(n)`), for the judgement's tests.
//! - [`trace_check`]: the rules of the Chrome Trace Event format that the trace writer
//!   follows, checked on a parsed file.
//! - [`alloc`]: a counting global allocator, for tests and benchmarks of the tracker's own
//!   memory.
//! - [`serial`]: a lock that makes the tests of one test binary that take it run one at a
//!   time.
//! - [`twice!`]: compiles items twice, as written and with `#[tensor_lifetime::track]`.

#![deny(unsafe_code)]

pub mod alloc;
pub mod events;
pub mod synth;
pub mod trace_check;

use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the lock shared by every test of this test binary (each test file is its own
/// process) that calls it: for tests that touch the process-wide tracker in ways that
/// sessions do not isolate. A test that panicked while holding it does not poison it for
/// the others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Emits items twice: in a module `plain` as written, and in a module `tracked` with
/// `#[tensor_lifetime::track]` on each, so that a test can run both and compare.
///
/// `types { .. }` (optional) are items emitted as written in both modules, such as the
/// structs the functions use; `code { .. }` are the items to track. Both modules
/// `use super::*`. The caller depends on `tensor-lifetime` (the attribute's path is
/// resolved where the macro is used).
///
/// ```text
/// tensor_lifetime_test_support::twice! {
///     pub fn sum(n: u32) -> u32 { (0..n).sum() }
/// }
/// assert_eq!(plain::sum(4), tracked::sum(4));
/// ```
#[macro_export]
macro_rules! twice {
    (types { $($ty:item)* } code { $($item:item)* }) => {
        #[allow(dead_code)]
        pub mod plain {
            use super::*;
            $($ty)*
            $($item)*
        }
        #[allow(dead_code)]
        pub mod tracked {
            use super::*;
            $($ty)*
            $(#[tensor_lifetime::track] $item)*
        }
    };
    ($($item:item)*) => {
        $crate::twice! { types {} code { $($item)* } }
    };
}
