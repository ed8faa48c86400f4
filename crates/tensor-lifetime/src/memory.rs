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
//! `candle-core/cuda`), they return [`Error::CudaNotEnabled`].

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use crate::error::{Error, Result};
use candle_core::{Device, DeviceLocation};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use tensor_lifetime_report::event::MemorySample;
use tensor_lifetime_report::size::{format_bytes, format_signed};

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
    /// Live bytes of tracked tensors on this device (each storage counted once).
    pub tracked: u64,
    /// Highest `tracked` seen at a sweep since the start or [`reset_peak`].
    pub tracked_peak: u64,
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

/// The tracker's name of a device: `"cpu"`, `"cuda:N"`, `"metal:N"`.
pub fn device_key(device: &Device) -> String {
    match device.location() {
        DeviceLocation::Cpu => "cpu".to_string(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// Live and peak tracked bytes, and whether tracking is on.
fn tracked(key: &str) -> (u64, u64, bool) {
    match crate::tracker::active() {
        Some(t) => {
            let (live, peak) = t.tracked_bytes(key);
            (live, peak, true)
        }
        None => (0, 0, false),
    }
}

/// Statistics of `device`, from the tracker and (CUDA) the driver. Does not synchronize:
/// frees still queued on a stream count as used until they run; call
/// `device.synchronize()` first for settled numbers.
pub fn memory_stats(device: &Device) -> Result<MemoryStats> {
    let key = device_key(device);
    let (live, peak, tracking) = tracked(&key);
    stats_with_tracked(Some(device), &key, live, peak, tracking)
}

/// The statistics of the device named `key`, with the tracker's numbers given. The CUDA
/// part reaches the device through candle's handle when there is one (its own context),
/// else by ordinal (the monitor knows names only; same primary context, same pool).
fn stats_with_tracked(
    device: Option<&Device>,
    key: &str,
    live: u64,
    peak: u64,
    tracking: bool,
) -> Result<MemoryStats> {
    let mut stats = MemoryStats {
        device: key.to_string(),
        tracking,
        tracked: live,
        tracked_peak: peak,
        ..MemoryStats::default()
    };
    if key == "cpu" {
        stats.process_resident = process_resident();
    } else if let Some(ordinal) = key.strip_prefix("cuda:") {
        fill_cuda(&mut stats, device, ordinal)?;
    }
    Ok(stats)
}

#[cfg(feature = "cuda")]
fn fill_cuda(stats: &mut MemoryStats, device: Option<&Device>, ordinal: &str) -> Result<()> {
    let ctx = match device {
        Some(d) => cuda::context_of(d)?,
        None => cuda::context_for_ordinal(parse_ordinal(ordinal)?)?,
    };
    let p = cuda::query(&ctx)?;
    stats.name = p.name;
    stats.pool_used = Some(p.used);
    stats.pool_used_peak = Some(p.used_high);
    stats.pool_reserved = Some(p.reserved);
    stats.pool_reserved_peak = Some(p.reserved_high);
    stats.release_threshold = Some(p.release_threshold);
    stats.device_used = Some(p.total.saturating_sub(p.free));
    stats.device_total = Some(p.total);
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn fill_cuda(_: &mut MemoryStats, _: Option<&Device>, _: &str) -> Result<()> {
    Err(Error::CudaNotEnabled)
}

#[cfg(feature = "cuda")]
fn parse_ordinal(s: &str) -> Result<usize> {
    s.parse()
        .map_err(|_| Error::Cuda(format!("not a CUDA device name: cuda:{s}")))
}

/// Live bytes of tracked tensors on `device` (PyTorch's `memory_allocated`).
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
    let key = device_key(device);
    if let Device::Cuda(_) = device {
        reset_cuda_peak(device)?;
    }
    if let Some(t) = crate::tracker::active() {
        t.reset_tracked_peak(&key);
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn reset_cuda_peak(device: &Device) -> Result<()> {
    cuda::reset_high(&*cuda::context_of(device)?)
}

#[cfg(not(feature = "cuda"))]
fn reset_cuda_peak(_: &Device) -> Result<()> {
    Err(Error::CudaNotEnabled)
}

/// Synchronizes the device and returns the pool's cached memory to it
/// (`cuMemPoolTrimTo(pool, 0)`, PyTorch's `empty_cache`). Returns the bytes given back
/// (reserved before minus after). Memory of live tensors is never released. On CPU there
/// is no cache: returns 0.
pub fn empty_cache(device: &Device) -> Result<u64> {
    match device {
        Device::Cuda(_) => empty_cuda_cache(device),
        _ => Ok(0),
    }
}

#[cfg(feature = "cuda")]
fn empty_cuda_cache(device: &Device) -> Result<u64> {
    let ctx = cuda::context_of(device)?;
    cuda::synchronize(&ctx)?;
    let before = cuda::query(&ctx)?.reserved;
    cuda::trim(&ctx, 0)?;
    let after = cuda::query(&ctx)?.reserved;
    Ok(before.saturating_sub(after))
}

#[cfg(not(feature = "cuda"))]
fn empty_cuda_cache(_: &Device) -> Result<u64> {
    Err(Error::CudaNotEnabled)
}

/// Sets how many reserved bytes the CUDA pool keeps cached when a synchronize would
/// otherwise return them to the device (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`). The
/// default, 0, gives freed memory back at every synchronize, so the next allocations
/// must map memory again; `u64::MAX` keeps everything (PyTorch's caching allocator
/// behaves so). Only CUDA devices have a pool: others give an error.
pub fn set_release_threshold(device: &Device, bytes: u64) -> Result<()> {
    match device {
        Device::Cuda(_) => set_cuda_threshold(device, bytes),
        other => Err(Error::Candle(candle_core::Error::Msg(format!(
            "set_release_threshold needs a CUDA device; {} has no memory pool",
            device_key(other)
        )))),
    }
}

#[cfg(feature = "cuda")]
fn set_cuda_threshold(device: &Device, bytes: u64) -> Result<()> {
    cuda::set_release_threshold(&*cuda::context_of(device)?, bytes)
}

#[cfg(not(feature = "cuda"))]
fn set_cuda_threshold(_: &Device, _: u64) -> Result<()> {
    Err(Error::CudaNotEnabled)
}

/// A table of the device's memory in the spirit of PyTorch's `memory_summary`, plus the
/// lines that explain the gaps (untracked, cached, outside the pool). Also records the
/// sample in the event log. Does not synchronize (see [`memory_stats`]).
pub fn memory_summary(device: &Device) -> Result<String> {
    let stats = memory_stats(device)?;
    if let Some(t) = crate::tracker::active() {
        t.record_memory(stats.device.clone(), stats.to_sample());
    }
    Ok(render_summary(&stats))
}

/// Takes a memory sample of `device` now, records it in the event log (a `memory` event,
/// as the monitor does) and returns it. Call it after a synchronize for settled numbers.
pub fn record_memory_sample(device: &Device) -> Result<MemoryStats> {
    let stats = memory_stats(device)?;
    if let Some(t) = crate::tracker::active() {
        t.record_memory(stats.device.clone(), stats.to_sample());
    }
    Ok(stats)
}

/// CUDA bytes of a storage (`len × size of T`; the pool rounds each allocation up).
#[cfg(feature = "cuda")]
pub(crate) fn cuda_storage_bytes(storage: &candle_core::CudaStorage) -> usize {
    cuda::storage_bytes(storage)
}

fn cell(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), format_bytes)
}

fn signed(v: i64) -> String {
    let s = format_signed(v as f64);
    if v > 0 {
        format!("+{s}")
    } else {
        s
    }
}

/// Renders [`MemoryStats`] as [`memory_summary`] does.
pub fn render_summary(s: &MemoryStats) -> String {
    const RULE: &str =
        "|==========================================================================|";
    const LINE: &str =
        "|--------------------------------------------------------------------------|";
    let mut out = String::new();
    let title = match &s.name {
        Some(name) => format!("tensor-lifetime memory summary: {} ({name})", s.device),
        None => format!("tensor-lifetime memory summary: {}", s.device),
    };
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(out, "| {title:<72} |");
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(
        out,
        "| {:<32} | {:>11} | {:>11} | {:>10} |",
        "metric", "current", "peak", "limit"
    );
    let _ = writeln!(out, "{LINE}");
    let row =
        |out: &mut String, label: &str, cur: Option<u64>, peak: Option<u64>, limit: Option<u64>| {
            let _ = writeln!(
                out,
                "| {label:<32} | {:>11} | {:>11} | {:>10} |",
                cell(cur),
                cell(peak),
                cell(limit)
            );
        };
    let tracked_label = if s.tracking {
        "tracked tensors"
    } else {
        "tracked tensors (tracking off)"
    };
    row(
        &mut out,
        tracked_label,
        Some(s.tracked),
        Some(s.tracked_peak),
        None,
    );
    if s.pool_used.is_some() {
        row(&mut out, "pool used", s.pool_used, s.pool_used_peak, None);
        let threshold = s.release_threshold.filter(|t| *t != u64::MAX);
        row(
            &mut out,
            "pool reserved",
            s.pool_reserved,
            s.pool_reserved_peak,
            None,
        );
        if s.release_threshold == Some(u64::MAX) {
            let _ = writeln!(
                out,
                "| {:<32} | {:>11} | {:>11} | {:>10} |",
                "release threshold", "unlimited", "-", "-"
            );
        } else {
            row(&mut out, "release threshold", threshold, None, None);
        }
    }
    if s.device_used.is_some() {
        row(&mut out, "device used", s.device_used, None, s.device_total);
    }
    if s.process_resident.is_some() {
        row(&mut out, "process resident", s.process_resident, None, None);
    }
    let _ = writeln!(out, "{LINE}");
    let mut gap = |label: &str, formula: &str, v: String, why: &str| {
        let _ = writeln!(out, "  {label:<9} {formula:<24} {v:>11}  {why}");
    };
    if let Some(u) = s.untracked() {
        gap(
            "untracked",
            "= pool used - tracked",
            signed(u),
            "tensors not tagged, or frees still queued (synchronize first)",
        );
    }
    if let Some(c) = s.cached() {
        gap(
            "cached",
            "= reserved - pool used",
            format_bytes(c),
            "freed, kept by the pool for reuse; empty_cache() returns it",
        );
    }
    if let Some(o) = s.outside_pool() {
        gap(
            "outside",
            "= device used - reserved",
            signed(o),
            "CUDA context, kernels, cuBLAS/cuRAND workspaces, other processes",
        );
    }
    if let Some(r) = s.process_resident {
        gap(
            "untracked",
            "= resident - tracked",
            signed(r as i64 - s.tracked as i64),
            "the program, its libraries and every allocation not a tracked tensor",
        );
    }
    out
}

/// Resident memory of this process, from `/proc/self/status` (Linux only).
fn process_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

// ---------------------------------------------------------------------------------------
// The periodic monitor.

/// 0: off; `u64::MAX`: not yet read from the environment.
static MONITOR_EVERY: AtomicU64 = AtomicU64::new(u64::MAX);
static MONITOR_ENV: OnceLock<u64> = OnceLock::new();

/// Samples memory every `every` iteration ends (0 turns it off: the default, unless
/// `TENSOR_LIFETIME_MEMORY_EVERY` says otherwise).
pub fn set_memory_monitor(every: u64) {
    MONITOR_EVERY.store(every, Ordering::Relaxed);
}

/// The monitor's period now (0: off).
#[inline]
pub fn memory_monitor() -> u64 {
    match MONITOR_EVERY.load(Ordering::Relaxed) {
        u64::MAX => {
            let every = *MONITOR_ENV.get_or_init(|| {
                monitor_from_env(
                    std::env::var("TENSOR_LIFETIME_MEMORY_EVERY")
                        .ok()
                        .as_deref(),
                )
            });
            // Later calls read it directly, unless `set_memory_monitor` was called since.
            let _ = MONITOR_EVERY.compare_exchange(
                u64::MAX,
                every,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            every
        }
        n => n,
    }
}

fn monitor_from_env(value: Option<&str>) -> u64 {
    match value.map(str::trim) {
        None | Some("") | Some("off") => 0,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!(
                "tensor-lifetime: TENSOR_LIFETIME_MEMORY_EVERY={v:?} is not understood \
                 (accepted: a number of iterations, 0 or off); the memory monitor stays off"
            );
            0
        }),
    }
}

/// Iteration ends seen by the monitor while on.
static MONITOR_STEPS: AtomicU64 = AtomicU64::new(0);

/// Called by the tracker at every iteration end (any loop frame), with the tracked (live,
/// peak) bytes of every device it has seen. When the monitor is due, samples each device,
/// logs it through `tracing` and returns the samples for the event log (`Event::Memory`).
/// Needs no tracker lock (the caller may hold it); costs one atomic load when off (iteration
/// ends are counted only while the monitor is on).
pub(crate) fn monitor_tick(
    devices: impl FnOnce() -> Vec<(String, u64, u64)>,
) -> Vec<(String, MemorySample)> {
    let every = memory_monitor();
    if every == 0 {
        // Off: not even the step counter is touched (one atomic less per iteration end).
        return Vec::new();
    }
    let step = MONITOR_STEPS.fetch_add(1, Ordering::Relaxed) + 1;
    if step % every != 0 {
        return Vec::new();
    }
    let devices = devices();
    let mut out = Vec::with_capacity(devices.len());
    for (key, live, peak) in &devices {
        match stats_with_tracked(None, key, *live, *peak, true) {
            Ok(s) => {
                tracing::info!(
                    target: "tensor_lifetime::memory",
                    device = %s.device,
                    step,
                    tracked = s.tracked,
                    tracked_peak = s.tracked_peak,
                    pool_used = s.pool_used,
                    pool_reserved = s.pool_reserved,
                    device_used = s.device_used,
                    process_resident = s.process_resident,
                    "memory {}: tracked {}, pool used {}, reserved {}",
                    s.device,
                    format_bytes(s.tracked),
                    cell(s.pool_used),
                    cell(s.pool_reserved),
                );
                out.push((key.clone(), s.to_sample()));
            }
            Err(e) => {
                tracing::warn!(target: "tensor_lifetime::memory", device = %key, "memory sample failed: {e}");
            }
        }
    }
    out
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
        assert_eq!(render_summary(&cuda_stats()), expected);
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
        assert_eq!(render_summary(&cpu), expected);
        let mut s = cuda_stats();
        s.release_threshold = Some(u64::MAX);
        assert!(render_summary(&s).contains(
            "| release threshold                |   unlimited |           - |          - |"
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

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_a_clear_error() {
        let e = stats_with_tracked(None, "cuda:0", 0, 0, true).unwrap_err();
        assert!(matches!(e, Error::CudaNotEnabled), "{e}");
        assert!(e.to_string().contains("`cuda` feature"), "{e}");
    }

    #[test]
    fn reads_vm_rss() {
        let status = "Name:\tx\nVmPeak:\t  200 kB\nVmRSS:\t    1234 kB\nThreads: 1\n";
        assert_eq!(parse_vm_rss(status), Some(1234 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn monitor_period_from_the_environment() {
        assert_eq!(monitor_from_env(None), 0);
        assert_eq!(monitor_from_env(Some("off")), 0);
        assert_eq!(monitor_from_env(Some(" 100 ")), 100);
        assert_eq!(monitor_from_env(Some("often")), 0);
    }

    #[test]
    fn monitor_samples_every_nth_iteration_end() {
        // The only test that ticks the monitor (its counter is global).
        let devices = vec![("cpu".to_string(), 64, 128)];
        set_memory_monitor(0);
        assert!((0..7).all(|_| monitor_tick(|| devices.clone()).is_empty()));
        set_memory_monitor(5);
        let due: Vec<usize> = (0..10)
            .filter(|_| !monitor_tick(|| devices.clone()).is_empty())
            .collect();
        // Ticks while off are not counted: due at the 5th and 10th tick since.
        assert_eq!(due, [4, 9]);
        MONITOR_STEPS.store(4, Ordering::Relaxed);
        let got = monitor_tick(|| devices.clone());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "cpu");
        assert_eq!(got[0].1.tracked, 64);
        assert!(got[0].1.process_resident.is_some());
        set_memory_monitor(0);
    }
}
