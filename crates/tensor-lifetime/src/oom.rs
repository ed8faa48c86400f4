//! Out-of-memory detection on the way out of a tracked function.
//!
//! `#[track]` ends every function it instruments whose return type is a `Result` with
//! `(&Returned(&result)).check_oom()`: for a `Result<_, E>` whose `E` is `Display`, an
//! `Err` is looked at (nothing is done on `Ok`); for any other type the call resolves to
//! [`CheckAny`], which does nothing (autoref specialization: the type is fully known
//! there, so it constrains no inference).
//!
//! An error is candle's out-of-memory when it is a `candle_core::Error::Cuda` (under any
//! `Context` or `WithBacktrace`) whose message names `CUDA_ERROR_OUT_OF_MEMORY` (cudarc's
//! driver error) or says `out of memory`; an error of another type (`anyhow::Error`
//! wrapping it) is judged by its message alone. The first one in the process writes the
//! post-mortem ([`crate::post_mortem`]) to stderr, the event log and the JSON report.

use std::any::Any;
use std::fmt::Display;

/// A function's result on its way out (see the module docs).
pub struct Returned<'a, T: ?Sized>(pub &'a T);

impl<T: ?Sized> std::fmt::Debug for Returned<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Returned")
    }
}

/// The check of a `Result` whose error is `Display`.
pub trait CheckResult {
    fn check_oom(&self);
}

impl<U, E: Display + 'static> CheckResult for Returned<'_, Result<U, E>> {
    #[inline]
    fn check_oom(&self) {
        if let Err(e) = self.0 {
            returned_error(e);
        }
    }
}

/// The fallback for every other type: nothing to check.
pub trait CheckAny {
    fn check_oom(&self);
}

impl<T: ?Sized> CheckAny for &Returned<'_, T> {
    #[inline]
    fn check_oom(&self) {}
}

/// A tracked function returned `e`: the post-mortem if it is the first out-of-memory
/// error.
#[cold]
#[inline(never)]
fn returned_error<E: Display + 'static>(e: &E) {
    let oom = match (e as &dyn Any).downcast_ref::<candle_core::Error>() {
        Some(e) => is_candle_oom(e),
        None => says_oom(&e.to_string()),
    };
    if !oom {
        return;
    }
    let Some(t) = crate::tracker::active() else {
        return;
    };
    if crate::tracker::oom_seen() {
        let pm = t.post_mortem(&format!("out of memory: {e}"));
        t.write_post_mortem(&pm);
    }
}

/// candle's CUDA out-of-memory error, under any context or backtrace.
fn is_candle_oom(e: &candle_core::Error) -> bool {
    match e {
        candle_core::Error::Cuda(inner) => says_oom(&inner.to_string()),
        candle_core::Error::Context { inner, .. }
        | candle_core::Error::WithBacktrace { inner, .. } => is_candle_oom(inner),
        _ => false,
    }
}

fn says_oom(message: &str) -> bool {
    message.contains("CUDA_ERROR_OUT_OF_MEMORY") || message.to_lowercase().contains("out of memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Driver;
    impl Display for Driver {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")")
        }
    }
    impl std::error::Error for Driver {}

    #[test]
    fn knows_candle_oom() {
        let oom = candle_core::Error::Cuda(Box::new(Driver));
        assert!(is_candle_oom(&oom));
        assert!(is_candle_oom(&oom.context("allocating")));
        assert!(!is_candle_oom(&candle_core::Error::Msg(
            "out of memory".into()
        )));
        assert!(says_oom("CUDA_ERROR_OUT_OF_MEMORY"));
        assert!(!says_oom("shape mismatch"));
    }

    #[test]
    // The borrow picks the check, as in what `#[track]` generates.
    #[allow(clippy::needless_borrow)]
    fn any_type_resolves() {
        let r: Result<u8, candle_core::Error> = Ok(1);
        (&Returned(&r)).check_oom();
        let n = 3u32;
        (&Returned(&n)).check_oom();
        struct NoDisplay;
        let r: Result<u8, NoDisplay> = Err(NoDisplay);
        (&Returned(&r)).check_oom();
    }
}
