//! Devices: one name for each ([`DeviceId`], as records keep it in two bytes and as
//! reports, events and memory statistics spell it: `cpu`, `cuda:0`, `metal:0`), and what
//! a device itself says of its memory ([`Counters`]: the CUDA pool and driver, or the
//! process's resident memory on the CPU), and what it has left for the forecast of running
//! out ([`room`]). The memory API ([`crate::memory`]) and the
//! tracker's memory monitor both read devices here.

// The CUDA calls, or their twin with the same signatures that says the feature is off.
#[cfg_attr(not(feature = "cuda"), path = "no_cuda.rs")]
pub(crate) mod cuda;
mod room;

pub(crate) use room::room;

use crate::error::Result;
use candle_core::{Device, DeviceLocation};
use std::fmt;
use tensor_lifetime_report::event::MemorySample;

/// A device, as the tracker and the memory statistics know it. Ordered CPU first, then
/// CUDA devices by ordinal, then Metal devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct DeviceId(u16);

impl DeviceId {
    pub(crate) const CPU: DeviceId = DeviceId(0);
    const METAL: u16 = 1000;

    #[inline]
    pub(crate) fn of_location(loc: DeviceLocation) -> DeviceId {
        DeviceId(match loc {
            DeviceLocation::Cpu => 0,
            DeviceLocation::Cuda { gpu_id } => 1 + gpu_id as u16,
            DeviceLocation::Metal { gpu_id } => Self::METAL + gpu_id as u16,
        })
    }

    pub(crate) fn of(device: &Device) -> DeviceId {
        DeviceId::of_location(device.location())
    }

    /// The CUDA ordinal, for a CUDA device.
    pub(crate) fn cuda_ordinal(self) -> Option<usize> {
        (1..Self::METAL)
            .contains(&self.0)
            .then(|| usize::from(self.0 - 1))
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("cpu"),
            n if n < Self::METAL => write!(f, "cuda:{}", n - 1),
            n => write!(f, "metal:{}", n - Self::METAL),
        }
    }
}

/// One reading of a CUDA device's pool and memory.
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

/// What a device says of its memory; fields that do not apply to it are `None`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    pub(crate) name: Option<String>,
    pub(crate) pool_used: Option<u64>,
    pub(crate) pool_used_peak: Option<u64>,
    pub(crate) pool_reserved: Option<u64>,
    pub(crate) pool_reserved_peak: Option<u64>,
    pub(crate) release_threshold: Option<u64>,
    pub(crate) device_used: Option<u64>,
    pub(crate) device_total: Option<u64>,
    pub(crate) process_resident: Option<u64>,
}

impl Counters {
    /// Reads the counters of `id`. The CUDA part reaches the device through candle's
    /// handle when there is one (its own context), else by ordinal (the monitor knows
    /// devices by id only; same primary context, same pool).
    pub(crate) fn read(id: DeviceId, device: Option<&Device>) -> Result<Counters> {
        if id == DeviceId::CPU {
            return Ok(Counters {
                process_resident: process_resident(),
                ..Counters::default()
            });
        }
        let Some(ordinal) = id.cuda_ordinal() else {
            // Metal: no counters are read.
            return Ok(Counters::default());
        };
        let ctx = match device {
            Some(d) => cuda::context_of(d)?,
            None => cuda::context_for_ordinal(ordinal)?,
        };
        let p = cuda::query(&ctx)?;
        Ok(Counters {
            name: p.name,
            pool_used: Some(p.used),
            pool_used_peak: Some(p.used_high),
            pool_reserved: Some(p.reserved),
            pool_reserved_peak: Some(p.reserved_high),
            release_threshold: Some(p.release_threshold),
            device_used: Some(p.total.saturating_sub(p.free)),
            device_total: Some(p.total),
            process_resident: None,
        })
    }

    /// The event log's memory sample of these counters, with the tracker's live bytes.
    pub(crate) fn sample(&self, tracked: u64) -> MemorySample {
        MemorySample {
            tracked,
            pool_used: self.pool_used,
            pool_reserved: self.pool_reserved,
            device_used: self.device_used,
            device_total: self.device_total,
            process_resident: self.process_resident,
        }
    }
}

/// Resident memory of this process, from `/proc/self/status` (Linux only).
fn process_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:")
}

/// The bytes of a `/proc` file's line `key  1234 kB` (`VmRSS:`, `MemAvailable:`).
fn kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix(key))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vm_rss() {
        let status = "Name:\tx\nVmPeak:\t  200 kB\nVmRSS:\t    1234 kB\nThreads: 1\n";
        assert_eq!(kib_field(status, "VmRSS:"), Some(1234 * 1024));
        assert_eq!(kib_field("Name: x\n", "VmRSS:"), None);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_a_clear_error() {
        let e = Counters::read(cuda(0), None).unwrap_err();
        assert!(matches!(e, crate::Error::CudaNotEnabled), "{e}");
        assert!(e.to_string().contains("`cuda` feature"), "{e}");
    }

    fn cuda(gpu_id: usize) -> DeviceId {
        DeviceId::of_location(DeviceLocation::Cuda { gpu_id })
    }

    #[test]
    fn names_and_order() {
        let metal = DeviceId::of_location(DeviceLocation::Metal { gpu_id: 3 });
        assert_eq!(DeviceId::CPU.to_string(), "cpu");
        assert_eq!(cuda(0).to_string(), "cuda:0");
        assert_eq!(cuda(7).to_string(), "cuda:7");
        assert_eq!(metal.to_string(), "metal:3");
        assert_eq!(DeviceId::of(&Device::Cpu), DeviceId::CPU);
        assert_eq!(cuda(2).cuda_ordinal(), Some(2));
        assert_eq!(DeviceId::CPU.cuda_ordinal(), None);
        assert_eq!(metal.cuda_ordinal(), None);
        assert!(DeviceId::CPU < cuda(0) && cuda(0) < cuda(1) && cuda(1) < metal);
    }
}
