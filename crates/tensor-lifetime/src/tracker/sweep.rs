//! The sweep: at an iteration end (and before every query) one walk of the live records
//! removes the dead ones, claims each live storage for its oldest record (bytes counted
//! once per storage), tallies bytes per device and per role ([`super::tally`]), and
//! collects the survivors of the ending frame for [`super::holders`] to summarize by
//! site. Which walk runs is [`Walk`]'s rule; what a walk does with each record it visits
//! is [`Visit`]'s, the same for the exact walk (here) and the partial one
//! ([`super::generations`]).
//!
//! # What an iteration end walks
//!
//! - **Exact walk** (every live record): while at most `TENSOR_LIFETIME_EXACT_MAX` (16)
//!   records are alive; at the end of an *outermost* iteration (a loop with no enclosing
//!   loop on its thread); at every query (`report`, `snapshot`, `site_totals`, leak
//!   tests, `memory_stats`); at the close of a loop nested two deep or more (its
//!   survivors are handed to an enclosing iteration whose end is partial). A loop whose
//!   enclosing loop is outermost hands them over without a walk: the aggregates of its
//!   frame move to that iteration ([`super::generations::Generations::reframe`]), and the
//!   outermost iteration's end walks everything.
//! - **Partial sweep** (an inner iteration end with more records alive,
//!   [`super::generations`]): the *young* records (made since the latest sweep, those
//!   whose tensor had an autograd op, and those of running iterations, below) are walked
//!   and, but for the latter two, turned *old*;
//!   then one shard of at most 28 old records, round robin: at every partial sweep
//!   while the walks find dead records, and up to every 16th while they find none (the
//!   interval doubles after each walk that finds none). The cost is what changed since
//!   the last sweep plus a bounded amount, whatever is alive.
//! - **Running iterations**: a walk leaves young (or makes young again) the records born
//!   in an iteration still running, but at an iteration end those of the loops enclosing
//!   the ending one on its thread ([`super::frames::running_iterations`], [`Walk`]). So
//!   another thread's walk never turns this thread's temporaries old, and a nested loop's
//!   close leaves its survivors young: the enclosing iteration's end walks them, and
//!   finds the buffer an episode dropped dead instead of counting it from aggregates.
//! - **Aggregates** stand in for the old records: per (frame, site) survivors, their
//!   iterations, bytes and holders, and per device the bytes they own, added when a
//!   record turns old, moved when a store is seen on it, taken when a walk finds it dead,
//!   rebuilt from the records at every exact walk.
//!
//! Between two exact walks the summaries are those of an exact walk except for:
//! an old record dead but not yet reached by the round robin still counts (survivors,
//! bytes, device bytes, their split by role and their peak) for up to 16 × (old records
//! / 14) inner iteration ends;
//! a storage shared between an old record and a record made after the latest exact walk
//! is counted for both (only sharing seen at that walk, or among records turned old
//! together, is known), and when its owner dies its views do not take its bytes over
//! until the next exact walk; an old record in a young survivor's autograd graph keeps
//! its own holder (the graph's size is exact); refcounts are those read when a record
//! turned old. Growth that these hide or add is settled at the next exact walk: a leak
//! may be confirmed at the next enclosing iteration end, not later. Records whose tensor
//! had an autograd op stay young, so a graph leak still costs a walk of its survivors.

use super::generations::Owner;
use super::holders::{summarize_survivors, GraphInputs};
use super::ingest::Pending;
use super::registry::Record;
use super::tally::{Devices, RoleTally};
use super::{FastMap, State};
use crate::device::DeviceId;
use tensor_lifetime_report::event::{Event, HolderSpec, SiteSweep};

/// A survivor of the ending frame, with what its summary reads of its record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Survivor {
    pub(super) key: usize,
    pub(super) site: u32,
    pub(super) iteration: u32,
    pub(super) id: u64,
    pub(super) storage: usize,
    pub(super) storage_bytes: u64,
    pub(super) view_bytes: u64,
    pub(super) store: u32,
    pub(super) refcount: u32,
    pub(super) has_graph: bool,
    pub(super) role: u8,
    pub(super) path: u32,
}

impl Survivor {
    #[inline]
    pub(super) fn of(key: usize, r: &Record, refcount: usize) -> Survivor {
        Survivor {
            key,
            site: r.site,
            iteration: r.iteration,
            id: r.id,
            storage: r.storage,
            storage_bytes: r.storage_bytes,
            view_bytes: r.view_bytes,
            store: r.store,
            refcount: refcount.min(u32::MAX as usize) as u32,
            has_graph: r.has_graph,
            role: r.role,
            path: r.path,
        }
    }
}

/// What every walk does with a record it visits, exact or partial: a dead record is
/// counted (its id kept for the log's event; a temporary of its role when born since the
/// latest iteration end) and removed by the caller; a live one counts for its role and,
/// when it owns its storage, for its device and role's bytes; the survivors of the
/// ending frame are collected. Who owns a storage is the walk's to say: the exact walk
/// claims storages, a partial one knows the owners from the latest full walk.
pub(super) struct Visit<'a> {
    /// The frame whose survivors are collected.
    frame: Option<u64>,
    /// The ids of the dead are kept (an event log is written).
    log: bool,
    /// Records found dead.
    pub(super) dropped: u64,
    dead: &'a mut Vec<u64>,
    survivors: &'a mut Vec<Survivor>,
    roles: &'a mut RoleTally,
}

impl<'a> Visit<'a> {
    /// A walk collecting the survivors of `frame`, into the cleared buffers.
    pub(super) fn new(
        frame: Option<u64>,
        log: bool,
        dead: &'a mut Vec<u64>,
        survivors: &'a mut Vec<Survivor>,
        roles: &'a mut RoleTally,
    ) -> Visit<'a> {
        dead.clear();
        survivors.clear();
        Visit {
            frame,
            log,
            dropped: 0,
            dead,
            survivors,
            roles,
        }
    }

    /// Whether `r` (with strong count `refcount`) is dead; a dead one is counted, as a
    /// temporary of its role too when `temporary` (a young record may be one).
    #[inline(always)]
    pub(super) fn dead(&mut self, r: &Record, refcount: usize, temporary: bool) -> bool {
        if refcount != 0 {
            return false;
        }
        self.dropped += 1;
        if temporary {
            self.roles.dead(r.id, r.role, r.storage_bytes);
        }
        if self.log {
            self.dead.push(r.id);
        }
        true
    }

    /// Live record `r` of `key` (with strong count `refcount`): its role's tensors, and
    /// a survivor if it is the ending frame's.
    #[inline(always)]
    pub(super) fn live(&mut self, key: usize, r: &Record, refcount: usize) {
        if Some(r.frame()) == self.frame {
            self.survivors.push(Survivor::of(key, r, refcount));
        }
        self.roles.tensor(r.role);
    }

    /// `r` owns its storage: its bytes count for its device and role.
    #[inline(always)]
    pub(super) fn owns(&mut self, devices: &mut Devices, r: &Record) {
        devices.count(r.device, r.storage_bytes);
        self.roles.bytes(r.role, r.storage_bytes);
    }
}

/// The working buffers of [`Tracker::drain`] and [`State::sweep`]: kept between
/// iteration ends so that a steady loop allocates nothing there. Each is given back when
/// it grew large ([`trim_vec`]), so steady-state memory stays the records alone.
#[derive(Default)]
pub(super) struct Scratch {
    /// Probes taken from the threads' buffers.
    pub(super) drained: Vec<Pending>,
    /// Ids of the records found dead in the current sweep (for the event log).
    pub(super) dead: Vec<u64>,
    /// Survivors of the ending frame.
    pub(super) survivors: Vec<Survivor>,
    /// Holder counts of the site being summarized.
    pub(super) holders: Vec<(HolderSpec, u64)>,
    /// The sweep's per-site summaries (the `sites` of its `iteration_end` event).
    pub(super) sites: Vec<SiteSweep>,
    /// Partial sweeps: young records turning old, the storages they claim, and the
    /// summaries merged with the aggregates.
    pub(super) promote: Vec<(usize, Record)>,
    pub(super) storages: FastMap<usize, Owner>,
    pub(super) merged: Vec<SiteSweep>,
    /// The running iterations whose records the sweep leaves young
    /// ([`super::frames::running_iterations`]).
    pub(super) running: Vec<(u32, u32)>,
    /// The event log's latest birth event, refilled for the next one.
    pub(super) born: Option<Event>,
}

impl Scratch {
    pub(super) const KEEP: usize = super::registry::KEEP;

    /// After a drain: a large drain's buffer is not kept (nor handed to a thread).
    pub(super) fn trim_drain(&mut self) {
        trim_vec(&mut self.drained);
    }

    /// At the end of a sweep (its summaries, `sites`, are trimmed once used).
    pub(super) fn trim_sweep(&mut self) {
        trim_vec(&mut self.dead);
        trim_vec(&mut self.survivors);
        trim_vec(&mut self.holders);
    }
}

pub(super) fn trim_vec<T>(v: &mut Vec<T>) {
    if v.capacity() > Scratch::KEEP {
        *v = Vec::new();
    }
}

pub(super) fn trim_map<K, V>(m: &mut FastMap<K, V>) {
    if m.capacity() > Scratch::KEEP {
        *m = FastMap::default();
    }
}

/// A live storage's claim: its bytes count once, for its owner (the oldest live record
/// using it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Claim {
    pub(super) owner: u64,
    pub(super) owner_site: u32,
    /// More than one live record uses the storage.
    pub(super) shared: bool,
    bytes: u64,
    device: DeviceId,
    role: u8,
}

impl Claim {
    fn of(r: &Record) -> Claim {
        Claim {
            owner: r.id,
            owner_site: r.site,
            shared: false,
            bytes: r.storage_bytes,
            device: r.device,
            role: r.role,
        }
    }
}

/// Why a sweep runs: whose survivors it summarizes, and which running iterations' records
/// it may turn old ([`super::frames::running_iterations`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Walk {
    /// The end of an iteration of `frame`: its records, and the running iterations of
    /// the loops enclosing it on its thread, may turn old.
    End { frame: u64, outermost: bool },
    /// The close of a loop nested two deep or more, whose survivors now belong to the
    /// enclosing loop's running iteration: they stay young for that iteration's end;
    /// the running iterations of `settled` (the loop enclosing that one) and of its
    /// enclosing loops may turn old.
    Close { settled: u64 },
    /// A query (a report, a snapshot, a leak test's verdict): no running iteration's
    /// records turn old.
    Query,
}

impl Walk {
    /// The frame whose survivors the sweep summarizes.
    fn frame(self) -> Option<u64> {
        match self {
            Walk::End { frame, .. } => Some(frame),
            Walk::Close { .. } | Walk::Query => None,
        }
    }

    /// The frame whose iteration end walks partially, if this walk does: an inner
    /// iteration end while records are old (`generational`). Every other walk is exact.
    fn partial(self, generational: bool) -> Option<u64> {
        match self {
            Walk::End {
                frame,
                outermost: false,
            } if generational => Some(frame),
            _ => None,
        }
    }

    /// The innermost loop whose running iteration (and its enclosing loops') may turn old.
    pub(super) fn settled(self) -> Option<u64> {
        match self {
            Walk::End { frame, .. } => Some(frame),
            Walk::Close { settled } => Some(settled),
            Walk::Query => None,
        }
    }
}

/// What a sweep counted: live records and their bytes (each storage once).
pub(super) struct SweepResult {
    pub(super) live_tensors: u64,
    pub(super) live_bytes: u64,
}

impl State {
    /// Claims each live storage for its oldest record (the dead ones are gone), then
    /// [`State::tally_claims`]. Out of line: a sweep of a few records needs it only when
    /// the bitmap of their storages had a collision.
    #[inline(never)]
    fn claim_storages(&mut self) -> u64 {
        self.build_claims();
        self.tally_claims()
    }

    /// The claims table of every live record.
    pub(super) fn build_claims(&mut self) {
        let claims = &mut self.claims;
        claims.clear();
        claims.reserve(self.registry.len());
        for r in self.registry.iter() {
            claim(claims, r);
        }
    }

    /// Counts the bytes of the claims per device (their `tally`); returns their total.
    fn tally_claims(&mut self) -> u64 {
        self.devices.start_count();
        self.roles.reset_bytes();
        let mut live_bytes = 0;
        for c in self.claims.values() {
            live_bytes += c.bytes;
            self.devices.count(c.device, c.bytes);
            self.roles.bytes(c.role, c.bytes);
        }
        live_bytes
    }

    /// The sweep `walk`: exact (every record walked) while few records are alive, at an
    /// outermost iteration end, a close or a query; otherwise partial (see the module
    /// docs).
    pub(super) fn sweep(&mut self, walk: Walk, t_ns: u64, log: bool) -> SweepResult {
        if let Some(frame) = walk.partial(self.gens.is_some()) {
            return self.partial_sweep(walk, frame, t_ns, log);
        }
        let frame = walk.frame();
        let (result, claimed) = self.exact_sweep(frame, t_ns, log);
        if self.gens.is_some() || self.registry.len() > self.exact_max {
            if !claimed {
                self.build_claims();
            }
            self.rebuild_generations(walk.settled());
        }
        // The claims table is rebuilt when needed; its capacity is kept for typical loops
        // and given back when large, so steady-state memory is the records alone.
        trim_map(&mut self.claims);
        result
    }

    /// Walks the records once: drops the dead, claims each live storage for its oldest
    /// record (bytes counted once per storage), and summarizes the survivors of `frame`
    /// by site.
    ///
    /// Storage claims are rebuilt at every sweep that needs them rather than kept
    /// incrementally: a storage's address is reused by the allocator as soon as it is
    /// freed, so only the storages of records alive now identify storages reliably.
    /// Also returns whether the claims table now holds every live storage.
    fn exact_sweep(&mut self, frame: Option<u64>, t_ns: u64, log: bool) -> (SweepResult, bool) {
        let total = self.live_len();
        let (registry, scratch, devices) =
            (&mut self.registry, &mut self.scratch, &mut self.devices);
        let mut visit = Visit::new(
            frame,
            log,
            &mut scratch.dead,
            &mut scratch.survivors,
            &mut self.roles,
        );
        let mut live_bytes = 0;
        // The storages of a few live records are usually distinct: a bitmap of their
        // hashed addresses shows it during the walk, each record then owns its storage,
        // and the claims table is built only when the bitmap has a collision. Many
        // records build it in the walk (one pass over them).
        let few = total <= StorageBits::MAX;
        let mut distinct = few.then(StorageBits::default);
        let mut claims = if few {
            None
        } else {
            let c = &mut self.claims;
            c.clear();
            c.reserve(total);
            Some(c)
        };
        // One pass: the dead are removed in place (no second lookup).
        registry.retain(&mut |key: &usize, r: &mut Record| {
            let refcount = r.weak.strong_count();
            if visit.dead(r, refcount, true) {
                return false;
            }
            visit.live(*key, r, refcount);
            if let Some(c) = claims.as_deref_mut() {
                claim(c, r);
            } else if let Some(bits) = distinct.as_mut() {
                if bits.insert(r.storage) {
                    live_bytes += r.storage_bytes;
                    visit.owns(devices, r);
                } else {
                    distinct = None;
                }
            }
            true
        });
        let dropped = visit.dropped;
        self.note_drops(dropped, t_ns);
        let shared = !few || distinct.is_none();
        if !few {
            live_bytes = self.tally_claims();
        } else if shared {
            live_bytes = self.claim_storages();
        }
        self.devices.finish_count(false);
        self.roles.finish_sweep();
        summarize_survivors(
            &mut self.scratch,
            shared.then_some(&self.claims),
            GraphInputs {
                made_from: &self.made_from,
                registry: &self.registry,
            },
        );
        self.prune_made_from(true);
        self.scratch.trim_sweep();
        let result = SweepResult {
            live_tensors: self.live_len() as u64,
            live_bytes,
        };
        (result, shared)
    }

    /// Counts `dropped` records found dead (with a log, as events of the ids in
    /// `scratch.dead`).
    pub(super) fn note_drops(&mut self, dropped: u64, t_ns: u64) {
        self.sink.drops(dropped, &mut self.scratch.dead, t_ns);
    }
}

/// Claims `r`'s storage for it if it is the storage's oldest live record so far.
#[inline]
fn claim(claims: &mut FastMap<usize, Claim>, r: &Record) {
    claims
        .entry(r.storage)
        .and_modify(|c| {
            if r.id < c.owner {
                *c = Claim::of(r);
            }
            c.shared = true;
        })
        .or_insert_with(|| Claim::of(r));
}

/// A 512-bit set of hashed storage addresses: tells that up to [`StorageBits::MAX`]
/// storages are distinct without a hash table (a collision may be a false alarm).
#[derive(Default)]
struct StorageBits([u64; 8]);

impl StorageBits {
    /// Beyond this many records a collision is likely: the claims table is built.
    const MAX: usize = 48;

    /// Adds `storage`; false when its bit was set already.
    #[inline]
    fn insert(&mut self, storage: usize) -> bool {
        let h = (storage as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 55;
        let (word, bit) = ((h >> 6) as usize, 1u64 << (h & 63));
        let new = self.0[word] & bit == 0;
        self.0[word] |= bit;
        new
    }
}
