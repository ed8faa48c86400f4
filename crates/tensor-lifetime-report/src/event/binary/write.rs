//! The binary log's writer: each event appended to a buffer as one frame, the buffer
//! handed to the output when it holds [`FLUSH_AT`] bytes and at [`BinaryWriter::flush`].
//! No number is formatted: integers are LEB128 varints, pushed byte by byte.

use super::MINOR_VERSION;
use super::{born, tag, zigzag_delta, Running, FILE_HEADER_LEN, MAGIC, MAJOR_VERSION};
use crate::event::{BornRef, Event, SiteSweep, StepEvent};
use crate::roles::{CallFrame, RoleBytes};
use std::collections::HashMap;
use std::io::{self, Write};

use super::encode::{
    optionals, put, put_str, role_bytes, site_info, site_sweep, site_sweep_max, Out, ROLE_BYTES_MAX,
};

/// Buffered bytes that make the writer hand them to its output.
const FLUSH_AT: usize = 1 << 16;

/// Writes events as a binary log (the file header first) to `out`.
#[derive(Debug)]
pub struct BinaryWriter<W: Write> {
    out: W,
    /// Whole frames not yet handed to `out` (the file header at first).
    buf: Vec<u8>,
    /// The strings declared so far, by value: their index.
    strings: HashMap<String, u32>,
    /// The same strings by index.
    names: Vec<String>,
    running: Running,
    /// The previous birth's `kind` ([`BornRef::kind`]): its dtype and device are the
    /// running ones.
    kind: u32,
}

impl<W: Write> BinaryWriter<W> {
    /// A writer to `out`; the file header is written with the first flush.
    pub fn new(out: W) -> Self {
        let mut buf = Vec::with_capacity(FLUSH_AT + 4096);
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&[MAJOR_VERSION, MINOR_VERSION]);
        debug_assert_eq!(buf.len(), FILE_HEADER_LEN);
        BinaryWriter {
            out,
            buf,
            strings: HashMap::new(),
            names: Vec::new(),
            running: Running {
                dtype: u32::MAX,
                device: u32::MAX,
                ..Running::default()
            },
            kind: BornRef::ANY_KIND,
        }
    }

    /// Appends `event` (and the declarations of the strings it uses first).
    pub fn write(&mut self, event: &Event) -> io::Result<()> {
        match event.step() {
            Some(step) => self.encode_step(step),
            None => self.encode_rare(event),
        }
        self.hand_over()
    }

    /// Appends a per-step event from its borrowed fields: the same bytes as
    /// [`BinaryWriter::write`] of its [`Event`].
    #[inline]
    pub fn write_step(&mut self, event: StepEvent<'_>) -> io::Result<()> {
        self.encode_step(event);
        self.hand_over()
    }

    /// Hands the buffer to the output once it holds [`FLUSH_AT`] bytes.
    #[inline]
    fn hand_over(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Bytes written and not yet handed to the output.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Hands every whole frame to the output and flushes it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }

    #[inline]
    fn encode_step(&mut self, event: StepEvent<'_>) {
        match event {
            StepEvent::Born(b) => self.born(&b),
            StepEvent::Dropped { t_ns, tensor } => {
                let r = &mut self.running;
                let mut rec = Small::new(tag::DROPPED);
                rec.put(zigzag_delta(t_ns, r.t_ns));
                rec.put(zigzag_delta(tensor, r.tensor));
                rec.finish(&mut self.buf);
                (r.t_ns, r.tensor) = (t_ns, tensor);
            }
            StepEvent::Stored { t_ns, tensor, site } => {
                let r = &mut self.running;
                let mut rec = Small::new(tag::STORED);
                rec.put(zigzag_delta(t_ns, r.t_ns));
                rec.put(zigzag_delta(tensor, r.tensor));
                rec.put(u64::from(site));
                rec.finish(&mut self.buf);
                (r.t_ns, r.tensor) = (t_ns, tensor);
            }
            StepEvent::Alias { tensor, site } => {
                let r = &mut self.running;
                let mut rec = Small::new(tag::ALIAS);
                rec.put(zigzag_delta(tensor, r.tensor));
                rec.put(u64::from(site));
                rec.finish(&mut self.buf);
                r.tensor = tensor;
            }
            StepEvent::IterationEnd {
                t_ns,
                frame,
                iteration,
                duration_ns,
                live_tensors,
                live_bytes,
                sites,
                roles,
            } => {
                let r = &mut self.running;
                // Written into room made for it at its longest (the tag, the six
                // numbers, the two counts, the sites, the roles; every varint at ten
                // bytes): no capacity test per byte.
                let longest = 1
                    + 6 * 10
                    + 2 * 10
                    + sites.iter().map(site_sweep_max).sum::<usize>()
                    + roles.len() * ROLE_BYTES_MAX;
                let start = self.buf.len();
                self.buf.resize(start + 1 + longest, 0);
                let mut out = InPlace {
                    b: &mut self.buf[start + 1..],
                    n: 0,
                };
                out.byte(tag::ITERATION_END);
                let numbers = [frame, iteration, duration_ns, live_tensors, live_bytes];
                iteration_end(&mut out, r, (t_ns, numbers), (sites, roles));
                let end = start + 1 + out.n;
                self.buf.truncate(end);
                Frame {
                    buf: &mut self.buf,
                    start,
                }
                .close();
                r.t_ns = t_ns;
            }
        }
    }

    /// A `born` record: the dtype and device declared when they differ from the previous
    /// birth's (told by `kind` when the caller gives one, else by the strings).
    #[inline]
    fn born(&mut self, b: &BornRef<'_>) {
        let same_kind = b.kind != BornRef::ANY_KIND && b.kind == self.kind;
        let r = &self.running;
        let new_type = !same_kind
            && (self.strings_differ(r.dtype, b.dtype) || self.strings_differ(r.device, b.device));
        self.kind = b.kind;
        let (dtype_id, device_id) = if new_type {
            (self.intern(b.dtype), self.intern(b.device))
        } else {
            (self.running.dtype, self.running.device)
        };
        let r = &mut self.running;
        let mut flags = 0;
        if let Some(f) = b.frame {
            flags |= born::HAS_FRAME;
            if r.frame != Some(f) {
                flags |= born::NEW_FRAME;
            }
        }
        if let Some(s) = b.shape {
            flags |= born::HAS_SHAPE;
            if !same(&r.shape, s) {
                flags |= born::NEW_SHAPE;
            }
        }
        if new_type {
            flags |= born::NEW_TYPE;
        }
        if r.thread != b.thread {
            flags |= born::NEW_THREAD;
        }
        if flags & born::NEW_SHAPE != 0 {
            // A shape of any length: the general frame.
            let f = Frame::open(&mut self.buf, tag::BORN);
            born_fields(f.buf, r, flags, b, (dtype_id, device_id));
            f.close();
        } else {
            let mut rec = Small::new(tag::BORN);
            born_fields(&mut rec, r, flags, b, (dtype_id, device_id));
            rec.finish(&mut self.buf);
        }
        if new_type {
            (r.dtype, r.device) = (dtype_id, device_id);
        }
        if let (true, Some(s)) = (flags & born::NEW_SHAPE != 0, b.shape) {
            r.shape.clear();
            r.shape.extend_from_slice(s);
        }
        if let Some(f) = b.frame {
            r.frame = Some(f);
        }
        r.thread = b.thread;
        (r.t_ns, r.tensor, r.iteration, r.storage) = (b.t_ns, b.tensor, b.iteration, b.storage);
    }

    /// The events that are not written at every step.
    #[cold]
    fn encode_rare(&mut self, event: &Event) {
        match event {
            Event::Header {
                pid,
                started_unix_ms,
                tool_version,
                rank,
                world_size,
                host,
                ..
            } => {
                let f = Frame::open(&mut self.buf, tag::HEADER);
                put(f.buf, u64::from(*pid));
                put(f.buf, *started_unix_ms);
                put_str(f.buf, tool_version);
                let flags = u8::from(rank.is_some())
                    | u8::from(world_size.is_some()) << 1
                    | u8::from(host.is_some()) << 2;
                f.buf.push(flags);
                for v in [rank, world_size].into_iter().flatten() {
                    put(f.buf, u64::from(*v));
                }
                if let Some(h) = host {
                    put_str(f.buf, h);
                }
                f.close();
            }
            Event::Sampling { interval } => {
                let f = Frame::open(&mut self.buf, tag::SAMPLING);
                put(f.buf, *interval);
                f.close();
            }
            Event::Site { id, info } => {
                let f = Frame::open(&mut self.buf, tag::SITE);
                put(f.buf, u64::from(*id));
                site_info(f.buf, info);
                f.close();
            }
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
            } => {
                let name = self.intern(name);
                let r = &mut self.running;
                let f = Frame::open(&mut self.buf, tag::LOOP_START);
                put(f.buf, zigzag_delta(*t_ns, r.t_ns));
                r.t_ns = *t_ns;
                put(f.buf, *frame);
                put(f.buf, u64::from(*site));
                put(f.buf, u64::from(name));
                put(f.buf, *thread);
                put(f.buf, *session);
                optionals(f.buf, &[*parent, *parent_iteration, *warmup, *window]);
                f.close();
            }
            Event::CallPath { id, frames } => {
                let ids: Vec<(u32, u32, u32)> = frames
                    .iter()
                    .map(
                        |CallFrame {
                             function,
                             file,
                             line,
                         }| {
                            (self.intern(function), self.intern(file), *line)
                        },
                    )
                    .collect();
                let f = Frame::open(&mut self.buf, tag::CALL_PATH);
                put(f.buf, u64::from(*id));
                put(f.buf, ids.len() as u64);
                for (function, file, line) in ids {
                    put(f.buf, u64::from(function));
                    put(f.buf, u64::from(file));
                    put(f.buf, u64::from(line));
                }
                f.close();
            }
            Event::PostMortem { t_ns, post_mortem } => {
                let r = &mut self.running;
                let f = Frame::open(&mut self.buf, tag::POST_MORTEM);
                put(f.buf, zigzag_delta(*t_ns, r.t_ns));
                r.t_ns = *t_ns;
                serde_json::to_writer(&mut *f.buf, post_mortem).expect("writes to a Vec");
                f.close();
            }
            Event::LoopEnd {
                t_ns,
                frame,
                iterations,
            } => {
                let r = &mut self.running;
                let f = Frame::open(&mut self.buf, tag::LOOP_END);
                put(f.buf, zigzag_delta(*t_ns, r.t_ns));
                r.t_ns = *t_ns;
                put(f.buf, *frame);
                put(f.buf, *iterations);
                f.close();
            }
            Event::Memory {
                t_ns,
                device,
                sample,
            } => {
                let device = self.intern(device);
                let r = &mut self.running;
                let f = Frame::open(&mut self.buf, tag::MEMORY);
                put(f.buf, zigzag_delta(*t_ns, r.t_ns));
                r.t_ns = *t_ns;
                put(f.buf, u64::from(device));
                put(f.buf, sample.tracked);
                optionals(
                    f.buf,
                    &[
                        sample.pool_used,
                        sample.pool_reserved,
                        sample.device_used,
                        sample.device_total,
                        sample.process_resident,
                    ],
                );
                f.close();
            }
            Event::Born { .. }
            | Event::Dropped { .. }
            | Event::Stored { .. }
            | Event::Alias { .. }
            | Event::IterationEnd { .. } => {
                if let Some(step) = event.step() {
                    self.encode_step(step);
                }
            }
        }
    }

    /// Whether `s` is not the string declared as `id`.
    #[inline]
    fn strings_differ(&self, id: u32, s: &str) -> bool {
        self.names
            .get(id as usize)
            .is_none_or(|n| !same(n.as_bytes(), s.as_bytes()))
    }

    /// The index of `s`, declared now (a `STRING` record) if it is new.
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.insert(s.to_string(), id);
        self.names.push(s.to_string());
        let f = Frame::open(&mut self.buf, tag::STRING);
        f.buf.extend_from_slice(s.as_bytes());
        f.close();
        id
    }
}

impl<W: Write> Drop for BinaryWriter<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Whether `a` and `b` are equal, compared in place (dtypes, devices and shapes are a few
/// items: a call to `memcmp` would cost more than the comparison).
#[inline(always)]
fn same<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Bytes of a [`Small`] record: a `born` without a new shape at its longest (10-byte
/// varints) is 88.
const SMALL: usize = 96;

/// A step's record gathered on the stack, its length known before it is appended (one
/// byte: it is under 128).
struct Small {
    b: [u8; SMALL],
    n: usize,
}

impl Small {
    #[inline(always)]
    fn new(tag: u8) -> Self {
        let mut b = [0; SMALL];
        b[1] = tag;
        Small { b, n: 2 }
    }

    /// Appends the record to `buf`: the whole array (a copy of a known size, no call),
    /// then the tail beyond the record cut off.
    #[inline(always)]
    fn finish(mut self, buf: &mut Vec<u8>) {
        self.b[0] = (self.n - 1) as u8;
        let end = buf.len() + self.n;
        buf.extend_from_slice(&self.b);
        buf.truncate(end);
    }
}

impl Out for Small {
    #[inline(always)]
    fn put(&mut self, v: u64) {
        self.n = put_at(&mut self.b, self.n, v);
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.b[self.n] = b;
        self.n += 1;
    }
}

/// `v` as a varint at `b[n..]`; the index after it.
#[inline(always)]
fn put_at(b: &mut [u8], mut n: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        b[n] = v as u8 | 0x80;
        n += 1;
        v >>= 7;
    }
    b[n] = v as u8;
    n + 1
}

/// A record written into room made for it at the end of the buffer: its bytes from the
/// start of `b`.
struct InPlace<'a> {
    b: &'a mut [u8],
    n: usize,
}

impl Out for InPlace<'_> {
    #[inline(always)]
    fn put(&mut self, v: u64) {
        self.n = put_at(self.b, self.n, v);
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.b[self.n] = b;
        self.n += 1;
    }
}

/// The payload of an `iteration_end` record: the time (against `r`), the frame,
/// iteration, duration, live tensors and bytes, then the sites' summaries and the roles.
#[inline(always)]
fn iteration_end(
    out: &mut impl Out,
    r: &Running,
    (t_ns, numbers): (u64, [u64; 5]),
    (sites, roles): (&[SiteSweep], &[RoleBytes]),
) {
    out.put(zigzag_delta(t_ns, r.t_ns));
    for v in numbers {
        out.put(v);
    }
    out.put(sites.len() as u64);
    for s in sites {
        site_sweep(out, s);
    }
    out.put(roles.len() as u64);
    for role in roles {
        role_bytes(out, role);
    }
}

/// The payload of a `born` record (`flags` computed against `r`, not yet updated).
#[inline(always)]
fn born_fields(out: &mut impl Out, r: &Running, flags: u8, b: &BornRef<'_>, ids: (u32, u32)) {
    out.put(zigzag_delta(b.t_ns, r.t_ns));
    out.put(zigzag_delta(b.tensor, r.tensor));
    out.put(u64::from(b.site));
    out.byte(flags);
    if flags & born::NEW_FRAME != 0 {
        out.put(b.frame.unwrap_or(0));
    }
    out.put(zigzag_delta(b.iteration, r.iteration));
    out.put(b.bytes);
    out.put(zigzag_delta(b.storage, r.storage));
    if flags & born::NEW_SHAPE != 0 {
        let s = b.shape.unwrap_or_default();
        out.put(s.len() as u64);
        for d in s {
            out.put(*d as u64);
        }
    }
    if flags & born::NEW_TYPE != 0 {
        out.put(u64::from(ids.0));
        out.put(u64::from(ids.1));
    }
    if flags & born::NEW_THREAD != 0 {
        out.put(b.thread);
    }
}

/// A frame being written at the end of a buffer: a length byte reserved, the tag, then
/// the payload; [`Frame::close`] writes the length (moving the payload when the length
/// needs more than one byte).
struct Frame<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Frame<'a> {
    #[inline]
    fn open(buf: &'a mut Vec<u8>, tag: u8) -> Self {
        let start = buf.len();
        buf.push(0);
        buf.push(tag);
        Frame { buf, start }
    }

    #[inline]
    fn close(self) {
        let len = self.buf.len() - self.start - 1;
        if len < 0x80 {
            self.buf[self.start] = len as u8;
            return;
        }
        let mut prefix = Vec::with_capacity(10);
        put(&mut prefix, len as u64);
        let extra = prefix.len() - 1;
        let end = self.buf.len();
        self.buf.resize(end + extra, 0);
        self.buf
            .copy_within(self.start + 1..end, self.start + 1 + extra);
        self.buf[self.start..self.start + prefix.len()].copy_from_slice(&prefix);
    }
}
