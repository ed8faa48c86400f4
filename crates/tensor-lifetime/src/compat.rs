//! Everything that depends on candle-core's version, for every supported release
//! (`>=0.8, <0.12`: 0.8.x, 0.9.x, 0.10.x, 0.11.x, and forks or git revisions of them).
//!
//! # One source for every version, no cfgs
//!
//! The releases differ, for this crate, in two places: the element types of the storage
//! enums (`CpuStorage`, `CudaStorageSlice`: 0.9.2 added `I16`, `I32`, `F8E4M3` and four
//! dummy float formats) and the cudarc behind the CUDA backend (0.13 in candle 0.8, 0.16
//! in 0.9.1, 0.19 from 0.9.2). Naming a variant that a release lacks does not compile,
//! and a build script cannot learn a dependency's version (Cargo tells it nothing about
//! dependencies without `links`), so nothing here names a variant: storage bytes are read
//! through candle's own generic accessors (`CpuStorage::as_slice::<T>`,
//! `CudaStorage::as_cuda_slice::<T>`, present in every release), tried for each element
//! type the release implements. Whether it implements one is decided at compile time by
//! [`Elem`]: an inherent method bounded on candle's trait wins over a trait method of the
//! same name when the bound holds, and the trait's fallback is chosen when it does not
//! (the `impls` crate's trick; it works because the types are concrete here). The CUDA
//! memory statistics reach the driver directly ([`crate::device`]), not through cudarc.
//!
//! Which candle-core a build uses is chosen by a feature (`candle-0-8` to `candle-0-11`),
//! because Cargo keeps one candle-core per minor and would not follow the user's; the
//! crate root names the selected one `candle_core`. The build script checks the choice
//! against the user's candle and reads which release was resolved (from `Cargo.lock`),
//! for messages.
//!
//! # Another candle at run time
//!
//! When the build's candle is not the user's (a check the build script could not make:
//! no `Cargo.lock` found for sure, a candle outside the range), their tensors have a type
//! this crate cannot see (same name, other type id), and tracking would find nothing.
//! [`foreign_candle`] says so, once, at the first such tensor probed, with the feature to
//! select.

use candle_core::{CpuStorage, DType, Storage, Tensor, Var, WithDType};
use half::{bf16, f16};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

/// The candle-core requirement of this release (the workspace `Cargo.toml`'s).
pub(crate) const SUPPORTED: &str = ">=0.8, <0.12";

/// The candle-core version this build resolved, as the build script read it from
/// `Cargo.lock` ("unknown" when it found none, e.g. under a target directory outside the
/// workspace).
pub(crate) const BUILT_WITH: &str = env!("TENSOR_LIFETIME_CANDLE_VERSION");

/// Every candle-core version in that `Cargo.lock` (comma-separated).
pub(crate) const IN_GRAPH: &str = env!("TENSOR_LIFETIME_CANDLE_VERSIONS_IN_GRAPH");

/// What to do about another candle-core in that `Cargo.lock` (the build script's
/// sentence: the feature of its minor, or that it is not supported); empty when it holds
/// one candle or none was found.
const FIX: &str = env!("TENSOR_LIFETIME_CANDLE_FIX");

/// The candle-core this build uses, for messages: `candle-core 0.11.1`.
pub(crate) fn candle_version() -> String {
    format!("candle-core {BUILT_WITH} (tensor-lifetime supports {SUPPORTED})")
}

/// Bytes of the whole storage behind a tensor (not just its view); `None` for what this
/// build does not read (Metal, and the 8-, 6- and 4-bit float formats of candle 0.9.2 and
/// later, whose element types are not nameable on older releases); the caller then counts
/// the tensor's own bytes. `dtype` is the tensor's (its storage's): only that element
/// type is read, so no accessor is called with a type it must refuse.
pub(crate) fn storage_bytes(storage: &Storage, dtype: DType) -> Option<u64> {
    match storage {
        Storage::Cpu(c) => cpu_storage_bytes(c, dtype),
        #[cfg(feature = "cuda")]
        Storage::Cuda(c) => cuda_storage_bytes(c, dtype),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// An element type, probed at compile time for what this candle implements for it.
struct Elem<T>(PhantomData<T>);

/// The fallback of [`Elem`]'s probes: chosen when candle does not implement its trait for
/// the type (an older release), so the type is never the storage's.
// why: unused on a candle that implements every type tried (0.9.2 and later).
#[allow(dead_code)]
trait NotAnElem {
    fn cpu_len(&self, _: &CpuStorage, _: DType) -> Option<usize> {
        None
    }
    #[cfg(feature = "cuda")]
    fn cuda_len(&self, _: &candle_core::CudaStorage, _: DType) -> Option<usize> {
        None
    }
}
impl<T> NotAnElem for Elem<T> {}

impl<T: WithDType> Elem<T> {
    #[inline]
    fn cpu_len(&self, s: &CpuStorage, dtype: DType) -> Option<usize> {
        if T::DTYPE != dtype {
            return None;
        }
        s.as_slice::<T>().ok().map(<[T]>::len)
    }
}

#[cfg(feature = "cuda")]
impl<T: candle_core::cuda_backend::CudaDType + WithDType> Elem<T> {
    #[inline]
    fn cuda_len(&self, s: &candle_core::CudaStorage, dtype: DType) -> Option<usize> {
        if <T as WithDType>::DTYPE != dtype {
            return None;
        }
        s.as_cuda_slice::<T>().ok().map(|slice| slice.len())
    }
}

/// Calls `$probe` on `Elem<T>` for each element type until one is the storage's `dtype`;
/// the bytes are its length times the type's size.
macro_rules! storage_bytes_of {
    ($storage:expr, $dtype:expr, $probe:ident, $($ty:ty),*) => {{
        let (s, dtype) = ($storage, $dtype);
        None
            $(.or_else(|| {
                Elem::<$ty>(PhantomData)
                    .$probe(s, dtype)
                    .map(|n| (n * std::mem::size_of::<$ty>()) as u64)
            }))*
    }};
}

fn cpu_storage_bytes(s: &CpuStorage, dtype: DType) -> Option<u64> {
    storage_bytes_of!(s, dtype, cpu_len, f32, bf16, f16, f64, u8, u32, i64, i16, i32)
}

/// Bytes of a CUDA storage as candle asked for them (`len × size_of::<T>()`; the pool
/// rounds each allocation up).
#[cfg(feature = "cuda")]
fn cuda_storage_bytes(s: &candle_core::CudaStorage, dtype: DType) -> Option<u64> {
    storage_bytes_of!(s, dtype, cuda_len, f32, bf16, f16, f64, u8, u32, i64, i16, i32)
}

/// Checks a probed value whose type is none of the known tensor-holding types: if its type
/// *name* is the name of one of them, it is a tensor of another candle-core (the same path
/// in a different crate version), which tracking cannot see. Cheap for any other type (a
/// few byte comparisons), so the probe may call it for every value it does not know.
#[inline]
pub(crate) fn check_unknown(type_name: &'static str) {
    if type_name.ends_with("Tensor")
        || type_name.ends_with("Tensor>")
        || type_name.ends_with("Var")
        || type_name.ends_with("Error>")
    {
        check_unknown_slow(type_name);
    }
}

#[cold]
fn check_unknown_slow(type_name: &'static str) {
    use std::any::type_name as name;
    let ours = [
        name::<Tensor>(),
        name::<&Tensor>(),
        name::<Var>(),
        name::<&Var>(),
        name::<Option<Tensor>>(),
        name::<Vec<Tensor>>(),
        name::<candle_core::Result<Tensor>>(),
    ];
    if ours.contains(&type_name) {
        foreign_candle(type_name);
    }
}

static FOREIGN_REPORTED: AtomicBool = AtomicBool::new(false);

/// Says once, on stderr and through `tracing`, that a tensor of another candle-core was
/// probed and will not be tracked.
#[cold]
pub(crate) fn foreign_candle(type_name: &str) {
    if FOREIGN_REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let message = foreign_message(type_name);
    eprintln!("{message}");
    tracing::error!(target: "tensor_lifetime", "{message}");
}

/// Whether [`foreign_candle`] has reported (tests).
#[cfg(test)]
pub(crate) fn foreign_reported() -> bool {
    FOREIGN_REPORTED.load(Ordering::Relaxed)
}

fn foreign_message(type_name: &str) -> String {
    let graph = if IN_GRAPH.contains(',') {
        format!("; the build's Cargo.lock holds candle-core {IN_GRAPH}")
    } else {
        String::new()
    };
    let fix = if FIX.is_empty() {
        "Select your candle-core's minor with its feature (candle-0-8, candle-0-9, \
         candle-0-10, candle-0-11), e.g. for 0.9: tensor-lifetime = { ..., \
         default-features = false, features = [\"macros\", \"tracking\", \"candle-0-9\"] }."
    } else {
        FIX
    };
    let version = if BUILT_WITH == "unknown" {
        "VERSION"
    } else {
        BUILT_WITH
    };
    format!(
        "error: tensor-lifetime: a `{type_name}` of another candle-core was probed, so its \
         tensors are not tracked and no leak can be found in them. tensor-lifetime was built \
         with candle-core {BUILT_WITH}{graph}; it supports candle-core {SUPPORTED}, one minor \
         per build, chosen by a feature (`candle-0-11` by default): Cargo does not share a \
         candle-core of another minor. {fix} (`cargo tree -i candle-core@{version}` shows \
         which crates use this build's.)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn storage_bytes_of_every_dtype_this_candle_has() {
        for dtype in [
            DType::U8,
            DType::U32,
            DType::I64,
            DType::BF16,
            DType::F16,
            DType::F32,
            DType::F64,
        ] {
            let t = Tensor::zeros((3, 5), dtype, &Device::Cpu).unwrap();
            let (guard, _) = t.storage_and_layout();
            assert_eq!(
                storage_bytes(&guard, dtype),
                Some(15 * dtype.size_in_bytes() as u64),
                "{dtype:?}"
            );
        }
    }

    #[test]
    fn a_view_counts_its_whole_storage() {
        let t = Tensor::zeros((8, 4), DType::F32, &Device::Cpu).unwrap();
        let row = t.narrow(0, 2, 1).unwrap();
        let (guard, _) = row.storage_and_layout();
        assert_eq!(storage_bytes(&guard, row.dtype()), Some(8 * 4 * 4));
        // Only the given element type is read.
        assert_eq!(storage_bytes(&guard, DType::U8), None);
    }

    #[test]
    fn an_unknown_type_is_not_a_foreign_candle() {
        // Our own types are matched by the probe before this check; other types, and
        // containers of our tensors that the probe does not read, are not foreign.
        check_unknown(std::any::type_name::<f32>());
        check_unknown(std::any::type_name::<Vec<(String, Tensor)>>());
        check_unknown(std::any::type_name::<std::collections::LinkedList<Tensor>>());
        assert!(!foreign_reported());
    }

    #[test]
    fn the_message_names_both_versions_and_the_range() {
        let m = foreign_message("candle_core::tensor::Tensor");
        assert!(m.starts_with("error: tensor-lifetime: "), "{m}");
        assert!(m.contains("`candle_core::tensor::Tensor` of another candle-core"));
        assert!(
            m.contains(&format!("built with candle-core {BUILT_WITH}")),
            "{m}"
        );
        assert!(m.contains(">=0.8, <0.12"), "{m}");
        assert!(m.contains("cargo tree -i candle-core"), "{m}");
    }

    #[test]
    fn the_message_names_the_feature_to_select() {
        // The workspace's lock holds one candle per minor (every optional dependency of a
        // member is resolved), so the build script's sentence names the other ones'.
        let m = foreign_message("candle_core::tensor::Tensor");
        assert!(
            m.contains("chosen by a feature (`candle-0-11` by default)"),
            "{m}"
        );
        assert!(m.contains("default-features = false, features = ["), "{m}");
        assert!(m.contains("\"candle-0-"), "{m}");
        assert!(!m.contains("shared automatically"), "{m}");
    }

    #[test]
    fn the_build_script_found_this_candle() {
        // The workspace's own builds always have a Cargo.lock above the build directory.
        assert_ne!(BUILT_WITH, "unknown");
        assert!(IN_GRAPH.split(',').any(|v| v == BUILT_WITH), "{IN_GRAPH}");
        assert!(BUILT_WITH.starts_with("0.") && BUILT_WITH[2..].split('.').count() >= 2);
    }
}
