//! The events the tracker emits and the JSON-lines event log that stores them.
//!
//! One event per line, each a JSON object whose `event` field names its kind. The first
//! line is a [`Event::Header`] naming the format and its version ([`FORMAT`],
//! [`FORMAT_VERSION`]). `docs/event-log.md` documents every field.
//!
//! The reader is streaming (one line in memory at a time). A last line cut off mid-write
//! (a crashed run) is reported as [`ReadOutcome::Truncated`] and reading stops there with
//! everything before it intact; any other bad line is a [`ReadError`] naming the line.

mod line;

use crate::roles::{CallFrame, Role, RoleBytes};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{self, BufRead};

/// The value of the header's `format` field.
pub const FORMAT: &str = "tensor-lifetime-events";
/// The version of the event-log format this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// What a [`SiteInfo`] marks in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// A `let` binding: the label is the variable name.
    Binding,
    /// An assignment (`x = ...`, `x += ...`): the label is the assigned place.
    Assignment,
    /// A store into a container (`self.cache.push(t)`): the label is the receiver text.
    Store,
    /// A site given explicitly through the manual API.
    Explicit,
    /// A loop (`for`, `while`, `loop`): the label is its name (`'epoch`) or empty.
    Loop,
}

impl SiteKind {
    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::Binding => "binding",
            SiteKind::Assignment => "assignment",
            SiteKind::Store => "store",
            SiteKind::Explicit => "explicit",
            SiteKind::Loop => "loop",
        }
    }
}

/// A static source location plus a label, as the tracker's `Site`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteInfo {
    /// Path as `file!()` gives it.
    pub file: String,
    pub line: u32,
    pub column: u32,
    /// Module path and enclosing function, e.g. `my_crate::train::run`.
    pub function: String,
    pub label: String,
    pub kind: SiteKind,
    /// What `#[track]` saw around the site in the source, when it matters to the
    /// judgement (a store whose container is trimmed, a loop that builds a returned
    /// value). Absent in logs written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<SiteNote>,
}

/// What the macro saw around a site, beyond its place and label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum SiteNote {
    /// A store whose receiver the tracked code also trims (`pop_front`, `truncate`,
    /// `clear`, assigning a new container ...): the line of the first such call, in the
    /// store's file, and the call (`pop_front`). The container is bounded.
    Evicted { line: u32, call: String },
    /// A loop that fills `holder`, a local the function returns (`Ok(heads)`): the loop
    /// builds a value (a model's layers), whose tensors are its product.
    Fills { holder: String },
}

impl SiteInfo {
    /// `file:line`.
    pub fn location(&self) -> String {
        location(&self.file, self.line)
    }
}

/// `file:line`: how reports, the trace and the diff name a place in the source (the
/// `location()` of [`SiteInfo`], [`crate::report::SiteRef`] and [`crate::diff::SiteDiff`]).
pub fn location(file: &str, line: u32) -> String {
    format!("{file}:{line}")
}

/// Who keeps a survivor alive, as far as the tracker can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HolderSpec {
    /// The survivor went through this store site (`self.cache.push(t)`).
    Store { site: u32 },
    /// The survivor is a node of the autograd graph of a survivor born at `site`.
    Graph { site: u32 },
    /// The survivor shares its storage with a survivor born at `site`.
    View { site: u32 },
    /// Nothing the tracker saw holds it (a global, a clone outside tracked code...).
    Unknown,
}

/// One holder and how many of a site's survivors it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderCount {
    #[serde(flatten)]
    pub holder: HolderSpec,
    pub count: u64,
}

/// What a sweep found about the survivors of one site within one loop frame.
#[derive(Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SiteSweep {
    pub site: u32,
    /// Live tensors born at this site in this frame (or loops nested in it).
    pub survivors: u64,
    /// Bytes of the storages these survivors keep alive, each storage counted once.
    pub bytes: u64,
    /// Distinct iterations of this frame in which the survivors were born.
    pub iterations: u64,
    /// Earliest and latest iteration of this frame that bore a survivor.
    pub first_iteration: u64,
    pub last_iteration: u64,
    /// Highest strong count among the survivors.
    pub refcount: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<HolderCount>,
    /// Largest autograd graph held by one survivor of this site: other tensors in it and
    /// their storage bytes (parameters excluded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_tensors: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_bytes: u64,
    /// For survivors that are small views of a larger storage: bytes of the views
    /// themselves and of the storages they pin.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub view_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub view_storage_bytes: u64,
    /// The role of most of the survivors (absent in logs written before roles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The call paths ([`Event::CallPath`] ids) that created the survivors, the most
    /// frequent first (up to 4; absent in logs written before call paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_paths: Vec<u32>,
}

// By hand for `clone_from`, which reuses the holders' allocation: the analysis keeps the
// latest sweep of every series, at every iteration end.
impl Clone for SiteSweep {
    fn clone(&self) -> Self {
        let mut out = SiteSweep::default();
        out.clone_from(self);
        out
    }

    fn clone_from(&mut self, source: &Self) {
        let SiteSweep {
            site,
            survivors,
            bytes,
            iterations,
            first_iteration,
            last_iteration,
            refcount,
            holders,
            graph_tensors,
            graph_bytes,
            view_bytes,
            view_storage_bytes,
            role,
            call_paths,
        } = source;
        self.holders.clone_from(holders);
        self.call_paths.clone_from(call_paths);
        (self.site, self.survivors, self.bytes) = (*site, *survivors, *bytes);
        (self.iterations, self.first_iteration) = (*iterations, *first_iteration);
        (self.last_iteration, self.refcount) = (*last_iteration, *refcount);
        (self.graph_tensors, self.graph_bytes) = (*graph_tensors, *graph_bytes);
        (self.view_bytes, self.view_storage_bytes) = (*view_bytes, *view_storage_bytes);
        self.role = *role;
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A memory sample (from the periodic monitor or a `memory_summary`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemorySample {
    /// Live bytes of tracked tensors on this device.
    pub tracked: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_reserved: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_resident: Option<u64>,
}

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
        post_mortem: Box<crate::post_mortem::PostMortem>,
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
            | Event::Alias { .. }
            | Event::CallPath { .. } => None,
        }
    }

    /// Appends this event as one JSON line (the per-step events written by hand, in
    /// `event/line.rs`; the others through `serde_json`).
    pub fn write_line(&self, out: &mut impl io::Write) -> io::Result<()> {
        if line::write_step_event(self, out)? {
            return Ok(());
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
    /// A complete event and its 1-based line number.
    Event { line: u64, event: Event },
    /// The last line has no newline and does not parse: the writer stopped mid-line.
    /// Reading ends here; everything before it was read.
    Truncated { line: u64, bytes: usize },
}

/// A streaming reader of an event log.
#[derive(Debug)]
pub struct EventReader<R> {
    input: R,
    line: u64,
    buf: Vec<u8>,
    done: bool,
    bytes_read: u64,
}

impl<R: BufRead> EventReader<R> {
    pub fn new(input: R) -> Self {
        EventReader {
            input,
            line: 0,
            buf: Vec::with_capacity(256),
            done: false,
            bytes_read: 0,
        }
    }

    /// Bytes consumed so far (for progress bars).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn next_outcome(&mut self) -> Result<Option<ReadOutcome>, ReadError> {
        loop {
            if self.done {
                return Ok(None);
            }
            self.buf.clear();
            let n = self.input.read_until(b'\n', &mut self.buf)?;
            if n == 0 {
                self.done = true;
                if self.line == 0 {
                    return Err(ReadError::NotALog {
                        line: 1,
                        found: "an empty file".to_string(),
                    });
                }
                return Ok(None);
            }
            self.bytes_read += n as u64;
            self.line += 1;
            let complete = self.buf.last() == Some(&b'\n');
            let text = trim_line(&self.buf);
            if text.iter().all(u8::is_ascii_whitespace) {
                if !complete {
                    self.done = true;
                    return Ok(None);
                }
                continue;
            }
            let parsed = serde_json::from_slice::<Event>(text);
            if self.line == 1 {
                return match parsed {
                    Ok(Event::Header {
                        ref format,
                        version,
                        ..
                    }) if format == FORMAT => {
                        if version != FORMAT_VERSION {
                            self.done = true;
                            return Err(ReadError::WrongVersion {
                                line: 1,
                                found: version,
                            });
                        }
                        Ok(Some(ReadOutcome::Event {
                            line: 1,
                            event: parsed.expect("matched Ok"),
                        }))
                    }
                    _ if !complete && looks_like_header_prefix(text) => {
                        self.done = true;
                        Ok(Some(ReadOutcome::Truncated {
                            line: 1,
                            bytes: text.len(),
                        }))
                    }
                    _ => {
                        self.done = true;
                        Err(ReadError::NotALog {
                            line: 1,
                            found: describe(text),
                        })
                    }
                };
            }
            return match parsed {
                Ok(event) => Ok(Some(ReadOutcome::Event {
                    line: self.line,
                    event,
                })),
                Err(_) if !complete => {
                    self.done = true;
                    Ok(Some(ReadOutcome::Truncated {
                        line: self.line,
                        bytes: text.len(),
                    }))
                }
                Err(e) => {
                    self.done = true;
                    Err(ReadError::Corrupt {
                        line: self.line,
                        message: e.to_string(),
                    })
                }
            };
        }
    }
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Result<ReadOutcome, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_outcome().transpose()
    }
}

fn trim_line(buf: &[u8]) -> &[u8] {
    let mut end = buf.len();
    while end > 0 && (buf[end - 1] == b'\n' || buf[end - 1] == b'\r') {
        end -= 1;
    }
    &buf[..end]
}

fn looks_like_header_prefix(text: &[u8]) -> bool {
    let s = String::from_utf8_lossy(text);
    s.starts_with("{\"event\":\"header\"") || "{\"event\":\"header\"".starts_with(s.as_ref())
}

fn describe(text: &[u8]) -> String {
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
