//! `pprof`: the live tensors of a log, at its end, its peak or an iteration end, as a
//! gzipped pprof profile ([`tensor_lifetime_report::pprof`]).

use crate::input::{scan, LogPath, Progress};
use crate::output::{write_output, wrote};
use anyhow::{bail, Result};
use clap::ValueEnum;
use std::path::Path;
use tensor_lifetime_report::pprof::{At, LiveReplay};
use tensor_lifetime_report::size::format_bytes;

/// `pprof --at`: which moment of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Moment {
    /// The end of the log.
    End,
    /// When the most bytes were live (the log is read twice).
    Peak,
}

/// Writes the profile of `log` at the moment asked for (`iteration` wins over `at`).
pub(crate) fn pprof(
    log: &LogPath,
    output: &Path,
    at: Moment,
    iteration: Option<u64>,
) -> Result<()> {
    let peak = iteration.is_none() && at == Moment::Peak;
    if peak && log.is_stdin() {
        bail!("pprof --at peak reads the log twice (to find the peak, then to replay): give a file, not `-`");
    }
    let progress = Progress::for_logs(&[log], if peak { 2 } else { 1 });
    let (at, what) = match (iteration, peak) {
        (Some(n), _) => (
            At::Iteration(n),
            format!("at the end of iteration {n} of {}", log.name()),
        ),
        (None, true) => {
            let mut first = LiveReplay::new(At::End);
            scan(log, &progress, "finding the peak", |e| {
                first.apply(e);
                Ok(())
            })?;
            let (bytes, events) = first.peak_event();
            (
                At::Event(events),
                format!(
                    "at the peak of {} ({}, after event {events})",
                    log.name(),
                    format_bytes(bytes)
                ),
            )
        }
        (None, false) => (At::End, format!("at the end of {}", log.name())),
    };
    let mut replay = LiveReplay::new(at);
    scan(log, &progress, "replaying", |e| {
        replay.apply(e);
        Ok(())
    })?;
    if let (At::Iteration(n), false) = (at, replay.reached()) {
        bail!(
            "{}: no outermost loop ended an iteration {n} (iterations count from 0, as reports print them)",
            log.name()
        );
    }
    let profile = replay.profile(&what);
    write_output(output, &profile.encode())?;
    wrote(
        &progress,
        output,
        format!(
            "{what}: {} live in {} (go tool pprof -top {})",
            format_bytes(profile.live_bytes()),
            match profile.live.len() {
                1 => "1 group".to_string(),
                n => format!("{n} groups"),
            },
            output.display()
        ),
    );
    Ok(())
}
