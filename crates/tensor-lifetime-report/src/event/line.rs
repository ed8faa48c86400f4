//! The JSON lines of the events a tracked loop writes at every step (births, drops,
//! stores, aliases, iteration ends), written by hand: the same bytes as `serde_json`
//! writes (`tests` below compare them), without its escaping of every key, which cost more
//! than a short training step (docs/performance.md, the event log on the rollout loop).
//! Every other event goes through `serde_json`.

use super::{BornRef, HolderCount, HolderSpec, SiteSweep, StepEvent};
use crate::roles::RoleBytes;
use std::io::{self, Write};

/// Writes a per-step event as one JSON line.
pub(super) fn write_step_line(event: StepEvent<'_>, out: &mut impl Write) -> io::Result<()> {
    let mut w = Line {
        out,
        buf: [0; LINE_BUF],
        len: 0,
    };
    match event {
        StepEvent::Born(BornRef {
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
            kind: _,
        }) => {
            w.raw(b"{\"event\":\"born\",\"t_ns\":")?;
            w.int(t_ns)?;
            w.key_int(b",\"tensor\":", tensor)?;
            w.key_int(b",\"site\":", u64::from(site))?;
            if let Some(frame) = frame {
                w.key_int(b",\"frame\":", frame)?;
            }
            w.key_int(b",\"iteration\":", iteration)?;
            w.key_int(b",\"bytes\":", bytes)?;
            w.key_int(b",\"storage\":", storage)?;
            if let Some(shape) = shape {
                w.array(b",\"shape\":", shape, |w, d| w.int(*d as u64))?;
            }
            w.raw(b",\"dtype\":")?;
            w.string(dtype)?;
            w.raw(b",\"device\":")?;
            w.string(device)?;
            w.key_int(b",\"thread\":", thread)?;
        }
        StepEvent::Alias { tensor, site } => {
            w.raw(b"{\"event\":\"alias\",\"tensor\":")?;
            w.int(tensor)?;
            w.key_int(b",\"site\":", u64::from(site))?;
        }
        StepEvent::Stored { t_ns, tensor, site } => {
            w.raw(b"{\"event\":\"stored\",\"t_ns\":")?;
            w.int(t_ns)?;
            w.key_int(b",\"tensor\":", tensor)?;
            w.key_int(b",\"site\":", u64::from(site))?;
        }
        StepEvent::Dropped { t_ns, tensor } => {
            w.raw(b"{\"event\":\"dropped\",\"t_ns\":")?;
            w.int(t_ns)?;
            w.key_int(b",\"tensor\":", tensor)?;
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
            w.raw(b"{\"event\":\"iteration_end\",\"t_ns\":")?;
            w.int(t_ns)?;
            w.key_int(b",\"frame\":", frame)?;
            w.key_int(b",\"iteration\":", iteration)?;
            w.key_int(b",\"duration_ns\":", duration_ns)?;
            w.key_int(b",\"live_tensors\":", live_tensors)?;
            w.key_int(b",\"live_bytes\":", live_bytes)?;
            w.non_empty(b",\"sites\":", sites, Line::site_sweep)?;
            w.non_empty(b",\"roles\":", roles, Line::role_bytes)?;
        }
    }
    w.raw(b"}\n")?;
    w.flush()
}

/// Bytes of a line gathered before they go to the writer (one `write_all` for most lines).
const LINE_BUF: usize = 512;

/// A line being written, gathered in a buffer on the stack.
struct Line<'a, W: Write> {
    out: &'a mut W,
    buf: [u8; LINE_BUF],
    len: usize,
}

/// `"00"` to `"99"`.
const DIGITS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl<W: Write> Line<'_, W> {
    /// Hands the gathered bytes to the writer.
    fn flush(&mut self) -> io::Result<()> {
        let n = std::mem::take(&mut self.len);
        self.out.write_all(&self.buf[..n])
    }

    #[inline(always)]
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.len + bytes.len() > LINE_BUF {
            self.flush()?;
            if bytes.len() > LINE_BUF {
                return self.out.write_all(bytes);
            }
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        Ok(())
    }

    /// An unsigned integer, in decimal, written in place (two digits at a time).
    #[inline]
    fn int(&mut self, mut v: u64) -> io::Result<()> {
        if self.len + 20 > LINE_BUF {
            self.flush()?;
        }
        let digits = v.checked_ilog10().unwrap_or(0) as usize + 1;
        let mut i = self.len + digits;
        self.len = i;
        while v >= 100 {
            let d = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            self.buf[i] = DIGITS[d];
            self.buf[i + 1] = DIGITS[d + 1];
        }
        if v >= 10 {
            let d = v as usize * 2;
            self.buf[i - 2] = DIGITS[d];
            self.buf[i - 1] = DIGITS[d + 1];
        } else {
            self.buf[i - 1] = b'0' + v as u8;
        }
        Ok(())
    }

    /// `,"key":v`: `key` is the whole prefix (keys are identifiers: nothing to escape).
    #[inline(always)]
    fn key_int(&mut self, key: &[u8], v: u64) -> io::Result<()> {
        self.raw(key)?;
        self.int(v)
    }

    /// `key` (the whole prefix, as for [`Line::key_int`]) and a JSON array of `items`.
    fn array<T>(
        &mut self,
        key: &[u8],
        items: &[T],
        mut item: impl FnMut(&mut Self, &T) -> io::Result<()>,
    ) -> io::Result<()> {
        self.raw(key)?;
        self.raw(b"[")?;
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                self.raw(b",")?;
            }
            item(self, x)?;
        }
        self.raw(b"]")
    }

    /// [`Line::array`], left out when `items` is empty (as serde's
    /// `skip_serializing_if = "Vec::is_empty"` does).
    fn non_empty<T>(
        &mut self,
        key: &[u8],
        items: &[T],
        item: impl FnMut(&mut Self, &T) -> io::Result<()>,
    ) -> io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        self.array(key, items, item)
    }

    /// A JSON string, escaped as `serde_json` escapes it.
    fn string(&mut self, s: &str) -> io::Result<()> {
        if s.bytes()
            .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f)
        {
            self.raw(b"\"")?;
            self.raw(s.as_bytes())?;
            self.raw(b"\"")
        } else {
            self.flush()?;
            serde_json::to_writer(&mut *self.out, s).map_err(io::Error::other)
        }
    }

    fn site_sweep(&mut self, s: &SiteSweep) -> io::Result<()> {
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
        } = s;
        self.raw(b"{\"site\":")?;
        self.int(u64::from(*site))?;
        self.key_int(b",\"survivors\":", *survivors)?;
        self.key_int(b",\"bytes\":", *bytes)?;
        self.key_int(b",\"iterations\":", *iterations)?;
        self.key_int(b",\"first_iteration\":", *first_iteration)?;
        self.key_int(b",\"last_iteration\":", *last_iteration)?;
        self.key_int(b",\"refcount\":", *refcount)?;
        self.non_empty(b",\"holders\":", holders, Line::holder)?;
        for (key, v) in [
            (&b",\"graph_tensors\":"[..], *graph_tensors),
            (b",\"graph_bytes\":", *graph_bytes),
            (b",\"view_bytes\":", *view_bytes),
            (b",\"view_storage_bytes\":", *view_storage_bytes),
        ] {
            if v != 0 {
                self.key_int(key, v)?;
            }
        }
        if let Some(role) = role {
            self.raw(b",\"role\":\"")?;
            self.raw(role.as_str().as_bytes())?;
            self.raw(b"\"")?;
        }
        self.non_empty(b",\"call_paths\":", call_paths, |w, p| w.int(u64::from(*p)))?;
        self.raw(b"}")
    }

    fn holder(&mut self, h: &HolderCount) -> io::Result<()> {
        let (kind, site): (&[u8], _) = match h.holder {
            HolderSpec::Store { site } => (b"store", Some(site)),
            HolderSpec::Graph { site } => (b"graph", Some(site)),
            HolderSpec::View { site } => (b"view", Some(site)),
            HolderSpec::Unknown => (b"unknown", None),
        };
        self.raw(b"{\"kind\":\"")?;
        self.raw(kind)?;
        self.raw(b"\"")?;
        if let Some(site) = site {
            self.key_int(b",\"site\":", u64::from(site))?;
        }
        self.key_int(b",\"count\":", h.count)?;
        self.raw(b"}")
    }

    fn role_bytes(&mut self, r: &RoleBytes) -> io::Result<()> {
        self.raw(b"{\"role\":\"")?;
        self.raw(r.role.as_str().as_bytes())?;
        self.raw(b"\"")?;
        self.key_int(b",\"bytes\":", r.bytes)?;
        self.key_int(b",\"tensors\":", r.tensors)?;
        if r.temporary_bytes != 0 {
            self.key_int(b",\"temporary_bytes\":", r.temporary_bytes)?;
        }
        if r.temporary_tensors != 0 {
            self.key_int(b",\"temporary_tensors\":", r.temporary_tensors)?;
        }
        self.raw(b"}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::Event;
    use crate::roles::Role;

    /// The line serde_json writes.
    fn serde_line(e: &Event) -> Vec<u8> {
        let mut v = serde_json::to_vec(e).unwrap();
        v.push(b'\n');
        v
    }

    fn fast_line(e: &Event) -> Vec<u8> {
        let mut v = Vec::new();
        let step = e.step().unwrap_or_else(|| panic!("{e:?} is a step event"));
        write_step_line(step, &mut v).unwrap();
        v
    }

    /// A site's summary with every field set (`full`) or the optional ones empty; also
    /// the binary format's tests' fixture.
    pub(crate) fn sweep(site: u32, full: bool) -> SiteSweep {
        SiteSweep {
            site,
            survivors: 3,
            bytes: u64::MAX,
            iterations: 2,
            first_iteration: 10,
            last_iteration: 12,
            refcount: 2,
            holders: if full {
                vec![
                    HolderCount {
                        holder: HolderSpec::Store { site: 4 },
                        count: 2,
                    },
                    HolderCount {
                        holder: HolderSpec::Graph { site: 0 },
                        count: 1,
                    },
                    HolderCount {
                        holder: HolderSpec::View { site: 9 },
                        count: 1,
                    },
                    HolderCount {
                        holder: HolderSpec::Unknown,
                        count: 7,
                    },
                ]
            } else {
                Vec::new()
            },
            graph_tensors: if full { 5 } else { 0 },
            graph_bytes: if full { 1 << 40 } else { 0 },
            view_bytes: if full { 64 } else { 0 },
            view_storage_bytes: if full { 4096 } else { 0 },
            role: full.then_some(Role::OptimizerState),
            call_paths: if full { vec![1, 30] } else { Vec::new() },
        }
    }

    #[test]
    fn step_events_are_the_lines_serde_json_writes() {
        let mut events = vec![
            Event::Alias { tensor: 0, site: 1 },
            Event::Stored {
                t_ns: 1,
                tensor: 99,
                site: u32::MAX,
            },
            Event::Dropped {
                t_ns: u64::MAX,
                tensor: 10,
            },
        ];
        for (frame, shape, dtype, device) in [
            (None, None, "f32", "cpu"),
            (Some(3), Some(vec![]), "bf16", "cuda:0"),
            (Some(0), Some(vec![16, 1, 4096]), "u8", "we\"ird\\\n\u{7f}é"),
        ] {
            events.push(Event::Born {
                t_ns: 123_456_789,
                tensor: 7,
                site: 2,
                frame,
                iteration: 41,
                bytes: 1 << 33,
                storage: 0x7f00_dead_beef,
                shape,
                dtype: dtype.into(),
                device: device.into(),
                thread: 1,
            });
        }
        for (sites, roles) in [
            (vec![], vec![]),
            // Longer than the line's buffer.
            ((0..20).map(|i| sweep(i, i % 2 == 0)).collect(), vec![]),
            (vec![sweep(1, false)], vec![]),
            (
                vec![sweep(1, true), sweep(2, false)],
                Role::ALL
                    .iter()
                    .enumerate()
                    .map(|(i, role)| RoleBytes {
                        role: *role,
                        bytes: i as u64 * 1000,
                        tensors: i as u64,
                        temporary_bytes: if i % 2 == 0 { 0 } else { 12 },
                        temporary_tensors: if i % 3 == 0 { 0 } else { 1 },
                    })
                    .collect(),
            ),
        ] {
            events.push(Event::IterationEnd {
                t_ns: 5,
                frame: 2,
                iteration: 0,
                duration_ns: 1_000_000_007,
                live_tensors: 12,
                live_bytes: 0,
                sites,
                roles,
            });
        }
        for e in &events {
            assert_eq!(
                String::from_utf8(fast_line(e)).unwrap(),
                String::from_utf8(serde_line(e)).unwrap()
            );
        }
    }

    #[test]
    fn other_events_are_left_to_serde_json() {
        let e = Event::LoopEnd {
            t_ns: 1,
            frame: 2,
            iterations: 3,
        };
        assert!(e.step().is_none());
    }
}
