//! The sweep: at an iteration end (and before every query) one walk of the live records
//! removes the dead ones, claims each live storage for its oldest record (bytes counted
//! once per storage), tallies bytes per device and per role ([`super::tally`]), and
//! collects the survivors of the ending frame for [`holders`] to summarize by
//! site. Which walk runs is [`Walk`]'s rule; what a walk does with each record it visits
//! is [`Visit`]'s, the same for the exact walk (here) and the partial one
//! ([`generations`]).
//!
//! # What an iteration end walks
//!
//! - **Exact walk** (every live record): while at most `TENSOR_LIFETIME_EXACT_MAX` (16)
//!   records are alive; at the end of an *outermost* iteration (a loop with no enclosing
//!   loop on its thread); at every query (`report`, `snapshot`, `site_totals`, leak
//!   tests, `memory_stats`); at the close of a loop nested two deep or more (its
//!   survivors are handed to an enclosing iteration whose end is partial). A loop whose
//!   enclosing loop is outermost hands them over without a walk: the aggregates of its
//!   frame move to that iteration ([`Sweeper::reframe`]), and the
//!   outermost iteration's end walks everything.
//! - **Partial sweep** (an inner iteration end with more records alive,
//!   [`generations`]): the *young* records (made since the latest sweep, those
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

mod estimate;
mod generations;
mod holders;
mod site_counts;

pub(in crate::tracker) use estimate::{
    estimate_live, estimate_sites, estimate_temporaries, weight_of, Sample,
};
pub(in crate::tracker) use holders::{live_holdings, GraphInputs, Holding};

use super::frames::FrameState;
use super::inputs::MadeFrom;
use super::keep::{trim_map, trim_vec, FastMap};
use super::registry::{Record, Registry};
use super::sink::Sink;
use super::tally::{Devices, RoleTally};
use crate::device::DeviceId;
use generations::{Generations, Owner};
use holders::summarize_survivors;
use tensor_lifetime_report::event::{HolderSpec, SiteSweep};

/// A survivor of the ending frame, with what its summary reads of its record.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Survivor {
    pub(in crate::tracker) key: usize,
    pub(in crate::tracker) site: u32,
    pub(in crate::tracker) iteration: u32,
    pub(in crate::tracker) id: u64,
    pub(in crate::tracker) storage: usize,
    pub(in crate::tracker) storage_bytes: u64,
    pub(in crate::tracker) view_bytes: u64,
    pub(in crate::tracker) store: u32,
    pub(in crate::tracker) refcount: u32,
    pub(in crate::tracker) has_graph: bool,
    pub(in crate::tracker) role: u8,
    pub(in crate::tracker) path: u32,
}

impl Survivor {
    #[inline]
    pub(in crate::tracker) fn of(key: usize, r: &Record, refcount: usize) -> Survivor {
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
pub(in crate::tracker) struct Visit<'a> {
    /// The frame whose survivors are collected.
    frame: Option<u64>,
    /// The ids of the dead are kept (an event log is written).
    log: bool,
    /// Records found dead.
    pub(in crate::tracker) dropped: u64,
    dead: &'a mut Vec<u64>,
    survivors: &'a mut Vec<Survivor>,
    roles: &'a mut RoleTally,
}

impl<'a> Visit<'a> {
    /// A walk collecting the survivors of `frame`, into the cleared buffers.
    pub(in crate::tracker) fn new(
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
    pub(in crate::tracker) fn dead(
        &mut self,
        r: &Record,
        refcount: usize,
        temporary: bool,
    ) -> bool {
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
    pub(in crate::tracker) fn live(&mut self, key: usize, r: &Record, refcount: usize) {
        if Some(r.frame()) == self.frame {
            self.survivors.push(Survivor::of(key, r, refcount));
        }
        self.roles.tensor(r.role);
    }

    /// `r` owns its storage: its bytes count for its device and role.
    #[inline(always)]
    pub(in crate::tracker) fn owns(&mut self, devices: &mut Devices, r: &Record) {
        devices.count(r.device, r.storage_bytes);
        self.roles.bytes(r.role, r.storage_bytes);
    }
}

/// The working buffers of the walks: kept between iteration ends so that a steady loop
/// allocates nothing there. Each is given back when it grew large ([`trim_vec`]), so
/// steady-state memory stays the records alone.
#[derive(Default)]
struct Scratch {
    /// Ids of the records found dead in the current sweep (for the event log).
    dead: Vec<u64>,
    /// Survivors of the ending frame.
    survivors: Vec<Survivor>,
    /// Holder counts of the site being summarized.
    holders: Vec<(HolderSpec, u64)>,
    /// The sweep's per-site summaries (the `sites` of its `iteration_end` event).
    sites: Vec<SiteSweep>,
    /// Partial sweeps: young records turning old, the storages they claim, and the
    /// summaries merged with the aggregates.
    promote: Vec<(usize, Record)>,
    storages: FastMap<usize, Owner>,
    /// The storages of the records turning old and their owners, oldest first.
    owners: Vec<(usize, Owner)>,
    merged: Vec<SiteSweep>,
    /// The running iterations whose records the sweep leaves young
    /// ([`super::frames::running_iterations`]).
    running: Vec<(u32, u32)>,
}

impl Scratch {
    /// At the end of a sweep (its summaries, `sites`, are trimmed once used).
    fn trim_sweep(&mut self) {
        trim_vec(&mut self.dead);
        trim_vec(&mut self.survivors);
        trim_vec(&mut self.holders);
    }
}

/// A live storage's claim: its bytes count once, for its owner (the oldest live record
/// using it).
#[derive(Debug, Clone, Copy)]
struct Claim {
    owner: u64,
    owner_site: u32,
    /// More than one live record uses the storage.
    shared: bool,
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
pub(in crate::tracker) enum Walk {
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
    pub(in crate::tracker) fn settled(self) -> Option<u64> {
        match self {
            Walk::End { frame, .. } => Some(frame),
            Walk::Close { settled } => Some(settled),
            Walk::Query => None,
        }
    }
}

/// What a sweep counted: live records and their bytes (each storage once).
pub(in crate::tracker) struct SweepResult {
    pub(in crate::tracker) live_tensors: u64,
    pub(in crate::tracker) live_bytes: u64,
}

/// What a walk works on besides its own state: the tracker's other parts, which the
/// root keeps together (each with its own invariants) and lends to a walk in one piece
/// (one pointer on the iteration end's path).
pub(in crate::tracker) struct Parts {
    pub(in crate::tracker) registry: Registry,
    pub(in crate::tracker) devices: Devices,
    pub(in crate::tracker) roles: RoleTally,
    pub(in crate::tracker) made_from: MadeFrom,
    /// The open frames (their running iterations).
    pub(in crate::tracker) frames: FastMap<u64, FrameState>,
    /// Where the records found dead are counted.
    pub(in crate::tracker) sink: Sink,
}

/// The walks' own state: the storage claims, the aggregates of the old records
/// (generational mode) and the working buffers.
pub(in crate::tracker) struct Sweeper {
    /// Storage claims of the latest sweep (kept for its capacity).
    claims: FastMap<usize, Claim>,
    /// Working buffers, kept between walks for their capacity.
    scratch: Scratch,
    /// The aggregates of the old records in the generational mode (more than
    /// `exact_max` live records); `None`: no record is old.
    gens: Option<Generations>,
    /// Live records above which inner iteration ends sweep partially
    /// (`TENSOR_LIFETIME_EXACT_MAX`).
    exact_max: usize,
}

impl Sweeper {
    /// No claims, no old records; partial walks above `exact_max` live records.
    pub(in crate::tracker) fn new(exact_max: usize) -> Sweeper {
        Sweeper {
            claims: FastMap::default(),
            scratch: Scratch::default(),
            gens: None,
            exact_max,
        }
    }

    /// The latest sweep's per-site summaries (the `sites` of its `iteration_end`
    /// event), lent to the sink and handed back with their allocations.
    pub(in crate::tracker) fn sites_mut(&mut self) -> &mut Vec<SiteSweep> {
        &mut self.scratch.sites
    }

    /// Whether a sweep built the claims table.
    #[cfg(test)]
    pub(in crate::tracker) fn claims_built(&self) -> bool {
        !self.claims.is_empty()
    }

    /// A storage address other than `storage` whose bit in a walk's bitmap is the same.
    #[cfg(test)]
    pub(in crate::tracker) fn colliding_storage(storage: usize) -> usize {
        let mut first = StorageBits::default();
        first.insert(storage);
        (1..)
            .map(|i| storage + 16 * i)
            .find(|&other| {
                let mut bits = first;
                bits.insert(other);
                bits.collisions != 0
            })
            .expect("an address with the same bit")
    }

    /// The latest sweep's per-site summaries.
    #[cfg(test)]
    pub(in crate::tracker) fn sites(&self) -> &[SiteSweep] {
        &self.scratch.sites
    }

    /// After the summaries were used: a large buffer is given back.
    pub(in crate::tracker) fn trim_sites(&mut self) {
        trim_vec(&mut self.scratch.sites);
    }

    /// Claims each live storage for its oldest record (the dead ones are gone), then
    /// [`Sweeper::tally_claims`]. Out of line: a sweep of a few records needs it only
    /// when two of them share a storage.
    #[inline(never)]
    fn claim_storages(&mut self, p: &mut Parts) -> u64 {
        self.build_claims(&p.registry);
        self.tally_claims(p)
    }

    /// The claims table of every live record.
    fn build_claims(&mut self, registry: &Registry) {
        let claims = &mut self.claims;
        claims.clear();
        claims.reserve(registry.len());
        for r in registry.iter() {
            claim(claims, r);
        }
    }

    /// Counts the bytes of the claims per device (their `tally`); returns their total.
    fn tally_claims(&mut self, p: &mut Parts) -> u64 {
        p.devices.start_count();
        p.roles.reset_bytes();
        let mut live_bytes = 0;
        for c in self.claims.values() {
            live_bytes += c.bytes;
            p.devices.count(c.device, c.bytes);
            p.roles.bytes(c.role, c.bytes);
        }
        live_bytes
    }

    /// The sweep `walk` at `t_ns` (`log`: an event log is written): exact (every record
    /// walked) while few records are alive, at an outermost iteration end, a close or a
    /// query; otherwise partial (see the module docs).
    pub(in crate::tracker) fn sweep(
        &mut self,
        walk: Walk,
        t_ns: u64,
        log: bool,
        p: &mut Parts,
    ) -> SweepResult {
        if let Some(frame) = walk.partial(self.gens.is_some()) {
            return self.partial_sweep(walk, frame, t_ns, log, p);
        }
        let frame = walk.frame();
        let (result, claimed) = self.exact_sweep(frame, t_ns, log, p);
        if self.gens.is_some() || p.registry.len() > self.exact_max {
            if !claimed {
                self.build_claims(&p.registry);
            }
            self.rebuild_generations(walk.settled(), p);
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
    fn exact_sweep(
        &mut self,
        frame: Option<u64>,
        t_ns: u64,
        log: bool,
        p: &mut Parts,
    ) -> (SweepResult, bool) {
        let total = p.registry.len();
        let (registry, scratch, devices) = (&mut p.registry, &mut self.scratch, &mut p.devices);
        let mut visit = Visit::new(
            frame,
            log,
            &mut scratch.dead,
            &mut scratch.survivors,
            &mut p.roles,
        );
        let mut live_bytes = 0;
        // The storages of a few live records are usually distinct: a bitmap of their
        // hashed addresses shows it during the walk, each record then owns its storage,
        // and the claims table is built only when two of them share one (a collision in
        // the bitmap is checked after the walk: most are false alarms). Many records
        // build it in the walk (one pass over them).
        let few = total <= StorageBits::MAX;
        let mut storages = few.then(StorageBits::default);
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
            } else if let Some(bits) = storages.as_mut() {
                bits.insert(r.storage);
                live_bytes += r.storage_bytes;
                visit.owns(devices, r);
            }
            true
        });
        let dropped = visit.dropped;
        p.sink.drops(dropped, &mut self.scratch.dead, t_ns);
        let shared = storages
            .as_ref()
            .is_none_or(|bits| bits.shared(&p.registry));
        if !few {
            live_bytes = self.tally_claims(p);
        } else if shared {
            live_bytes = self.claim_storages(p);
        }
        p.devices.finish_count(false);
        p.roles.finish_sweep(None);
        summarize_survivors(
            &mut self.scratch,
            shared.then_some(&self.claims),
            GraphInputs {
                made_from: &p.made_from,
                registry: &p.registry,
            },
        );
        p.made_from.prune(&p.registry, true);
        self.scratch.trim_sweep();
        let result = SweepResult {
            live_tensors: p.registry.len() as u64,
            live_bytes,
        };
        (result, shared)
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

/// A 512-bit set of hashed storage addresses, and the first addresses whose bit was set
/// already: tells that up to [`StorageBits::MAX`] storages are distinct without a hash
/// table. A collision may be a false alarm; only its address can be a repeat.
#[derive(Default, Clone, Copy)]
struct StorageBits {
    bits: [u64; 8],
    repeats: [usize; 4],
    collisions: usize,
}

impl StorageBits {
    /// Beyond this many records a collision is likely: the claims table is built.
    const MAX: usize = 48;

    /// Adds `storage`.
    #[inline]
    fn insert(&mut self, storage: usize) {
        let h = (storage as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 55;
        let (word, bit) = ((h >> 6) as usize, 1u64 << (h & 63));
        if self.bits[word] & bit != 0 {
            if let Some(slot) = self.repeats.get_mut(self.collisions) {
                *slot = storage;
            }
            self.collisions += 1;
        }
        self.bits[word] |= bit;
    }

    /// Whether two of the records added, those of `registry`, share a storage.
    #[inline]
    fn shared(&self, registry: &Registry) -> bool {
        self.collisions != 0 && self.repeated(registry)
    }

    /// [`StorageBits::shared`] after a collision: whether a colliding address is that of
    /// two records (with more collisions than addresses kept: assumed so).
    #[cold]
    fn repeated(&self, registry: &Registry) -> bool {
        let Some(repeats) = self.repeats.get(..self.collisions) else {
            return true;
        };
        repeats
            .iter()
            .any(|&s| registry.iter().filter(|r| r.storage == s).nth(1).is_some())
    }
}
