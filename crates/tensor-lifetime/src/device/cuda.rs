//! The CUDA driver calls behind [`crate::memory`] and the memory monitor: the device's
//! stream-ordered memory pool (`cuMemPool*`), `cuMemGetInfo`, synchronize.
//!
//! candle's CUDA backend allocates through cudarc on the device's primary context, with
//! `cuMemAllocAsync`, into the device's current pool (`cuDeviceGetMemPool`, the default
//! pool unless someone set another). This module reaches the same pool through the driver
//! API itself, loaded from `libcuda.so.1` (the library cudarc links, so the same driver
//! state): candle 0.8 to 0.11 use four cudarc versions (0.13, 0.16, 0.19) with different
//! APIs, and the dozen driver calls below are the same in every CUDA 12 and 13 driver.
//! A context is the device's primary context, retained once by ordinal; each call pushes
//! it on the calling thread and pops it again, so candle's own binding is left as it was.

// why: the driver's C functions take handles and out-pointers.
#![allow(unsafe_code)]

use super::PoolInfo;
use crate::error::{Error, Result};
use candle_core::{Device, DeviceLocation};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

type CUresult = c_int;
type CUdevice = c_int;
type CUcontext = *mut c_void;
type CUmemoryPool = *mut c_void;

// `CUmemPool_attribute` (cuda.h).
const ATTR_RELEASE_THRESHOLD: c_int = 4;
const ATTR_RESERVED_MEM_CURRENT: c_int = 5;
const ATTR_RESERVED_MEM_HIGH: c_int = 6;
const ATTR_USED_MEM_CURRENT: c_int = 7;
const ATTR_USED_MEM_HIGH: c_int = 8;

/// The driver entry points used here, resolved once.
struct Driver {
    init: unsafe extern "C" fn(c_uint) -> CUresult,
    device_get: unsafe extern "C" fn(*mut CUdevice, c_int) -> CUresult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CUdevice) -> CUresult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult,
    ctx_push: unsafe extern "C" fn(CUcontext) -> CUresult,
    ctx_pop: unsafe extern "C" fn(*mut CUcontext) -> CUresult,
    ctx_synchronize: unsafe extern "C" fn() -> CUresult,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult,
    device_get_mem_pool: unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CUresult,
    pool_get_attribute: unsafe extern "C" fn(CUmemoryPool, c_int, *mut c_void) -> CUresult,
    pool_set_attribute: unsafe extern "C" fn(CUmemoryPool, c_int, *mut c_void) -> CUresult,
    pool_trim_to: unsafe extern "C" fn(CUmemoryPool, usize) -> CUresult,
    // Kept loaded for the process's life (the function pointers above point into it).
    _lib: libloading::Library,
}

fn driver() -> Result<&'static Driver> {
    static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();
    DRIVER
        .get_or_init(load)
        .as_ref()
        .map_err(|e| Error::Cuda(e.clone()))
}

fn load() -> std::result::Result<Driver, String> {
    // SAFETY: loading the CUDA driver runs no initialisation with preconditions; candle's
    // cudarc has loaded the same library already when a CUDA device exists.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }
        .or_else(|_| unsafe { libloading::Library::new("libcuda.so") })
        .map_err(|e| format!("cannot load the CUDA driver (libcuda.so.1): {e}"))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: each name is a driver entry point whose C signature (cuda.h) is the
            // field's type it is assigned to.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("the CUDA driver lacks {}: {e}", $name))?
        };
    }
    let driver = Driver {
        init: sym!("cuInit"),
        device_get: sym!("cuDeviceGet"),
        device_get_name: sym!("cuDeviceGetName"),
        primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
        ctx_push: sym!("cuCtxPushCurrent_v2"),
        ctx_pop: sym!("cuCtxPopCurrent_v2"),
        ctx_synchronize: sym!("cuCtxSynchronize"),
        mem_get_info: sym!("cuMemGetInfo_v2"),
        device_get_mem_pool: sym!("cuDeviceGetMemPool"),
        pool_get_attribute: sym!("cuMemPoolGetAttribute"),
        pool_set_attribute: sym!("cuMemPoolSetAttribute"),
        pool_trim_to: sym!("cuMemPoolTrimTo"),
        _lib: lib,
    };
    // SAFETY: cuInit takes flags, 0 is the only valid value.
    check("cuInit", unsafe { (driver.init)(0) }).map_err(|e| e.to_string())?;
    Ok(driver)
}

fn check(call: &str, code: CUresult) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Cuda(format!("{call}: CUDA driver error {code}")))
    }
}

/// A device's primary context: what the calls below act on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context {
    device: CUdevice,
    ctx: CUcontext,
}

// SAFETY: driver contexts and device handles are process-wide; any thread may make one
// current (this module does so only between a push and a pop).
unsafe impl Send for Context {}
// SAFETY: as above; `Context` is a pair of handles with no interior state.
unsafe impl Sync for Context {}

/// The primary context of a candle CUDA device (the one its cudarc uses).
pub(crate) fn context_of(device: &Device) -> Result<Context> {
    match device.location() {
        DeviceLocation::Cuda { gpu_id } => context_for_ordinal(gpu_id),
        _ => Err(Error::Cuda(format!(
            "not a CUDA device: {}",
            super::DeviceId::of(device)
        ))),
    }
}

/// The primary context of device `ordinal`, retained once and kept.
pub(crate) fn context_for_ordinal(ordinal: usize) -> Result<Context> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Context>>> = OnceLock::new();
    let d = driver()?;
    let mut map = CONTEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(ctx) = map.get(&ordinal) {
        return Ok(*ctx);
    }
    let mut device: CUdevice = 0;
    let index = c_int::try_from(ordinal).map_err(|_| Error::Cuda("bad ordinal".into()))?;
    // SAFETY: out-pointer to a local.
    check("cuDeviceGet", unsafe { (d.device_get)(&mut device, index) })?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; `device` is valid. The retain is never released:
    // the context lives as long as the process, like candle's.
    check("cuDevicePrimaryCtxRetain", unsafe {
        (d.primary_ctx_retain)(&mut ctx, device)
    })?;
    let context = Context { device, ctx };
    map.insert(ordinal, context);
    Ok(context)
}

/// Runs `f` with the context current on this thread, then restores the previous one.
fn with_current<T>(c: &Context, f: impl FnOnce(&Driver) -> Result<T>) -> Result<T> {
    let d = driver()?;
    // SAFETY: `c.ctx` is a retained primary context.
    check("cuCtxPushCurrent", unsafe { (d.ctx_push)(c.ctx) })?;
    let out = f(d);
    let mut popped: CUcontext = std::ptr::null_mut();
    // SAFETY: pops the context pushed above; out-pointer to a local.
    let pop = check("cuCtxPopCurrent", unsafe { (d.ctx_pop)(&mut popped) });
    let out = out?;
    pop.map(|()| out)
}

fn pool(d: &Driver, c: &Context) -> Result<CUmemoryPool> {
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the device handle is valid.
    check("cuDeviceGetMemPool", unsafe {
        (d.device_get_mem_pool)(&mut pool, c.device)
    })?;
    Ok(pool)
}

fn get(d: &Driver, pool: CUmemoryPool, attr: c_int) -> Result<u64> {
    let mut value: u64 = 0;
    // SAFETY: every attribute read here is a `cuuint64_t`, and `value` is one.
    check("cuMemPoolGetAttribute", unsafe {
        (d.pool_get_attribute)(pool, attr, (&mut value as *mut u64).cast())
    })?;
    Ok(value)
}

fn set(d: &Driver, pool: CUmemoryPool, attr: c_int, mut value: u64) -> Result<()> {
    // SAFETY: every attribute written here is a `cuuint64_t`, and `value` is one.
    check("cuMemPoolSetAttribute", unsafe {
        (d.pool_set_attribute)(pool, attr, (&mut value as *mut u64).cast())
    })
}

fn name(d: &Driver, c: &Context) -> Option<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer's length is passed; the driver writes a NUL-terminated name.
    let code = unsafe { (d.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, c.device) };
    (code == 0).then(|| {
        // SAFETY: NUL-terminated within the buffer (the driver truncates to its length).
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    })
}

/// Reads the pool's counters and `cuMemGetInfo`.
pub(crate) fn query(ctx: &Context) -> Result<PoolInfo> {
    with_current(ctx, |d| {
        let pool = pool(d, ctx)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out-pointers to locals; a context is current.
        check("cuMemGetInfo", unsafe {
            (d.mem_get_info)(&mut free, &mut total)
        })?;
        Ok(PoolInfo {
            name: name(d, ctx),
            used: get(d, pool, ATTR_USED_MEM_CURRENT)?,
            used_high: get(d, pool, ATTR_USED_MEM_HIGH)?,
            reserved: get(d, pool, ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high: get(d, pool, ATTR_RESERVED_MEM_HIGH)?,
            release_threshold: get(d, pool, ATTR_RELEASE_THRESHOLD)?,
            free: free as u64,
            total: total as u64,
        })
    })
}

/// Resets the pool's high-water marks to the current values (the driver only accepts 0,
/// which it reads as "now").
pub(crate) fn reset_high(ctx: &Context) -> Result<()> {
    with_current(ctx, |d| {
        let pool = pool(d, ctx)?;
        set(d, pool, ATTR_USED_MEM_HIGH, 0)?;
        set(d, pool, ATTR_RESERVED_MEM_HIGH, 0)
    })
}

/// Waits for all work of the context, every stream (so queued frees have run).
pub(crate) fn synchronize(ctx: &Context) -> Result<()> {
    // SAFETY: a context is current.
    with_current(ctx, |d| {
        check("cuCtxSynchronize", unsafe { (d.ctx_synchronize)() })
    })
}

/// Returns reserved memory above `keep` bytes that no allocation uses to the device.
pub(crate) fn trim(ctx: &Context, keep: usize) -> Result<()> {
    with_current(ctx, |d| {
        let pool = pool(d, ctx)?;
        // SAFETY: the pool belongs to a live device.
        check("cuMemPoolTrimTo", unsafe { (d.pool_trim_to)(pool, keep) })
    })
}

pub(crate) fn set_release_threshold(ctx: &Context, bytes: u64) -> Result<()> {
    with_current(ctx, |d| {
        set(d, pool(d, ctx)?, ATTR_RELEASE_THRESHOLD, bytes)
    })
}
