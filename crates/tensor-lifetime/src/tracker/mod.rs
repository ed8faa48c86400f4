//! The runtime tracker: a registry of tracked tensors, loop scopes and their sweeps.
//!
//! Inside the tracker a loop scope's state is its *frame* (one per loop entered, with an
//! id), and a leak test's view of the tracker is its *session* (an id carried by the
//! thread that runs the test, so tests on parallel threads judge only their own tensors).
//!
//! # Life cycle
//!
//! The tracker is a process-wide singleton whose [`TrackerState`] is decided once, at the
//! first probe (or [`crate::init`]): `On` when the environment allows tracking and the
//! weak-handle self-test passes, `Off` when `TENSOR_LIFETIME=off` (or the `tracking`
//! feature is off), `Failed` when the self-test fails (the error is printed once and kept
//! for [`crate::init`]).
//!
//! # Rooms
//!
//! - [`local`]: the per-thread state (probe ring, open loops, session).
//! - [`observe`]: what is read of a tensor, and when.
//! - [`ingest`]: the hot path: probes into per-thread rings, drained into the registry.
//! - [`loops`]: loop frames, iterations and leak-test sessions.
//! - [`sweep`]: the walk of the live records at an iteration end; storage claims.
//! - [`generations`]: young and old records, the round robin over the old, and the
//!   aggregates that stand in for them between exact walks.
//! - [`roles`]: each tensor's role (parameter, gradient, ...) and the per-role tally.
//! - [`post_mortem`]: what is live now, by site, role and holder (out of memory).
//! - [`holders`]: per-site summaries of survivors and who holds them (stores, graphs,
//!   views).
//! - [`monitor`]: the periodic memory monitor, sampled at iteration ends.
//! - [`output`]: the event log file, automatic reports, and the queries behind the public
//!   API (report, snapshot, site totals, tracked bytes).
//!
//! # Hot path
//!
//! A probe (tag or store) never takes the global lock: it appends a [`Pending`] entry
//! (a weak handle, the site, the loop frame and iteration, the tensor's own bytes; one
//! cache line) to a ring owned by its thread ([`crate::probe_buffer`]: no atomic
//! read-modify-write to append; a full ring drains the probes into the registry). It
//! takes no lock of the tensor's either: what only the event log needs, the storage
//! among it, is read only when a log is written. Every drain takes all
//! rings into the registry in probe order (a global counter, once a second thread
//! probes), so the first tag of a tensor fixes its creation site and later tags only add
//! aliases. A probe notes whether it is its tensor's first (no weak handle of the
//! tracker's existed), so the drain looks up a record only for later probes. A tensor
//! already dropped when drained (a loop body's temporary) is only counted; one still
//! alive gets a record, with what a record needs of the tensor read then (its storage,
//! element bytes, device, autograd op: none of it changes).
//!
//! # Sweeps
//!
//! (With more than `TENSOR_LIFETIME_EXACT_MAX` live records an inner iteration end walks
//! only what changed plus a bounded slice and keeps aggregates of the rest: the rule is
//! in [`sweep`]'s module docs, the parts in [`generations`].)
//!
//! At each iteration end the sweep drains the buffers, walks the live records once
//! (removing the dead ones, so memory stays bounded by live tensors plus sites; births
//! per site are the analysis's counts), claims each storage for its oldest live record
//! (bytes counted once per storage; a handful of records with distinct storages, told
//! apart by a bitmap of their addresses, need no claims table), and summarizes per site
//! the survivors of the ending frame: counts, bytes, refcounts, holders (store sites,
//! autograd graphs, views). The summary is an [`Event::IterationEnd`], fed to the
//! [`Analysis`] and to the event log alike (without a log, the same summary goes to the
//! analysis directly: [`Analysis::note_iteration_end`]).

mod generations;
mod holders;
mod ingest;
mod inputs;
mod local;
mod loops;
mod monitor;
mod observe;
mod output;
mod post_mortem;
mod roles;
mod sweep;

pub use inputs::Input;
pub(crate) use local::{set_session, Entered, SessionMark, TaskContext};
pub use monitor::set_memory_monitor;
pub use output::{LiveTensor, SiteTotals};
pub(crate) use post_mortem::oom_seen;
pub(crate) use roles::hint as role_hint;

use crate::config::Config;
use crate::device::DeviceId;
use crate::probe_buffer::Registry;
use crate::site::Site;
use crate::weak::{self, WeakTensor};
use ingest::Pending;
use loops::{FrameState, PrimaryLoop, SessionJudgement};
use observe::{Observed, View};
use parking_lot::Mutex;
use roles::RoleTally;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::OnceLock;
use std::time::Instant;
use sweep::{Claim, DeviceBytes, Scratch};
use tensor_lifetime_report::event::Event;
use tensor_lifetime_report::{Analysis, Judgement};

type FastMap<K, V> = tensor_lifetime_report::fast_hash::HashMap<K, V>;

/// The tracker's life cycle (see the module docs): decided once, then final.
// One value per process, held in a static for its whole life: boxing `On` would only add
// a pointer chase to every probe.
#[allow(clippy::large_enum_variant)]
enum TrackerState {
    /// Tracking is off (`TENSOR_LIFETIME=off`, or built without `tracking`).
    Off,
    /// The weak-handle self-test failed: why (the tracker never guesses).
    Failed(String),
    On(Tracker),
}

static STATE: OnceLock<TrackerState> = OnceLock::new();

/// The tracker, if tracking is on. Decides the state on first use.
#[inline]
pub(crate) fn active() -> Option<&'static Tracker> {
    if !cfg!(feature = "tracking") {
        // Compiled out: every probe folds away.
        return None;
    }
    match STATE.get() {
        Some(TrackerState::On(t)) => Some(t),
        Some(_) => None,
        None => init_slow(),
    }
}

/// The tracker if it is on, without deciding the state (a thread's first probe registers
/// its ring here, from inside a decided tracker's calls).
fn started() -> Option<&'static Tracker> {
    match STATE.get() {
        Some(TrackerState::On(t)) => Some(t),
        _ => None,
    }
}

#[cold]
fn init_slow() -> Option<&'static Tracker> {
    let state = STATE.get_or_init(|| {
        let state = start(Config::from_env(), weak::self_test);
        if let TrackerState::Failed(why) = &state {
            eprintln!("tensor-lifetime: tracking disabled: {why}");
        }
        state
    });
    match state {
        TrackerState::On(t) => Some(t),
        _ => None,
    }
}

/// The state the tracker starts in: the self-test runs only when tracking is enabled,
/// and its failure is final.
fn start(
    config: Config,
    self_test: impl FnOnce() -> Result<(), weak::LayoutMismatch>,
) -> TrackerState {
    if !cfg!(feature = "tracking") || !config.enabled {
        return TrackerState::Off;
    }
    match self_test() {
        Ok(()) => TrackerState::On(Tracker::new(config)),
        Err(e) => TrackerState::Failed(e.to_string()),
    }
}

/// Why the tracker refused to start, if it did.
pub(crate) fn failure() -> Option<String> {
    let _ = active();
    match STATE.get() {
        Some(TrackerState::Failed(why)) => Some(why.clone()),
        _ => None,
    }
}

/// One tracked tensor. Kept small (80 bytes): frames, iterations and sessions are
/// stored as `u32` (4 billion of each per process is beyond any run).
#[derive(Debug)]
struct Record {
    weak: WeakTensor,
    id: u64,
    storage: usize,
    storage_bytes: u64,
    view_bytes: u64,
    frame: u32,
    iteration: u32,
    session: u32,
    site: u32,
    /// Latest store site (0: none).
    store: u32,
    device: DeviceId,
    /// It had an autograd op when tagged (ops never change afterwards).
    has_graph: bool,
    /// The tensor's creation serial, cut to 32 bits (picks its shard when old).
    serial: u32,
    /// It owns its storage, as of the walk that turned it old (generational mode:
    /// [`generations`]); true until then.
    owns: bool,
    /// Its role byte ([`roles`]).
    role: u8,
    /// The call path of its first probe ([`crate::call_path`]; 0: none).
    path: u32,
}

impl Record {
    /// The bytes this record's storage counts for it: all of them when it owns the
    /// storage (generational mode, `owns`), else none.
    #[inline]
    fn owned_bytes(&self) -> u64 {
        if self.owns {
            self.storage_bytes
        } else {
            0
        }
    }

    /// The record of probe `p`'s tensor (it takes the probe's weak handle).
    #[inline(always)]
    fn of(p: &mut Pending, id: u64, site: u32, view: View, storage: Observed) -> Record {
        Record {
            weak: p.weak.take(),
            id,
            site,
            store: if p.store { site } else { 0 },
            frame: p.frame,
            iteration: p.iteration,
            storage: storage.storage,
            storage_bytes: storage.storage_bytes,
            view_bytes: view.view_bytes,
            session: p.session,
            device: view.device,
            has_graph: view.has_graph,
            serial: p.serial,
            owns: true,
            role: p.role,
            path: p.path,
        }
    }

    fn frame(&self) -> u64 {
        u64::from(self.frame)
    }
}

/// What the global lock guards: the registry of records, the sites, the open frames,
/// per-device bytes, the analysis and the event log.
struct State {
    sites: Vec<&'static Site>,
    records: FastMap<usize, Record>,
    /// Storage claims of the latest sweep (kept for its capacity).
    claims: FastMap<usize, Claim>,
    next_record: u64,
    frames: FastMap<u64, FrameState>,
    /// Tracked bytes per device, sorted by device (a handful of devices at most).
    devices: Vec<(DeviceId, DeviceBytes)>,
    /// Tracked tensors and bytes per role, and the temporaries of the iteration.
    roles: RoleTally,
    /// Call paths declared to the analysis (and the log) so far: ids `1..=declared`.
    declared_paths: u32,
    analysis: Analysis,
    log: Option<BufWriter<File>>,
    log_error: bool,
    /// When the log was last flushed at an inner iteration end (`t_ns`).
    log_flushed_ns: u64,
    /// Working buffers of drains and sweeps, kept between them for their capacity.
    scratch: Scratch,
    /// The old records and the aggregates of the generational mode (more than
    /// `exact_max` live records); `None`: every record is in `records`.
    gens: Option<generations::Generations>,
    /// The old records' shard bits when the generational mode last ended (its next
    /// start begins with as many shards).
    old_bits: u32,
    /// Live records above which inner iteration ends sweep partially
    /// (`TENSOR_LIFETIME_EXACT_MAX`).
    exact_max: usize,
    /// The inputs the macro saw tensors with an autograd op computed from.
    made_from: inputs::MadeFrom,
}

/// The process-wide tracker.
pub(crate) struct Tracker {
    config: Config,
    start: Instant,
    /// An event log is written: probes and iterations read the clock only then.
    timed: bool,
    /// Global probe order, counted once a second thread has a probe buffer.
    next_seq: AtomicU64,
    /// A second thread has a probe buffer (set before that thread's first probe; never
    /// cleared).
    threaded: AtomicBool,
    state: Mutex<State>,
    buffers: Registry<Pending>,
    next_frame: AtomicU64,
    next_session: AtomicU64,
    /// Tensors born on threads with no loop of their own belong to this loop.
    primary: PrimaryLoop,
    /// Judgement overrides of leak-test sessions.
    session_judgement: Mutex<HashMap<u64, SessionJudgement>>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").finish_non_exhaustive()
    }
}

impl Tracker {
    fn new(config: Config) -> Tracker {
        let start = Instant::now();
        let log = output::open_log(&config);
        let exact_max = config.exact_max;
        monitor::configure(config.memory_every);
        Tracker {
            timed: log.is_some(),
            next_seq: AtomicU64::new(1),
            threaded: AtomicBool::new(false),
            config,
            start,
            state: Mutex::new(State {
                sites: Vec::new(),
                records: FastMap::default(),
                claims: FastMap::default(),
                next_record: 1,
                frames: FastMap::default(),
                devices: Vec::new(),
                roles: RoleTally::default(),
                declared_paths: 0,
                analysis: Analysis::new(Judgement::default()),
                log,
                log_error: false,
                log_flushed_ns: 0,
                scratch: Scratch::default(),
                gens: None,
                old_bits: 0,
                made_from: inputs::MadeFrom::default(),
                exact_max,
            }),
            buffers: Registry::new(),
            next_frame: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            primary: PrimaryLoop::default(),
            session_judgement: Mutex::new(HashMap::new()),
        }
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// [`Tracker::now_ns`] when an event log is written (its events carry times), else 0:
    /// nothing else reads the times of probes and iterations, and a clock read is not free
    /// on every host (a virtual machine's clock source may need a system call).
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        if self.timed {
            self.now_ns()
        } else {
            0
        }
    }
}

/// The longest an inner iteration end's events wait in the log's buffer (50 ms).
const LOG_FLUSH_EVERY_NS: u64 = 50_000_000;

impl State {
    #[inline]
    fn site_id(&mut self, site: &'static Site) -> u32 {
        // Only this (the process's one) tracker sets a site's id, when it registers the
        // site; a `&'static Site` is never moved or copied, so its id is its index here.
        let id = site.id();
        if id != 0 {
            debug_assert!(std::ptr::eq(self.sites[id as usize - 1], site));
            return id;
        }
        self.new_site(site)
    }

    /// Registers a site seen for the first time.
    #[cold]
    fn new_site(&mut self, site: &'static Site) -> u32 {
        self.sites.push(site);
        let id = self.sites.len() as u32;
        site.set_id(id);
        self.emit(Event::Site {
            id,
            info: site.info(),
        });
        id
    }

    /// The site registered as `id` (ids start at 1).
    fn site(&self, id: u32) -> &'static Site {
        self.sites[id as usize - 1]
    }

    fn emit(&mut self, event: Event) {
        self.emit_ref(&event);
    }

    /// Writes `event` to the log and applies it to the analysis.
    #[inline]
    fn emit_ref(&mut self, event: &Event) {
        if let Some(w) = self.log.as_mut() {
            if let Err(e) = event.write_line(w) {
                if !self.log_error {
                    eprintln!("tensor-lifetime: cannot write the event log: {e}");
                    self.log_error = true;
                }
            }
        }
        self.analysis.apply(event);
    }

    fn flush_log(&mut self) {
        if let Some(w) = self.log.as_mut() {
            let _ = w.flush();
        }
    }

    /// At an iteration end at `t_ns`: the log is flushed at every outermost one, and at
    /// an inner one when [`LOG_FLUSH_EVERY_NS`] have passed since the last flush there
    /// (a write per inner step would cost a rollout's step more than the step itself).
    fn flush_log_at_iteration_end(&mut self, t_ns: u64, outermost: bool) {
        if outermost || t_ns.saturating_sub(self.log_flushed_ns) >= LOG_FLUSH_EVERY_NS {
            self.log_flushed_ns = t_ns;
            self.flush_log();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_self_test_refuses_to_start() {
        let config = Config::from_lookup(|_| None);
        let state = start(config, || {
            Err(weak::LayoutMismatch("layout changed".to_string()))
        });
        let TrackerState::Failed(why) = state else {
            panic!("the tracker started");
        };
        assert_eq!(why, "layout changed");
        let err = crate::Error::TrackerUnavailable(why);
        assert_eq!(
            err.to_string(),
            "tensor-lifetime cannot track tensors: layout changed"
        );
    }

    #[test]
    fn records_stay_small() {
        // The memory budget is 128 bytes per live record, hash table overhead included:
        // 80 bytes of record measured 118.8 bytes per live record with the generations'
        // shards (`bench_loops memory`, docs/performance.md).
        assert!(
            std::mem::size_of::<Record>() <= 80,
            "{}",
            std::mem::size_of::<Record>()
        );
        // A probe entry is one cache line, aligned to one: the probe writes a single line.
        assert_eq!(std::mem::size_of::<Pending>(), 64);
        assert_eq!(std::mem::align_of::<Pending>(), 64);
    }

    #[test]
    fn off_skips_the_self_test() {
        let config = Config::from_lookup(|k| (k == "TENSOR_LIFETIME").then(|| "off".into()));
        let state = start(config, || panic!("must not run"));
        assert!(matches!(state, TrackerState::Off));
    }
}
