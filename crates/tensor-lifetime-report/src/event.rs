//! The events the tracker emits and the event log that stores them, in two formats.
//!
//! JSON lines: one event per line, each a JSON object whose `event` field names its kind.
//! The first line is a [`Event::Header`] naming the format and its version ([`FORMAT`],
//! [`FORMAT_VERSION`]). `docs/event-log.md` documents every field. The binary format
//! ([`binary`]) holds the same events in framed records; [`EventWriter`] writes either
//! ([`LogFormat::for_path`] chooses by the file's name).
//!
//! [`EventReader`] reads either, told apart by the first byte, one event in memory at a
//! time. A tail cut off mid-write (a crashed run) is reported as
//! [`ReadOutcome::Truncated`] and reading stops there with everything before it intact;
//! anything else that does not read is a [`ReadError`] naming the line (JSON lines) or
//! the byte offset (binary).

pub mod binary;
mod json_reader;
mod line;
mod writer;

use crate::model::is_zero;
pub use crate::model::{
    location, HolderCount, HolderSpec, MemorySample, SiteInfo, SiteKind, SiteNote, SiteSweep,
};
use crate::post_mortem::PostMortem;
use crate::roles::{CallFrame, RoleBytes};
use binary::BinaryReader;
use json_reader::JsonReader;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{self, BufRead};
pub use writer::{BornRef, EventWriter, LogFormat, StepEvent};

/// The value of the header's `format` field.
pub const FORMAT: &str = "tensor-lifetime-events";
/// The version of the event-log format this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// One line of the event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// First line of every log.
    Header {
        format: String,
        version: u32,
        pid: u32,
        started_unix_ms: u64,
        tool_version: String,
        /// The process's rank in a multi-process job, and the job's size.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rank: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        world_size: Option<u32>,
        /// The machine's host name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
    },
    /// A site, declared once before its first use; later events refer to `id`.
    Site {
        id: u32,
        #[serde(flatten)]
        info: SiteInfo,
    },
    /// From here on the tracker records a sample of the tensors, one per `interval`
    /// bytes on average (`TENSOR_LIFETIME_SAMPLE`): the sweeps' figures that follow are
    /// estimates, scaled by the inverse sampling probability, and its `born` events are
    /// the sampled tensors only. Written before the first such sweep, and again when the
    /// interval changes.
    Sampling { interval: u64 },
    /// A loop frame (one run of a loop) opened. `site` is the loop's site.
    LoopStart {
        t_ns: u64,
        frame: u64,
        site: u32,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_iteration: Option<u64>,
        thread: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        session: u64,
        /// Judgement overrides for this frame (leak-test options).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warmup: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<u64>,
    },
    /// A tensor was tagged for the first time (its creation site).
    Born {
        t_ns: u64,
        tensor: u64,
        site: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        frame: Option<u64>,
        #[serde(default)]
        iteration: u64,
        bytes: u64,
        storage: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<Vec<usize>>,
        dtype: String,
        device: String,
        thread: u64,
    },
    /// A tagged tensor was bound again at another site (returned, rebound, cloned).
    Alias { tensor: u64, site: u32 },
    /// A tagged tensor went through a store site.
    Stored { t_ns: u64, tensor: u64, site: u32 },
    /// A tagged tensor was found dropped by a sweep.
    Dropped { t_ns: u64, tensor: u64 },
    /// An iteration of a loop frame ended; `sites` holds the sweep's survivors by site.
    IterationEnd {
        t_ns: u64,
        frame: u64,
        iteration: u64,
        duration_ns: u64,
        live_tensors: u64,
        live_bytes: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sites: Vec<SiteSweep>,
        /// Live tensors and bytes by role, and the tensors born and dead within the
        /// iteration (absent in logs written before roles).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        roles: Vec<RoleBytes>,
    },
    /// A call path (the `#[track]`ed functions on the stack, outermost first), declared
    /// once before a sweep summary refers to its `id`.
    CallPath { id: u32, frames: Vec<CallFrame> },
    /// What was live when a tracked function returned an out-of-memory error (or when
    /// the program asked for it).
    PostMortem {
        t_ns: u64,
        #[serde(flatten)]
        post_mortem: Box<PostMortem>,
    },
    /// A loop frame closed after `iterations` iterations.
    LoopEnd {
        t_ns: u64,
        frame: u64,
        iterations: u64,
    },
    /// A memory sample of one device.
    Memory {
        t_ns: u64,
        device: String,
        #[serde(flatten)]
        sample: MemorySample,
    },
}

impl Event {
    /// The header line for a log written now by this process.
    pub fn header(pid: u32, started_unix_ms: u64) -> Event {
        Event::Header {
            format: FORMAT.to_string(),
            version: FORMAT_VERSION,
            pid,
            started_unix_ms,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            rank: None,
            world_size: None,
            host: None,
        }
    }

    /// A header that names the process's place in a multi-process job.
    pub fn rank_header(
        pid: u32,
        started_unix_ms: u64,
        rank: Option<u32>,
        world_size: Option<u32>,
        host: Option<String>,
    ) -> Event {
        let mut header = Event::header(pid, started_unix_ms);
        if let Event::Header {
            rank: r,
            world_size: w,
            host: h,
            ..
        } = &mut header
        {
            (*r, *w, *h) = (rank, world_size, host);
        }
        header
    }

    /// When the event happened, for the events that carry a time.
    pub fn t_ns(&self) -> Option<u64> {
        match self {
            Event::LoopStart { t_ns, .. }
            | Event::Born { t_ns, .. }
            | Event::Stored { t_ns, .. }
            | Event::Dropped { t_ns, .. }
            | Event::IterationEnd { t_ns, .. }
            | Event::LoopEnd { t_ns, .. }
            | Event::Memory { t_ns, .. }
            | Event::PostMortem { t_ns, .. } => Some(*t_ns),
            Event::Header { .. }
            | Event::Site { .. }
            | Event::Sampling { .. }
            | Event::Alias { .. }
            | Event::CallPath { .. } => None,
        }
    }

    /// Appends this event as one JSON line (the per-step events written by hand, in
    /// `event/line.rs`; the others through `serde_json`).
    pub fn write_line(&self, out: &mut impl io::Write) -> io::Result<()> {
        if let Some(step) = self.step() {
            return line::write_step_line(step, out);
        }
        serde_json::to_writer(&mut *out, self).map_err(io::Error::other)?;
        out.write_all(b"\n")
    }
}

/// Why a log could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    /// The first line is not a tensor-lifetime header.
    NotALog {
        line: u64,
        found: String,
    },
    /// The header names a format version this reader does not know.
    WrongVersion {
        line: u64,
        found: u32,
    },
    /// A complete line that is not a valid event.
    Corrupt {
        line: u64,
        message: String,
    },
    /// A binary log of a major version this reader does not know.
    BinaryVersion {
        major: u8,
        minor: u8,
    },
    /// A whole record of a binary log that does not decode: the byte offset of its frame
    /// and the number of the event it would have been.
    CorruptFrame {
        offset: u64,
        event: u64,
        message: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "cannot read the event log: {e}"),
            ReadError::NotALog { line, found } => write!(
                f,
                "line {line}: not a tensor-lifetime event log: expected a header \
                 {{\"event\":\"header\",\"format\":\"{FORMAT}\",...}}, found {found}"
            ),
            ReadError::WrongVersion { line, found } => write!(
                f,
                "line {line}: event log format version {found} is not supported \
                 (this build reads version {FORMAT_VERSION})"
            ),
            ReadError::Corrupt { line, message } => {
                write!(f, "line {line}: corrupt event: {message}")
            }
            ReadError::BinaryVersion { major, minor } => write!(
                f,
                "binary event log format version {major}.{minor} is not supported \
                 (this build reads version {}.x)",
                binary::MAJOR_VERSION
            ),
            ReadError::CorruptFrame {
                offset,
                event,
                message,
            } => write!(
                f,
                "byte {offset}: corrupt record (event {event} of the binary log): {message}"
            ),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// What the reader yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadOutcome {
    /// A complete event and its 1-based number: its line in a JSON-lines log, its line
    /// in `tensor-lifetime cat`'s output of a binary one.
    Event { line: u64, event: Event },
    /// The last line has no newline and does not parse, or a binary log ends inside a
    /// frame: the writer stopped mid-write. `line` is the number the cut-off event would
    /// have had, `bytes` what there is of it. Reading ends here; everything before it
    /// was read.
    Truncated { line: u64, bytes: usize },
}

/// A streaming reader of an event log in either format, told apart by the first byte
/// (a binary log starts with [`binary::MAGIC`], a JSON-lines log with `{`).
#[derive(Debug)]
pub struct EventReader<R> {
    state: ReaderState<R>,
}

/// Which format the reader found: none yet before the first read.
#[derive(Debug)]
enum ReaderState<R> {
    Unread(Option<R>),
    JsonLines(JsonReader<R>),
    Binary(BinaryReader<R>),
}

impl<R: BufRead> EventReader<R> {
    pub fn new(input: R) -> Self {
        EventReader {
            state: ReaderState::Unread(Some(input)),
        }
    }

    /// Bytes consumed so far (for progress bars).
    pub fn bytes_read(&self) -> u64 {
        match &self.state {
            ReaderState::Unread(_) => 0,
            ReaderState::JsonLines(r) => r.bytes_read(),
            ReaderState::Binary(r) => r.bytes_read(),
        }
    }

    /// The format of the log, once the first read has seen it.
    pub fn format(&self) -> Option<LogFormat> {
        match &self.state {
            ReaderState::Unread(_) => None,
            ReaderState::JsonLines(_) => Some(LogFormat::JsonLines),
            ReaderState::Binary(_) => Some(LogFormat::Binary),
        }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Result<ReadOutcome, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let ReaderState::Unread(input) = &mut self.state {
            let mut input = input.take().expect("an unread input");
            let first = match input.fill_buf() {
                Ok(bytes) => bytes.first().copied(),
                Err(e) => return Some(Err(e.into())),
            };
            self.state = if first == Some(binary::MAGIC[0]) {
                ReaderState::Binary(BinaryReader::new(input))
            } else {
                ReaderState::JsonLines(JsonReader::new(input))
            };
        }
        match &mut self.state {
            ReaderState::Unread(_) => unreachable!("the format was chosen above"),
            ReaderState::JsonLines(r) => r.next(),
            ReaderState::Binary(r) => r.next(),
        }
    }
}

pub(crate) fn describe(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    let mut shown: String = s.chars().take(60).collect();
    if shown.len() < s.len() {
        shown.push_str("...");
    }
    format!("{shown:?}")
}

/// A last line cut off mid-write ([`ReadOutcome::Truncated`]): its 1-based number and
/// the bytes it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated {
    pub line: u64,
    pub bytes: usize,
}

/// Reads a whole log from `input`, calling `f` for each event. Returns the truncation, if
/// the last line was cut off.
pub fn read_events(
    input: impl BufRead,
    mut f: impl FnMut(Event),
) -> Result<Option<Truncated>, ReadError> {
    for outcome in EventReader::new(input) {
        match outcome? {
            ReadOutcome::Event { event, .. } => f(event),
            ReadOutcome::Truncated { line, bytes } => return Ok(Some(Truncated { line, bytes })),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines: &[Event]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in lines {
            e.write_line(&mut out).unwrap();
        }
        out
    }

    fn sample() -> Vec<Event> {
        vec![
            Event::header(1, 2),
            Event::Site {
                id: 0,
                info: SiteInfo {
                    file: "src/a.rs".into(),
                    line: 3,
                    column: 9,
                    function: "a::f".into(),
                    label: "x".into(),
                    kind: SiteKind::Binding,
                    note: None,
                    from: Vec::new(),
                },
            },
            Event::Dropped { t_ns: 5, tensor: 7 },
        ]
    }

    #[test]
    fn round_trips() {
        let bytes = log(&sample());
        let mut got = Vec::new();
        let trunc = read_events(&bytes[..], |e| got.push(e)).unwrap();
        assert_eq!(trunc, None);
        assert_eq!(got, sample());
    }

    #[test]
    fn cut_off_last_line_reads_up_to_it() {
        let mut bytes = log(&sample());
        bytes.extend_from_slice(b"{\"event\":\"dropped\",\"t_ns\":9,\"ten");
        let mut got = Vec::new();
        let trunc = read_events(&bytes[..], |e| got.push(e)).unwrap();
        assert_eq!(trunc, Some(Truncated { line: 4, bytes: 32 }));
        assert_eq!(got, sample());
    }

    #[test]
    fn corrupt_line_is_an_error_naming_the_line() {
        let mut bytes = log(&sample());
        bytes.extend_from_slice(b"{\"event\":\"bogus\"}\n");
        let err = read_events(&bytes[..], |_| {}).unwrap_err();
        assert!(matches!(err, ReadError::Corrupt { line: 4, .. }), "{err}");
        assert!(
            err.to_string().starts_with("line 4: corrupt event"),
            "{err}"
        );
    }

    #[test]
    fn not_a_log_and_wrong_version() {
        let err = read_events(&b"hello world\n"[..], |_| {}).unwrap_err();
        assert!(matches!(err, ReadError::NotALog { line: 1, .. }), "{err}");
        let err = read_events(&b""[..], |_| {}).unwrap_err();
        assert!(err.to_string().contains("empty file"), "{err}");
        let v2 = b"{\"event\":\"header\",\"format\":\"tensor-lifetime-events\",\"version\":2,\"pid\":1,\"started_unix_ms\":0,\"tool_version\":\"9\"}\n";
        let err = read_events(&v2[..], |_| {}).unwrap_err();
        assert!(
            matches!(err, ReadError::WrongVersion { found: 2, .. }),
            "{err}"
        );
    }
}
