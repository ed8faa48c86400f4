//! The sweep: at an iteration end (and before every query) one walk of the live records
//! removes the dead ones, claims each live storage for its oldest record (bytes counted
//! once per storage), tallies bytes per device and per role ([`super::roles`]), and
//! collects the survivors of the ending frame for [`super::holders`] to summarize by
//! site.

use super::holders::summarize_survivors;
use super::ingest::Pending;
use super::{FastMap, Record, State};
use crate::device::DeviceId;
use tensor_lifetime_report::event::{Event, HolderSpec, SiteSweep};

/// Tracked bytes of one device.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct DeviceBytes {
    pub(super) live: u64,
    pub(super) peak: u64,
    /// Live bytes being counted by a sweep.
    tally: u64,
}

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
}

impl Scratch {
    pub(super) const KEEP: usize = 8192;

    /// After a drain: a large drain's buffer is not kept (nor handed to a thread).
    pub(super) fn trim_drain(&mut self) {
        trim_vec(&mut self.drained);
    }

    /// At the end of a sweep (its summaries, `sites`, are trimmed once used).
    fn trim_sweep(&mut self) {
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

/// A live storage's claim: its bytes count once, for its owner (the oldest live record
/// using it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Claim {
    pub(super) owner: u64,
    pub(super) owner_site: u32,
    bytes: u64,
    device: DeviceId,
    role: u8,
}

impl Claim {
    fn of(r: &Record) -> Claim {
        Claim {
            owner: r.id,
            owner_site: r.site,
            bytes: r.storage_bytes,
            device: r.device,
            role: r.role,
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
        let claims = &mut self.claims;
        claims.clear();
        claims.reserve(self.records.len());
        for r in self.records.values() {
            claim(claims, r);
        }
        self.tally_claims()
    }

    /// Counts the bytes of the claims per device (their `tally`); returns their total.
    fn tally_claims(&mut self) -> u64 {
        for (_, d) in &mut self.devices {
            d.tally = 0;
        }
        self.roles.reset_bytes();
        let mut live_bytes = 0;
        let mut device = None;
        for c in self.claims.values() {
            live_bytes += c.bytes;
            let d = cached_device_index(&mut self.devices, &mut device, c.device);
            self.devices[d].1.tally += c.bytes;
            self.roles.bytes(c.role, c.bytes);
        }
        live_bytes
    }

    /// Walks the records once: drops the dead, claims each live storage for its oldest
    /// record (bytes counted once per storage), and summarizes the survivors of `frame`
    /// by site.
    ///
    /// Storage claims are rebuilt at every sweep that needs them rather than kept
    /// incrementally: a storage's address is reused by the allocator as soon as it is
    /// freed, so only the storages of records alive now identify storages reliably.
    pub(super) fn sweep(&mut self, frame: Option<u64>, t_ns: u64, log: bool) -> SweepResult {
        let (records, scratch, devices) = (&mut self.records, &mut self.scratch, &mut self.devices);
        let roles = &mut self.roles;
        scratch.dead.clear();
        scratch.survivors.clear();
        let mut live_bytes = 0;
        // The storages of a few live records are usually distinct: a bitmap of their
        // hashed addresses shows it during the walk, each record then owns its storage,
        // and the claims table is built only when the bitmap has a collision. Many
        // records build it in the walk (one pass over them).
        let few = records.len() <= StorageBits::MAX;
        let mut distinct = few.then(StorageBits::default);
        let mut claims = if few {
            None
        } else {
            let c = &mut self.claims;
            c.clear();
            c.reserve(records.len());
            Some(c)
        };
        // Records come mostly from one device: its entry is looked up once per run of it.
        let mut device = None;
        // One pass: the dead are removed in place (no second lookup), counted, and their
        // ids kept for the log's events.
        let mut dropped = 0;
        records.retain(|key, r| {
            let refcount = r.weak.strong_count();
            if refcount == 0 {
                dropped += 1;
                roles.dead(r.id, r.role, r.storage_bytes);
                if log {
                    scratch.dead.push(r.id);
                }
                return false;
            }
            if Some(r.frame()) == frame {
                scratch.survivors.push(Survivor {
                    key: *key,
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
                });
            }
            roles.tensor(r.role);
            if let Some(c) = claims.as_deref_mut() {
                claim(c, r);
            } else if let Some(bits) = distinct.as_mut() {
                if bits.insert(r.storage) {
                    live_bytes += r.storage_bytes;
                    let d = cached_device_index(devices, &mut device, r.device);
                    devices[d].1.tally += r.storage_bytes;
                    roles.bytes(r.role, r.storage_bytes);
                } else {
                    distinct = None;
                }
            }
            true
        });
        if log {
            // The events count the drops in the analysis.
            let mut dead = std::mem::take(&mut scratch.dead);
            for id in dead.drain(..) {
                self.emit(Event::Dropped { t_ns, tensor: id });
            }
            self.scratch.dead = dead;
        } else {
            for _ in 0..dropped {
                self.analysis.note_dropped();
            }
        }
        let shared = !few || distinct.is_none();
        if !few {
            live_bytes = self.tally_claims();
        } else if shared {
            live_bytes = self.claim_storages();
        }
        for (_, d) in &mut self.devices {
            d.live = std::mem::take(&mut d.tally);
            d.peak = d.peak.max(d.live);
        }
        self.roles.finish_sweep();
        summarize_survivors(
            &self.records,
            &mut self.scratch,
            shared.then_some(&self.claims),
        );
        self.scratch.trim_sweep();
        // The claims table is rebuilt when needed; its capacity is kept for typical loops
        // and given back when large, so steady-state memory is the records alone.
        if self.claims.capacity() > Scratch::KEEP {
            self.claims = FastMap::default();
        }
        SweepResult {
            live_tensors: self.records.len() as u64,
            live_bytes,
        }
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

/// [`device_index`] with the latest device looked up kept in `last`.
#[inline]
fn cached_device_index(
    devices: &mut Vec<(DeviceId, DeviceBytes)>,
    last: &mut Option<(DeviceId, usize)>,
    device: DeviceId,
) -> usize {
    match *last {
        Some((d, i)) if d == device => i,
        _ => {
            let i = device_index(devices, device);
            *last = Some((device, i));
            i
        }
    }
}

/// The index of `device` in `devices`, added in device order when first seen.
fn device_index(devices: &mut Vec<(DeviceId, DeviceBytes)>, device: DeviceId) -> usize {
    match devices.iter().position(|(d, _)| *d >= device) {
        Some(i) if devices[i].0 == device => i,
        Some(i) => {
            devices.insert(i, (device, DeviceBytes::default()));
            i
        }
        None => {
            devices.push((device, DeviceBytes::default()));
            devices.len() - 1
        }
    }
}
