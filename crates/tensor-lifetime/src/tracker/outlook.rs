//! The forecast's facts, from the tracker to the judgement: at each outermost iteration
//! end the time (the pace of the last iterations), and, when the report has a leak, what
//! the device holding the most tracked bytes has left ([`crate::device::room`]) and how
//! fast what it uses grew over the last iteration ends ([`Outlook::device_growth`]),
//! noted to the analysis (`Analysis::note_room`), which puts the forecast on the leaks.

use super::tally::Devices;
use std::collections::VecDeque;
use std::time::Instant;
use tensor_lifetime_report::{Analysis, Report};

/// The iteration ends the pace is measured over.
const PACE_OVER: usize = 8;

/// The fewest rises in a row of what the device uses that make a growth.
const RISES: usize = 3;

/// The latest outermost iteration ends of one loop frame.
#[derive(Debug, Default)]
pub(super) struct Outlook {
    frame: u64,
    ends: VecDeque<Instant>,
    /// What the device used at the latest of these ends: (iteration, device, bytes).
    used: VecDeque<(u64, String, u64)>,
}

impl Outlook {
    /// At the automatic report of an iteration end of outermost loop `frame`: counts the
    /// iteration end for the pace. At the loop's end (`loop_end`) nothing changes: the
    /// forecast stays as at its last iteration.
    pub(super) fn iteration_end(&mut self, frame: u64, loop_end: bool) {
        if loop_end {
            return;
        }
        if self.frame != frame {
            self.frame = frame;
            self.ends.clear();
            self.used.clear();
        }
        if self.ends.len() == PACE_OVER {
            self.ends.pop_front();
        }
        self.ends.push_back(Instant::now());
    }

    /// At the automatic report of iteration end `iteration` of outermost loop `frame`,
    /// after [`Outlook::iteration_end`], when `report` has a leak: reads the room of the
    /// device with the most tracked bytes in `devices` (`limit`: set by hand), notes it
    /// to `analysis` and puts the forecasts on `report`.
    pub(super) fn forecast(
        &mut self,
        analysis: &mut Analysis,
        report: &mut Report,
        (frame, iteration): (u64, u64),
        devices: &Devices,
        limit: Option<u64>,
    ) {
        let Some((device, _, _)) = devices.iter().max_by_key(|(_, live, _)| *live) else {
            return;
        };
        let Some(room) = crate::device::room(device, limit) else {
            return;
        };
        match room.used {
            Some(used) => {
                if self.used.len() == PACE_OVER {
                    self.used.pop_front();
                }
                self.used.push_back((iteration, room.device.clone(), used));
            }
            None => self.used.clear(),
        }
        let growth = self.device_growth();
        analysis.note_room(room, self.pace().map(|s| (frame, s)), growth);
        analysis.attach_forecasts(report);
    }

    /// Bytes per iteration by which what the device uses grew over the latest reads, when
    /// it rose at each of the last [`RISES`] reads or more, of one device and iterations
    /// in a row (use that moves both ways makes none).
    fn device_growth(&self) -> Option<u64> {
        let newest = self.used.back()?;
        let mut oldest = newest;
        let mut rises = 0;
        for earlier in self.used.iter().rev().skip(1) {
            let (later_iteration, _, later_used) = oldest;
            let (iteration, device, used) = earlier;
            if *device != newest.1 || iteration + 1 != *later_iteration || used >= later_used {
                break;
            }
            oldest = earlier;
            rises += 1;
        }
        (rises >= RISES).then(|| (newest.2 - oldest.2) / (newest.0 - oldest.0))
    }

    /// Seconds per iteration over the latest iteration ends (two at least).
    fn pace(&self) -> Option<f64> {
        let (first, last) = (self.ends.front()?, self.ends.back()?);
        let n = self.ends.len().checked_sub(1).filter(|n| *n > 0)?;
        Some(last.duration_since(*first).as_secs_f64() / n as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(used: &[(u64, &str, u64)]) -> Outlook {
        Outlook {
            used: used
                .iter()
                .map(|(i, d, free)| (*i, d.to_string(), *free))
                .collect(),
            ..Outlook::default()
        }
    }

    #[test]
    fn the_device_grows_when_what_it_uses_rises_at_each_read() {
        let steady = [
            (3, "cuda:0", 1000),
            (4, "cuda:0", 1100),
            (5, "cuda:0", 1200),
        ];
        // Two rises are not yet a growth; three are.
        assert_eq!(reads(&steady).device_growth(), None);
        let mut more = steady.to_vec();
        more.push((6, "cuda:0", 1360));
        assert_eq!(reads(&more).device_growth(), Some((1360 - 1000) / 3));
        // Use that went back down, a skipped iteration or another device start the count
        // again.
        for (at, read) in [
            (1, (4, "cuda:0", 900)),
            (1, (5, "cuda:0", 1100)),
            (0, (3, "cpu", 1000)),
        ] {
            let mut broken = more.clone();
            broken[at] = read;
            assert_eq!(reads(&broken).device_growth(), None, "{broken:?}");
        }
    }
}
