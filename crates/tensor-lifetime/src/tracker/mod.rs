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
//! Data flows one way: probe → registry → sweep → sink → the report crate. Only the
//! root (this module, with [`drain`], [`loops`] and [`answers`], which are part of it:
//! the one [`State`] behind the lock, and [`Tracker`]) calls across the parts; a part
//! never reaches into the root or into a part above it, and each part's type keeps its
//! fields private and changes only through its methods, lent the pieces it works on.
//!
//! - [`probe`] (no lock): the probe entry and the threads' rings, the per-thread state
//!   (open loops, session), where a tensor was born, what is read of a tensor.
//! - [`registry`]: the one owner of the live records, young and old, behind one API.
//! - [`sweep`]: the walk rule written once ([`sweep::Walk`]), the one record visitor of
//!   every walk, storage claims, the partial walk and the per-(frame, site) counts of
//!   old survivors, per-site summaries and the one holder choice; [`inputs`]: the
//!   inputs the macro saw graphs computed from.
//! - [`tally`]: tracked bytes per device and per role, written only there;
//!   [`roles`]: each tensor's role byte; [`keep`]: the working buffers' capacity.
//! - [`frames`]: the open loop frames, the running iteration of each, and leak-test
//!   sessions' judgement; [`monitor`]: the periodic memory monitor.
//! - [`sink`]: the one path to the report crate (the event log, the judgement, automatic
//!   reports, the JSON file, `tracing`).
//! - [`queries`] and [`post_mortem`]: read-only answers behind the public API (snapshot,
//!   site totals; what is live now, by site, role and holder).
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
//! in [`sweep`]'s module docs.)
//!
//! At each iteration end the sweep drains the buffers, walks the live records once
//! (removing the dead ones, so memory stays bounded by live tensors plus sites; births
//! per site are the analysis's counts), claims each storage for its oldest live record
//! (bytes counted once per storage; a handful of records with distinct storages, told
//! apart by a bitmap of their addresses, need no claims table), and summarizes per site
//! the survivors of the ending frame: counts, bytes, refcounts, holders (store sites,
//! autograd graphs, views). The summary is an [`Event::IterationEnd`], fed by [`sink`] to
//! the judgement and to the event log alike (without a log, the same summary goes to the
//! judgement directly).

mod answers;
mod clock;
mod drain;
mod frames;
mod inputs;
mod keep;
mod loops;
mod metrics;
mod monitor;
mod outlook;
mod post_mortem;
mod probe;
mod profile;
mod queries;
mod registry;
mod roles;
mod sink;
mod sweep;
mod tally;

pub use inputs::Input;
pub(crate) use post_mortem::oom_seen;
pub(crate) use probe::{gated_out, set_session, Entered, SessionMark, TaskContext};
pub use queries::{LiveTensor, SiteTotals};
pub(crate) use roles::hint as role_hint;

use crate::config::Config;
use crate::site::Site;
use crate::weak;
use frames::SessionJudgement;
use keep::FastMap;
use parking_lot::Mutex;
use probe::{LoggedProbe, Pending, PrimaryLoop};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::Instant;
use sweep::{Parts, SweepResult, Sweeper, Walk};
use tally::RoleTally;
use tensor_lifetime_report::event::Event;

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

/// Samples memory every `every` iteration ends (0 turns it off: the default, unless
/// `TENSOR_LIFETIME_MEMORY_EVERY` says otherwise).
pub fn set_memory_monitor(every: u64) {
    monitor::set_every(every);
    // A sampled run's quiet iteration ends are not counted: the next end is a full one
    // (and `Tracker::settle_quiet` grants none while the monitor is on).
    crate::sample::end_quiet();
}

/// Why the tracker refused to start, if it did.
pub(crate) fn failure() -> Option<String> {
    let _ = active();
    match STATE.get() {
        Some(TrackerState::Failed(why)) => Some(why.clone()),
        _ => None,
    }
}

/// What the global lock guards: the registry of records, the sites, the open frames,
/// the tallies, the sink (judgement and event log) and the walks' state. Each part's
/// owner keeps its own invariants; the root lends them to each other
/// ([`State::sweep`] lends [`sweep::Parts`] to the walks).
struct State {
    sites: Vec<&'static Site>,
    next_record: u64,
    /// The registry, the open frames, the tallies, the inputs and the sink: kept
    /// together, to be lent to the walks in one piece.
    parts: Parts,
    /// The walks: claims, the old records' aggregates, their working buffers.
    sweeper: Sweeper,
    /// Probes taken from the threads' buffers (kept for its capacity).
    drained: Vec<Pending>,
    /// With an event log: its probes taken from the threads' buffers (kept for its
    /// capacity).
    drained_logged: Vec<LoggedProbe>,
    /// A logged probe's shape, read for its `born` event.
    shape: Vec<usize>,
    /// The event log's clock: turns the probes' stamps into nanoseconds.
    clock: clock::Clock,
    /// The devices' names in the event log, by device; their index codes a birth's
    /// dtype and device for the log's writer.
    device_names: Vec<(crate::device::DeviceId, String)>,
}

/// The process-wide tracker.
pub(crate) struct Tracker {
    config: Config,
    start: Instant,
    /// An event log is written: probes and iterations read the clock only then.
    timed: bool,
    state: Mutex<State>,
    next_frame: AtomicU64,
    next_session: AtomicU64,
    /// Tensors born on threads with no loop of their own belong to this loop.
    primary: PrimaryLoop,
    /// Judgement overrides of leak-test sessions.
    session_judgement: Mutex<HashMap<u64, SessionJudgement>>,
    /// Sampled mode: probes that were not left out (counted only in that mode).
    sampled_probes: AtomicU64,
    /// Sampled mode: `sampled_probes` as of the latest full iteration end ([`NOT_QUIET`]
    /// before the first): the quiet span doubles while it stays the same.
    quiet_at: AtomicU64,
    /// Sampled mode: the quiet frame's first iteration whose end is a full one.
    quiet_until: AtomicU64,
    /// Sampled mode: the quiet ends granted at the latest full iteration end, and the
    /// records it left alive (the span doubles while neither changes).
    quiet_span: AtomicU64,
    quiet_live: AtomicU64,
}

/// [`Tracker::quiet_at`] before the first full iteration end.
const NOT_QUIET: u64 = u64::MAX;

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").finish_non_exhaustive()
    }
}

impl Tracker {
    fn new(config: Config) -> Tracker {
        let start = Instant::now();
        let log = sink::Sink::open_log(&config);
        let exact_max = config.exact_max;
        monitor::configure(config.memory_every);
        crate::sample::configure(config.sample, config.sample_seed);
        // Threads register their probe rings from now on.
        probe::RINGS.start(log.is_some());
        Tracker {
            timed: log.is_some(),
            config,
            start,
            state: Mutex::new(State {
                // The event log's times count from the tracker's start.
                clock: clock::Clock::new(start),
                ..State::new(log, exact_max)
            }),
            next_frame: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            primary: PrimaryLoop::default(),
            session_judgement: Mutex::new(HashMap::new()),
            sampled_probes: AtomicU64::new(0),
            quiet_at: AtomicU64::new(NOT_QUIET),
            quiet_until: AtomicU64::new(0),
            quiet_span: AtomicU64::new(0),
            quiet_live: AtomicU64::new(0),
        }
    }

    /// Counts a probe the sampled mode did not leave out (the next iteration end is a
    /// full one).
    #[inline(always)]
    fn note_sampled_probe(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.sampled_probes.fetch_add(1, SeqCst);
        crate::sample::end_quiet();
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// A time stamp ([`crate::phase_timing::ticks`], turned into nanoseconds at the next
    /// drain by [`clock::Clock`]) when an event log is written (its events carry times),
    /// else 0: nothing else reads the times of probes and iterations, and a clock read is
    /// not free on every host (a virtual machine's clock source may need a system call).
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        if self.timed {
            crate::phase_timing::ticks()
        } else {
            0
        }
    }
}

impl State {
    /// No records, sites or frames yet; events go to `log` (if any) and the judgement.
    fn new(log: Option<sink::LogWriter>, exact_max: usize) -> State {
        State {
            sites: Vec::new(),
            next_record: 1,
            parts: Parts {
                registry: registry::Registry::default(),
                frames: FastMap::default(),
                devices: tally::Devices::default(),
                roles: RoleTally::default(),
                sink: sink::Sink::new(log),
                made_from: inputs::MadeFrom::default(),
            },
            sweeper: Sweeper::new(exact_max),
            drained: Vec::new(),
            drained_logged: Vec::new(),
            shape: Vec::new(),
            clock: clock::Clock::new(Instant::now()),
            device_names: Vec::new(),
        }
    }

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
        self.parts.sink.emit(Event::Site {
            id,
            info: site.info(),
        });
        id
    }

    /// The sweep `walk` at `t_ns` (`log`: an event log is written), with the parts it
    /// works on lent to the walks ([`Sweeper::sweep`]).
    /// In the sampled mode (outside a leak test) its figures are estimates
    /// ([`sweep::estimate_live`]).
    fn sweep(&mut self, walk: Walk, t_ns: u64, log: bool) -> SweepResult {
        let mut result = self.sweeper.sweep(walk, t_ns, log, &mut self.parts);
        if let Some(sample) = sampling_now() {
            let Parts {
                registry,
                devices,
                roles,
                ..
            } = &mut self.parts;
            sweep::estimate_live(registry, (devices, roles), &mut result, sample);
        }
        result
    }

    /// The automatic report at an iteration end or the end of outermost loop `frame`.
    fn auto_report(&mut self, config: &Config, frame: u64, iterations: u64, loop_end: bool) {
        let Parts {
            sink,
            frames,
            devices,
            ..
        } = &mut self.parts;
        if let Some(fs) = frames.get_mut(&frame) {
            sink.auto_report(
                config,
                (frame, fs.site, fs.started),
                &mut fs.printed,
                devices,
                iterations,
                loop_end,
            );
        }
    }
}

/// The sample this thread's figures are estimated at: the sampled mode's interval,
/// outside a leak test (which records every tensor); `None` in exact mode.
fn sampling_now() -> Option<sweep::Sample> {
    let interval = crate::sample::interval()?;
    if probe::in_session() {
        return None;
    }
    sweep::Sample::at(Some(interval))
}

#[cfg(test)]
mod walk_tests;

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
            std::mem::size_of::<registry::Record>() <= 80,
            "{}",
            std::mem::size_of::<registry::Record>()
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
