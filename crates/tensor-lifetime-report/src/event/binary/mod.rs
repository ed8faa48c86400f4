//! The binary event log: the same events as the JSON lines, framed, with numbers as
//! LEB128 varints, so that writing one costs no number formatting and a step's events take
//! a few bytes each. `docs/event-log.md` ("The binary format") documents it byte by byte;
//! the constants below are its vocabulary.
//!
//! - A file header: [`MAGIC`] (8 bytes), the major and the minor version (a byte each).
//! - Then records, each a frame: its length (a varint: the bytes of the tag and the
//!   payload), a tag byte ([`tag`]), the payload. A reader that meets a frame longer than
//!   what is left stops there with everything before it read (a cut-off tail); one that
//!   meets a frame it cannot decode reports it with its byte offset.
//! - Strings that recur (dtypes, devices, loop names, call frames' functions and files)
//!   are declared once by a [`tag::STRING`] record and referred to by index; sites are
//!   declared once by their `site` event and referred to by id, as in the JSON lines.
//! - Times, tensor ids and storages are written as the zigzag-coded difference from the
//!   previous one of their kind, so a step's records hold small numbers.
//!
//! The writer ([`BinaryWriter`], `write.rs`) and the reader ([`BinaryReader`], `read.rs`)
//! keep the same running state (`Running`) record for record.

mod cursor;
mod encode;
mod read;
mod write;

use crate::event::SiteKind;
pub use read::BinaryReader;
pub use write::BinaryWriter;

/// The first 8 bytes of a binary event log. The first byte is not ASCII (so no text log
/// starts this way, and a 7-bit transfer shows); `\r\n` shows a line-ending conversion;
/// `0x1a` stops a `type` on a terminal.
pub const MAGIC: [u8; 8] = *b"\x89TLEV\r\n\x1a";
/// The major version: a reader refuses a log of another major version.
pub const MAJOR_VERSION: u8 = 1;
/// The minor version: records added within a major version get new tags; a reader skips
/// a tag it does not know in a log of a higher minor version.
pub const MINOR_VERSION: u8 = 1;
/// Bytes of the file header: the magic and the two versions.
pub const FILE_HEADER_LEN: usize = MAGIC.len() + 2;
/// The longest frame a reader accepts (a larger length is a corrupt frame).
pub const MAX_FRAME: u64 = 1 << 26;

/// The tag byte of each record kind.
pub mod tag {
    /// A string declared for later reference: its index is the count of strings before it.
    pub const STRING: u8 = 0x01;
    pub const HEADER: u8 = 0x02;
    pub const SITE: u8 = 0x03;
    pub const LOOP_START: u8 = 0x04;
    pub const BORN: u8 = 0x05;
    pub const ALIAS: u8 = 0x06;
    pub const STORED: u8 = 0x07;
    pub const DROPPED: u8 = 0x08;
    pub const ITERATION_END: u8 = 0x09;
    pub const CALL_PATH: u8 = 0x0a;
    /// The `post_mortem` event: the time, then its JSON object (once per process).
    pub const POST_MORTEM: u8 = 0x0b;
    pub const LOOP_END: u8 = 0x0c;
    pub const MEMORY: u8 = 0x0d;
    /// The `sampling` event: the interval (minor version 1).
    pub const SAMPLING: u8 = 0x0e;
}

/// The site kinds by their byte in a `site` record.
pub(crate) const SITE_KINDS: [SiteKind; 5] = [
    SiteKind::Binding,
    SiteKind::Assignment,
    SiteKind::Store,
    SiteKind::Explicit,
    SiteKind::Loop,
];

/// The flag bits of a `born` record.
pub(crate) mod born {
    /// The event has a `frame`.
    pub const HAS_FRAME: u8 = 1;
    /// The frame differs from the previous birth's: it follows (else it is the same).
    pub const NEW_FRAME: u8 = 1 << 1;
    /// The event has a `shape`.
    pub const HAS_SHAPE: u8 = 1 << 2;
    /// The shape differs from the previous birth's: it follows.
    pub const NEW_SHAPE: u8 = 1 << 3;
    /// The dtype and device differ from the previous birth's: they follow.
    pub const NEW_TYPE: u8 = 1 << 4;
    /// The thread differs from the previous birth's: it follows.
    pub const NEW_THREAD: u8 = 1 << 5;
    /// Every bit a reader knows.
    pub const ALL: u8 = (1 << 6) - 1;
}

/// What each record is written relative to: the same on both sides, updated record for
/// record.
#[derive(Debug, Default)]
pub(crate) struct Running {
    /// The previous event's time (any event that has one).
    pub t_ns: u64,
    /// The previous tensor id (`born`, `alias`, `stored`, `dropped`).
    pub tensor: u64,
    /// The previous birth's storage, iteration, frame, thread, shape, dtype and device.
    pub storage: u64,
    pub iteration: u64,
    pub frame: Option<u64>,
    pub thread: u64,
    pub shape: Vec<usize>,
    pub dtype: u32,
    pub device: u32,
}

/// The zigzag code of `now - before` (wrapping): small either way round.
#[inline]
pub(crate) fn zigzag_delta(now: u64, before: u64) -> u64 {
    let d = now.wrapping_sub(before) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// The value whose [`zigzag_delta`] from `before` is `code`.
#[inline]
pub(crate) fn undo_zigzag_delta(code: u64, before: u64) -> u64 {
    let d = ((code >> 1) as i64) ^ -((code & 1) as i64);
    before.wrapping_add(d as u64)
}

#[cfg(test)]
mod tests;
