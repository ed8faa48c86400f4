//! Memory statistics per device: what PyTorch users ask of `memory_allocated`,
//! `memory_reserved`, `memory_summary` and `empty_cache`, for candle.
//!
//! # The numbers and where they come from
//!
//! | field | CUDA | CPU |
//! |---|---|---|
//! | `tracked`, `tracked_peak` | live bytes of tracked tensors' storages (each storage once), from the tracker | same |
//! | `pool_used`, `pool_used_peak` | `cuMemPoolGetAttribute(USED_MEM_CURRENT / HIGH)` of the device's current pool | absent |
//! | `pool_reserved`, `pool_reserved_peak` | `RESERVED_MEM_CURRENT / HIGH`: memory the pool holds from the device | absent |
//! | `release_threshold` | `RELEASE_THRESHOLD`: reserved memory the pool keeps at a synchronize | absent |
//! | `device_used`, `device_total` | `cuMemGetInfo`: total minus free, and total (all processes) | absent |
//! | `process_resident` | absent | `VmRSS` of `/proc/self/status` |
//!
//! candle's CUDA backend allocates every tensor with `cuMemAllocAsync` from the device's
//! stream-ordered pool (cudarc does, whenever the device supports pools), so after a
//! synchronize, with every tensor tracked, `pool_used` equals `tracked`. Measured on an
//! H200 (`docs/gpu.md`): to the byte; the pool's used counter counts the bytes asked for,
//! with no rounding (from 1 B to 100 MB), and the pool's granularity shows in `reserved`
//! instead (multiples of 32 MiB in every reading there). The gaps explain the rest, and
//! [`memory_summary`] prints them:
//!
//! - **untracked** = pool used − tracked: tensors made outside tracked code (or kept by
//!   an autograd graph whose nodes are not tagged), and frees still queued on a stream;
//! - **cached** = reserved − pool used: freed memory the pool keeps for reuse (how much
//!   survives a synchronize is the release threshold's call); [`empty_cache`] returns it;
//! - **outside the pool** = device used − reserved: the CUDA context, loaded kernels,
//!   cuBLAS/cuRAND workspaces (`cudaMalloc`, not the pool) and other processes.
//!
//! The tracker's peak is the highest live total seen at a sweep (iteration ends and
//! explicit queries), not between them; the pool's high-water marks are exact.
//!
//! # Monitor
//!
//! [`set_memory_monitor`] (or `TENSOR_LIFETIME_MEMORY_EVERY=N`) samples every device the
//! tracker has seen at every N-th iteration end (of any tracked loop: the training steps),
//! into the event log (`memory` events) and `tracing` (target `tensor_lifetime::memory`,
//! level INFO): the `print(memory_allocated(), memory_reserved())` every 100 steps of
//! PyTorch scripts. Off by default; a sample costs a few driver calls and no synchronize.
//! [`record_memory_sample`] takes one by hand (after a synchronize, say).
//!
//! # Without the `cuda` feature
//!
//! Every function exists. Given a CUDA device (possible when another crate turned on
//! `candle-core/cuda`), they return [`crate::Error::CudaNotEnabled`].
//!
//! # Rooms
//!
//! This module is the API; the device readings are `crate::device`'s, the monitor is the
//! tracker's (it samples at iteration ends), and `summary` renders the table.

mod summary;

pub use crate::tracker::set_memory_monitor;

use crate::device::{cuda, Counters, DeviceId};
use crate::error::Result;
use candle_core::Device;
use tensor_lifetime_report::event::MemorySample;

/// Memory statistics of one device at one moment. Fields that do not apply to the device
/// (the pool on CPU) are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryStats {
    /// `"cpu"`, `"cuda:0"`, `"metal:0"`.
    pub device: String,
    /// The device's name (`NVIDIA H200`), when known.
    pub name: Option<String>,
    /// Whether the tracker is on; when off, `tracked` is 0.
    pub tracking: bool,
    /// Live bytes of tracked tensors on this device (each storage counted once); in the
    /// sampled mode an estimate (each sampled tensor's bytes scaled by the inverse of its
    /// probability), as are the peak and `memory_allocated`.
    pub tracked: u64,
    /// Highest `tracked` seen at a sweep since the start or [`reset_peak`].
    pub tracked_peak: u64,
    /// `tracked` and its peak are estimates: the tracker samples (`TENSOR_LIFETIME_SAMPLE`).
    pub estimated: bool,
    /// Bytes of the pool in use by allocations (CUDA).
    pub pool_used: Option<u64>,
    /// High-water mark of `pool_used` since the start or [`reset_peak`].
    pub pool_used_peak: Option<u64>,
    /// Bytes the pool holds from the device, used or cached.
    pub pool_reserved: Option<u64>,
    /// High-water mark of `pool_reserved`.
    pub pool_reserved_peak: Option<u64>,
    /// Reserved bytes the pool may keep cached across a synchronize (`u64::MAX`: all).
    pub release_threshold: Option<u64>,
    /// Device memory in use by everything (total − free).
    pub device_used: Option<u64>,
    /// Device memory in all.
    pub device_total: Option<u64>,
    /// Resident memory of this process (CPU).
    pub process_resident: Option<u64>,
}

impl MemoryStats {
    /// Pool used minus tracked: allocations the tracker does not know (negative when
    /// tracked tensors live outside the pool).
    pub fn untracked(&self) -> Option<i64> {
        self.pool_used.map(|u| u as i64 - self.tracked as i64)
    }

    /// Reserved minus used: freed memory the pool keeps for reuse.
    pub fn cached(&self) -> Option<u64> {
        match (self.pool_reserved, self.pool_used) {
            (Some(r), Some(u)) => Some(r.saturating_sub(u)),
            _ => None,
        }
    }

    /// Device used minus pool reserved: the context, kernels, library workspaces and
    /// other processes.
    pub fn outside_pool(&self) -> Option<i64> {
        match (self.device_used, self.pool_reserved) {
            (Some(d), Some(r)) => Some(d as i64 - r as i64),
            _ => None,
        }
    }

    /// The sample recorded in the event log.
    pub fn to_sample(&self) -> MemorySample {
        MemorySample {
            tracked: self.tracked,
            pool_used: self.pool_used,
            pool_reserved: self.pool_reserved,
            device_used: self.device_used,
            device_total: self.device_total,
            process_resident: self.process_resident,
        }
    }
}

/// The [`memory_summary`] table of these statistics.
impl std::fmt::Display for MemoryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&summary::render(self))
    }
}

/// Live and peak tracked bytes, and whether tracking is on.
fn tracked(device: DeviceId) -> (u64, u64, bool) {
    match crate::tracker::active() {
        Some(t) => {
            let (live, peak) = t.tracked_bytes(device);
            (live, peak, true)
        }
        None => (0, 0, false),
    }
}

/// Statistics of `device`, from the tracker and (CUDA) the driver. Does not synchronize:
/// frees still queued on a stream count as used until they run; call
/// `device.synchronize()` first for settled numbers.
pub fn memory_stats(device: &Device) -> Result<MemoryStats> {
    let id = DeviceId::of(device);
    let (tracked, tracked_peak, tracking) = tracked(id);
    let c = Counters::read(id, Some(device))?;
    Ok(MemoryStats {
        device: id.to_string(),
        name: c.name,
        tracking,
        tracked,
        tracked_peak,
        estimated: tracking && crate::sample::interval().is_some(),
        pool_used: c.pool_used,
        pool_used_peak: c.pool_used_peak,
        pool_reserved: c.pool_reserved,
        pool_reserved_peak: c.pool_reserved_peak,
        release_threshold: c.release_threshold,
        device_used: c.device_used,
        device_total: c.device_total,
        process_resident: c.process_resident,
    })
}

/// Live bytes of tracked tensors on `device` (PyTorch's `memory_allocated`): an estimate
/// in the sampled mode ([`MemoryStats::tracked`]).
pub fn memory_allocated(device: &Device) -> Result<u64> {
    Ok(memory_stats(device)?.tracked)
}

/// Highest tracked live bytes since the start or [`reset_peak`]
/// (`max_memory_allocated`).
pub fn max_memory_allocated(device: &Device) -> Result<u64> {
    Ok(memory_stats(device)?.tracked_peak)
}

/// Bytes the device's pool holds (`memory_reserved`); `None` on a device without a pool
/// (CPU).
pub fn memory_reserved(device: &Device) -> Result<Option<u64>> {
    Ok(memory_stats(device)?.pool_reserved)
}

/// High-water mark of the pool's reserved bytes (`max_memory_reserved`).
pub fn max_memory_reserved(device: &Device) -> Result<Option<u64>> {
    Ok(memory_stats(device)?.pool_reserved_peak)
}

/// Resets the peaks: the tracker's peak to the current live bytes and (CUDA) the pool's
/// high-water marks to the current values (`reset_peak_memory_stats`).
pub fn reset_peak(device: &Device) -> Result<()> {
    if let Device::Cuda(_) = device {
        cuda::reset_high(&cuda::context_of(device)?)?;
    }
    if let Some(t) = crate::tracker::active() {
        t.reset_tracked_peak(DeviceId::of(device));
    }
    Ok(())
}

/// Synchronizes the device and returns the pool's cached memory to it
/// (`cuMemPoolTrimTo(pool, 0)`, PyTorch's `empty_cache`). Returns the bytes given back
/// (reserved before minus after). Memory of live tensors is never released. On CPU there
/// is no cache: returns 0.
pub fn empty_cache(device: &Device) -> Result<u64> {
    if !matches!(device, Device::Cuda(_)) {
        return Ok(0);
    }
    let ctx = cuda::context_of(device)?;
    cuda::synchronize(&ctx)?;
    let before = cuda::query(&ctx)?.reserved;
    cuda::trim(&ctx, 0)?;
    let after = cuda::query(&ctx)?.reserved;
    Ok(before.saturating_sub(after))
}

/// Sets how many reserved bytes the CUDA pool keeps cached when a synchronize would
/// otherwise return them to the device (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`). The
/// default, 0, gives freed memory back at every synchronize, so the next allocations
/// must map memory again; `u64::MAX` keeps everything (PyTorch's caching allocator
/// behaves so). Only CUDA devices have a pool: others give an error.
pub fn set_release_threshold(device: &Device, bytes: u64) -> Result<()> {
    if !matches!(device, Device::Cuda(_)) {
        return Err(crate::Error::Candle(candle_core::Error::Msg(format!(
            "set_release_threshold needs a CUDA device; {} has no memory pool",
            DeviceId::of(device)
        ))));
    }
    cuda::set_release_threshold(&cuda::context_of(device)?, bytes)
}

/// A table of the device's memory in the spirit of PyTorch's `memory_summary`, plus the
/// lines that explain the gaps (untracked, cached, outside the pool). Also records the
/// sample in the event log. Does not synchronize (see [`memory_stats`]).
pub fn memory_summary(device: &Device) -> Result<String> {
    Ok(summary::render(&record_memory_sample(device)?))
}

/// Takes a memory sample of `device` now, records it in the event log (a `memory` event,
/// as the monitor does) and returns it. Call it after a synchronize for settled numbers.
pub fn record_memory_sample(device: &Device) -> Result<MemoryStats> {
    let stats = memory_stats(device)?;
    if let Some(t) = crate::tracker::active() {
        t.record_memory(DeviceId::of(device), stats.to_sample());
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda_stats() -> MemoryStats {
        MemoryStats {
            device: "cuda:0".into(),
            name: Some("NVIDIA H200".into()),
            tracking: true,
            tracked: 256 << 20,
            tracked_peak: 512 << 20,
            estimated: false,
            pool_used: Some((256 << 20) + (12 << 20)),
            pool_used_peak: Some(520 << 20),
            pool_reserved: Some(1 << 30),
            pool_reserved_peak: Some(1 << 30),
            release_threshold: Some(0),
            device_used: Some((1 << 30) + (600 << 20)),
            device_total: Some(143_771 << 20),
            process_resident: None,
        }
    }

    #[test]
    fn gaps_are_differences_of_the_right_fields() {
        let s = cuda_stats();
        assert_eq!(s.untracked(), Some(12 << 20));
        assert_eq!(s.cached(), Some((1 << 30) - (268 << 20)));
        assert_eq!(s.outside_pool(), Some(600 << 20));
        let cpu = MemoryStats {
            device: "cpu".into(),
            tracked: 100,
            process_resident: Some(50),
            ..MemoryStats::default()
        };
        assert_eq!(cpu.untracked(), None);
        assert_eq!(cpu.cached(), None);
        assert_eq!(cpu.outside_pool(), None);
        // Tracked tensors outside the pool make the gap negative, not a wrap-around.
        let odd = MemoryStats {
            tracked: 10,
            pool_used: Some(4),
            ..MemoryStats::default()
        };
        assert_eq!(odd.untracked(), Some(-6));
    }

    #[test]
    fn sample_carries_the_current_values() {
        let s = cuda_stats().to_sample();
        assert_eq!(s.tracked, 256 << 20);
        assert_eq!(s.pool_used, Some(268 << 20));
        assert_eq!(s.pool_reserved, Some(1 << 30));
        assert_eq!(s.process_resident, None);
    }

    #[test]
    fn cuda_summary() {
        let expected = "\
|==========================================================================|
| tensor-lifetime memory summary: cuda:0 (NVIDIA H200)                     |
|==========================================================================|
| metric                           |     current |        peak |      limit |
|--------------------------------------------------------------------------|
| tracked tensors                  |   256.0 MiB |   512.0 MiB |          - |
| pool used                        |   268.0 MiB |   520.0 MiB |          - |
| pool reserved                    |     1.0 GiB |     1.0 GiB |          - |
| release threshold                |         0 B |           - |          - |
| device used                      |     1.6 GiB |           - |  140.4 GiB |
|--------------------------------------------------------------------------|
  untracked = pool used - tracked      +12.0 MiB  tensors not tagged, or frees still queued (synchronize first)
  cached    = reserved - pool used     756.0 MiB  freed, kept by the pool for reuse; empty_cache() returns it
  outside   = device used - reserved  +600.0 MiB  CUDA context, kernels, cuBLAS/cuRAND workspaces, other processes
";
        assert_eq!(summary::render(&cuda_stats()), expected);
    }

    #[test]
    fn cpu_summary_and_unlimited_threshold() {
        let cpu = MemoryStats {
            device: "cpu".into(),
            tracking: false,
            process_resident: Some(3 << 20),
            ..MemoryStats::default()
        };
        let expected = "\
|==========================================================================|
| tensor-lifetime memory summary: cpu                                      |
|==========================================================================|
| metric                           |     current |        peak |      limit |
|--------------------------------------------------------------------------|
| tracked tensors (tracking off)   |         0 B |         0 B |          - |
| process resident                 |     3.0 MiB |           - |          - |
|--------------------------------------------------------------------------|
  untracked = resident - tracked        +3.0 MiB  the program, its libraries and every allocation not a tracked tensor
";
        assert_eq!(summary::render(&cpu), expected);
        let mut s = cuda_stats();
        s.release_threshold = Some(u64::MAX);
        assert!(summary::render(&s).contains(
            "| release threshold                |   unlimited |           - |          - |"
        ));
        // A sampled run's tracked bytes are estimates, and the table says so.
        s.estimated = true;
        assert!(summary::render(&s).contains(
            "| tracked tensors (estimated)      |   256.0 MiB |   512.0 MiB |          - |"
        ));
    }

    #[test]
    fn cpu_stats_have_resident_memory_and_no_pool() {
        let s = memory_stats(&Device::Cpu).unwrap();
        assert_eq!(s.device, "cpu");
        assert!(s.process_resident.is_some_and(|r| r > 0), "{s:?}");
        assert_eq!(s.pool_used, None);
        assert_eq!(memory_reserved(&Device::Cpu).unwrap(), None);
        assert_eq!(empty_cache(&Device::Cpu).unwrap(), 0);
        let e = set_release_threshold(&Device::Cpu, 0).unwrap_err();
        assert!(e.to_string().contains("needs a CUDA device"), "{e}");
    }
}
