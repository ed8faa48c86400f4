//! The CUDA driver calls behind [`crate::memory`] and the memory monitor: the device's stream-ordered memory
//! pool (`cuMemPool*`), `cuMemGetInfo`, synchronize.
//!
//! candle's `CudaDevice` holds a cudarc stream on the device's primary context; its
//! allocations go through `cuMemAllocAsync` into the device's current pool
//! (`cuDeviceGetMemPool`, the default pool unless someone set another). The monitor knows
//! devices by name only: it retains the same primary context by ordinal, so it reads the
//! same pool.

// why: cudarc's raw pool calls take handles and out-pointers.
#![allow(unsafe_code)]

use super::PoolInfo;
use crate::error::{Error, Result};
use candle_core::Device;
use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUmemPool_attribute as Attr};
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn err(call: &str) -> impl FnOnce(DriverError) -> Error + '_ {
    move |e| Error::Cuda(format!("{call}: {e}"))
}

/// A device's context: what the calls below act on.
pub(crate) type Context = Arc<CudaContext>;

/// The cudarc context of a candle CUDA device.
pub(crate) fn context_of(device: &Device) -> Result<Context> {
    match device {
        Device::Cuda(d) => Ok(d.cuda_stream().context().clone()),
        other => Err(Error::Cuda(format!(
            "not a CUDA device: {}",
            super::DeviceId::of(other)
        ))),
    }
}

/// The primary context of device `ordinal`, retained once and kept.
pub(crate) fn context_for_ordinal(ordinal: usize) -> Result<Context> {
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

fn pool(ctx: &Context) -> Result<sys::CUmemoryPool> {
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
pub(crate) fn query(ctx: &Context) -> Result<PoolInfo> {
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
pub(crate) fn reset_high(ctx: &Context) -> Result<()> {
    let pool = pool(ctx)?;
    set(pool, Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
    set(pool, Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
}

/// Waits for all work of the context, every stream (so queued frees have run).
pub(crate) fn synchronize(ctx: &Context) -> Result<()> {
    ctx.synchronize().map_err(err("cuCtxSynchronize"))
}

/// Returns reserved memory above `keep` bytes that no allocation uses to the device.
pub(crate) fn trim(ctx: &Context, keep: usize) -> Result<()> {
    let pool = pool(ctx)?;
    // SAFETY: the pool belongs to a live device.
    unsafe { result::mem_pool::trim_to(pool, keep) }.map_err(err("cuMemPoolTrimTo"))
}

pub(crate) fn set_release_threshold(ctx: &Context, bytes: u64) -> Result<()> {
    set(pool(ctx)?, Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
}
