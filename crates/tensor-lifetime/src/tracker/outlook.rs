//! The forecast's facts, from the tracker to the judgement: at each outermost iteration
//! end the time (the pace of the last iterations), and, when the report has a leak, what
//! the device holding the most tracked bytes has left ([`crate::device::room`]), noted
//! to the analysis (`Analysis::note_room`), which puts the forecast on the leaks.

use super::tally::Devices;
use std::collections::VecDeque;
use std::time::Instant;
use tensor_lifetime_report::{Analysis, Report};

/// The iteration ends the pace is measured over.
const PACE_OVER: usize = 8;

/// The latest outermost iteration ends of one loop frame.
#[derive(Debug, Default)]
pub(super) struct Outlook {
    frame: u64,
    ends: VecDeque<Instant>,
}

impl Outlook {
    /// At the automatic report of an iteration end of outermost loop `frame`: counts the
    /// iteration end, and when `report` has a leak reads the room of the device with the
    /// most tracked bytes in `devices` (`limit`: set by hand), notes it to `analysis` and
    /// puts the forecasts on `report`. At the loop's end (`loop_end`) nothing changes.
    pub(super) fn update(
        &mut self,
        analysis: &mut Analysis,
        report: &mut Report,
        (frame, loop_end): (u64, bool),
        devices: &Devices,
        limit: Option<u64>,
    ) {
        if loop_end {
            // The loop's pace ended with it: the forecast stays as at its last iteration.
            return;
        }
        if self.frame != frame {
            self.frame = frame;
            self.ends.clear();
        }
        if self.ends.len() == PACE_OVER {
            self.ends.pop_front();
        }
        self.ends.push_back(Instant::now());
        if !report.has_leaks() {
            return;
        }
        let Some((device, _, _)) = devices.iter().max_by_key(|(_, live, _)| *live) else {
            return;
        };
        let Some(room) = crate::device::room(device, limit) else {
            return;
        };
        analysis.note_room(room, self.pace().map(|s| (frame, s)));
        analysis.attach_forecasts(report);
    }

    /// Seconds per iteration over the latest iteration ends (two at least).
    fn pace(&self) -> Option<f64> {
        let (first, last) = (self.ends.front()?, self.ends.back()?);
        let n = self.ends.len().checked_sub(1).filter(|n| *n > 0)?;
        Some(last.duration_since(*first).as_secs_f64() / n as f64)
    }
}
