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
//!
//! The post-mortem's reason is the error's message on one line ([`message`]): a
//! backtrace candle captured (`Error::bt()`, `WithBacktrace`) is left out of it. It is
//! printed after the post-mortem only where the user asked for backtraces
//! (`RUST_BACKTRACE` or `RUST_LIB_BACKTRACE` set and not `0`) and it has symbols: a
//! release build without debug information captures frames that all read `<unknown>`.

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
        let pm = t.post_mortem(&format!("out of memory: {}", message(e)));
        t.write_post_mortem(&pm);
        if let Some(bt) = backtrace(e).filter(|bt| worth_printing(bt, backtraces_asked())) {
            eprintln!("tensor-lifetime: backtrace of the out-of-memory error:\n{bt}");
        }
    }
}

/// The error's message on one line, without the backtraces it carries: a context
/// before what it wraps (`allocating: CUDA_ERROR_OUT_OF_MEMORY`).
fn message(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => message(inner),
        candle_core::Error::Context { inner, context } => format!("{context}: {}", message(inner)),
        other => other.to_string().replace('\n', " "),
    }
}

/// The outermost backtrace the error carries, as text.
fn backtrace(e: &candle_core::Error) -> Option<String> {
    match e {
        candle_core::Error::WithBacktrace { backtrace, .. } => Some(backtrace.to_string()),
        candle_core::Error::Context { inner, .. } => backtrace(inner),
        _ => None,
    }
}

/// Whether the user asked for backtraces, as the standard library reads it.
fn backtraces_asked() -> bool {
    ["RUST_LIB_BACKTRACE", "RUST_BACKTRACE"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .is_some_and(|v| v != "0")
}

/// Frames every backtrace has, named even in a stripped program: the C runtime's entry.
const RUNTIME_FRAMES: [&str; 4] = [
    "__libc_start_main",
    "__libc_start_call_main",
    "_start",
    "start_thread",
];

/// A backtrace is printed when asked for and when a frame names a function of the
/// program (frames read `N: <unknown>` without symbols; the C runtime's entry is named
/// even then).
fn worth_printing(backtrace: &str, asked: bool) -> bool {
    asked
        && backtrace.lines().any(|l| {
            let frame = l.trim_start();
            let name = frame.split_once(": ").map(|(n, rest)| (n, rest.trim()));
            matches!(name, Some((n, f)) if n.bytes().all(|b| b.is_ascii_digit())
                && f != "<unknown>"
                && !RUNTIME_FRAMES.contains(&f))
        })
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
    fn the_reason_is_the_message_without_the_captured_backtrace() {
        let oom = candle_core::Error::Cuda(Box::new(Driver));
        // What `Error::bt()` makes when backtraces are on, whatever the environment.
        let bt = std::backtrace::Backtrace::force_capture();
        let text = bt.to_string();
        let e = candle_core::Error::WithBacktrace {
            inner: Box::new(oom),
            backtrace: Box::new(bt),
        };
        assert!(
            e.to_string().contains(&text),
            "candle's Display prints the backtrace"
        );
        assert!(is_candle_oom(&e));
        assert_eq!(
            message(&e),
            "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")"
        );
        let e = e.context("allocating the batch");
        assert_eq!(
            message(&e),
            "allocating the batch: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")"
        );
        assert_eq!(backtrace(&e).as_deref(), Some(text.as_str()));
        assert_eq!(backtrace(&candle_core::Error::Msg("x".into())), None);
    }

    #[test]
    fn a_backtrace_is_printed_only_when_asked_for_and_symbolized() {
        // The H200's stripped release build: every frame unknown but the C runtime's.
        let unknown =
            "   0: <unknown>\n   1: <unknown>\n  14: __libc_start_main\n  15: <unknown>\n";
        let symbols = "   0: candle_core::error::Error::bt\n             at ./src/error.rs:260:25\n   1: <unknown>\n";
        assert!(!worth_printing(unknown, true));
        assert!(worth_printing(symbols, true));
        assert!(!worth_printing(symbols, false));
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
