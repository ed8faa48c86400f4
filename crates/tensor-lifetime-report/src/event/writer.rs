//! Writing an event log in either format: [`LogFormat`] chooses by the file's name
//! (`*.jsonl` and `*.json`: JSON lines; anything else: binary), [`EventWriter`] writes it.
//! Readers never look at the name: [`super::EventReader`] tells the formats by their
//! first byte.

use super::binary::BinaryWriter;
use super::Event;
use std::io::{self, BufWriter, Write};
use std::path::Path;

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
