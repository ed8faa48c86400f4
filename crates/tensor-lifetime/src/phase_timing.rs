//! Diagnostic: TSC cycles the tracker spends in each phase of its hot path, per thread.
//! Built only with the `phase-timing` feature (a measurement aid for docs/performance.md:
//! where the tracker's time goes on a given machine); without it every call folds away.
//! The same counter stamps the event log's probes ([`ticks`], always built).

// why: `rdtsc` (the diagnostic timer, and the event log's probe stamps).
#![allow(unsafe_code)]

/// A cheap monotonic counter: the TSC on x86-64 (one instruction, no system call),
/// elsewhere the nanoseconds since the first call. The event log's probes are stamped
/// with it; the tracker's clock (`tracker/clock.rs`) turns it into nanoseconds.
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        EPOCH
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// The phases timed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum HotPhase {
    Probe,
    EndIteration,
    Drain,
    Sweep,
    Analysis,
    BeginIteration,
}

const NAMES: [&str; 6] = [
    "probe",
    "end_iteration (all)",
    "  drain",
    "  sweep",
    "  analysis",
    "begin_iteration",
];

#[cfg(all(feature = "phase-timing", target_arch = "x86_64"))]
mod on {
    use std::cell::Cell;

    thread_local! {
        pub(super) static CYCLES: [Cell<(u64, u64)>; 6] = Default::default();
    }

    #[inline(always)]
    pub(super) fn now() -> u64 {
        // SAFETY: `rdtsc` has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
}

/// Runs `f`, adding its cycles to `phase` (with the feature; otherwise just runs it).
#[inline(always)]
pub(crate) fn timed<R>(phase: HotPhase, f: impl FnOnce() -> R) -> R {
    #[cfg(all(feature = "phase-timing", target_arch = "x86_64"))]
    {
        let t0 = on::now();
        let r = f();
        let dt = on::now().wrapping_sub(t0);
        let _ = on::CYCLES.try_with(|c| {
            let (s, n) = c[phase as usize].get();
            c[phase as usize].set((s + dt, n + 1));
        });
        r
    }
    #[cfg(not(all(feature = "phase-timing", target_arch = "x86_64")))]
    {
        let _ = phase;
        f()
    }
}

/// This thread's totals, one line per phase (cycles, calls, cycles per call); empty
/// without the feature. Resets them.
pub fn summary() -> String {
    #[cfg(all(feature = "phase-timing", target_arch = "x86_64"))]
    {
        on::CYCLES
            .try_with(|c| {
                let mut out = String::new();
                for (name, cell) in NAMES.iter().zip(c.iter()) {
                    let (s, n) = cell.replace((0, 0));
                    out.push_str(&format!(
                        "{name:<22} {s:>14} cycles {n:>10} calls {:>10.1} per call\n",
                        s as f64 / n.max(1) as f64
                    ));
                }
                out
            })
            .unwrap_or_default()
    }
    #[cfg(not(all(feature = "phase-timing", target_arch = "x86_64")))]
    {
        let _ = NAMES;
        String::new()
    }
}
