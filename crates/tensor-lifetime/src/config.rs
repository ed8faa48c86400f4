//! Run-time configuration from the environment.
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `TENSOR_LIFETIME` | `on` (default), `off` | `off` disables tracking: every probe returns at once |
//! | `TENSOR_LIFETIME_REPORT` | `stderr` (default), `off` | automatic printing of reports |
//! | `TENSOR_LIFETIME_JSON` | a path | the latest report as JSON, rewritten at each report |
//! | `TENSOR_LIFETIME_LOG` | a path | the JSON-lines event log (`docs/event-log.md`) |
//! | `TENSOR_LIFETIME_MEMORY_EVERY` | a number of iterations, `0`/`off` (default) | the memory monitor's period |
//!
//! This module is the only reader of the environment. A value that is not understood is reported once on stderr, naming the variable and the
//! accepted values, and the default is kept.

use std::path::PathBuf;

/// Where automatic reports go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReportMode {
    Off,
    Stderr,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) enabled: bool,
    pub(crate) report: ReportMode,
    pub(crate) json: Option<PathBuf>,
    pub(crate) log: Option<PathBuf>,
    /// The memory monitor's period in iteration ends (0: off).
    pub(crate) memory_every: u64,
}

impl Config {
    pub(crate) fn from_env() -> Config {
        Config::from_lookup(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let enabled = match get("TENSOR_LIFETIME").as_deref().map(str::trim) {
            None | Some("") | Some("on") | Some("1") => true,
            Some("off") | Some("0") => false,
            Some(other) => {
                warn_env("TENSOR_LIFETIME", other, "on, off", "tracking stays on");
                true
            }
        };
        let report = match get("TENSOR_LIFETIME_REPORT").as_deref().map(str::trim) {
            None | Some("") | Some("stderr") => ReportMode::Stderr,
            Some("off") => ReportMode::Off,
            Some(other) => {
                warn_env(
                    "TENSOR_LIFETIME_REPORT",
                    other,
                    "stderr, off",
                    "reports go to stderr",
                );
                ReportMode::Stderr
            }
        };
        let path = |k: &str| get(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
        Config {
            enabled,
            report,
            json: path("TENSOR_LIFETIME_JSON"),
            log: path("TENSOR_LIFETIME_LOG"),
            memory_every: memory_every(get("TENSOR_LIFETIME_MEMORY_EVERY").as_deref()),
        }
    }
}

fn memory_every(value: Option<&str>) -> u64 {
    match value.map(str::trim) {
        None | Some("") | Some("off") => 0,
        Some(v) => v.parse().unwrap_or_else(|_| {
            warn_env(
                "TENSOR_LIFETIME_MEMORY_EVERY",
                v,
                "a number of iterations, 0 or off",
                "the memory monitor stays off",
            );
            0
        }),
    }
}

fn warn_env(var: &str, value: &str, accepted: &str, fallback: &str) {
    eprintln!(
        "tensor-lifetime: {var}={value:?} is not understood (accepted: {accepted}); {fallback}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_and_values() {
        let c = cfg(&[]);
        assert!(c.enabled);
        assert_eq!(c.report, ReportMode::Stderr);
        assert!(c.json.is_none() && c.log.is_none());
        assert_eq!(c.memory_every, 0);
        let c = cfg(&[
            ("TENSOR_LIFETIME", "off"),
            ("TENSOR_LIFETIME_REPORT", "off"),
            ("TENSOR_LIFETIME_JSON", "r.json"),
            ("TENSOR_LIFETIME_LOG", "e.jsonl"),
            ("TENSOR_LIFETIME_MEMORY_EVERY", " 100 "),
        ]);
        assert!(!c.enabled);
        assert_eq!(c.report, ReportMode::Off);
        assert_eq!(c.json.unwrap(), PathBuf::from("r.json"));
        assert_eq!(c.log.unwrap(), PathBuf::from("e.jsonl"));
        assert_eq!(c.memory_every, 100);
    }

    #[test]
    fn unknown_values_keep_defaults() {
        let c = cfg(&[
            ("TENSOR_LIFETIME", "maybe"),
            ("TENSOR_LIFETIME_REPORT", "pager"),
            ("TENSOR_LIFETIME_MEMORY_EVERY", "often"),
        ]);
        assert_eq!(c.memory_every, 0);
        assert!(c.enabled);
        assert_eq!(c.report, ReportMode::Stderr);
    }
}
