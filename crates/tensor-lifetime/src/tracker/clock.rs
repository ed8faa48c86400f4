//! The event log's clock: probes and iteration starts are stamped with a cheap counter
//! ([`crate::phase_timing::ticks`]: the TSC on x86-64), and the drain turns the stamps
//! into nanoseconds since the tracker started. Each drain reads the clock once (a
//! calibration pair: the counter and the nanoseconds); a stamp between two pairs is
//! placed between their times in proportion, so the times stay monotonic and exact at
//! every pair, whatever the counter's rate.

use crate::phase_timing::ticks;
use std::time::Instant;

/// The latest two calibration pairs (ticks, nanoseconds).
#[derive(Debug)]
pub(super) struct Clock {
    start: Instant,
    previous: (u64, u64),
    latest: (u64, u64),
    /// Nanoseconds per tick between the two pairs, times 2^32.
    rate: u64,
}

impl Clock {
    /// A clock whose nanoseconds count from `start`.
    pub(super) fn new(start: Instant) -> Clock {
        let pair = (ticks(), start.elapsed().as_nanos() as u64);
        Clock {
            start,
            previous: pair,
            latest: pair,
            rate: 0,
        }
    }

    /// Takes a calibration pair now; returns its nanoseconds.
    pub(super) fn read(&mut self) -> u64 {
        let now = (ticks(), self.start.elapsed().as_nanos() as u64);
        self.previous = self.latest;
        self.latest = now;
        let (dt, dns) = (now.0.wrapping_sub(self.previous.0), now.1 - self.previous.1);
        // A counter that went back or did not move (a pair on another core): no rate.
        self.rate = if dt == 0 || dt > i64::MAX as u64 {
            0
        } else {
            ((u128::from(dns) << 32) / u128::from(dt)).min(u128::from(u64::MAX)) as u64
        };
        now.1
    }

    /// The nanoseconds of the latest pair.
    pub(super) fn latest_ns(&self) -> u64 {
        self.latest.1
    }

    /// The nanoseconds of a stamp taken before the latest pair: placed between the two
    /// latest pairs in proportion (one taken before the previous pair is placed before
    /// it at the same rate), never after the latest pair.
    #[inline]
    pub(super) fn ns(&self, stamp: u64) -> u64 {
        let (t0, ns0) = self.previous;
        let d = stamp.wrapping_sub(t0) as i64;
        let scaled = (i128::from(d) * i128::from(self.rate)) >> 32;
        (i128::from(ns0) + scaled).clamp(0, i128::from(self.latest.1)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stamps between two pairs get times between theirs, in order; a stamp of the
    /// pair's instant gets its time.
    #[test]
    fn stamps_fall_between_their_pairs_in_order() {
        let mut clock = Clock::new(Instant::now());
        clock.read();
        let stamps: Vec<u64> = (0..5)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                ticks()
            })
            .collect();
        let before = clock.latest_ns();
        let after = clock.read();
        let times: Vec<u64> = stamps.iter().map(|s| clock.ns(*s)).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert!(
            times[0] >= before && times[4] <= after,
            "{before} {times:?} {after}"
        );
        assert!(times[4] - times[0] >= 6_000_000, "8 ms apart, {times:?}");
        assert!(
            after - clock.ns(clock.latest.0) < 1_000,
            "the latest pair's time"
        );
    }
}
