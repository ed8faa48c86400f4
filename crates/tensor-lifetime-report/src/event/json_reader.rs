//! The JSON-lines log's reader: line by line, the first a header; a last line cut off
//! mid-write ends the reading, any other bad line is an error naming it.

use super::{describe, Event, ReadError, ReadOutcome, FORMAT, FORMAT_VERSION};
use std::io::BufRead;

/// A streaming reader of a JSON-lines log.
#[derive(Debug)]
pub(super) struct JsonReader<R> {
    input: R,
    line: u64,
    buf: Vec<u8>,
    done: bool,
    bytes_read: u64,
}

impl<R: BufRead> JsonReader<R> {
    pub(super) fn new(input: R) -> Self {
        JsonReader {
            input,
            line: 0,
            buf: Vec::with_capacity(256),
            done: false,
            bytes_read: 0,
        }
    }

    /// Bytes consumed so far (for progress bars).
    pub(super) fn bytes_read(&self) -> u64 {
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

impl<R: BufRead> Iterator for JsonReader<R> {
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
