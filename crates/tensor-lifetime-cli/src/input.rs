//! Reading event logs: streaming, with a progress bar on a terminal, a warning for a log
//! cut off mid-line and errors that name the file and the line.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};
use tensor_lifetime_report::event::{binary, EventReader, LogFormat, ReadOutcome};
use tensor_lifetime_report::ranks::{Merge, MergedReport, RankCollector};
use tensor_lifetime_report::{Analysis, Event, Report};

/// Events between progress-bar updates.
const PROGRESS_EVERY: u64 = 16 * 1024;

/// A log named on the command line: a file, or `-` for standard input.
#[derive(Debug, Clone)]
pub struct LogPath(pub PathBuf);

impl LogPath {
    pub fn is_stdin(&self) -> bool {
        self.0.as_os_str() == "-"
    }

    /// How the log is named in messages.
    pub fn name(&self) -> String {
        if self.is_stdin() {
            "<stdin>".to_string()
        } else {
            self.0.display().to_string()
        }
    }

    fn open(&self) -> Result<(Box<dyn BufRead>, Option<u64>)> {
        if self.is_stdin() {
            return Ok((Box::new(BufReader::new(io::stdin())), None));
        }
        let file = File::open(&self.0).with_context(|| format!("cannot open {}", self.name()))?;
        let len = file.metadata().ok().map(|m| m.len());
        Ok((Box::new(BufReader::with_capacity(256 * 1024, file)), len))
    }
}

/// A progress bar on standard error when it is a terminal, nothing otherwise.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// `total`: bytes to read in all (all passes), when known.
    pub fn new(total: Option<u64>) -> Self {
        if !io::stderr().is_terminal() {
            return Progress {
                bar: ProgressBar::hidden(),
            };
        }
        let bar = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        let style = ProgressStyle::with_template(
            "{msg:>12} [{bar:40}] {binary_bytes}/{binary_total_bytes} ({eta})",
        )
        .expect("a valid template")
        .progress_chars("=> ");
        bar.set_style(style);
        Progress { bar }
    }

    /// A bar over the given logs' sizes times `passes`.
    pub fn for_logs(logs: &[&LogPath], passes: u64) -> Self {
        let mut total = 0;
        for log in logs {
            match std::fs::metadata(&log.0) {
                Ok(m) if !log.is_stdin() => total += m.len() * passes,
                _ => return Progress::new(None),
            }
        }
        Progress::new(Some(total))
    }

    /// Prints a line to standard error without tearing the bar.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// What a pass over a log saw.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scanned {
    pub events: u64,
    /// The line cut off at the end, if any.
    pub truncated_at: Option<u64>,
}

/// Reads `log` once, calling `f` with each event.
pub fn scan(
    log: &LogPath,
    progress: &Progress,
    message: &'static str,
    mut f: impl FnMut(&Event) -> Result<()>,
) -> Result<Scanned> {
    let (input, _) = log.open()?;
    progress.bar.set_message(message);
    let start = progress.bar.position();
    let mut reader = EventReader::new(input);
    let mut scanned = Scanned::default();
    while let Some(outcome) = reader.next() {
        match outcome.with_context(|| log.name())? {
            ReadOutcome::Event { event, .. } => {
                scanned.events += 1;
                f(&event)?;
                if scanned.events % PROGRESS_EVERY == 0 {
                    progress.bar.set_position(start + reader.bytes_read());
                }
            }
            ReadOutcome::Truncated { line, .. } => {
                scanned.truncated_at = Some(line);
                let message = if reader.format() == Some(LogFormat::Binary) {
                    format!(
                        "event {line} is cut off at byte {} (a run that stopped \
                         mid-write); read up to event {}",
                        reader.bytes_read(),
                        line - 1
                    )
                } else {
                    format!(
                        "line {line} is cut off (a run that stopped mid-write); \
                         read up to line {}",
                        line - 1
                    )
                };
                progress.println(&format!("warning: {}: {message}", log.name()));
            }
        }
    }
    progress.bar.set_position(start + reader.bytes_read());
    Ok(scanned)
}

/// The judgement of a whole log, as the in-process report makes it.
pub fn judge(log: &LogPath, progress: &Progress) -> Result<(Report, Scanned)> {
    let mut analysis = Analysis::default();
    let scanned = scan(log, progress, "judging", |e| {
        analysis.apply(e);
        Ok(())
    })?;
    Ok((analysis.report(), scanned))
}

/// A report from an event log, or from a JSON report saved by `report --format json`
/// (so a CI can keep the base run's report instead of its log).
pub fn load_report(log: &LogPath, progress: &Progress) -> Result<Report> {
    if !log.is_stdin() && looks_like_json_report(&log.0)? {
        let mut text = String::new();
        File::open(&log.0)
            .and_then(|mut f| f.read_to_string(&mut text))
            .with_context(|| format!("cannot read {}", log.name()))?;
        return match serde_json::from_str::<Report>(&text) {
            Ok(r) => Ok(r),
            Err(e) => bail!(
                "{}: not an event log, nor a JSON report of `tensor-lifetime report --format json`: \
                 line {}: {e}",
                log.name(),
                e.line()
            ),
        };
    }
    Ok(judge(log, progress)?.0)
}

/// A JSON report starts with `{` on a line of its own (pretty JSON); a log's first line is
/// a whole header object.
fn looks_like_json_report(path: &Path) -> Result<bool> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut first = String::new();
    BufReader::new(file.take(4096)).read_line(&mut first).ok();
    Ok(first.trim() == "{")
}

/// The logs named on the command line: each path a log (or `-`), or a directory whose
/// logs are its `*.jsonl` files and its files that start as a binary log does (in name
/// order).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<LogPath>> {
    let mut logs = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read the directory {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file() && (p.extension().is_some_and(|x| x == "jsonl") || is_binary_log(p))
                })
                .collect();
            if found.is_empty() {
                bail!(
                    "{}: a directory with no *.jsonl or binary log",
                    path.display()
                );
            }
            found.sort();
            logs.extend(found.into_iter().map(LogPath));
        } else {
            logs.push(LogPath(path.clone()));
        }
    }
    if logs.len() > 1 && logs.iter().any(LogPath::is_stdin) {
        bail!("standard input (`-`) cannot be merged with other logs");
    }
    Ok(logs)
}

/// Whether the file at `path` starts with the binary log's magic.
fn is_binary_log(path: &Path) -> bool {
    let mut magic = [0u8; binary::MAGIC.len()];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == binary::MAGIC)
}

/// The logs of several ranks, each judged on its own (one log in memory at a time), then
/// merged ([`tensor_lifetime_report::ranks`]). `each` sees every log's events too.
pub fn judge_ranks(
    logs: &[LogPath],
    progress: &Progress,
    mut each: impl FnMut(usize, &Event),
    mut done: impl FnMut(usize, &Report),
) -> Result<MergedReport> {
    let mut merge = Merge::default();
    for (i, log) in logs.iter().enumerate() {
        let mut analysis = Analysis::default();
        let mut collector = RankCollector::default();
        scan(log, progress, "judging", |e| {
            analysis.apply(e);
            collector.apply(e);
            each(i, e);
            Ok(())
        })?;
        let report = analysis.report();
        done(i, &report);
        merge.add(collector.finish(log.name(), report));
    }
    merge.finish().map_err(anyhow::Error::msg)
}
