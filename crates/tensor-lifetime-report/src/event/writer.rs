//! Writing an event log in either format: [`LogFormat`] chooses by the file's name
//! (`*.jsonl` and `*.json`: JSON lines; anything else: binary), [`EventWriter`] writes it.
//! Readers never look at the name: [`super::EventReader`] tells the formats by their
//! first byte. The events a tracked loop writes at every step are also written from
//! borrowed fields ([`StepEvent`], [`EventWriter::write_step`]): no [`Event`] is built.

use super::binary::BinaryWriter;
use super::{Event, SiteSweep};
use crate::roles::RoleBytes;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// A per-step event's fields, borrowed: what [`EventWriter::write_step`] writes, the same
/// bytes as the [`Event`] of those fields ([`Event::step`]).
#[derive(Debug, Clone, Copy)]
pub enum StepEvent<'a> {
    Born(BornRef<'a>),
    Alias {
        tensor: u64,
        site: u32,
    },
    Stored {
        t_ns: u64,
        tensor: u64,
        site: u32,
    },
    Dropped {
        t_ns: u64,
        tensor: u64,
    },
    IterationEnd {
        t_ns: u64,
        frame: u64,
        iteration: u64,
        duration_ns: u64,
        live_tensors: u64,
        live_bytes: u64,
        sites: &'a [SiteSweep],
        roles: &'a [RoleBytes],
    },
}

/// A `born` event's fields, borrowed ([`Event::Born`]). `kind` names the pair (`dtype`,
/// `device`) for the writer: the same `kind` always comes with the same two strings, so
/// a writer compares the number, not the strings; [`BornRef::ANY_KIND`] when the caller
/// has no such number.
#[derive(Debug, Clone, Copy)]
pub struct BornRef<'a> {
    pub t_ns: u64,
    pub tensor: u64,
    pub site: u32,
    pub frame: Option<u64>,
    pub iteration: u64,
    pub bytes: u64,
    pub storage: u64,
    pub shape: Option<&'a [usize]>,
    pub dtype: &'a str,
    pub device: &'a str,
    pub thread: u64,
    pub kind: u32,
}

impl BornRef<'_> {
    /// The `kind` of a birth whose strings are to be compared.
    pub const ANY_KIND: u32 = u32::MAX;
}

impl Event {
    /// This event's fields borrowed, for one of the per-step events.
    pub fn step(&self) -> Option<StepEvent<'_>> {
        Some(match self {
            Event::Born {
                t_ns,
                tensor,
                site,
                frame,
                iteration,
                bytes,
                storage,
                shape,
                dtype,
                device,
                thread,
            } => StepEvent::Born(BornRef {
                t_ns: *t_ns,
                tensor: *tensor,
                site: *site,
                frame: *frame,
                iteration: *iteration,
                bytes: *bytes,
                storage: *storage,
                shape: shape.as_deref(),
                dtype,
                device,
                thread: *thread,
                kind: BornRef::ANY_KIND,
            }),
            Event::Alias { tensor, site } => StepEvent::Alias {
                tensor: *tensor,
                site: *site,
            },
            Event::Stored { t_ns, tensor, site } => StepEvent::Stored {
                t_ns: *t_ns,
                tensor: *tensor,
                site: *site,
            },
            Event::Dropped { t_ns, tensor } => StepEvent::Dropped {
                t_ns: *t_ns,
                tensor: *tensor,
            },
            Event::IterationEnd {
                t_ns,
                frame,
                iteration,
                duration_ns,
                live_tensors,
                live_bytes,
                sites,
                roles,
            } => StepEvent::IterationEnd {
                t_ns: *t_ns,
                frame: *frame,
                iteration: *iteration,
                duration_ns: *duration_ns,
                live_tensors: *live_tensors,
                live_bytes: *live_bytes,
                sites,
                roles,
            },
            _ => return None,
        })
    }
}

/// The two formats of the event log (`docs/event-log.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    JsonLines,
    /// Framed binary records (the module `event::binary`).
    Binary,
}

impl LogFormat {
    /// The format a log written to `path` gets: JSON lines when the name ends in `.jsonl`
    /// or `.json`, binary otherwise.
    pub fn for_path(path: &Path) -> LogFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("jsonl") || ext.eq_ignore_ascii_case("json") => {
                LogFormat::JsonLines
            }
            _ => LogFormat::Binary,
        }
    }

    /// How the format is named in messages.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::JsonLines => "JSON lines",
            LogFormat::Binary => "binary",
        }
    }
}

/// A writer of events in one of the formats, buffered: [`EventWriter::flush`] hands
/// what it holds to the output (the tracker flushes at iteration ends and reports).
#[derive(Debug)]
pub enum EventWriter<W: Write> {
    JsonLines(BufWriter<W>),
    Binary(BinaryWriter<W>),
}

impl<W: Write> EventWriter<W> {
    /// A writer of `format` to `out`.
    pub fn new(format: LogFormat, out: W) -> Self {
        match format {
            LogFormat::JsonLines => EventWriter::JsonLines(BufWriter::with_capacity(1 << 16, out)),
            LogFormat::Binary => EventWriter::Binary(BinaryWriter::new(out)),
        }
    }

    pub fn format(&self) -> LogFormat {
        match self {
            EventWriter::JsonLines(_) => LogFormat::JsonLines,
            EventWriter::Binary(_) => LogFormat::Binary,
        }
    }

    /// Appends `event`.
    #[inline]
    pub fn write(&mut self, event: &Event) -> io::Result<()> {
        match self {
            EventWriter::JsonLines(w) => event.write_line(w),
            EventWriter::Binary(w) => w.write(event),
        }
    }

    /// Appends a per-step event from its borrowed fields (the same bytes as
    /// [`EventWriter::write`] of its [`Event`]).
    #[inline]
    pub fn write_step(&mut self, event: StepEvent<'_>) -> io::Result<()> {
        match self {
            EventWriter::JsonLines(w) => super::line::write_step_line(event, w),
            EventWriter::Binary(w) => w.write_step(event),
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            EventWriter::JsonLines(w) => w.flush(),
            EventWriter::Binary(w) => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_chooses_the_format() {
        for (path, format) in [
            ("run.jsonl", LogFormat::JsonLines),
            ("logs/rank-0.JSONL", LogFormat::JsonLines),
            ("run.json", LogFormat::JsonLines),
            ("run.tlog", LogFormat::Binary),
            ("run", LogFormat::Binary),
            ("run.jsonl.bin", LogFormat::Binary),
        ] {
            assert_eq!(LogFormat::for_path(Path::new(path)), format, "{path}");
        }
    }
}
