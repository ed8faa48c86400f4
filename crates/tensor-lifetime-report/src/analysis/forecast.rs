//! The forecast of running out: at a growing finding's measured growth, how many
//! iterations (and, at the pace of the last iterations, how long) until the device's
//! free memory is used up. The tracker notes what the device has left and the pace of
//! its outermost loop ([`Analysis::note_room`](super::Analysis::note_room)); every leak
//! of a report gets its [`Forecast`], and the report gets the forecast of its largest
//! leak's loop, whose leaks' growths add up, or of the device's measured growth where
//! that is larger by more than a quarter (what runs the device out is all it holds: a
//! kept autograd graph holds intermediate tensors made inside libraries, which no finding
//! counts; a quarter, so that the allocator's rounding of the leaks' own growth does not
//! count).

use crate::model::{DeviceRoom, Forecast, GROWTH_FROM_DEVICE, GROWTH_FROM_LEAKS};
use crate::report::Report;

/// What the tracker last noted: the device's room and the pace of a loop.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Outlook {
    pub(super) room: DeviceRoom,
    /// The loop (as findings name it) and its seconds per iteration lately.
    pub(super) pace: Option<(String, f64)>,
    /// The growth of what the device uses, per iteration of that loop lately.
    pub(super) device_growth: Option<u64>,
}

/// The forecast for `growth` bytes per iteration on `room`, at `seconds_per_iteration`;
/// `None` without growth.
pub fn forecast(
    room: &DeviceRoom,
    growth: u64,
    seconds_per_iteration: Option<f64>,
) -> Option<Forecast> {
    if growth == 0 {
        return None;
    }
    let iterations_left = room.free / growth;
    // The fraction of an iteration counts for the time: it is when the memory runs out.
    let seconds_left = seconds_per_iteration
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| s * room.free as f64 / growth as f64);
    Some(Forecast {
        device: room.device.clone(),
        free_bytes: room.free,
        growth_per_iteration: growth,
        growth_from: GROWTH_FROM_LEAKS.to_string(),
        iterations_left,
        seconds_left,
        source: room.source.clone(),
    })
}

/// Puts a forecast on every leak of `report` and on the report itself.
pub(super) fn attach(report: &mut Report, outlook: &Outlook) {
    let pace_of = |loop_name: &str| {
        outlook
            .pace
            .as_ref()
            .filter(|(name, _)| name == loop_name)
            .map(|(_, s)| *s)
    };
    for f in report.findings.iter_mut().filter(|f| f.is_leak()) {
        let pace = pace_of(&f.loop_name);
        f.forecast = forecast(&outlook.room, f.bytes_per_iteration, pace);
    }
    let Some(largest) = report
        .leaks()
        .max_by_key(|f| f.bytes_per_iteration)
        .map(|f| f.loop_name.clone())
    else {
        return;
    };
    let growth: u64 = report
        .leaks()
        .filter(|f| f.loop_name == largest)
        .map(|f| f.bytes_per_iteration)
        .sum();
    let pace = pace_of(&largest);
    report.forecast = match outlook.device_growth {
        // The device's growth is of the loop whose pace was measured.
        Some(device) if device > growth.saturating_add(growth / 4) && pace.is_some() => {
            forecast(&outlook.room, device, pace).map(|f| Forecast {
                growth_from: GROWTH_FROM_DEVICE.to_string(),
                ..f
            })
        }
        _ => forecast(&outlook.room, growth, pace),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SiteRef;
    use crate::report::{Finding, FindingKind};

    fn room(free: u64) -> DeviceRoom {
        DeviceRoom {
            device: "cpu".into(),
            free,
            source: "cgroup".into(),
            used: None,
        }
    }

    fn leak(loop_name: &str, per_iteration: u64) -> Finding {
        Finding {
            loop_name: loop_name.into(),
            bytes_per_iteration: per_iteration,
            ..Finding::at(FindingKind::Leak, SiteRef::default())
        }
    }

    #[test]
    fn iterations_and_time_left_at_the_growth() {
        let f = forecast(&room(1000), 96, Some(0.5)).unwrap();
        assert_eq!(f.iterations_left, 10);
        assert_eq!(f.seconds_left, Some(1000.0 / 96.0 * 0.5));
        assert_eq!(forecast(&room(1000), 0, None), None);
        assert_eq!(forecast(&room(10), 96, None).unwrap().iterations_left, 0);
    }

    #[test]
    fn leaks_get_their_forecast_and_the_report_the_sum_of_its_largest_loop() {
        let mut report = crate::Analysis::default().report();
        report.findings = vec![
            leak("'step", 100),
            leak("'step", 50),
            leak("'batch", 10),
            Finding {
                bytes_per_iteration: 500,
                ..Finding::at(FindingKind::Retained, SiteRef::default())
            },
        ];
        let outlook = Outlook {
            room: room(3000),
            pace: Some(("'step".into(), 2.0)),
            device_growth: Some(120),
        };
        attach(&mut report, &outlook);
        let left: Vec<Option<u64>> = report
            .findings
            .iter()
            .map(|f| f.forecast.as_ref().map(|f| f.iterations_left))
            .collect();
        assert_eq!(left, [Some(30), Some(60), Some(300), None]);
        // Another loop's pace is not this one's.
        assert_eq!(
            report.findings[2].forecast.as_ref().unwrap().seconds_left,
            None
        );
        let total = report.forecast.unwrap();
        assert_eq!(
            (total.growth_per_iteration, total.iterations_left),
            (150, 20)
        );
        assert_eq!(total.seconds_left, Some(40.0));
        assert_eq!(total.growth_from, "leaks");
    }

    #[test]
    fn the_report_takes_the_devices_growth_where_it_is_larger() {
        let mut report = crate::Analysis::default().report();
        report.findings = vec![leak("'step", 100)];
        // A quarter more is within the allocator's rounding of the leak's own growth.
        let mut outlook = Outlook {
            room: room(3000),
            pace: Some(("'step".into(), 2.0)),
            device_growth: Some(125),
        };
        attach(&mut report, &outlook);
        assert_eq!(report.forecast.clone().unwrap().growth_from, "leaks");
        outlook.device_growth = Some(300);
        attach(&mut report, &outlook);
        let total = report.forecast.clone().unwrap();
        assert_eq!(
            (total.growth_per_iteration, total.iterations_left),
            (300, 10)
        );
        assert_eq!(total.growth_from, "device");
        // The leak's own forecast stays at its own growth.
        let own = report.findings[0].forecast.as_ref().unwrap();
        assert_eq!(
            (own.growth_per_iteration, own.growth_from.as_str()),
            (100, "leaks")
        );
        // Without the loop's pace the device's growth is of no known loop.
        outlook.pace = None;
        attach(&mut report, &outlook);
        assert_eq!(report.forecast.unwrap().growth_per_iteration, 100);
    }
}
