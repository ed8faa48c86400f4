//! Run-time configuration from the environment.
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `TENSOR_LIFETIME` | `on` (default), `off` | `off` disables tracking: every probe returns at once |
//! | `TENSOR_LIFETIME_REPORT` | `stderr` (default), `off` | automatic printing of reports |
//! | `TENSOR_LIFETIME_JSON` | a path (`{rank}`, `{pid}` replaced) | the latest report as JSON, rewritten at each report |
//! | `TENSOR_LIFETIME_LOG` | a path (`{rank}`, `{pid}` replaced) | the event log (`docs/event-log.md`): binary, JSON lines for `*.jsonl` / `*.json` |
//! | `TENSOR_LIFETIME_RANK`, `TENSOR_LIFETIME_WORLD_SIZE` | numbers | this process's rank and the job's size; else the launchers' `RANK` / `WORLD_SIZE` (`LOCAL_RANK` when there is no `RANK`) |
//! | `TENSOR_LIFETIME_MEMORY_EVERY` | a number of iterations, `0`/`off` (default) | the memory monitor's period |
//! | `TENSOR_LIFETIME_SAMPLE` | `exact` (default) or a byte interval (`512KiB`, `2MiB`) | records a sample of the tensors, each of `s` bytes with probability `1 - exp(-s / interval)`; every figure from the samples is an estimate (`crate::sample`) |
//! | `TENSOR_LIFETIME_SAMPLE_SEED` | a number (default 0) | which tensors a sampled run records (one seed, one sample) |
//! | `TENSOR_LIFETIME_MEMORY_LIMIT` | a size (`2GiB`, `512 MiB`) | the memory the forecast of running out takes for every device (less what the device uses now), instead of the cgroup's limit or `MemAvailable` on the CPU and the driver's free memory on CUDA: a limit to test the forecast with |
//! | `TENSOR_LIFETIME_EXACT_MAX` | a number of live records (default 16) | above it, inner iteration ends walk what changed plus a bounded slice (`tracker::sweep`); set low to test that mode on small programs |
//!
//! This module is the only reader of the environment. A value that is not understood is reported once on stderr, naming the variable and the
//! accepted values, and the default is kept.

use crate::sample::Sampling;
use std::path::PathBuf;

/// Where automatic reports go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReportMode {
    Off,
    Stderr,
}

/// This process's place in a multi-process job (torchrun-style launchers, Slurm scripts
/// and `mpirun` wrappers set `RANK` / `WORLD_SIZE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rank {
    pub(crate) rank: Option<u32>,
    pub(crate) world_size: Option<u32>,
    /// The machine's host name (Linux: the kernel's; else `HOSTNAME`).
    pub(crate) host: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) enabled: bool,
    pub(crate) report: ReportMode,
    pub(crate) json: Option<PathBuf>,
    pub(crate) log: Option<PathBuf>,
    /// The memory monitor's period in iteration ends (0: off).
    pub(crate) memory_every: u64,
    /// Live records above which inner iteration ends sweep partially.
    pub(crate) exact_max: usize,
    /// Every tensor, or a sample (`TENSOR_LIFETIME_SAMPLE`).
    pub(crate) sample: Sampling,
    /// `TENSOR_LIFETIME_SAMPLE_SEED`, when set.
    pub(crate) sample_seed: Option<u64>,
    /// The memory limit the forecast takes instead of the device's (bytes).
    pub(crate) memory_limit: Option<u64>,
    pub(crate) rank: Rank,
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
        let rank = Rank {
            rank: number(&get, &["TENSOR_LIFETIME_RANK", "RANK", "LOCAL_RANK"]),
            world_size: number(&get, &["TENSOR_LIFETIME_WORLD_SIZE", "WORLD_SIZE"]),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .or_else(|| get("HOSTNAME"))
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty()),
        };
        let pid = std::process::id();
        let path = |k: &str| {
            get(k)
                .filter(|v| !v.trim().is_empty())
                .map(|v| PathBuf::from(expand_path(&v, rank.rank, pid)))
        };
        Config {
            enabled,
            report,
            json: path("TENSOR_LIFETIME_JSON"),
            log: path("TENSOR_LIFETIME_LOG"),
            memory_every: memory_every(get("TENSOR_LIFETIME_MEMORY_EVERY").as_deref()),
            exact_max: exact_max(get("TENSOR_LIFETIME_EXACT_MAX").as_deref()),
            sample: sample(get("TENSOR_LIFETIME_SAMPLE").as_deref()),
            sample_seed: number64(&get, "TENSOR_LIFETIME_SAMPLE_SEED"),
            memory_limit: memory_limit(get("TENSOR_LIFETIME_MEMORY_LIMIT").as_deref()),
            rank,
        }
    }
}

/// The first of `vars` that is set, as a number (a value that is not one is said once and
/// the next variable is read).
fn number(get: &impl Fn(&str) -> Option<String>, vars: &[&str]) -> Option<u32> {
    vars.iter().find_map(|var| {
        let value = get(var)?;
        let value = value.trim();
        if value.is_empty() {
            return None;
        }
        value
            .parse()
            .map_err(|_| warn_env(var, value, "a non-negative number", "it is not used"))
            .ok()
    })
}

/// `{rank}` (the rank, or 0 when there is none) and `{pid}` in a path: one file per
/// process of a multi-process job.
pub(crate) fn expand_path(path: &str, rank: Option<u32>, pid: u32) -> String {
    path.replace("{rank}", &rank.unwrap_or(0).to_string())
        .replace("{pid}", &pid.to_string())
}

fn exact_max(value: Option<&str>) -> usize {
    const DEFAULT: usize = 16;
    match value.map(str::trim) {
        None | Some("") => DEFAULT,
        Some(v) => v.parse().unwrap_or_else(|_| {
            warn_env(
                "TENSOR_LIFETIME_EXACT_MAX",
                v,
                "a number of live records",
                "16 is used",
            );
            DEFAULT
        }),
    }
}

fn sample(value: Option<&str>) -> Sampling {
    match value.map(str::trim) {
        None | Some("") => Sampling::Exact,
        Some(v) => v.parse().unwrap_or_else(|e: crate::sample::SamplingError| {
            eprintln!("tensor-lifetime: TENSOR_LIFETIME_SAMPLE: {e}; tracking stays exact");
            Sampling::Exact
        }),
    }
}

/// `var` as a 64-bit number, if set (a value that is not one is said once and not used).
fn number64(get: &impl Fn(&str) -> Option<String>, var: &str) -> Option<u64> {
    let value = get(var)?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    value
        .parse()
        .map_err(|_| warn_env(var, value, "a non-negative number", "it is not used"))
        .ok()
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

fn memory_limit(value: Option<&str>) -> Option<u64> {
    let v = value.map(str::trim).filter(|v| !v.is_empty())?;
    tensor_lifetime_report::size::parse_size(v)
        .map_err(|e| {
            warn_env(
                "TENSOR_LIFETIME_MEMORY_LIMIT",
                v,
                &format!("a size such as 2GiB or 512 MiB ({e})"),
                "the device's own limit is used",
            )
        })
        .ok()
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
    fn memory_limit_is_a_size() {
        assert_eq!(cfg(&[]).memory_limit, None);
        let c = cfg(&[("TENSOR_LIFETIME_MEMORY_LIMIT", " 2GiB ")]);
        assert_eq!(c.memory_limit, Some(2 << 30));
        let c = cfg(&[("TENSOR_LIFETIME_MEMORY_LIMIT", "lots")]);
        assert_eq!(c.memory_limit, None);
    }

    #[test]
    fn rank_from_our_variables_then_the_launchers() {
        assert_eq!((cfg(&[]).rank.rank, cfg(&[]).rank.world_size), (None, None));
        let c = cfg(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1")]);
        assert_eq!((c.rank.rank, c.rank.world_size), (Some(3), Some(8)));
        let c = cfg(&[("LOCAL_RANK", "1")]);
        assert_eq!(c.rank.rank, Some(1));
        let c = cfg(&[
            ("TENSOR_LIFETIME_RANK", "5"),
            ("TENSOR_LIFETIME_WORLD_SIZE", "16"),
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
        ]);
        assert_eq!((c.rank.rank, c.rank.world_size), (Some(5), Some(16)));
        // A value that is not a number is not used; the next variable is.
        let c = cfg(&[("TENSOR_LIFETIME_RANK", "two"), ("RANK", "2")]);
        assert_eq!(c.rank.rank, Some(2));
    }

    #[test]
    fn paths_name_the_rank_and_the_process() {
        let c = cfg(&[
            ("RANK", "3"),
            ("TENSOR_LIFETIME_LOG", "run/{rank}.jsonl"),
            ("TENSOR_LIFETIME_JSON", "r-{rank}-{pid}.json"),
        ]);
        assert_eq!(c.log.unwrap(), PathBuf::from("run/3.jsonl"));
        let pid = std::process::id();
        assert_eq!(c.json.unwrap(), PathBuf::from(format!("r-3-{pid}.json")));
        assert_eq!(expand_path("x-{rank}.jsonl", None, 7), "x-0.jsonl");
    }

    #[test]
    fn sampling_is_exact_unless_an_interval_is_given() {
        assert_eq!(cfg(&[]).sample, Sampling::Exact);
        assert_eq!(cfg(&[]).sample_seed, None);
        let c = cfg(&[
            ("TENSOR_LIFETIME_SAMPLE", "512KiB"),
            ("TENSOR_LIFETIME_SAMPLE_SEED", "42"),
        ]);
        assert_eq!(c.sample, Sampling::Interval(512 * 1024));
        assert_eq!(c.sample_seed, Some(42));
        assert_eq!(
            cfg(&[("TENSOR_LIFETIME_SAMPLE", "exact")]).sample,
            Sampling::Exact
        );
        // Bad input is said (stderr) and tracking stays exact.
        let c = cfg(&[
            ("TENSOR_LIFETIME_SAMPLE", "sometimes"),
            ("TENSOR_LIFETIME_SAMPLE_SEED", "x"),
        ]);
        assert_eq!((c.sample, c.sample_seed), (Sampling::Exact, None));
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
