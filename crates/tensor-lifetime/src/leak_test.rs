//! Leak tests: run code under its own session and fail on leaks.
//!
//! `cargo test` runs tests on parallel threads of one process. Each leak test opens a
//! session on its thread; tensors and loops created on that thread belong to it (and
//! tensors from loop-less helper threads to the primary loop's session), so each test
//! judges only what it created.

use crate::tracker::{self, LiveTensor, SessionMark};
use std::fmt::Write as _;
use tensor_lifetime_report::size::format_bytes;
use tensor_lifetime_report::Report;

/// Options of a leak test (`#[leak_test(...)]` or [`check_leaks`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct LeakTestOptions {
    /// Labels, files (or path suffixes) or `file:line` of sites whose leaks are accepted.
    pub allow: &'static [&'static str],
    /// Leaked bytes tolerated in all (0: none).
    pub max_leaked_bytes: u64,
    /// Warm-up iterations (default 1).
    pub warmup: Option<u64>,
    /// Growth events needed for a leak (default 3).
    pub window: Option<u64>,
}

/// What a leak test found.
#[derive(Debug, Clone)]
pub struct LeakTestOutcome {
    /// The session's report.
    pub report: Report,
    /// Tensors born in the test still alive after it returned (allowed sites excluded).
    pub alive: Vec<LiveTensor>,
    /// Bytes of the leaks and of the tensors still alive, not allowed.
    pub leaked_bytes: u64,
    pub options: LeakTestOptions,
}

impl LeakTestOutcome {
    /// Whether the test fails.
    pub fn failed(&self) -> bool {
        let leaks = self.report.has_leaks() || !self.alive.is_empty();
        leaks
            && (self.options.max_leaked_bytes == 0
                || self.leaked_bytes > self.options.max_leaked_bytes)
    }

    /// The failure message: the report and the tensors still alive. It starts with the
    /// first leaking site as `file:line:col: ` so that editors and CI logs link to it.
    pub fn message(&self, name: &str) -> String {
        let site = self
            .report
            .leaks()
            .next()
            .map(|f| (f.site.file.as_str(), f.site.line, f.site.column))
            .or_else(|| {
                self.alive
                    .first()
                    .map(|t| (t.site.file, t.site.line, t.site.column))
            });
        let at = site.map_or_else(String::new, |(file, line, col)| {
            format!("{file}:{line}:{col}: ")
        });
        let mut out = format!(
            "{at}leak test `{name}` failed: {} leaked (max_leaked_bytes {})\n",
            format_bytes(self.leaked_bytes),
            format_bytes(self.options.max_leaked_bytes)
        );
        if self.report.has_leaks() {
            let _ = write!(out, "{}", self.report);
        }
        if !self.alive.is_empty() {
            let _ = writeln!(
                out,
                "{} tensors born in the test are still alive after it returned:",
                self.alive.len()
            );
            for t in self.alive.iter().take(20) {
                let _ = write!(
                    out,
                    "ALIVE    {}  `{}` {}, refcount {}",
                    t.site.location(),
                    t.site.label,
                    format_bytes(t.storage_bytes),
                    t.refcount
                );
                if let Some(s) = t.store {
                    let _ = write!(out, " (stored into `{}` at {})", s.label, s.location());
                }
                out.push('\n');
            }
        }
        out
    }
}

/// Whether an `allow` entry names a site: its label, its file (or a suffix of its path),
/// or `file:line`.
fn allow_matches(allow: &str, file: &str, line: u32, label: &str) -> bool {
    allow == label
        || file.ends_with(allow)
        || allow
            .rsplit_once(':')
            .is_some_and(|(f, l)| f == file && l.parse() == Ok(line))
}

fn allowed(allow: &[&str], file: &str, line: u32, label: &str) -> bool {
    allow.iter().any(|a| allow_matches(a, file, line, label))
}

/// Restores the thread's previous session on every path out (panics included).
struct SessionGuard(SessionMark);

impl Drop for SessionGuard {
    fn drop(&mut self) {
        tracker::set_session(self.0);
    }
}

/// Runs `f` under a new session and returns its value and what the session leaked.
///
/// Returns `Err` when the tracker cannot run (disabled, or it refused to start).
pub fn check_leaks<R>(
    options: LeakTestOptions,
    f: impl FnOnce() -> R,
) -> crate::Result<(R, LeakTestOutcome)> {
    judge_session(options, false, f)
}

/// [`check_leaks`] with the session's tensors sampled as the tracker samples outside
/// leak tests (the sampled mode's interval and seed; exact when it does not sample), and
/// the report marked as estimated: the seeded detection tests of the sampled mode judge
/// the reliability matrix's loops with it. Leak tests never sample.
#[doc(hidden)]
pub fn check_leaks_sampled<R>(
    options: LeakTestOptions,
    f: impl FnOnce() -> R,
) -> crate::Result<(R, LeakTestOutcome)> {
    let (value, mut outcome) = judge_session(options, true, f)?;
    if let Some(interval) = crate::sample::interval() {
        outcome.report.mark_estimated(interval);
    }
    Ok((value, outcome))
}

/// Runs `f` under a new session (`sampled`: its probes sampled, [`SessionMark`]) and
/// judges it.
fn judge_session<R>(
    options: LeakTestOptions,
    sampled: bool,
    f: impl FnOnce() -> R,
) -> crate::Result<(R, LeakTestOutcome)> {
    let Some(t) = tracker::active() else {
        return Err(match tracker::failure() {
            Some(why) => crate::Error::TrackerUnavailable(why),
            None => crate::Error::TrackingDisabled,
        });
    };
    let session = t.new_session();
    t.set_session_judgement(session, options.warmup, options.window);
    let value = {
        let _guard = SessionGuard(tracker::set_session(SessionMark {
            session,
            watermark: crate::weak::serial_watermark(),
            sampled,
        }));
        f()
    };
    let alive: Vec<LiveTensor> = t
        .live(Some(session))
        .into_iter()
        .filter(|l| !allowed(options.allow, l.site.file, l.site.line, l.site.label))
        .collect();
    let mut report = t.report(Some(session));
    report
        .findings
        .retain(|f| !allowed(options.allow, &f.site.file, f.site.line, &f.site.label));
    // Tensors still alive from a site that already has a leak finding are in that
    // finding's bytes: count them once.
    let leak_sites: Vec<(&str, u32, &str)> = report
        .leaks()
        .map(|f| (f.site.file.as_str(), f.site.line, f.site.label.as_str()))
        .collect();
    let leaked_bytes = report.leaks().map(|f| f.bytes).sum::<u64>()
        + alive
            .iter()
            .filter(|l| !leak_sites.contains(&(l.site.file, l.site.line, l.site.label)))
            .map(|l| l.storage_bytes)
            .sum::<u64>();
    Ok((
        value,
        LeakTestOutcome {
            report,
            alive,
            leaked_bytes,
            options,
        },
    ))
}

/// Runs `f` and panics with the leak report if it leaked tensors: the function form of
/// `#[leak_test]`.
///
/// ```should_panic
/// use candle_core::{Device, Tensor};
/// static CACHE: std::sync::Mutex<Vec<Tensor>> = std::sync::Mutex::new(Vec::new());
/// tensor_lifetime::assert_no_leaks(|| {
///     let t = Tensor::ones(8, candle_core::DType::F32, &Device::Cpu).unwrap();
///     tensor_lifetime::tag!(t);
///     CACHE.lock().unwrap().push(t);
/// });
/// ```
#[track_caller]
pub fn assert_no_leaks<R>(f: impl FnOnce() -> R) -> R {
    run_leak_test("assert_no_leaks", LeakTestOptions::default(), f)
}

/// What `#[leak_test]` expands to: runs the body, panics with the report on a leak.
#[track_caller]
pub(crate) fn run_leak_test<R>(name: &str, options: LeakTestOptions, f: impl FnOnce() -> R) -> R {
    match check_leaks(options, f) {
        Ok((value, outcome)) => {
            if outcome.failed() {
                panic!("{}", outcome.message(name));
            }
            value
        }
        Err(e) => panic!("leak test `{name}` cannot run: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::allow_matches;

    #[test]
    fn allow_entries_name_labels_files_and_lines() {
        let (file, line, label) = ("src/train.rs", 42, "cache");
        for yes in ["cache", "src/train.rs", "train.rs", "src/train.rs:42"] {
            assert!(allow_matches(yes, file, line, label), "{yes}");
        }
        for no in ["cach", "src/train.rs:41", "other.rs", "train.rs:x", "ain"] {
            assert!(!allow_matches(no, file, line, label), "{no}");
        }
    }
}
