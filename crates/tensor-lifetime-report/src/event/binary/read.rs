//! The binary log's reader: frame by frame, each decoded into the [`Event`] the JSON
//! lines hold. A frame cut off by the end of the input ends the reading (everything
//! before it was read); a frame that does not decode is a [`ReadError::CorruptFrame`]
//! naming its byte offset. Counts and lengths are checked against the frame's bytes
//! before anything is allocated for them.

use super::cursor::{role_bytes, site_info, site_sweep, Cursor};
use super::{born, tag, undo_zigzag_delta, Running, FILE_HEADER_LEN, MAGIC, MAJOR_VERSION};
use super::{MAX_FRAME, MINOR_VERSION};
use crate::event::{describe, Event, MemorySample, ReadError, ReadOutcome, FORMAT, FORMAT_VERSION};
use crate::roles::CallFrame;
use std::io::{self, BufRead};

/// A streaming reader of a binary log (one frame in memory at a time).
#[derive(Debug)]
pub struct BinaryReader<R> {
    input: R,
    /// Bytes consumed so far: the offset of the next frame.
    offset: u64,
    /// Events read so far (the next one's number is one more).
    events: u64,
    /// The log's minor version, once its file header is read.
    minor: Option<u8>,
    /// The strings declared so far, by index.
    strings: Vec<String>,
    running: Running,
    frame: Vec<u8>,
    done: bool,
}

/// How a read of bytes ended short.
enum Short {
    /// The input ended after `n` of the bytes asked for.
    End(usize),
    Io(io::Error),
}

impl From<io::Error> for Short {
    fn from(e: io::Error) -> Self {
        Short::Io(e)
    }
}

impl<R: BufRead> BinaryReader<R> {
    pub fn new(input: R) -> Self {
        BinaryReader {
            input,
            offset: 0,
            events: 0,
            minor: None,
            strings: Vec::new(),
            running: Running {
                dtype: u32::MAX,
                device: u32::MAX,
                ..Running::default()
            },
            frame: Vec::with_capacity(256),
            done: false,
        }
    }

    /// Bytes consumed so far (the end of the last whole record read).
    pub fn bytes_read(&self) -> u64 {
        self.offset
    }

    /// Reads `n` bytes into `self.frame` (replacing what it held).
    fn fill(&mut self, n: usize) -> Result<(), Short> {
        self.frame.clear();
        while self.frame.len() < n {
            let available = self.input.fill_buf()?;
            if available.is_empty() {
                return Err(Short::End(self.frame.len()));
            }
            let take = available.len().min(n - self.frame.len());
            self.frame.extend_from_slice(&available[..take]);
            self.input.consume(take);
        }
        Ok(())
    }

    /// The next varint of the input (a frame's length): `Ok(None)` at the end of the
    /// input before its first byte; `Err(End(k))` when it ends after `k` of its bytes.
    fn length(&mut self) -> Result<Option<(u64, usize)>, Short> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = match self.input.fill_buf()?.first() {
                Some(b) => *b,
                None if i == 0 => return Ok(None),
                None => return Err(Short::End(i)),
            };
            self.input.consume(1);
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(Some((value, i + 1)));
            }
        }
        Ok(Some((u64::MAX, 10)))
    }

    fn corrupt(&mut self, offset: u64, message: impl Into<String>) -> ReadError {
        self.done = true;
        ReadError::CorruptFrame {
            offset,
            event: self.events + 1,
            message: message.into(),
        }
    }

    fn truncated(&mut self, bytes: usize) -> Result<Option<ReadOutcome>, ReadError> {
        self.done = true;
        Ok(Some(ReadOutcome::Truncated {
            line: self.events + 1,
            bytes,
        }))
    }

    fn file_header(&mut self) -> Result<Option<ReadOutcome>, ReadError> {
        match self.fill(FILE_HEADER_LEN) {
            Ok(()) => {}
            Err(Short::Io(e)) => return Err(e.into()),
            Err(Short::End(n)) if MAGIC.starts_with(&self.frame[..n.min(MAGIC.len())]) => {
                return self.truncated(n)
            }
            Err(Short::End(_)) => {}
        }
        if !self.frame.starts_with(&MAGIC) {
            self.done = true;
            return Err(ReadError::NotALog {
                line: 1,
                found: describe(&self.frame),
            });
        }
        let (major, minor) = (self.frame[8], self.frame[9]);
        if major != MAJOR_VERSION {
            self.done = true;
            return Err(ReadError::BinaryVersion { major, minor });
        }
        self.offset = FILE_HEADER_LEN as u64;
        self.minor = Some(minor);
        Ok(None)
    }

    fn next_outcome(&mut self) -> Result<Option<ReadOutcome>, ReadError> {
        if self.done {
            return Ok(None);
        }
        if self.minor.is_none() {
            if let Some(outcome) = self.file_header()? {
                return Ok(Some(outcome));
            }
            if self.done {
                return Ok(None);
            }
        }
        loop {
            let start = self.offset;
            let (len, prefix) = match self.length() {
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Ok(Some(l)) => l,
                Err(Short::End(k)) => return self.truncated(k),
                Err(Short::Io(e)) => return Err(e.into()),
            };
            if len == 0 || len > MAX_FRAME {
                return Err(self.corrupt(start, format!("a frame length of {len} bytes")));
            }
            match self.fill(len as usize) {
                Ok(()) => {}
                Err(Short::End(n)) => return self.truncated(prefix + n),
                Err(Short::Io(e)) => return Err(e.into()),
            }
            self.offset = start + prefix as u64 + len;
            let decoded = self.decode();
            match decoded {
                Ok(Some(event)) => {
                    self.events += 1;
                    return Ok(Some(ReadOutcome::Event {
                        line: self.events,
                        event,
                    }));
                }
                Ok(None) => continue,
                Err(message) => return Err(self.corrupt(start, message)),
            }
        }
    }

    /// The event of the frame in `self.frame`; `None` for a string declaration (or a
    /// record of a later minor version that this reader skips).
    fn decode(&mut self) -> Result<Option<Event>, String> {
        let frame = std::mem::take(&mut self.frame);
        let result = self.decode_frame(&frame);
        self.frame = frame;
        result
    }

    fn decode_frame(&mut self, frame: &[u8]) -> Result<Option<Event>, String> {
        let (&kind, payload) = frame.split_first().expect("a frame is not empty");
        let mut c = Cursor { data: payload };
        if self.events == 0 && kind != tag::HEADER && kind != tag::STRING {
            return Err(format!(
                "the first record is not a header (tag {kind:#04x})"
            ));
        }
        let event = match kind {
            tag::STRING => {
                let s = std::str::from_utf8(payload).map_err(|e| format!("a string: {e}"))?;
                self.strings.push(s.to_string());
                return Ok(None);
            }
            tag::BORN => self.born(&mut c)?,
            tag::DROPPED => {
                let t_ns = self.time(&mut c)?;
                let tensor = self.tensor(&mut c)?;
                Event::Dropped { t_ns, tensor }
            }
            tag::STORED => {
                let t_ns = self.time(&mut c)?;
                let tensor = self.tensor(&mut c)?;
                let site = c.u32()?;
                Event::Stored { t_ns, tensor, site }
            }
            tag::ALIAS => {
                let tensor = self.tensor(&mut c)?;
                let site = c.u32()?;
                Event::Alias { tensor, site }
            }
            tag::ITERATION_END => {
                let t_ns = self.time(&mut c)?;
                let [frame, iteration, duration_ns, live_tensors, live_bytes] =
                    [c.u64()?, c.u64()?, c.u64()?, c.u64()?, c.u64()?];
                let n = c.count(13)?;
                let sites = (0..n)
                    .map(|_| site_sweep(&mut c))
                    .collect::<Result<_, _>>()?;
                let n = c.count(5)?;
                let roles = (0..n)
                    .map(|_| role_bytes(&mut c))
                    .collect::<Result<_, _>>()?;
                Event::IterationEnd {
                    t_ns,
                    frame,
                    iteration,
                    duration_ns,
                    live_tensors,
                    live_bytes,
                    sites,
                    roles,
                }
            }
            tag::HEADER => {
                if self.events != 0 {
                    return Err("a second header".to_string());
                }
                let pid = c.u32()?;
                let started_unix_ms = c.u64()?;
                let tool_version = c.str()?;
                let flags = c.byte()?;
                if flags & !7 != 0 {
                    return Err(format!("header flags {flags:#04x}"));
                }
                let rank = (flags & 1 != 0).then(|| c.u32()).transpose()?;
                let world_size = (flags & 2 != 0).then(|| c.u32()).transpose()?;
                let host = (flags & 4 != 0).then(|| c.str()).transpose()?;
                Event::Header {
                    format: FORMAT.to_string(),
                    version: FORMAT_VERSION,
                    pid,
                    started_unix_ms,
                    tool_version,
                    rank,
                    world_size,
                    host,
                }
            }
            tag::SITE => Event::Site {
                id: c.u32()?,
                info: site_info(&mut c)?,
            },
            tag::LOOP_START => {
                let t_ns = self.time(&mut c)?;
                let frame = c.u64()?;
                let site = c.u32()?;
                let name = self.string(&mut c)?;
                let thread = c.u64()?;
                let session = c.u64()?;
                let [parent, parent_iteration, warmup, window] = c.optionals()?;
                Event::LoopStart {
                    t_ns,
                    frame,
                    site,
                    name,
                    parent,
                    parent_iteration,
                    thread,
                    session,
                    warmup,
                    window,
                }
            }
            tag::CALL_PATH => {
                let id = c.u32()?;
                let n = c.count(3)?;
                let frames = (0..n)
                    .map(|_| {
                        Ok(CallFrame {
                            function: self.string(&mut c)?,
                            file: self.string(&mut c)?,
                            line: c.u32()?,
                        })
                    })
                    .collect::<Result<_, String>>()?;
                Event::CallPath { id, frames }
            }
            tag::POST_MORTEM => {
                let t_ns = self.time(&mut c)?;
                let post_mortem = serde_json::from_slice(c.data)
                    .map_err(|e| format!("a post-mortem's JSON: {e}"))?;
                c.data = &[];
                Event::PostMortem { t_ns, post_mortem }
            }
            tag::SAMPLING => match c.u64()? {
                0 => return Err("a sampling interval of 0 bytes".into()),
                interval => Event::Sampling { interval },
            },
            tag::LOOP_END => Event::LoopEnd {
                t_ns: self.time(&mut c)?,
                frame: c.u64()?,
                iterations: c.u64()?,
            },
            tag::MEMORY => {
                let t_ns = self.time(&mut c)?;
                let device = self.string(&mut c)?;
                let tracked = c.u64()?;
                let [pool_used, pool_reserved, device_used, device_total, process_resident] =
                    c.optionals()?;
                Event::Memory {
                    t_ns,
                    device,
                    sample: MemorySample {
                        tracked,
                        pool_used,
                        pool_reserved,
                        device_used,
                        device_total,
                        process_resident,
                    },
                }
            }
            other if self.minor.unwrap_or(0) > MINOR_VERSION => {
                // A record kind of a later minor version: its frame says how long it is.
                let _ = other;
                return Ok(None);
            }
            other => return Err(format!("an unknown record tag {other:#04x}")),
        };
        if !c.data.is_empty() {
            return Err(format!("{} bytes left over in the record", c.data.len()));
        }
        Ok(Some(event))
    }

    fn born(&mut self, c: &mut Cursor<'_>) -> Result<Event, String> {
        let t_ns = self.time(c)?;
        let tensor = self.tensor(c)?;
        let site = c.u32()?;
        let flags = c.byte()?;
        if flags & !born::ALL != 0 {
            return Err(format!("born flags {flags:#04x}"));
        }
        let r = &mut self.running;
        if flags & born::NEW_FRAME != 0 {
            r.frame = Some(c.u64()?);
        }
        let frame = if flags & born::HAS_FRAME != 0 {
            Some(
                r.frame
                    .ok_or("a birth in the previous birth's frame, before any")?,
            )
        } else {
            None
        };
        r.iteration = undo_zigzag_delta(c.u64()?, r.iteration);
        let bytes = c.u64()?;
        r.storage = undo_zigzag_delta(c.u64()?, r.storage);
        if flags & born::NEW_SHAPE != 0 {
            let n = c.count(1)?;
            r.shape.clear();
            for _ in 0..n {
                let d = c.u64()?;
                r.shape
                    .push(usize::try_from(d).map_err(|_| format!("a dimension of {d}"))?);
            }
        }
        let shape = (flags & born::HAS_SHAPE != 0).then(|| r.shape.clone());
        if flags & born::NEW_TYPE != 0 {
            (r.dtype, r.device) = (c.u32()?, c.u32()?);
        }
        if flags & born::NEW_THREAD != 0 {
            r.thread = c.u64()?;
        }
        let (iteration, storage, thread) = (r.iteration, r.storage, r.thread);
        let (dtype, device) = (self.running.dtype, self.running.device);
        Ok(Event::Born {
            t_ns,
            tensor,
            site,
            frame,
            iteration,
            bytes,
            storage,
            shape,
            dtype: self.declared(dtype)?,
            device: self.declared(device)?,
            thread,
        })
    }

    fn time(&mut self, c: &mut Cursor<'_>) -> Result<u64, String> {
        self.running.t_ns = undo_zigzag_delta(c.u64()?, self.running.t_ns);
        Ok(self.running.t_ns)
    }

    fn tensor(&mut self, c: &mut Cursor<'_>) -> Result<u64, String> {
        self.running.tensor = undo_zigzag_delta(c.u64()?, self.running.tensor);
        Ok(self.running.tensor)
    }

    /// A string by reference (its index).
    fn string(&self, c: &mut Cursor<'_>) -> Result<String, String> {
        let id = c.u32()?;
        self.declared(id)
    }

    fn declared(&self, id: u32) -> Result<String, String> {
        self.strings
            .get(id as usize)
            .cloned()
            .ok_or_else(|| format!("string {id} is not declared (of {})", self.strings.len()))
    }
}

impl<R: BufRead> Iterator for BinaryReader<R> {
    type Item = Result<ReadOutcome, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_outcome().transpose()
    }
}
