//! Weak handles to candle tensors: the audited layout assumption of the tracker.
//!
//! candle's [`Tensor`] is `pub struct Tensor(Arc<Tensor_>)` and offers no weak
//! reference. The tracker needs one: a handle that tells whether the tensor is still
//! alive and how many strong references it has, without keeping it (or its storage)
//! alive. This module reinterprets a `&Tensor` as a `&Arc<Tensor_>` and downgrades it.
//!
//! # Why this is sound for the supported versions
//!
//! - Every candle-core in `>=0.8, <0.12` (the workspace `Cargo.toml`'s requirement; read
//!   in 0.8.4, 0.9.1, 0.9.2, 0.10.2 and 0.11.1, and run by `cargo xtask candle-matrix`)
//!   defines `Tensor` as a tuple struct whose only field is `Arc<Tensor_>`. A struct with a single
//!   non-zero-sized field has that field's size and alignment, and the field sits at
//!   offset 0 (there is nothing else to place); the compile-time assertions below check
//!   the size and alignment, and [`self_test`] checks at start-up that the reinterpreted
//!   `Arc` points at the very `Tensor_` that `Tensor`'s `Deref` returns and that its strong
//!   count moves with clones and drops of the `Tensor`.
//! - The inner type is named through `<Tensor as Deref>::Target`, so no private candle
//!   type is spelled out.
//! - Only shared references are produced, and only `Arc` methods that take `&self` are
//!   called through them (`Arc::downgrade`, `Arc::strong_count`, `Arc::as_ptr`), so no
//!   ownership is ever duplicated. Turning a strong `Arc` back into a `Tensor` (for graph
//!   walks) moves the `Arc` into a value of the same layout, which `self_test` checks
//!   by round-tripping one.
//! - If the self-test fails (a candle release changed the layout), [`self_test`] returns an
//!   error and the tracker refuses to start; it never guesses.
//! - This module's unit tests (`self_test_passes_on_the_pinned_candle` and the next ones)
//!   run the same checks on the candle in `Cargo.lock`, and `cargo xtask candle-matrix`
//!   runs them on each supported release, so a layout change fails CI before it reaches
//!   users.

// why: reinterpreting `&Tensor` as `&Arc<Tensor_>` is this module's purpose; the
// argument is above and checked at start-up.
#![allow(unsafe_code)]

use candle_core::{Device, Tensor};
use std::ops::Deref;
use std::sync::{Arc, Weak};

/// candle's private `Tensor_`, named through `Deref`.
pub(crate) type Inner = <Tensor as Deref>::Target;

// Compile-time layout checks, made on whichever candle-core this build resolved: `Tensor`
// must be exactly an `Arc<Tensor_>`.
const _: () = assert!(std::mem::size_of::<Tensor>() == std::mem::size_of::<Arc<Inner>>());
const _: () = assert!(std::mem::align_of::<Tensor>() == std::mem::align_of::<Arc<Inner>>());

/// Views a tensor as the `Arc` it wraps.
#[inline]
fn as_arc(tensor: &Tensor) -> &Arc<Inner> {
    // SAFETY: `Tensor` is a single-field tuple struct around `Arc<Inner>` in the pinned
    // candle-core versions; size and alignment are asserted above and the pointer identity
    // is checked by `self_test` before any handle is made (see the module docs).
    unsafe { &*(tensor as *const Tensor).cast::<Arc<Inner>>() }
}

/// A weak handle to a tensor.
#[derive(Debug, Clone)]
pub(crate) struct WeakTensor(Weak<Inner>);

impl WeakTensor {
    /// Makes a weak handle; the tensor's strong count is unchanged.
    #[inline]
    pub(crate) fn new(tensor: &Tensor) -> Self {
        WeakTensor(Arc::downgrade(as_arc(tensor)))
    }

    /// Strong references alive now (0 once the tensor was dropped).
    #[inline]
    pub(crate) fn strong_count(&self) -> usize {
        self.0.strong_count()
    }

    /// The tensor's [`key`] (the handle points where the tensor's `Arc` does).
    #[inline]
    pub(crate) fn key(&self) -> usize {
        self.0.as_ptr() as usize
    }

    /// A strong `Tensor` again, if still alive. Raises the strong count while held.
    /// Moves the handle out, leaving one that points at nothing (its drop touches no
    /// counter).
    #[inline]
    pub(crate) fn take(&mut self) -> WeakTensor {
        WeakTensor(std::mem::take(&mut self.0))
    }

    pub(crate) fn upgrade(&self) -> Option<Tensor> {
        let arc = self.0.upgrade()?;
        Some(from_arc(arc))
    }
}

/// How many weak handles of `tensor` exist. Only this module makes them (candle's
/// `Tensor` has no weak API), so they are the tracker's: its probe entries and records.
#[inline]
pub(crate) fn weak_count(tensor: &Tensor) -> usize {
    Arc::weak_count(as_arc(tensor))
}

/// The identity of a tensor: the address of its `Tensor_`, stable while any strong or
/// weak reference exists (so a tracked record's key is never reused while tracked).
#[inline]
pub(crate) fn key(tensor: &Tensor) -> usize {
    Arc::as_ptr(as_arc(tensor)) as usize
}

/// candle's creation serial of a tensor (its `TensorId`, from a process-wide counter that
/// every new tensor increments; clones share it). Read through `TensorId`'s `Hash`, which
/// hashes exactly its counter value: no `unsafe`.
#[inline]
pub(crate) fn serial(tensor: &Tensor) -> u64 {
    use std::hash::{Hash, Hasher};
    struct Capture(u64);
    impl Hasher for Capture {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 << 8) | u64::from(*b);
            }
        }
        fn write_usize(&mut self, n: usize) {
            self.0 = n as u64;
        }
    }
    let mut h = Capture(0);
    tensor.id().hash(&mut h);
    h.0
}

/// A serial no tensor created before this call has: tensors with a smaller serial existed
/// already (the creation watermark of a loop). candle hands out serials only to new
/// tensors: the cheapest is a view of a scalar this thread keeps (no storage to allocate).
pub(crate) fn serial_watermark() -> u64 {
    fn scalar() -> Option<Tensor> {
        Tensor::zeros((), candle_core::DType::U8, &Device::Cpu).ok()
    }
    thread_local! {
        static SCALAR: Option<Tensor> = scalar();
    }
    SCALAR
        .try_with(|s| s.as_ref().and_then(|s| s.reshape(()).ok()))
        .ok()
        .flatten()
        // The thread's scalar is gone (the thread is ending): a new one.
        .or_else(scalar)
        .map_or(0, |t| serial(&t))
}

fn from_arc(arc: Arc<Inner>) -> Tensor {
    // SAFETY: same layout as above; the `Arc`'s ownership moves into the `Tensor`, which
    // releases it on drop exactly as the `Arc` would have.
    unsafe { std::mem::transmute::<Arc<Inner>, Tensor>(arc) }
}

/// Why the layout self-test failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutMismatch(pub(crate) String);

impl std::fmt::Display for LayoutMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks, on a real tensor, every assumption the handles rely on.
pub(crate) fn self_test() -> Result<(), LayoutMismatch> {
    check_layout(as_arc)
}

/// The self-test, with the reinterpretation passed in (so tests can prove that a wrong
/// one is caught).
fn check_layout(as_arc: fn(&Tensor) -> &Arc<Inner>) -> Result<(), LayoutMismatch> {
    let fail = |what: &str| {
        Err(LayoutMismatch(format!(
            "candle-core's Tensor layout is not the one this tensor-lifetime build was \
             checked against ({what}); this build uses {}",
            crate::compat::candle_version()
        )))
    };
    let t = Tensor::zeros(4, candle_core::DType::F32, &Device::Cpu)
        .map_err(|e| LayoutMismatch(format!("cannot create a test tensor: {e}")))?;
    let arc = as_arc(&t);
    if !std::ptr::eq(Arc::as_ptr(arc), &*t as *const Inner) {
        return fail("the Arc does not point at the tensor's Deref target");
    }
    let base = Arc::strong_count(arc);
    if base != 1 {
        return fail("a fresh tensor does not have strong count 1");
    }
    let weak = WeakTensor(Arc::downgrade(arc));
    if weak.strong_count() != 1 || Arc::weak_count(arc) != 1 {
        return fail("downgrading changed the strong count");
    }
    let clone = t.clone();
    if weak.strong_count() != 2 {
        return fail("a clone did not raise the strong count");
    }
    drop(clone);
    if weak.strong_count() != 1 {
        return fail("dropping a clone did not lower the strong count");
    }
    match weak.upgrade() {
        Some(back) if std::ptr::eq(&*back, &*t) && back.dims() == t.dims() => drop(back),
        _ => return fail("a weak handle did not upgrade to the same tensor"),
    }
    if weak.strong_count() != 1 {
        return fail("an upgraded handle did not release its reference");
    }
    let later = Tensor::zeros(1, candle_core::DType::F32, &Device::Cpu)
        .map_err(|e| LayoutMismatch(format!("cannot create a test tensor: {e}")))?;
    if serial(&later) <= serial(&t) || serial(&t.clone()) != serial(&t) {
        return fail("tensor ids are not increasing creation serials");
    }
    drop(t);
    if weak.strong_count() != 0 || weak.upgrade().is_some() {
        return fail("dropping the tensor was not seen by its weak handle");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_test_passes_on_the_pinned_candle() {
        self_test().unwrap();
    }

    #[test]
    fn a_wrong_layout_is_refused_with_a_clear_error() {
        // Pretend the reinterpretation pointed somewhere else: the self-test must notice.
        static OTHER: std::sync::OnceLock<Tensor> = std::sync::OnceLock::new();
        fn wrong(_: &Tensor) -> &Arc<Inner> {
            as_arc(
                OTHER.get_or_init(|| {
                    Tensor::zeros(1, candle_core::DType::F32, &Device::Cpu).unwrap()
                }),
            )
        }
        let err = check_layout(wrong).unwrap_err().to_string();
        assert!(
            err.contains("candle-core's Tensor layout is not the one"),
            "{err}"
        );
        assert!(err.contains("does not point at the tensor"), "{err}");
        assert!(err.contains("supports >=0.8, <0.12"), "{err}");
        assert!(
            err.contains(&format!("candle-core {}", crate::compat::BUILT_WITH)),
            "{err}"
        );
    }

    #[test]
    fn the_watermark_is_above_every_tensor_made_before_and_not_above_those_after() {
        let before = Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap();
        let first = serial_watermark();
        let second = serial_watermark();
        let after = Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(serial(&before) < first, "{} < {first}", serial(&before));
        assert!(
            first < second,
            "each call is a new watermark: {first} < {second}"
        );
        assert!(second <= serial(&after), "{second} <= {}", serial(&after));
        // Another thread keeps its own scalar, and its watermarks are as good.
        let other = std::thread::spawn(serial_watermark).join().unwrap();
        assert!(
            other > second
                && other < serial(&Tensor::ones(1, candle_core::DType::U8, &Device::Cpu).unwrap())
        );
    }

    #[test]
    fn views_share_storage_but_not_identity() {
        let t = Tensor::zeros((4, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let row = t.narrow(0, 0, 1).unwrap();
        assert_ne!(key(&t), key(&row));
        let clone = t.clone();
        assert_eq!(key(&t), key(&clone));
        // A weak handle has the key of its tensor, also after the tensor is gone.
        let weak = WeakTensor::new(&row);
        let row_key = key(&row);
        assert_eq!(weak.key(), row_key);
        drop(row);
        assert_eq!(weak.strong_count(), 0);
        assert_eq!(weak.key(), row_key);
    }
}
