//! The event log's clock: probes and iteration starts are stamped with a cheap counter
//! ([`crate::phase_timing::ticks`]: the TSC on x86-64), and the drain turns the stamps
//! into nanoseconds since the tracker started. Each drain reads the clock once (a
//! calibration pair: the counter and the nanoseconds); a stamp between two pairs is
//! placed between their times in proportion, so the times stay monotonic and exact at
//! every pair, whatever the counter's rate. A stamp older than both pairs (an outer
//! iteration's start, many drains ago) is placed back from the older pair at the
//! counter's rate since the tracker started: a rate measured over the microseconds
//! between two drains is too coarse to reach milliseconds back.

use crate::phase_timing::ticks;
use std::time::Instant;

/// The latest two calibration pairs (ticks, nanoseconds).
#[derive(Debug)]
pub(super) struct Clock {
    start: Instant,
    first: (u64, u64),
    previous: (u64, u64),
    latest: (u64, u64),
    /// Nanoseconds per tick between the two pairs, times 2^32.
    rate: u64,
    /// Nanoseconds per tick between the first and the latest pair, times 2^32.
    long_rate: u64,
}

/// Nanoseconds per tick from `a` to `b`, times 2^32; 0 where the counter went back or
/// did not move (a pair read on another core).
fn rate(a: (u64, u64), b: (u64, u64)) -> u64 {
    let (dt, dns) = (b.0.wrapping_sub(a.0), b.1 - a.1);
    if dt == 0 || dt > i64::MAX as u64 {
        0
    } else {
        ((u128::from(dns) << 32) / u128::from(dt)).min(u128::from(u64::MAX)) as u64
    }
}

impl Clock {
    /// A clock whose nanoseconds count from `start`.
    pub(super) fn new(start: Instant) -> Clock {
        let pair = (ticks(), start.elapsed().as_nanos() as u64);
        Clock {
            start,
            first: pair,
            previous: pair,
            latest: pair,
            rate: 0,
            long_rate: 0,
        }
    }

    /// Takes a calibration pair now; returns its nanoseconds.
    pub(super) fn read(&mut self) -> u64 {
        let now = (ticks(), self.start.elapsed().as_nanos() as u64);
        self.previous = self.latest;
        self.latest = now;
        self.rate = rate(self.previous, now);
        self.long_rate = rate(self.first, now);
        now.1
    }

    /// The nanoseconds of the latest pair.
    pub(super) fn latest_ns(&self) -> u64 {
        self.latest.1
    }

    /// The nanoseconds of a stamp taken before the latest pair: placed between the two
    /// latest pairs in proportion (one taken before the previous pair is placed before
    /// it at the rate since the first pair), never after the latest pair.
    #[inline]
    pub(super) fn ns(&self, stamp: u64) -> u64 {
        let (t0, ns0) = self.previous;
        let d = stamp.wrapping_sub(t0) as i64;
        let rate = if d < 0 { self.long_rate } else { self.rate };
        let scaled = (i128::from(d) * i128::from(rate)) >> 32;
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

    /// A stamp taken long before two close pairs is placed at the rate since the first
    /// pair: within a few microseconds of the clock's reading at the stamp, where the
    /// two close pairs' rate alone may miss by far more.
    #[test]
    fn an_old_stamp_is_placed_at_the_long_rate() {
        let mut clock = Clock::new(Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (stamp, at) = (ticks(), clock.start.elapsed().as_nanos() as u64);
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.read();
        clock.read();
        let placed = clock.ns(stamp);
        assert!(placed.abs_diff(at) < 20_000, "{placed} against {at}");
    }
}
