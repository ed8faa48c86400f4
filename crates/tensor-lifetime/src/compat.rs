//! What depends on candle-core's version: the storage's element types (its enum's
//! variants change between releases). The weak handle's layout assumption lives in
//! [`crate::weak`], with its own checks.

use candle_core::Storage;

/// Bytes of the whole storage behind a tensor (not just its view); `None` for a backend
/// this build does not read (Metal).
pub(crate) fn storage_bytes(storage: &Storage) -> Option<u64> {
    use candle_core::CpuStorage as C;
    let bytes = match storage {
        Storage::Cpu(c) => match c {
            C::U8(v) | C::F6E2M3(v) | C::F6E3M2(v) | C::F4(v) | C::F8E8M0(v) => v.len(),
            C::U32(v) => v.len() * 4,
            C::I16(v) => v.len() * 2,
            C::I32(v) => v.len() * 4,
            C::I64(v) => v.len() * 8,
            C::BF16(v) => v.len() * 2,
            C::F16(v) => v.len() * 2,
            C::F32(v) => v.len() * 4,
            C::F64(v) => v.len() * 8,
            C::F8E4M3(v) => v.len(),
        },
        #[cfg(feature = "cuda")]
        Storage::Cuda(c) => cuda_storage_bytes(c),
        _ => return None,
    };
    Some(bytes as u64)
}

/// Bytes of a CUDA storage as candle asked for them (`len × size_of::<T>()`; the pool
/// rounds each allocation up).
#[cfg(feature = "cuda")]
fn cuda_storage_bytes(storage: &candle_core::CudaStorage) -> usize {
    use candle_core::cuda_backend::CudaStorageSlice as S;
    match &storage.slice {
        S::U8(s) | S::F6E2M3(s) | S::F6E3M2(s) | S::F4(s) | S::F8E8M0(s) => s.num_bytes(),
        S::U32(s) => s.num_bytes(),
        S::I16(s) => s.num_bytes(),
        S::I32(s) => s.num_bytes(),
        S::I64(s) => s.num_bytes(),
        S::BF16(s) => s.num_bytes(),
        S::F16(s) => s.num_bytes(),
        S::F32(s) => s.num_bytes(),
        S::F64(s) => s.num_bytes(),
        S::F8E4M3(s) => s.num_bytes(),
    }
}
