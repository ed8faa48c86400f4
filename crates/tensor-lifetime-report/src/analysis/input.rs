//! What the analysis takes in, borrowed: an event's content without its time and
//! identities, or the same built by the tracker without an event.
//!
//! [`Input`] is the one entry of the state machine ([`super::Analysis::step`]): a saved
//! log's [`Event`] becomes an input through [`Input::of`], and the tracker's per-step
//! calls (`note_born_at`, `note_born_dropped`, `note_dropped`, `note_iteration_end`) make
//! one on the stack, so nothing is allocated on its path.

use crate::event::Event;
use crate::model::{dtype_size, own_bytes_sized, MemorySample, SiteInfo, SiteSweep};
use crate::post_mortem::PostMortem;
use crate::roles::{CallFrame, RoleBytes};

/// One step of the analysis (see the module docs). The events the judgement does not
/// read (the header, aliases, stores) have none.
#[derive(Debug)]
pub enum Input<'a> {
    /// A site declared ([`Event::Site`]).
    Site { id: u32, info: &'a SiteInfo },
    /// A call path declared ([`Event::CallPath`]).
    CallPath { id: u32, frames: &'a [CallFrame] },
    /// What was live at one moment ([`Event::PostMortem`]).
    PostMortem(&'a PostMortem),
    /// The tracker samples from here on, one tensor per `interval` bytes on average
    /// ([`Event::Sampling`]): the figures that follow are estimates.
    Sampling { interval: u64 },
    /// A loop frame opened ([`Event::LoopStart`]).
    LoopStart {
        frame: u64,
        site: u32,
        name: &'a str,
        parent: Option<u64>,
        session: u64,
        warmup: Option<u64>,
        window: Option<u64>,
    },
    /// A tensor born at `site` in `iteration` of `frame` ([`Event::Born`]): `bytes` is
    /// its own size ([`crate::model::own_bytes`]); `dropped` when it was found dead when
    /// first seen (a birth and its drop at once, counted among the births, never live).
    Born {
        site: u32,
        frame: Option<u64>,
        iteration: u64,
        bytes: u64,
        shape: Option<&'a [usize]>,
        dropped: bool,
    },
    /// A tensor found dropped ([`Event::Dropped`]).
    Dropped,
    /// An iteration of `frame` ended ([`Event::IterationEnd`]).
    IterationEnd {
        frame: u64,
        iteration: u64,
        live_tensors: u64,
        live_bytes: u64,
        /// The sweep's survivors by site.
        sites: &'a [SiteSweep],
        roles: Roles<'a>,
    },
    /// A loop frame closed after `iterations` iterations ([`Event::LoopEnd`]).
    LoopEnd { frame: u64, iterations: u64 },
    /// A memory sample of one device ([`Event::Memory`]).
    Memory {
        device: &'a str,
        sample: &'a MemorySample,
    },
}

/// An iteration end's split by role: an event's, copied, or the tracker's, taken (it
/// holds the previous iteration end's split afterwards, to be overwritten).
#[derive(Debug)]
pub enum Roles<'a> {
    Copied(&'a [RoleBytes]),
    Taken(&'a mut Vec<RoleBytes>),
}

impl<'a> Input<'a> {
    /// The input an event makes, if the judgement reads it.
    pub fn of(event: &'a Event) -> Option<Input<'a>> {
        Some(match event {
            Event::Header { .. } | Event::Alias { .. } | Event::Stored { .. } => return None,
            Event::Site { id, info } => Input::Site { id: *id, info },
            Event::CallPath { id, frames } => Input::CallPath { id: *id, frames },
            Event::Sampling { interval } => Input::Sampling {
                interval: *interval,
            },
            Event::PostMortem { post_mortem, .. } => Input::PostMortem(post_mortem),
            Event::LoopStart {
                frame,
                site,
                name,
                parent,
                session,
                warmup,
                window,
                ..
            } => Input::LoopStart {
                frame: *frame,
                site: *site,
                name,
                parent: *parent,
                session: *session,
                warmup: *warmup,
                window: *window,
            },
            Event::Born {
                site,
                frame,
                iteration,
                bytes,
                shape,
                dtype,
                ..
            } => Input::Born {
                site: *site,
                frame: *frame,
                iteration: *iteration,
                bytes: born_bytes(shape.as_deref(), dtype_size(dtype), *bytes),
                shape: shape.as_deref(),
                dropped: false,
            },
            Event::Dropped { .. } => Input::Dropped,
            Event::IterationEnd {
                frame,
                iteration,
                live_tensors,
                live_bytes,
                sites,
                roles,
                ..
            } => Input::IterationEnd {
                frame: *frame,
                iteration: *iteration,
                live_tensors: *live_tensors,
                live_bytes: *live_bytes,
                sites,
                roles: Roles::Copied(roles),
            },
            Event::LoopEnd {
                frame, iterations, ..
            } => Input::LoopEnd {
                frame: *frame,
                iterations: *iterations,
            },
            Event::Memory { device, sample, .. } => Input::Memory { device, sample },
        })
    }
}

/// The size a `born` event's tensor is judged on: its own bytes, its `shape` times the
/// `size` of its dtype's elements ([`dtype_size`]), or the event's `bytes` (its
/// storage's) when those are unknown.
#[inline]
pub(super) fn born_bytes(shape: Option<&[usize]>, size: Option<u64>, bytes: u64) -> u64 {
    size.and_then(|size| own_bytes_sized(shape, size))
        .unwrap_or(bytes)
}
