//! The payload encoders of the binary log: LEB128 varints, strings in place, optional
//! values behind a presence byte, and the records' larger parts (a site, a site's sweep
//! summary, a role's bytes). `cursor.rs` decodes what these write.

use crate::event::{HolderSpec, SiteInfo, SiteNote, SiteSweep};
use crate::roles::RoleBytes;

/// `v` as an unsigned LEB128 varint: 7 bits a byte, low bits first, the high bit set on
/// every byte but the last.
#[inline]
pub(super) fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Where a record's varints and bytes go: the growing buffer of a frame, or (the
/// writer's) a record gathered on the stack or written into room made for it.
pub(super) trait Out {
    fn put(&mut self, v: u64);
    fn byte(&mut self, b: u8);
}

impl Out for Vec<u8> {
    #[inline(always)]
    fn put(&mut self, v: u64) {
        put(self, v)
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.push(b)
    }
}

/// A string in place: its length in bytes (a varint), then its UTF-8 bytes.
pub(super) fn put_str(buf: &mut Vec<u8>, s: &str) {
    put(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

/// Optional values: a byte whose bit `i` says value `i` is present, then the present ones.
pub(super) fn optionals(buf: &mut Vec<u8>, values: &[Option<u64>]) {
    let flags = values
        .iter()
        .enumerate()
        .fold(0u8, |f, (i, v)| f | u8::from(v.is_some()) << i);
    buf.push(flags);
    for v in values.iter().flatten() {
        put(buf, *v);
    }
}

pub(super) fn site_info(buf: &mut Vec<u8>, info: &SiteInfo) {
    put_str(buf, &info.file);
    put(buf, u64::from(info.line));
    put(buf, u64::from(info.column));
    put_str(buf, &info.function);
    put_str(buf, &info.label);
    buf.push(
        super::SITE_KINDS
            .iter()
            .position(|k| *k == info.kind)
            .expect("a kind") as u8,
    );
    match &info.note {
        None => buf.push(0),
        Some(SiteNote::Evicted { line, call }) => {
            buf.push(1);
            put(buf, u64::from(*line));
            put_str(buf, call);
        }
        Some(SiteNote::Fills { holder }) => {
            buf.push(2);
            put_str(buf, holder);
        }
    }
    put(buf, info.from.len() as u64);
    for local in &info.from {
        put_str(buf, local);
    }
}

/// The most bytes [`site_sweep`] writes for `s` (every varint at its longest: a site or
/// call path 5, any other number 10): kept beside it, which it bounds.
pub(super) fn site_sweep_max(s: &SiteSweep) -> usize {
    5 + 10 * 10 + 1 + 10 + s.holders.len() * (1 + 5 + 10) + 10 + s.call_paths.len() * 5
}

pub(super) fn site_sweep(out: &mut impl Out, s: &SiteSweep) {
    out.put(u64::from(s.site));
    for v in [
        s.survivors,
        s.bytes,
        s.iterations,
        s.first_iteration,
        s.last_iteration,
        s.refcount,
        s.graph_tensors,
        s.graph_bytes,
        s.view_bytes,
        s.view_storage_bytes,
    ] {
        out.put(v);
    }
    out.byte(s.role.map_or(0, |r| r.index() as u8 + 1));
    out.put(s.holders.len() as u64);
    for h in &s.holders {
        let (kind, site) = match h.holder {
            HolderSpec::Store { site } => (0, Some(site)),
            HolderSpec::Graph { site } => (1, Some(site)),
            HolderSpec::View { site } => (2, Some(site)),
            HolderSpec::Unknown => (3, None),
        };
        out.byte(kind);
        if let Some(site) = site {
            out.put(u64::from(site));
        }
        out.put(h.count);
    }
    out.put(s.call_paths.len() as u64);
    for p in &s.call_paths {
        out.put(u64::from(*p));
    }
}

/// The most bytes [`role_bytes`] writes.
pub(super) const ROLE_BYTES_MAX: usize = 1 + 4 * 10;

pub(super) fn role_bytes(out: &mut impl Out, r: &RoleBytes) {
    out.byte(r.role.index() as u8);
    for v in [r.bytes, r.tensors, r.temporary_bytes, r.temporary_tensors] {
        out.put(v);
    }
}
