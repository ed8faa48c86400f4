//! Out-of-memory detection on the way out of a tracked function.
//!
//! `#[track]` passes the operand of every `?` in the code it instruments, and the tail
//! expression of a function returning a `Result`, through [`Checked::checked`]: the
//! value comes back unchanged, and an `Err` holding a `candle_core::Error` is looked at
//! first. At a `?` the function's locals are all alive, so the post-mortem sees what the
//! failing step held (the error is caught where it first crosses tracked code, before
//! any caller's locals drop).
//!
//! An error is candle's out-of-memory when it is a `candle_core::Error::Cuda` (under any
//! `Context` or `WithBacktrace`) whose message names `CUDA_ERROR_OUT_OF_MEMORY` (cudarc's
//! driver error) or says `out of memory`. Errors of other types are not looked at (an
//! `anyhow::Error` is made from the candle error by a `?`, which saw it first). The first
//! one in the process writes the post-mortem ([`crate::post_mortem`]) to stderr, the
//! event log and the JSON report.

// why: an error whose type id is candle's `Error` is read as one.
#![allow(unsafe_code)]

use std::any::TypeId;

/// A value on its way through `?` (or out as a tracked function's tail): an `Err` is
/// looked at; `Ok`, `Some` and `None` pass untouched. A trait (not a generic function
/// over `Result`) so that `?` on an `Option` in tracked code still compiles.
pub trait Checked {
    fn checked(self) -> Self;
}

impl<U, E> Checked for Result<U, E> {
    #[inline(always)]
    fn checked(self) -> Self {
        if let Err(e) = &self {
            returned_error(e);
        }
        self
    }
}

impl<T> Checked for Option<T> {
    #[inline(always)]
    fn checked(self) -> Self {
        self
    }
}

/// A tracked function passes on error `e`: the post-mortem if it is the first
/// out-of-memory error of the process.
#[cold]
#[inline(never)]
fn returned_error<E>(e: &E) {
    // `typeid` compares types that need not be `'static` (the error type of a `?` may
    // borrow).
    if typeid::of::<E>() != TypeId::of::<candle_core::Error>() {
        return;
    }
    // SAFETY: `E` and `candle_core::Error` have the same type id: `E` is candle's `Error`
    // and `e` a valid reference to one for this call.
    let e = unsafe { &*(e as *const E as *const candle_core::Error) };
    if !is_candle_oom(e) {
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
    impl std::fmt::Display for Driver {
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
    fn passes_values_through() {
        let r: Result<u8, candle_core::Error> = Ok(1);
        assert_eq!(r.checked().unwrap(), 1);
        assert_eq!(Some(3).checked(), Some(3));
        let e: Result<u8, &str> = Err("no");
        assert!(e.checked().is_err());
    }
}
