//! Metrics through the `metrics` facade (feature `metrics`): at the end of each
//! outermost iteration (and loop) the tracked bytes and tensors by device and by role,
//! the leaks, the largest leak's growth, the forecast of running out and, on CUDA, the
//! pool's used and reserved bytes, set on whatever recorder the program installed
//! (`metrics-exporter-prometheus` serves them as `/metrics`). Without the feature
//! [`publish`] is an empty inline function; with it and no recorder, each metric costs
//! the facade's no-op handle. The names and what they mean: `docs/metrics.md`.

use super::tally::Devices;
use tensor_lifetime_report::Report;

/// Whether [`publish`] sets anything: the automatic report is then built at every
/// outermost iteration end.
pub(super) const PUBLISHED: bool = cfg!(feature = "metrics");

/// Sets every metric from `report` and `devices`; counts an iteration unless `loop_end`.
#[cfg(not(feature = "metrics"))]
#[inline(always)]
pub(super) fn publish(_report: &Report, _devices: &Devices, _loop_end: bool) {}

#[cfg(feature = "metrics")]
pub(super) use on::publish;

#[cfg(feature = "metrics")]
mod on {
    use super::{Devices, Report};
    use crate::device::{Counters, DeviceId};
    use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};
    use tensor_lifetime_report::Role;

    /// Sets every metric from `report` and `devices`; counts an iteration unless
    /// `loop_end`.
    pub(in crate::tracker) fn publish(report: &Report, devices: &Devices, loop_end: bool) {
        describe();
        if !loop_end {
            counter!("tensor_lifetime_iterations_total").increment(1);
        }
        for (device, live, peak) in devices.iter() {
            let name = device.to_string();
            gauge!("tensor_lifetime_live_bytes", "device" => name.clone()).set(live as f64);
            gauge!("tensor_lifetime_peak_live_bytes", "device" => name.clone()).set(peak as f64);
            pool(device, name);
        }
        gauge!("tensor_lifetime_live_tensors").set(report.live_tensors as f64);
        let now = &report.memory_by_role.now;
        for role in Role::ALL {
            let amount = now.get(role);
            let role = role.as_str();
            gauge!("tensor_lifetime_role_live_bytes", "role" => role).set(amount.bytes as f64);
            gauge!("tensor_lifetime_role_live_tensors", "role" => role).set(amount.tensors as f64);
        }
        gauge!("tensor_lifetime_findings").set(report.findings.len() as f64);
        gauge!("tensor_lifetime_leaks").set(report.leaks().count() as f64);
        let largest = report.leaks().map(|f| f.bytes_per_iteration).max();
        gauge!("tensor_lifetime_largest_leak_growth_bytes").set(largest.unwrap_or(0) as f64);
        let (iterations, seconds) = match &report.forecast {
            Some(f) => (f.iterations_left as f64, f.seconds_left.unwrap_or(f64::NAN)),
            None => (f64::INFINITY, f64::INFINITY),
        };
        gauge!("tensor_lifetime_forecast_iterations_left").set(iterations);
        gauge!("tensor_lifetime_forecast_seconds_left").set(seconds);
        let interval = report.sample_interval.filter(|_| report.estimated);
        gauge!("tensor_lifetime_sample_interval_bytes").set(interval.unwrap_or(0) as f64);
    }

    /// The CUDA pool's used and reserved bytes of `device` (nothing on other devices).
    fn pool(device: DeviceId, name: String) {
        if device.cuda_ordinal().is_none() {
            return;
        }
        let Ok(c) = Counters::read(device, None) else {
            return;
        };
        if let (Some(used), Some(reserved)) = (c.pool_used, c.pool_reserved) {
            gauge!("tensor_lifetime_pool_used_bytes", "device" => name.clone()).set(used as f64);
            gauge!("tensor_lifetime_pool_reserved_bytes", "device" => name).set(reserved as f64);
        }
    }

    /// The metrics' descriptions (a recorder shows them as `# HELP`), given at every
    /// publication: a recorder installed after the first one gets them too.
    fn describe() {
        let gauges: [(&'static str, Unit, &'static str); 13] = [
            ("tensor_lifetime_live_bytes", Unit::Bytes, "Tracked tensor bytes alive on the device at the latest outermost iteration end (each storage once)."),
            ("tensor_lifetime_peak_live_bytes", Unit::Bytes, "Highest tracked live bytes of the device at an iteration end."),
            ("tensor_lifetime_live_tensors", Unit::Count, "Tracked tensors alive, all devices."),
            ("tensor_lifetime_role_live_bytes", Unit::Bytes, "Tracked live bytes by role (parameter, gradient, optimizer_state, activation, input, other, temporary), all devices."),
            ("tensor_lifetime_role_live_tensors", Unit::Count, "Tracked live tensors by role, all devices."),
            ("tensor_lifetime_findings", Unit::Count, "Findings of the latest report."),
            ("tensor_lifetime_leaks", Unit::Count, "Leaks of the latest report."),
            ("tensor_lifetime_largest_leak_growth_bytes", Unit::Bytes, "Growth per iteration of the largest leak (0 without one)."),
            ("tensor_lifetime_forecast_iterations_left", Unit::Count, "Iterations until the leaks use up the device's free memory (+Inf without a leak)."),
            ("tensor_lifetime_forecast_seconds_left", Unit::Seconds, "Seconds until the leaks use up the device's free memory at the last iterations' pace (+Inf without a leak, NaN before a pace is known)."),
            ("tensor_lifetime_sample_interval_bytes", Unit::Bytes, "The sampled mode's mean interval between sampled bytes (0: exact); while not 0 the byte and tensor figures are estimates."),
            ("tensor_lifetime_pool_used_bytes", Unit::Bytes, "Bytes of the CUDA memory pool in use."),
            ("tensor_lifetime_pool_reserved_bytes", Unit::Bytes, "Bytes the CUDA memory pool holds from the device."),
        ];
        for (name, unit, help) in gauges {
            describe_gauge!(name, unit, help);
        }
        describe_counter!(
            "tensor_lifetime_iterations_total",
            Unit::Count,
            "Outermost loop iterations ended."
        );
    }
}
