//! What a device has left, for the forecast of running out ([`room`]): on CUDA the
//! driver's free memory plus what the memory pool holds unused (candle's next
//! allocations take it first); on the CPU the cgroup's limit less its usage (v2
//! `memory.max` / `memory.current`, v1 `memory.limit_in_bytes` / `memory.usage_in_bytes`)
//! or the kernel's `MemAvailable`, whichever is smaller. A limit set by hand
//! (`TENSOR_LIFETIME_MEMORY_LIMIT`) replaces both: what the device uses now (the
//! process's resident memory, the device's used memory) is taken from it.

use super::{Counters, DeviceId};
use tensor_lifetime_report::model::DeviceRoom;

/// The source name of a limit set by hand.
const BY_HAND: &str = "TENSOR_LIFETIME_MEMORY_LIMIT";

/// What `id` has left now, with `limit` (bytes) set by hand; `None` where nothing can be
/// read (Metal, a CUDA error, no `/proc`).
pub(crate) fn room(id: DeviceId, limit: Option<u64>) -> Option<DeviceRoom> {
    let (free, source, used) = if id == DeviceId::CPU {
        let resident = super::process_resident();
        let (free, source) = cpu_free(limit, resident)?;
        (free, source, resident)
    } else {
        id.cuda_ordinal()?;
        let c = Counters::read(id, None).ok()?;
        let used = c.device_used?;
        let pool_spare = c
            .pool_reserved
            .unwrap_or(0)
            .saturating_sub(c.pool_used.unwrap_or(0));
        let (free, source) = match limit {
            Some(limit) => (limit.saturating_sub(used), BY_HAND),
            None => (
                c.device_total?
                    .saturating_sub(used)
                    .saturating_add(pool_spare),
                "cuda",
            ),
        };
        (free, source, Some(used))
    };
    Some(DeviceRoom {
        device: id.to_string(),
        free,
        source: source.to_string(),
        used,
    })
}

/// The CPU's free bytes and their source, with the process's `resident` bytes.
fn cpu_free(limit: Option<u64>, resident: Option<u64>) -> Option<(u64, &'static str)> {
    if let Some(limit) = limit {
        return Some((limit.saturating_sub(resident?), BY_HAND));
    }
    let cgroup = cgroup_free(|path| std::fs::read_to_string(path).ok());
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| super::kib_field(&m, "MemAvailable:"));
    match (cgroup, available) {
        (Some(c), Some(a)) if a < c => Some((a, "MemAvailable")),
        (Some(c), _) => Some((c, "cgroup")),
        (None, Some(a)) => Some((a, "MemAvailable")),
        (None, None) => None,
    }
}

/// The cgroup's limit less its usage (v2, then v1); `None` without a limit.
fn cgroup_free(read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let pairs = [
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ];
    pairs.iter().find_map(|(limit, usage)| {
        // "max" (v2) or a page-rounded 2^63 (v1): no limit.
        let limit: u64 = read(limit)?.trim().parse().ok()?;
        if limit >= 1 << 62 {
            return None;
        }
        let usage: u64 = read(usage)?.trim().parse().ok()?;
        Some(limit.saturating_sub(usage))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_limits_v2_then_v1_and_none() {
        let files = |pairs: &'static [(&'static str, &'static str)]| {
            move |path: &str| {
                pairs
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, v)| v.to_string())
            }
        };
        let v2 = files(&[
            ("/sys/fs/cgroup/memory.max", "4294967296\n"),
            ("/sys/fs/cgroup/memory.current", "1073741824\n"),
        ]);
        assert_eq!(cgroup_free(v2), Some(3 << 30));
        let unlimited = files(&[
            ("/sys/fs/cgroup/memory.max", "max\n"),
            ("/sys/fs/cgroup/memory.current", "1073741824\n"),
        ]);
        assert_eq!(cgroup_free(unlimited), None);
        let v1 = files(&[
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "2147483648\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                "1073741824\n",
            ),
        ]);
        assert_eq!(cgroup_free(v1), Some(1 << 30));
        let v1_unlimited = files(&[
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "1\n"),
        ]);
        assert_eq!(cgroup_free(v1_unlimited), None);
    }

    #[test]
    fn mem_available_in_bytes() {
        let m = "MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(
            super::super::kib_field(m, "MemAvailable:"),
            Some(8_000_000 * 1024)
        );
    }

    #[test]
    fn a_limit_by_hand_less_the_resident_memory() {
        let r = room(DeviceId::CPU, Some(1 << 40)).unwrap();
        assert_eq!(r.source, BY_HAND);
        assert!(r.free < 1 << 40 && r.free > (1 << 40) - (1 << 34), "{r:?}");
        let r = room(DeviceId::CPU, None).unwrap();
        assert!(r.free > 0 && r.source != BY_HAND, "{r:?}");
    }
}
