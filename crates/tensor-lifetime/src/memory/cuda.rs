//! The CUDA driver calls behind [`crate::memory`]: the device's stream-ordered memory
//! pool (`cuMemPool*`), `cuMemGetInfo`, synchronize.
//!
//! candle's `CudaDevice` holds a cudarc stream on the device's primary context; its
//! allocations go through `cuMemAllocAsync` into the device's current pool
//! (`cuDeviceGetMemPool`, the default pool unless someone set another). The monitor knows
//! devices by name only: it retains the same primary context by ordinal, so it reads the
//! same pool.

use crate::error::{Error, Result};
use candle_core::{CudaStorage, Device};
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUmemPool_attribute as Attr};
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn err(call: &str) -> impl FnOnce(DriverError) -> Error + '_ {
    move |e| Error::Cuda(format!("{call}: {e}"))
}

/// The cudarc context of a candle CUDA device.
pub(crate) fn context_of(device: &Device) -> Result<Arc<CudaContext>> {
    match device {
        Device::Cuda(d) => Ok(d.cuda_stream().context().clone()),
        other => Err(Error::Cuda(format!(
            "not a CUDA device: {}",
            super::device_key(other)
        ))),
    }
}

/// The primary context of device `ordinal`, retained once and kept.
pub(crate) fn context_for_ordinal(ordinal: usize) -> Result<Arc<CudaContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<CudaContext>>>> = OnceLock::new();
    let mut map = CONTEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(ctx) = map.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal).map_err(err("cuDevicePrimaryCtxRetain"))?;
    map.insert(ordinal, ctx.clone());
    Ok(ctx)
}

/// One reading of the pool and the device.
#[derive(Debug, Clone)]
pub(crate) struct PoolInfo {
    pub(crate) name: Option<String>,
    pub(crate) used: u64,
    pub(crate) used_high: u64,
    pub(crate) reserved: u64,
    pub(crate) reserved_high: u64,
    pub(crate) release_threshold: u64,
    pub(crate) free: u64,
    pub(crate) total: u64,
}

fn pool(ctx: &CudaContext) -> Result<sys::CUmemoryPool> {
    ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
    // SAFETY: the device handle comes from a live context.
    unsafe { result::device::get_mem_pool(ctx.cu_device()) }.map_err(err("cuDeviceGetMemPool"))
}

fn get(pool: sys::CUmemoryPool, attr: Attr) -> Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: every attribute read here is a `cuuint64_t`, and `value` is one.
    unsafe { result::mem_pool::get_attribute(pool, attr, (&mut value as *mut u64).cast()) }
        .map_err(err("cuMemPoolGetAttribute"))?;
    Ok(value)
}

fn set(pool: sys::CUmemoryPool, attr: Attr, mut value: u64) -> Result<()> {
    // SAFETY: every attribute written here is a `cuuint64_t`, and `value` is one.
    unsafe { result::mem_pool::set_attribute(pool, attr, (&mut value as *mut u64).cast()) }
        .map_err(err("cuMemPoolSetAttribute"))
}

/// Reads the pool's counters and `cuMemGetInfo`.
pub(crate) fn query(ctx: &CudaContext) -> Result<PoolInfo> {
    let pool = pool(ctx)?;
    let (free, total) = ctx.mem_get_info().map_err(err("cuMemGetInfo"))?;
    Ok(PoolInfo {
        name: ctx.name().ok(),
        used: get(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        used_high: get(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        reserved: get(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        reserved_high: get(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        release_threshold: get(pool, Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)?,
        free: free as u64,
        total: total as u64,
    })
}

/// Resets the pool's high-water marks to the current values (the driver only accepts 0,
/// which it reads as "now").
pub(crate) fn reset_high(ctx: &CudaContext) -> Result<()> {
    let pool = pool(ctx)?;
    set(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
    set(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
}

/// Waits for all work of the context, every stream (so queued frees have run).
pub(crate) fn synchronize(ctx: &CudaContext) -> Result<()> {
    ctx.synchronize().map_err(err("cuCtxSynchronize"))
}

/// Returns reserved memory above `keep` bytes that no allocation uses to the device.
pub(crate) fn trim(ctx: &CudaContext, keep: usize) -> Result<()> {
    let pool = pool(ctx)?;
    // SAFETY: the pool belongs to a live device.
    unsafe { result::mem_pool::trim_to(pool, keep) }.map_err(err("cuMemPoolTrimTo"))
}

pub(crate) fn set_release_threshold(ctx: &CudaContext, bytes: u64) -> Result<()> {
    set(pool(ctx)?, Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
}

/// Bytes of a CUDA storage as candle asked for them (`len × size_of::<T>()`).
pub(crate) fn storage_bytes(storage: &CudaStorage) -> usize {
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
