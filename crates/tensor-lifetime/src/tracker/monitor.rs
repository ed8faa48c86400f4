//! The memory monitor: every N iteration ends (of any tracked loop: the training steps),
//! a sample of each device the tracker has seen, into the event log (`memory` events) and
//! `tracing` (target `tensor_lifetime::memory`, level INFO): the
//! `print(memory_allocated(), memory_reserved())` every 100 steps of PyTorch scripts. Off
//! by default (`TENSOR_LIFETIME_MEMORY_EVERY`, or [`super::set_memory_monitor`]); a sample costs
//! a few driver calls and no synchronize.

use super::sink::Sink;
use super::tally::Devices;
use crate::device::{Counters, DeviceId};
use std::sync::atomic::{AtomicU64, Ordering};
use tensor_lifetime_report::event::{Event, MemorySample};
use tensor_lifetime_report::size::format_bytes;

/// Not set yet: the tracker's configuration decides when it starts.
const UNSET: u64 = u64::MAX;

/// The period in iteration ends; 0: off.
static EVERY: AtomicU64 = AtomicU64::new(UNSET);
/// Iteration ends seen while the monitor is on.
static STEPS: AtomicU64 = AtomicU64::new(0);

/// Sets the period ([`super::set_memory_monitor`], which also ends a sampled run's quiet
/// iteration ends).
pub(super) fn set_every(every: u64) {
    EVERY.store(every, Ordering::SeqCst);
}

/// The configured period, unless [`super::set_memory_monitor`] was called first.
pub(super) fn configure(every: u64) {
    let _ = EVERY.compare_exchange(UNSET, every, Ordering::Relaxed, Ordering::Relaxed);
}

/// Whether the monitor samples (an iteration end must then be counted); sequentially
/// consistent with [`set_every`]'s store.
pub(super) fn on() -> bool {
    let every = EVERY.load(Ordering::SeqCst);
    every != 0 && every != UNSET
}

/// Counts an iteration end; whether a sample is due. One atomic load while off (iteration
/// ends are counted only while the monitor is on).
#[inline]
fn due() -> Option<u64> {
    let every = EVERY.load(Ordering::Relaxed);
    if every == 0 || every == UNSET {
        return None;
    }
    let step = STEPS.fetch_add(1, Ordering::Relaxed) + 1;
    (step % every == 0).then_some(step)
}

/// Samples each device (live tracked bytes from the sweep), traces each sample and
/// returns them for the event log.
fn sample(
    step: u64,
    devices: impl Iterator<Item = (DeviceId, u64, u64)>,
) -> Vec<(DeviceId, MemorySample)> {
    let mut out = Vec::new();
    for (device, live, peak) in devices {
        match Counters::read(device, None) {
            Ok(c) => {
                tracing::info!(
                    target: "tensor_lifetime::memory",
                    device = %device,
                    step,
                    tracked = live,
                    tracked_peak = peak,
                    pool_used = c.pool_used,
                    pool_reserved = c.pool_reserved,
                    device_used = c.device_used,
                    process_resident = c.process_resident,
                    "memory {device}: tracked {}, pool used {}, reserved {}",
                    format_bytes(live),
                    c.pool_used.map_or_else(|| "-".to_string(), format_bytes),
                    c.pool_reserved.map_or_else(|| "-".to_string(), format_bytes),
                );
                out.push((device, c.sample(live)));
            }
            Err(e) => {
                tracing::warn!(target: "tensor_lifetime::memory", device = %device, "memory sample failed: {e}");
            }
        }
    }
    out
}

/// At an iteration end at `t_ns`, after the sweep: the monitor's samples of the
/// `devices` when one is due, into `sink`.
#[inline]
pub(super) fn tick(devices: &Devices, sink: &mut Sink, t_ns: u64) {
    let Some(step) = due() else {
        return;
    };
    for (device, sample) in sample(step, devices.iter()) {
        sink.emit(Event::Memory {
            t_ns,
            device: device.to_string(),
            sample,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_samples_every_nth_iteration_end() {
        // The only test that ticks the monitor (its counters are global).
        set_every(0);
        assert!((0..7).all(|_| due().is_none()));
        set_every(5);
        let due_at: Vec<usize> = (0..10).filter(|_| due().is_some()).collect();
        // Ticks while off are not counted: due at the 5th and 10th tick since.
        assert_eq!(due_at, [4, 9]);
        configure(3);
        assert_eq!(EVERY.load(Ordering::Relaxed), 5, "a set period is kept");
        let got = sample(10, [(DeviceId::CPU, 64, 128)].into_iter());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, DeviceId::CPU);
        assert_eq!(got[0].1.tracked, 64);
        assert!(got[0].1.process_resident.is_some());
        set_every(0);
    }
}
