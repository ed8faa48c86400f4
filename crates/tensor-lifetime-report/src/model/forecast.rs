//! The memory a device has left ([`DeviceRoom`], read by the tracker) and the forecast of
//! when a growing finding uses it up ([`Forecast`], judged in `analysis/forecast.rs`),
//! with its one line of text: `cuda:0: 3.1 GiB free, +96.0 MiB per iteration: about 33
//! iterations, about 4 min at the last iterations' pace`.

use crate::size::{format_bytes, group_digits};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What a device has left, as the tracker read it at an iteration end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRoom {
    /// `cpu`, `cuda:0`.
    pub device: String,
    /// Bytes the device can still give.
    pub free: u64,
    /// What bounds it: `cuda` (the driver's free memory), `cgroup` (the cgroup's
    /// `memory.max` or `memory.limit_in_bytes` less its usage), `MemAvailable` (the
    /// kernel's estimate), `TENSOR_LIFETIME_MEMORY_LIMIT` (the limit set by hand, less
    /// what the device uses).
    pub source: String,
    /// What is used of it now, where that can be read: the process's resident memory
    /// on the CPU, the device's used memory on CUDA (its growth is the device's growth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
}

/// When the device runs out at the measured growth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub device: String,
    /// Bytes free when it was made.
    pub free_bytes: u64,
    /// The growth it extrapolates, bytes per iteration of the loop that judged it.
    pub growth_per_iteration: u64,
    /// Where that growth was measured: `leaks` (the findings' own growth) or `device`
    /// (the decline of the device's free memory over the last iterations, where it grows
    /// faster than the leaks: memory they hold outside tracked code, such as the
    /// intermediate tensors of a kept autograd graph made inside a library).
    #[serde(default = "leaks")]
    pub growth_from: String,
    /// Iterations until the free bytes are used up (rounded down).
    pub iterations_left: u64,
    /// At the pace of the last iterations; absent when no pace is known yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<f64>,
    /// What bounds the free bytes ([`DeviceRoom::source`]).
    pub source: String,
}

/// [`Forecast::growth_from`] of a forecast at the findings' own growth.
pub const GROWTH_FROM_LEAKS: &str = "leaks";

/// [`Forecast::growth_from`] of a forecast at the device's measured growth.
pub const GROWTH_FROM_DEVICE: &str = "device";

fn leaks() -> String {
    GROWTH_FROM_LEAKS.to_string()
}

impl fmt::Display for Forecast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let measured = if self.growth_from == GROWTH_FROM_DEVICE {
            " on the device"
        } else {
            ""
        };
        write!(
            f,
            "{}: {} free, +{} per iteration{measured}: about {} {}",
            self.device,
            format_bytes(self.free_bytes),
            format_bytes(self.growth_per_iteration),
            group_digits(self.iterations_left),
            if self.iterations_left == 1 {
                "iteration"
            } else {
                "iterations"
            }
        )?;
        if let Some(s) = self.seconds_left {
            write!(
                f,
                ", about {} at the last iterations' pace",
                format_duration(s)
            )?;
        }
        Ok(())
    }
}

/// `40 s`, `4 min`, `2.5 h`, `3.0 days`.
fn format_duration(seconds: f64) -> String {
    if seconds < 90.0 {
        format!("{} s", seconds.round() as u64)
    } else if seconds < 90.0 * 60.0 {
        format!("{} min", (seconds / 60.0).round() as u64)
    } else if seconds < 48.0 * 3600.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.1} days", seconds / 86400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forecast_reads_as_one_line() {
        let f = Forecast {
            device: "cuda:0".into(),
            free_bytes: 3_328_599_654,
            growth_per_iteration: 96 << 20,
            growth_from: GROWTH_FROM_LEAKS.into(),
            iterations_left: 33,
            seconds_left: Some(240.0),
            source: "cuda".into(),
        };
        assert_eq!(
            f.to_string(),
            "cuda:0: 3.1 GiB free, +96.0 MiB per iteration: about 33 iterations, \
             about 4 min at the last iterations' pace"
        );
        let f = Forecast {
            seconds_left: None,
            iterations_left: 1,
            ..f
        };
        assert!(f.to_string().ends_with("about 1 iteration"), "{f}");
        let f = Forecast {
            growth_from: GROWTH_FROM_DEVICE.into(),
            ..f
        };
        assert!(
            f.to_string()
                .contains("+96.0 MiB per iteration on the device: about 1"),
            "{f}"
        );
        assert_eq!(format_duration(12.4), "12 s");
        assert_eq!(format_duration(3.0 * 3600.0), "3.0 h");
    }
}
