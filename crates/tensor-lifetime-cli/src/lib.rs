//! `tensor-lifetime`: reports, HTML timelines, Perfetto traces and diffs of the event logs
//! that a run writes with `TENSOR_LIFETIME_LOG=<path>`.
//!
//! Every command reads logs as a stream (one event in memory at a time), in either format
//! (JSON lines or binary, told apart by their first byte), and judges them with the same
//! [`tensor_lifetime_report::Analysis`] as the in-process report. `cat` prints a log as
//! JSON lines.
//!
//! Exit codes: 0 done; 1 `diff --fail-on-increase` found a site that grew; 2 bad input
//! (a usage error, a log that cannot be read, is corrupt, has a wrong format version or
//! is not a log) or any other error.
//!
//! The binary (`src/main.rs`) parses the command line into a [`Cli`] and hands it to
//! [`run`]; [`exit_code`] turns the outcome into the process's exit code. The fuzz target
//! `fuzz/fuzz_targets/cli_options.rs` parses arbitrary command lines with the same [`Cli`].

#![deny(unsafe_code)]

mod ci;
mod input;
mod output;
mod pprof;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use input::{expand, judge, judge_ranks, load_report, scan, LogPath, Progress};
use output::{create, write_output, wrote};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tensor_lifetime_report::html::{self, HtmlOptions};
use tensor_lifetime_report::markdown;
use tensor_lifetime_report::ranks::MergedReport;
use tensor_lifetime_report::size::group_digits as group;
use tensor_lifetime_report::timeline::{TimelineBuilder, DEFAULT_MAX_POINTS};
use tensor_lifetime_report::trace::TraceWriter;
use tensor_lifetime_report::{Analysis, Diff, Report};

const EXAMPLES: &str = "\
Examples:
  # write an event log while the program runs (run.tlog, or any name not ending in
  # .jsonl: the compact binary log; run.jsonl: JSON lines)
  TENSOR_LIFETIME_LOG=run.jsonl cargo run --release --example leaky_dataset

  tensor-lifetime report run.jsonl                  # findings as text
  tensor-lifetime report run.jsonl --format json    # the same as JSON
  tensor-lifetime html run.jsonl -o report.html     # timeline, findings, sites
  tensor-lifetime trace run.jsonl -o trace.json     # open in ui.perfetto.dev
  tensor-lifetime pprof run.jsonl -o live.pb.gz     # live tensors for go tool pprof
  tensor-lifetime diff base.jsonl new.jsonl --fail-on-increase
  tensor-lifetime cat run.tlog > run.jsonl          # a binary log as JSON lines

Exit codes: 0 done, 1 `diff --fail-on-increase` found growth, 2 bad input or error.";

// The command line. (A plain comment: the doc comment below is the `--help` text.)
/// Tensor lifetime analyzer for candle: reads the event log of a tracked run
#[derive(Debug, Parser)]
#[command(name = "tensor-lifetime", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    /// A Markdown table, the increases first (for `$GITHUB_STEP_SUMMARY` or a PR comment).
    Markdown,
}

/// `report`'s formats: besides text and JSON, the two that CI systems read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReportFormat {
    Text,
    Json,
    /// SARIF 2.1.0, for GitHub code scanning and SARIF viewers.
    Sarif,
    /// GitHub Actions workflow commands (`::error file=...::...`), one per finding.
    Github,
    /// A Markdown table of the findings (for `$GITHUB_STEP_SUMMARY` or a PR comment);
    /// sites link to their lines when GITHUB_SERVER_URL, GITHUB_REPOSITORY and
    /// GITHUB_SHA are set.
    Markdown,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Judge a log: which tensors outlive their iteration, who holds them, how much.
    ///
    /// The same judgement as the report the program prints in-process.
    #[command(after_help = "Examples:\n  tensor-lifetime report run.jsonl\n  \
                            tensor-lifetime report run.jsonl --format json > report.json\n  \
                            tensor-lifetime report logs/ --format sarif > tensor-lifetime.sarif\n  \
                            tensor-lifetime report run.jsonl --format markdown >> \"$GITHUB_STEP_SUMMARY\"\n  \
                            tensor-lifetime report rank-0.jsonl rank-1.jsonl --format github")]
    Report {
        /// The event log (`-` for standard input), several logs, or a directory of logs
        /// (`*.jsonl` and binary): several are merged (one per rank of a job).
        #[arg(required = true, num_args = 1..)]
        logs: Vec<PathBuf>,
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// Write a self-contained HTML report of a log.
    ///
    /// One file, no network: live bytes over time stacked by site, the pools' used and
    /// reserved memory, the findings with holders and fix hints, and a detail per site.
    #[command(after_help = "Example:\n  tensor-lifetime html run.jsonl -o report.html")]
    Html {
        /// The event log (`-` for standard input), several logs, or a directory of logs
        /// (`*.jsonl` and binary): several are merged (one per rank of a job).
        #[arg(required = true, num_args = 1..)]
        logs: Vec<PathBuf>,
        /// The HTML file to write (`-` for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// Sites stacked on their own in the timeline (the rest are "other"; at most 9).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=9))]
        top: u16,
        /// Points kept in the timeline before neighbours are merged (peaks are kept).
        #[arg(long, default_value_t = DEFAULT_MAX_POINTS as u32,
              value_parser = clap::value_parser!(u32).range(16..=100_000))]
        max_points: u32,
    },
    /// Write a Chrome Trace Event file of a log, for ui.perfetto.dev.
    ///
    /// Opens in ui.perfetto.dev and chrome://tracing: counters for live bytes and the
    /// pools, a slice per loop iteration, an instant per finding.
    #[command(
        after_help = "Example:\n  tensor-lifetime trace run.jsonl -o trace.json\n  \
                            then open trace.json in https://ui.perfetto.dev"
    )]
    Trace {
        /// The event log (read twice: first to judge, then to write; not `-`), several
        /// logs or a directory of logs: one process per rank (pid = rank).
        #[arg(required = true, num_args = 1..)]
        logs: Vec<PathBuf>,
        /// The trace file to write (`-` for standard output).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Print a log's events as JSON lines, one per event (a binary log's as the JSON-lines
    /// log of the same run).
    ///
    /// Reads either format; writes the lines of the JSON-lines format
    /// (`docs/event-log.md`), so scripts that read those read a binary log too.
    #[command(
        after_help = "Examples:\n  tensor-lifetime cat run.tlog > run.jsonl\n  \
                            tensor-lifetime cat run.tlog | grep '\"event\":\"loop_end\"'"
    )]
    Cat {
        /// The event log (`-` for standard input), in either format.
        log: PathBuf,
    },
    /// Write the live tensors of a log as a pprof profile (gzipped protocol buffer).
    ///
    /// Sample types inuse_space and inuse_objects (the live tensors, each storage once;
    /// the default) and alloc_space and alloc_objects (every tensor born until then);
    /// one location per #[track]ed function of the call path, the creation site as the
    /// leaf; labels role, device, holder, site and variable.
    #[command(
        after_help = "Examples:\n  tensor-lifetime pprof run.jsonl -o live.pb.gz\n  \
                            tensor-lifetime pprof run.jsonl --at peak -o peak.pb.gz\n  \
                            tensor-lifetime pprof run.jsonl --at-iteration 3 -o it3.pb.gz\n  \
                            then: go tool pprof -top live.pb.gz, or go tool pprof -http=: live.pb.gz"
    )]
    Pprof {
        /// The event log (`-` for standard input, except with `--at peak`).
        log: PathBuf,
        /// The profile to write (`-` for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// The moment: the end of the log, or when the most bytes were live.
        #[arg(long, value_enum, default_value_t = pprof::Moment::End)]
        at: pprof::Moment,
        /// The end of this iteration (from 0, as reports print it) of the outermost loop.
        #[arg(long, value_name = "N", conflicts_with = "at")]
        at_iteration: Option<u64>,
    },
    /// Compare two runs per site: survivors and bytes before and after.
    ///
    /// A site grew when the new run keeps more survivors or bytes there; with
    /// `--fail-on-increase` that exits 1 (a CI guard).
    #[command(
        after_help = "Examples:\n  tensor-lifetime diff main.jsonl branch.jsonl\n  \
                            tensor-lifetime diff base-report.json new.jsonl --fail-on-increase\n\n\
                            BASE and NEW are event logs or JSON reports (`report --format json`)."
    )]
    Diff {
        /// The base run: an event log, a JSON report, or a directory of ranks' logs.
        base: PathBuf,
        /// The new run: an event log, a JSON report, or a directory of ranks' logs.
        new: PathBuf,
        /// Exit with 1 when a site keeps more survivors or bytes than in the base run.
        #[arg(long)]
        fail_on_increase: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// `cat`: the events of `log` as JSON lines on standard output.
fn cat(log: &LogPath) -> Result<()> {
    let progress = Progress::for_logs(&[log], 1);
    let mut out = BufWriter::with_capacity(256 * 1024, io::stdout().lock());
    scan(log, &progress, "reading", |e| {
        e.write_line(&mut out)
            .context("cannot write to standard output")
    })?;
    progress.finish();
    out.flush().context("cannot write to standard output")?;
    Ok(())
}

/// Runs a parsed command line; the exit code on success (1 when `diff --fail-on-increase`
/// found growth, 0 otherwise).
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Report { logs, format } => report(&expand(&logs)?, format)?,
        Command::Html {
            logs,
            output,
            top,
            max_points,
        } => html(&expand(&logs)?, &output, top, max_points)?,
        Command::Trace { logs, output } => trace(&expand(&logs)?, &output)?,
        Command::Pprof {
            log,
            output,
            at,
            at_iteration,
        } => pprof::pprof(&LogPath(log), &output, at, at_iteration)?,
        Command::Diff {
            base,
            new,
            fail_on_increase,
            format,
        } => return diff(&LogPath(base), &LogPath(new), fail_on_increase, format),
        Command::Cat { log } => cat(&LogPath(log))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The process's exit code for what [`run`] returned: an error is printed on standard
/// error as `error: ...` and exits 2; a reader that went away (`| head`) is no error.
pub fn exit_code(outcome: Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        // The reader went away (`| head`): nothing more to say.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `report`: the judgement of a log, or of several ranks' logs merged, on standard
/// output.
fn report(logs: &[LogPath], format: ReportFormat) -> Result<()> {
    let progress = Progress::for_logs(&logs.iter().collect::<Vec<_>>(), 1);
    let mut out = io::stdout().lock();
    if let [log] = logs {
        let (report, _) = judge(log, &progress)?;
        progress.finish();
        match format {
            ReportFormat::Text => write!(out, "{report}")?,
            ReportFormat::Json => writeln!(out, "{}", report.to_json())?,
            ReportFormat::Markdown => write!(out, "{}", markdown::report(&report, &ci::links()))?,
            ReportFormat::Sarif | ReportFormat::Github => {
                let sarif = format == ReportFormat::Sarif;
                let findings = report.findings.iter().map(|f| (f, f.to_string()));
                ci::write_annotations(&mut out, sarif, findings, report.estimate_note())?;
            }
        }
    } else {
        let merged = judge_ranks(logs, &progress, |_, _| {}, |_, _| {})?;
        progress.finish();
        match format {
            ReportFormat::Text => write!(out, "{merged}")?,
            ReportFormat::Json => writeln!(out, "{}", merged.to_json())?,
            ReportFormat::Markdown => write!(
                out,
                "{}",
                markdown::report(&merged.combined(), &ci::links())
            )?,
            ReportFormat::Sarif | ReportFormat::Github => {
                let sarif = format == ReportFormat::Sarif;
                let findings = merged
                    .findings
                    .iter()
                    .map(|f| (&f.finding, f.text(merged.world_size)));
                let note = merged.combined().estimate_note();
                ci::write_annotations(&mut out, sarif, findings, note)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// `html`: the self-contained HTML report of a log, or of several ranks' logs.
fn html(logs: &[LogPath], output: &Path, top: u16, max_points: u32) -> Result<()> {
    let [log] = logs else {
        return html_ranks(logs, output, top, max_points);
    };
    let progress = Progress::for_logs(&[log], 1);
    let mut analysis = Analysis::default();
    let mut timeline = TimelineBuilder::new(max_points as usize);
    let scanned = scan(log, &progress, "reading", |e| {
        analysis.apply(e);
        timeline.apply(e);
        Ok(())
    })?;
    let report = analysis.report();
    let title = match log.0.file_name() {
        Some(name) if !log.is_stdin() => {
            format!("tensor-lifetime: {}", name.to_string_lossy())
        }
        _ => "tensor-lifetime report".to_string(),
    };
    let page = html::render(
        &timeline.finish(),
        &report,
        &HtmlOptions {
            title,
            top_sites: top as usize,
            ..HtmlOptions::default()
        },
    );
    write_output(output, page.as_bytes())?;
    wrote(
        &progress,
        output,
        format!(
            "from {} events: {}",
            group(scanned.events),
            counts(report.findings.len(), report.leaks().count())
        ),
    );
    Ok(())
}

/// `3 findings, 1 leak`.
fn counts(findings: usize, leaks: usize) -> String {
    format!(
        "{findings} {}, {leaks} {}",
        if findings == 1 { "finding" } else { "findings" },
        if leaks == 1 { "leak" } else { "leaks" }
    )
}

/// `html` of several ranks: the merged findings, every rank's live bytes, and the timeline
/// of the rank with the most leaks (the only timeline kept while the logs are read).
fn html_ranks(logs: &[LogPath], output: &Path, top: u16, max_points: u32) -> Result<()> {
    use std::cell::RefCell;
    let progress = Progress::for_logs(&logs.iter().collect::<Vec<_>>(), 1);
    let current = RefCell::new((usize::MAX, TimelineBuilder::new(max_points as usize)));
    // The kept timeline: its log's index, its leaks, the timeline.
    let mut kept: Option<(usize, usize, tensor_lifetime_report::Timeline)> = None;
    let mut events = 0u64;
    let merged = judge_ranks(
        logs,
        &progress,
        |i, e| {
            let mut c = current.borrow_mut();
            if c.0 != i {
                *c = (i, TimelineBuilder::new(max_points as usize));
            }
            c.1.apply(e);
            events += 1;
        },
        |i, report: &Report| {
            let leaks = report.leaks().count();
            if kept.as_ref().is_none_or(|k| leaks > k.1) {
                let (_, builder) = current.replace((usize::MAX, TimelineBuilder::new(16)));
                kept = Some((i, leaks, builder.finish()));
            }
        },
    )?;
    let (index, _, timeline) = kept.expect("at least one log");
    let shown = merged
        .ranks
        .iter()
        .find(|r| r.name == logs[index].name())
        .and_then(|r| r.rank)
        .unwrap_or(0);
    let page = html::render_ranks(
        &timeline,
        &merged,
        shown,
        &HtmlOptions {
            title: format!("tensor-lifetime: {} ranks", merged.ranks.len()),
            top_sites: top as usize,
            ..HtmlOptions::default()
        },
    );
    write_output(output, page.as_bytes())?;
    wrote(
        &progress,
        output,
        format!(
            "from {} logs, {} events: {}",
            logs.len(),
            group(events),
            counts(merged.findings.len(), merged.leaks().count())
        ),
    );
    Ok(())
}

/// `trace`: a Chrome Trace Event file of a log (read twice: to judge, then to write).
fn trace(logs: &[LogPath], output: &Path) -> Result<()> {
    let [log] = logs else {
        return trace_ranks(logs, output);
    };
    if log.is_stdin() {
        bail!("trace reads the log twice (to judge, then to write): give a file, not `-`");
    }
    let progress = Progress::for_logs(&[log], 2);
    let (report, _) = judge(log, &progress)?;
    let out = create(output)?;
    let mut writer = TraceWriter::new(out, &report.findings)
        .with_context(|| format!("cannot write {}", output.display()))?;
    write_trace_events(&mut writer, log, &progress, output)?;
    let written = finish_trace(writer, output)?;
    wrote(
        &progress,
        output,
        format!("with {} trace events", group(written)),
    );
    Ok(())
}

/// Writes the events of `log` into the trace.
fn write_trace_events(
    writer: &mut TraceWriter<Box<dyn Write>>,
    log: &LogPath,
    progress: &Progress,
    output: &Path,
) -> Result<()> {
    scan(log, progress, "writing", |e| {
        writer
            .apply(e)
            .with_context(|| format!("cannot write {}", output.display()))
    })?;
    Ok(())
}

/// Ends the trace; returns how many trace events were written.
fn finish_trace(writer: TraceWriter<Box<dyn Write>>, output: &Path) -> Result<u64> {
    let written = writer.written();
    writer
        .finish()
        .with_context(|| format!("cannot write {}", output.display()))?;
    Ok(written)
}

/// `trace` of several ranks: one process per rank (pid = rank), each rank's findings as
/// its instants. Every log is judged first (one at a time), then written.
fn trace_ranks(logs: &[LogPath], output: &Path) -> Result<()> {
    let progress = Progress::for_logs(&logs.iter().collect::<Vec<_>>(), 2);
    let merged = judge_ranks(logs, &progress, |_, _| {}, |_, _| {})?;
    let out = create(output)?;
    let mut writer =
        TraceWriter::new(out, &[]).with_context(|| format!("cannot write {}", output.display()))?;
    for log in logs {
        let rank = merged
            .ranks
            .iter()
            .find(|r| r.name == log.name())
            .expect("every log is merged");
        let number = rank.rank.unwrap_or(0);
        let name = match &rank.host {
            Some(host) => format!("rank {number} ({host}, pid {})", rank.pid),
            None => format!("rank {number} (pid {})", rank.pid),
        };
        writer
            .begin_process(number, name, &rank.report.findings)
            .with_context(|| format!("cannot write {}", output.display()))?;
        write_trace_events(&mut writer, log, &progress, output)?;
    }
    let written = finish_trace(writer, output)?;
    wrote(
        &progress,
        output,
        format!(
            "with {} trace events from {} ranks",
            group(written),
            logs.len()
        ),
    );
    Ok(())
}

/// A side of `diff`: a log, a JSON report, or a directory of ranks' logs merged.
fn load_side(path: &LogPath, progress: &Progress) -> Result<Report> {
    if path.0.is_dir() {
        let logs = expand(std::slice::from_ref(&path.0))?;
        if logs.len() > 1 {
            let merged: MergedReport = judge_ranks(&logs, progress, |_, _| {}, |_, _| {})?;
            return Ok(merged.combined());
        }
        return load_report(&logs[0], progress);
    }
    load_report(path, progress)
}

/// `diff`: two runs compared per site; exit code 1 for growth with `fail_on_increase`.
fn diff(base: &LogPath, new: &LogPath, fail_on_increase: bool, format: Format) -> Result<ExitCode> {
    if base.is_stdin() && new.is_stdin() {
        bail!("BASE and NEW cannot both be standard input");
    }
    let progress = Progress::for_logs(&[base, new], 1);
    let base_report = load_side(base, &progress)?;
    let new_report = load_side(new, &progress)?;
    progress.finish();
    let diff = Diff::new(&base_report, &new_report);
    let mut out = io::stdout().lock();
    match format {
        Format::Text => write!(out, "{diff}")?,
        Format::Json => writeln!(out, "{}", diff.to_json())?,
        Format::Markdown => write!(out, "{}", markdown::diff(&diff, &ci::links()))?,
    }
    out.flush()?;
    if fail_on_increase && diff.grew() {
        let grown: Vec<String> = diff
            .grown()
            .map(|s| format!("{} `{}`", s.location(), s.label))
            .collect();
        eprintln!(
            "tensor-lifetime: {} grew from {} to {}: {}",
            if grown.len() == 1 { "a site" } else { "sites" },
            base.name(),
            new.name(),
            grown.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
