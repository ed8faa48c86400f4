//! `tensor-lifetime`: reports, HTML timelines, Perfetto traces and diffs of the event logs
//! that a run writes with `TENSOR_LIFETIME_LOG=<path>`.
//!
//! Every command reads logs as a stream (one line in memory at a time) and judges them
//! with the same [`tensor_lifetime_report::Analysis`] as the in-process report.
//!
//! Exit codes: 0 done; 1 `diff --fail-on-increase` found a site that grew; 2 bad input
//! (a usage error, a log that cannot be read, is corrupt, has a wrong format version or
//! is not a log) or any other error.
//!
//! The binary (`src/main.rs`) parses the command line into a [`Cli`] and hands it to
//! [`run`]; [`exit_code`] turns the outcome into the process's exit code. The fuzz target
//! `fuzz/fuzz_targets/cli_options.rs` parses arbitrary command lines with the same [`Cli`].

#![deny(unsafe_code)]

mod input;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use input::{judge, load_report, scan, LogPath, Progress};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tensor_lifetime_report::html::{self, HtmlOptions};
use tensor_lifetime_report::size::format_bytes;
use tensor_lifetime_report::size::group_digits as group;
use tensor_lifetime_report::timeline::{TimelineBuilder, DEFAULT_MAX_POINTS};
use tensor_lifetime_report::trace::TraceWriter;
use tensor_lifetime_report::{Analysis, Diff};

const EXAMPLES: &str = "\
Examples:
  # write an event log while the program runs
  TENSOR_LIFETIME_LOG=run.jsonl cargo run --release --example leaky_dataset

  tensor-lifetime report run.jsonl                  # findings as text
  tensor-lifetime report run.jsonl --format json    # the same as JSON
  tensor-lifetime html run.jsonl -o report.html     # timeline, findings, sites
  tensor-lifetime trace run.jsonl -o trace.json     # open in ui.perfetto.dev
  tensor-lifetime diff base.jsonl new.jsonl --fail-on-increase

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
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Judge a log: which tensors outlive their iteration, who holds them, how much.
    ///
    /// The same judgement as the report the program prints in-process.
    #[command(after_help = "Examples:\n  tensor-lifetime report run.jsonl\n  \
                            tensor-lifetime report run.jsonl --format json > report.json")]
    Report {
        /// The event log (`-` for standard input).
        log: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Write a self-contained HTML report of a log.
    ///
    /// One file, no network: live bytes over time stacked by site, the pools' used and
    /// reserved memory, the findings with holders and fix hints, and a detail per site.
    #[command(after_help = "Example:\n  tensor-lifetime html run.jsonl -o report.html")]
    Html {
        /// The event log (`-` for standard input).
        log: PathBuf,
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
        /// The event log (read twice: first to judge, then to write; not `-`).
        log: PathBuf,
        /// The trace file to write (`-` for standard output).
        #[arg(short, long)]
        output: PathBuf,
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
        /// The base run: an event log or a JSON report.
        base: PathBuf,
        /// The new run: an event log or a JSON report.
        new: PathBuf,
        /// Exit with 1 when a site keeps more survivors or bytes than in the base run.
        #[arg(long)]
        fail_on_increase: bool,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// Opens the output (`-`: standard output) buffered.
fn create(path: &Path) -> Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::new(io::stdout().lock())));
    }
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(BufWriter::with_capacity(256 * 1024, file)))
}

fn wrote(progress: &Progress, output: &Path, what: String) {
    progress.finish();
    if output.as_os_str() != "-" {
        let size = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "tensor-lifetime: wrote {} ({}) {what}",
            output.display(),
            format_bytes(size)
        );
    }
}

/// Runs a parsed command line; the exit code on success (1 when `diff --fail-on-increase`
/// found growth, 0 otherwise).
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Report { log, format } => report(&LogPath(log), format)?,
        Command::Html {
            log,
            output,
            top,
            max_points,
        } => html(&LogPath(log), &output, top, max_points)?,
        Command::Trace { log, output } => trace(&LogPath(log), &output)?,
        Command::Diff {
            base,
            new,
            fail_on_increase,
            format,
        } => return diff(&LogPath(base), &LogPath(new), fail_on_increase, format),
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

/// `report`: the judgement of a log, as text or JSON on standard output.
fn report(log: &LogPath, format: Format) -> Result<()> {
    let progress = Progress::for_logs(&[log], 1);
    let (report, _) = judge(log, &progress)?;
    progress.finish();
    let mut out = io::stdout().lock();
    match format {
        Format::Text => write!(out, "{report}")?,
        Format::Json => writeln!(out, "{}", report.to_json())?,
    }
    out.flush()?;
    Ok(())
}

/// `html`: the self-contained HTML report of a log.
fn html(log: &LogPath, output: &Path, top: u16, max_points: u32) -> Result<()> {
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
    let mut out = create(output)?;
    out.write_all(page.as_bytes())
        .and_then(|_| out.flush())
        .with_context(|| format!("cannot write {}", output.display()))?;
    drop(out);
    let leaks = report.leaks().count();
    wrote(
        &progress,
        output,
        format!(
            "from {} events: {} {}, {leaks} {}",
            group(scanned.events),
            report.findings.len(),
            if report.findings.len() == 1 {
                "finding"
            } else {
                "findings"
            },
            if leaks == 1 { "leak" } else { "leaks" }
        ),
    );
    Ok(())
}

/// `trace`: a Chrome Trace Event file of a log (read twice: to judge, then to write).
fn trace(log: &LogPath, output: &Path) -> Result<()> {
    if log.is_stdin() {
        bail!("trace reads the log twice (to judge, then to write): give a file, not `-`");
    }
    let progress = Progress::for_logs(&[log], 2);
    let (report, _) = judge(log, &progress)?;
    let out = create(output)?;
    let mut writer = TraceWriter::new(out, &report.findings)
        .with_context(|| format!("cannot write {}", output.display()))?;
    scan(log, &progress, "writing", |e| {
        writer
            .apply(e)
            .with_context(|| format!("cannot write {}", output.display()))
    })?;
    let written = writer.written();
    writer
        .finish()
        .with_context(|| format!("cannot write {}", output.display()))?;
    wrote(
        &progress,
        output,
        format!("with {} trace events", group(written)),
    );
    Ok(())
}

/// `diff`: two runs compared per site; exit code 1 for growth with `fail_on_increase`.
fn diff(base: &LogPath, new: &LogPath, fail_on_increase: bool, format: Format) -> Result<ExitCode> {
    if base.is_stdin() && new.is_stdin() {
        bail!("BASE and NEW cannot both be standard input");
    }
    let progress = Progress::for_logs(&[base, new], 1);
    let base_report = load_report(base, &progress)?;
    let new_report = load_report(new, &progress)?;
    progress.finish();
    let diff = Diff::new(&base_report, &new_report);
    let mut out = io::stdout().lock();
    match format {
        Format::Text => write!(out, "{diff}")?,
        Format::Json => writeln!(out, "{}", diff.to_json())?,
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
