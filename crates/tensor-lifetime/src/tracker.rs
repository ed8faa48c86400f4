//! The runtime tracker: a registry of tracked tensors, loop frames and their sweeps.
//!
//! # Phases
//!
//! The tracker is a process-wide singleton that moves through [`Phase`]s once:
//! `Uninit` → (first probe) → `On` when the environment allows tracking and the
//! weak-handle self-test passes, `Off` when `TENSOR_LIFETIME=off`, `Failed` when the
//! self-test fails (the error is printed once and kept for [`crate::init`]).
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
//! At each iteration end the sweep drains the buffers, walks the live records once
//! (removing the dead ones, so memory stays bounded by live tensors plus sites; births
//! per site are the analysis's counts), claims each storage for its oldest live record
//! (bytes counted once per storage; a handful of records with distinct storages, told
//! apart by a bitmap of their addresses, need no claims table), and summarizes per site
//! the survivors of the ending frame: counts, bytes, refcounts, holders (store sites,
//! autograd graphs, views). The summary is an [`Event::IterationEnd`], fed to the
//! [`Analysis`] and to the event log alike (without a log, the same summary goes to the
//! analysis directly: [`Analysis::note_iteration_end`]).

use crate::config::{Config, ReportMode};
use crate::phase_timing::{timed, HotPhase};
use crate::probe_buffer::{Producer, Registry};
use crate::site::Site;
use crate::weak::{self, WeakTensor};
use candle_core::{DeviceLocation, Storage, Tensor};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tensor_lifetime_report::event::{Event, HolderCount, HolderSpec, MemorySample, SiteSweep};
use tensor_lifetime_report::{Analysis, Judgement, Report};

/// The tracker's life cycle (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    Uninit = 0,
    On = 1,
    Off = 2,
    Failed = 3,
}

static PHASE: AtomicU8 = AtomicU8::new(Phase::Uninit as u8);
static TRACKER: OnceLock<Tracker> = OnceLock::new();
static FAILURE: OnceLock<Option<String>> = OnceLock::new();

/// The tracker, if tracking is on. Initializes it on first use.
#[inline]
pub(crate) fn active() -> Option<&'static Tracker> {
    if !cfg!(feature = "tracking") {
        // Compiled out: every probe folds away.
        return None;
    }
    match PHASE.load(Ordering::Acquire) {
        1 => TRACKER.get(),
        0 => init_slow(),
        _ => None,
    }
}

#[cold]
fn init_slow() -> Option<&'static Tracker> {
    let tracker = TRACKER.get_or_init(|| {
        let config = Config::from_env();
        let (phase, failure) = decide(&config, weak::self_test);
        if let Some(why) = &failure {
            eprintln!("tensor-lifetime: tracking disabled: {why}");
        }
        let _ = FAILURE.set(failure);
        let tracker = Tracker::new(config);
        PHASE.store(phase as u8, Ordering::Release);
        tracker
    });
    (phase() == Phase::On).then_some(tracker)
}

/// The phase the tracker starts in: the self-test runs only when tracking is enabled,
/// and its failure is final (the tracker never guesses).
fn decide(
    config: &Config,
    self_test: impl FnOnce() -> Result<(), weak::LayoutMismatch>,
) -> (Phase, Option<String>) {
    if !cfg!(feature = "tracking") || !config.enabled {
        return (Phase::Off, None);
    }
    match self_test() {
        Ok(()) => (Phase::On, None),
        Err(e) => (Phase::Failed, Some(e.to_string())),
    }
}

pub(crate) fn phase() -> Phase {
    match PHASE.load(Ordering::Acquire) {
        0 => Phase::Uninit,
        1 => Phase::On,
        2 => Phase::Off,
        _ => Phase::Failed,
    }
}

/// Why the tracker refused to start, if it did.
pub(crate) fn failure() -> Option<String> {
    let _ = active();
    FAILURE.get().cloned().flatten()
}

/// One probe's observation, buffered per thread until the next sweep. One cache line,
/// aligned to one: a probe writes a single line of its ring.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Pending {
    /// The tensor (its key is the handle's address, [`WeakTensor::key`]).
    weak: WeakTensor,
    site: &'static Site,
    store: bool,
    /// No weak handle of the tracker's existed for the tensor when probed: no record and
    /// no earlier probe entry, so this is the tensor's first probe. (Two threads probing
    /// one tensor at the same instant can both see none. With several threads probing,
    /// the drain looks every probe up, so only a tensor already dropped at the drain is
    /// then counted twice.)
    first: bool,
    // u32 like the records' (see [`Record`]): the buffer entry stays small.
    frame: u32,
    iteration: u32,
    session: u32,
    /// Global probe order (the drain merges threads' buffers by it; 0 before a second
    /// thread probed).
    seq: u64,
    /// The tensor's own bytes (elements times element size; its view, not its storage):
    /// the size the shape-churn finding judges. Read without the storage's lock.
    bytes: u64,
    /// What only the event log needs, read only when one is written.
    logged: Option<Box<Logged>>,
}

/// The part of a probe only the event log's events carry.
#[derive(Debug)]
struct Logged {
    t_ns: u64,
    thread: u32,
    view: View,
    dims: Vec<usize>,
    /// The storage as of the probe (a birth's event carries it even for a tensor dropped
    /// before the drain).
    storage: Observed,
}

/// A tensor's storage: its identity (address) and its whole size.
#[derive(Debug, Clone, Copy)]
struct Observed {
    storage: usize,
    storage_bytes: u64,
}

struct Local {
    buf: Producer<Pending>,
    /// Open loop frames on this thread: (frame, current or next iteration, creation
    /// watermark: tensors with a smaller serial existed before the loop opened).
    stack: RefCell<Vec<(u64, u64, u64)>>,
    /// Leak-test session of this thread and the creation watermark when it began.
    session: Cell<(u64, u64)>,
    thread: u64,
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static LOCAL: Local = {
        let buf = match TRACKER.get() {
            Some(t) => {
                let (buf, before) = t.buffers.register();
                if before > 0 {
                    // From now on probes take a global order (see `Tracker::probe`).
                    t.threaded.store(true, Ordering::Relaxed);
                }
                buf
            }
            None => Producer::unregistered(),
        };
        Local {
            buf,
            stack: RefCell::new(Vec::new()),
            session: Cell::new((0, 0)),
            thread: NEXT_THREAD.fetch_add(1, Ordering::Relaxed),
        }
    };
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
    device: u16,
    /// It had an autograd op when tagged (ops never change afterwards).
    has_graph: bool,
}

impl Record {
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
        }
    }

    fn frame(&self) -> u64 {
        u64::from(self.frame)
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SiteTotals {
    pub(crate) born: u64,
    pub(crate) dropped: u64,
}

#[derive(Debug)]
struct FrameState {
    parent: Option<(u64, u64)>,
    site: &'static Site,
    started: Instant,
    /// Signature of the findings printed last (outermost frames).
    printed: Vec<(String, u32, &'static str, bool)>,
}

#[derive(Debug, Default, Clone, Copy)]
struct DeviceBytes {
    live: u64,
    peak: u64,
    /// Live bytes being counted by a sweep.
    tally: u64,
}

struct State {
    sites: Vec<&'static Site>,
    records: FastMap<usize, Record>,
    /// Storage claims of the latest sweep (kept for its capacity).
    claims: FastMap<usize, Claim>,
    next_record: u64,
    frames: FastMap<u64, FrameState>,
    /// Tracked bytes per device code, sorted by code (a handful of devices at most).
    devices: Vec<(u16, DeviceBytes)>,
    analysis: Analysis,
    log: Option<BufWriter<File>>,
    log_error: bool,
    /// Working buffers of drains and sweeps, kept between them for their capacity.
    scratch: Scratch,
}

/// A survivor of the ending frame, with what its summary reads of its record.
#[derive(Debug, Clone, Copy)]
struct Survivor {
    key: usize,
    site: u32,
    iteration: u32,
    id: u64,
    storage: usize,
    storage_bytes: u64,
    view_bytes: u64,
    store: u32,
    refcount: u32,
    has_graph: bool,
}

/// The working buffers of [`Tracker::drain`] and [`State::sweep`]: kept between
/// iteration ends so that a steady loop allocates nothing there. Each is given back when
/// it grew large ([`trim_vec`]), so steady-state memory stays the records alone.
#[derive(Default)]
struct Scratch {
    /// Probes taken from the threads' buffers.
    drained: Vec<Pending>,
    /// Ids of the records found dead in the current sweep (for the event log).
    dead: Vec<u64>,
    /// Survivors of the ending frame.
    survivors: Vec<Survivor>,
    /// Holder counts of the site being summarized.
    holders: Vec<(HolderSpec, u64)>,
    /// The sweep's per-site summaries (the `sites` of its `iteration_end` event).
    sites: Vec<SiteSweep>,
}

impl Scratch {
    const KEEP: usize = 8192;

    /// After a drain: a large drain's buffer is not kept (nor handed to a thread).
    fn trim_drain(&mut self) {
        trim_vec(&mut self.drained);
    }

    /// At the end of a sweep (its summaries, `sites`, are trimmed once used).
    fn trim_sweep(&mut self) {
        trim_vec(&mut self.dead);
        trim_vec(&mut self.survivors);
        trim_vec(&mut self.holders);
    }
}

fn trim_vec<T>(v: &mut Vec<T>) {
    if v.capacity() > Scratch::KEEP {
        *v = Vec::new();
    }
}

/// A leak-test session's (warm-up, window) overrides.
type JudgementOverride = (Option<u64>, Option<u64>);

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
    /// The primary loop (first opened, still open): its frame, iteration and session;
    /// tensors born on threads with no loop of their own belong to it.
    primary_frame: AtomicU64,
    primary_iteration: AtomicU64,
    primary_session: AtomicU64,
    primary_watermark: AtomicU64,
    /// Judgement overrides of leak-test sessions: (warm-up, window).
    session_judgement: Mutex<HashMap<u64, JudgementOverride>>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").finish_non_exhaustive()
    }
}

fn device_code(loc: DeviceLocation) -> u16 {
    match loc {
        DeviceLocation::Cpu => 0,
        DeviceLocation::Cuda { gpu_id } => 1 + gpu_id as u16,
        DeviceLocation::Metal { gpu_id } => 1000 + gpu_id as u16,
    }
}

pub(crate) fn device_name(code: u16) -> String {
    match code {
        0 => "cpu".to_string(),
        1..=999 => format!("cuda:{}", code - 1),
        _ => format!("metal:{}", code - 1000),
    }
}

fn device_from_name(name: &str) -> Option<u16> {
    if name == "cpu" {
        return Some(0);
    }
    if let Some(n) = name.strip_prefix("cuda:") {
        return n.parse::<u16>().ok().map(|n| n + 1);
    }
    name.strip_prefix("metal:")
        .and_then(|n| n.parse::<u16>().ok())
        .map(|n| n + 1000)
}

/// Bytes of the whole storage behind a tensor (not just its view).
fn storage_bytes(storage: &Storage) -> Option<u64> {
    use candle_core::CpuStorage as C;
    let bytes = match storage {
        Storage::Cpu(c) => match c {
            C::U8(v) | C::F6E2M3(v) | C::F6E3M2(v) | C::F4(v) | C::F8E8M0(v) => v.len(),
            C::U32(v) => v.len() * 4,
            C::I16(v) => v.len() * 2,
            C::I32(v) => v.len() * 4,
            C::I64(v) => v.len() * 8,
            C::BF16(v) => v.len() * 2,
            C::F16(v) => v.len() * 2,
            C::F32(v) => v.len() * 4,
            C::F64(v) => v.len() * 8,
            C::F8E4M3(v) => v.len(),
        },
        #[cfg(feature = "cuda")]
        Storage::Cuda(c) => crate::memory::cuda_storage_bytes(c),
        _ => return None,
    };
    Some(bytes as u64)
}

/// A tensor's own bytes: its elements times their size (no lock).
#[inline]
fn own_bytes(t: &Tensor) -> u64 {
    // The product of the dims inline (candle's `elem_count` is out of line).
    (t.dims().iter().product::<usize>() * t.dtype().size_in_bytes()) as u64
}

impl Observed {
    /// Takes the storage's read lock, so a probe reads it only when an event log is
    /// written; otherwise the drain reads it from the tensors still alive, the only ones
    /// that get a record.
    #[inline]
    fn of(t: &Tensor) -> Observed {
        let (guard, _) = t.storage_and_layout();
        let storage = &*guard as *const Storage as usize;
        let bytes = storage_bytes(&guard);
        drop(guard);
        Observed {
            storage,
            storage_bytes: bytes.unwrap_or_else(|| own_bytes(t)),
        }
    }
}

/// What a record keeps of a tensor besides its storage. None of it changes in a tensor's
/// life, so a probe reads it only when an event log is written (a birth's event carries
/// it even for a tensor dropped before the drain); otherwise the drain reads it from the
/// tensors still alive, the only ones that get a record.
#[derive(Debug, Clone, Copy)]
struct View {
    view_bytes: u64,
    device: u16,
    /// It had an autograd op (ops never change afterwards).
    has_graph: bool,
    dtype: candle_core::DType,
}

impl View {
    #[inline]
    fn of(t: &Tensor) -> View {
        View {
            view_bytes: own_bytes(t),
            device: device_code(t.device().location()),
            has_graph: t.track_op() && !t.is_variable(),
            dtype: t.dtype(),
        }
    }
}

impl Tracker {
    fn new(config: Config) -> Tracker {
        let start = Instant::now();
        let mut log = None;
        if let Some(path) = config.log.as_ref().filter(|_| config.enabled) {
            match File::create(path) {
                Ok(file) => {
                    let mut w = BufWriter::with_capacity(1 << 16, file);
                    let started = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    let _ = Event::header(std::process::id(), started).write_line(&mut w);
                    let _ = w.flush();
                    log = Some(w);
                }
                Err(e) => eprintln!(
                    "tensor-lifetime: cannot create the event log {} (TENSOR_LIFETIME_LOG): {e}",
                    path.display()
                ),
            }
        }
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
                analysis: Analysis::new(Judgement::default()),
                log,
                log_error: false,
                scratch: Scratch::default(),
            }),
            buffers: Registry::new(),
            next_frame: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            primary_frame: AtomicU64::new(0),
            primary_iteration: AtomicU64::new(0),
            primary_session: AtomicU64::new(0),
            primary_watermark: AtomicU64::new(0),
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

    /// Records a tensor seen at `site` (a binding, or a store when `store`). Out of line:
    /// one copy of it for all of a loop body's probes.
    #[inline(never)]
    pub(crate) fn probe(&'static self, t: &Tensor, site: &'static Site, store: bool) {
        timed(HotPhase::Probe, || self.probe_untimed(t, site, store));
    }

    #[inline(always)]
    fn probe_untimed(&'static self, t: &Tensor, site: &'static Site, store: bool) {
        // One counter for all threads: its order agrees with every thread's program order
        // and with hand-offs between threads (a tensor made on a loader thread and probed
        // by the training thread after it was sent there). While only one thread has a
        // probe buffer its probes take 0 (an atomic increment less per probe): they come
        // before any other thread's, since a second thread sets `threaded` before its first
        // probe, and a hand-off from it makes the receiver see the flag.
        let seq = if self.threaded.load(Ordering::Relaxed) {
            self.next_seq.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let serial = weak::serial(t);
        // Before this probe's own handle is made.
        let first = weak::weak_count(t) == 0;
        let _ = LOCAL.try_with(|local| {
            let (session, session_start) = local.session.get();
            // A tensor created before its session began was not born in it.
            let session = if serial >= session_start { session } else { 0 };
            let stack = local.stack.borrow();
            // Born in the innermost open loop that existed when it was created: a tensor
            // first seen in a loop but created before it (weights, a dataset) was not
            // born there.
            let (frame, iteration, session) = if stack.is_empty() {
                let frame = self.primary_frame.load(Ordering::Acquire);
                let primary_session = self.primary_session.load(Ordering::Relaxed);
                // A thread in a leak session of its own (a parallel leak test whose code
                // runs no loop) is not a loader of another session's loop: its tensors are
                // not summarized there (tests/tests/reliability_sessions.rs).
                if frame == 0
                    || serial < self.primary_watermark.load(Ordering::Relaxed)
                    || (session != 0 && session != primary_session)
                {
                    (0, 0, session)
                } else {
                    let session = match session {
                        0 => primary_session,
                        s => s,
                    };
                    (
                        frame,
                        self.primary_iteration.load(Ordering::Relaxed),
                        session,
                    )
                }
            } else {
                match stack.iter().rev().find(|f| f.2 <= serial) {
                    Some(&(frame, iteration, _)) => (frame, iteration, session),
                    None => (0, 0, session),
                }
            };
            drop(stack);
            let logged = self.timed.then(|| {
                Box::new(Logged {
                    t_ns: self.now_ns(),
                    thread: local.thread as u32,
                    view: View::of(t),
                    dims: t.dims().to_vec(),
                    storage: Observed::of(t),
                })
            });
            local.buf.push(
                Pending {
                    weak: WeakTensor::new(t),
                    site,
                    store,
                    frame: frame as u32,
                    iteration: iteration as u32,
                    session: session as u32,
                    seq,
                    first,
                    bytes: own_bytes(t),
                    logged,
                },
                &self.buffers,
                // Full: the probes go to the registry now (the buffer keeps its size).
                || self.drain(&mut self.state.lock()),
            );
        });
    }

    pub(crate) fn new_session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// Warm-up and window overrides for the loops of a session.
    pub(crate) fn set_session_judgement(
        &self,
        session: u64,
        warmup: Option<u64>,
        window: Option<u64>,
    ) {
        if warmup.is_some() || window.is_some() {
            self.session_judgement
                .lock()
                .insert(session, (warmup, window));
        }
    }

    /// Opens a loop frame on this thread: its id, and whether it is outermost there.
    pub(crate) fn open_loop(&'static self, site: &'static Site) -> (u64, bool) {
        let frame = self.next_frame.fetch_add(1, Ordering::Relaxed);
        let watermark = weak::serial_watermark();
        let (parent, session, thread) = LOCAL
            .try_with(|l| {
                let mut stack = l.stack.borrow_mut();
                let parent = stack.last().map(|&(f, i, _)| (f, i));
                stack.push((frame, 0, watermark));
                (parent, l.session.get().0, l.thread)
            })
            .unwrap_or((None, 0, 0));
        if parent.is_none()
            && self
                .primary_frame
                .compare_exchange(0, frame, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.primary_iteration.store(0, Ordering::Relaxed);
            self.primary_session.store(session, Ordering::Relaxed);
            self.primary_watermark.store(watermark, Ordering::Relaxed);
        }
        let now = Instant::now();
        let t_ns = self.now_ns();
        let (warmup, window) = self
            .session_judgement
            .lock()
            .get(&session)
            .copied()
            .unwrap_or((None, None));
        let mut st = self.state.lock();
        let site_id = st.site_id(site);
        st.frames.insert(
            frame,
            FrameState {
                parent,
                site,
                started: now,
                printed: Vec::new(),
            },
        );
        let name = if site.label.is_empty() {
            site.location()
        } else {
            site.label.to_string()
        };
        st.emit(Event::LoopStart {
            t_ns,
            frame,
            site: site_id,
            name,
            parent: parent.map(|p| p.0),
            parent_iteration: parent.map(|p| p.1),
            thread,
            session,
            warmup,
            window,
        });
        (frame, parent.is_none())
    }

    /// Marks the start of iteration `iteration` of `frame` on this thread; returns its
    /// start time for the event log ([`Tracker::stamp`]).
    pub(crate) fn begin_iteration(&self, frame: u64, iteration: u64) -> u64 {
        timed(HotPhase::BeginIteration, || {
            self.begin_iteration_untimed(frame, iteration)
        })
    }

    #[inline(always)]
    fn begin_iteration_untimed(&self, frame: u64, iteration: u64) -> u64 {
        let _ = LOCAL.try_with(|l| {
            if let Some(top) = l.stack.borrow_mut().iter_mut().rev().find(|f| f.0 == frame) {
                top.1 = iteration;
            }
        });
        if self.primary_frame.load(Ordering::Relaxed) == frame {
            self.primary_iteration.store(iteration, Ordering::Relaxed);
        }
        self.stamp()
    }

    /// Ends iteration `iteration` of `frame` (started at `started_ns`): the sweep.
    pub(crate) fn end_iteration(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
    ) {
        timed(HotPhase::EndIteration, || {
            self.end_iteration_untimed(frame, iteration, started_ns, outermost)
        });
    }

    #[inline(always)]
    fn end_iteration_untimed(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
    ) {
        let _ = LOCAL.try_with(|l| {
            if let Some(top) = l.stack.borrow_mut().iter_mut().rev().find(|f| f.0 == frame) {
                top.1 = iteration + 1;
            }
        });
        if self.primary_frame.load(Ordering::Relaxed) == frame {
            self.primary_iteration
                .store(iteration + 1, Ordering::Relaxed);
        }
        let mut st = self.state.lock();
        timed(HotPhase::Drain, || self.drain(&mut st));
        let t_ns = self.stamp();
        let sweep = timed(HotPhase::Sweep, || st.sweep(Some(frame), t_ns, self.timed));
        let duration_ns = t_ns.saturating_sub(started_ns);
        // The periodic memory monitor (`set_memory_monitor`, TENSOR_LIFETIME_MEMORY_EVERY).
        if crate::memory::memory_monitor() != 0 {
            let samples = crate::memory::monitor_tick(|| {
                st.devices
                    .iter()
                    .map(|(c, d)| (device_name(*c), d.live, d.peak))
                    .collect()
            });
            for (device, sample) in samples {
                st.emit(Event::Memory {
                    t_ns,
                    device,
                    sample,
                });
            }
        }
        timed(HotPhase::Analysis, || {
            if st.log.is_some() {
                // The summaries go into the event and come back to the scratch buffers,
                // which keep their allocations for the next sweep.
                let event = Event::IterationEnd {
                    t_ns,
                    frame,
                    iteration,
                    duration_ns,
                    live_tensors: sweep.live_tensors,
                    live_bytes: sweep.live_bytes,
                    sites: std::mem::take(&mut st.scratch.sites),
                };
                st.emit_ref(&event);
                if let Event::IterationEnd { sites, .. } = event {
                    st.scratch.sites = sites;
                }
                st.flush_log();
            } else {
                let State {
                    analysis, scratch, ..
                } = &mut *st;
                analysis.note_iteration_end(
                    frame,
                    iteration,
                    sweep.live_tensors,
                    sweep.live_bytes,
                    &scratch.sites,
                );
            }
        });
        trim_vec(&mut st.scratch.sites);
        if outermost {
            self.auto_report(&mut st, frame, iteration, false);
        }
    }

    /// Closes `frame` (every path out of the loop).
    pub(crate) fn close_loop(&'static self, frame: u64, iterations: u64) {
        let _ = LOCAL.try_with(|l| {
            let mut stack = l.stack.borrow_mut();
            if let Some(pos) = stack.iter().rposition(|f| f.0 == frame) {
                stack.truncate(pos);
            }
        });
        if self
            .primary_frame
            .compare_exchange(frame, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.primary_iteration.store(0, Ordering::Relaxed);
            self.primary_session.store(0, Ordering::Relaxed);
        }
        let mut st = self.state.lock();
        self.drain(&mut st);
        let parent = st.frames.get(&frame).and_then(|f| f.parent);
        // Survivors of a nested loop now belong to the enclosing iteration.
        let (new_frame, new_iteration) = parent.unwrap_or((0, 0));
        for r in st.records.values_mut() {
            if r.frame() == frame {
                r.frame = new_frame as u32;
                r.iteration = new_iteration as u32;
            }
        }
        let t_ns = self.now_ns();
        st.emit(Event::LoopEnd {
            t_ns,
            frame,
            iterations,
        });
        st.flush_log();
        if parent.is_none() {
            self.auto_report(&mut st, frame, iterations, true);
        }
        st.frames.remove(&frame);
    }

    /// Prints / writes the report at the end of an outermost iteration (when the findings
    /// changed) and at the end of an outermost loop.
    fn auto_report(&self, st: &mut State, frame: u64, iterations: u64, loop_end: bool) {
        let report = st.analysis.report();
        let signature: Vec<(String, u32, &'static str, bool)> = report
            .findings
            .iter()
            .map(|f| {
                (
                    f.site.file.clone(),
                    f.site.line,
                    f.kind.as_str(),
                    f.is_leak(),
                )
            })
            .collect();
        let Some(fs) = st.frames.get_mut(&frame) else {
            return;
        };
        let changed = fs.printed != signature;
        if !(changed || loop_end) {
            return;
        }
        fs.printed = signature;
        let started = fs.started;
        if changed {
            for f in report.leaks() {
                tracing::warn!(
                    target: "tensor_lifetime",
                    kind = f.kind.as_str(),
                    file = %f.site.file,
                    line = f.site.line,
                    label = %f.site.label,
                    survivors = f.survivors,
                    bytes = f.bytes,
                    bytes_per_iteration = f.bytes_per_iteration,
                    "tensor leak: `{}` at {}:{}",
                    f.site.label,
                    f.site.file,
                    f.site.line
                );
            }
        }
        if let Some(path) = &self.config.json {
            if let Err(e) = std::fs::write(path, report.to_json()) {
                eprintln!(
                    "tensor-lifetime: cannot write {} (TENSOR_LIFETIME_JSON): {e}",
                    path.display()
                );
            }
        }
        if self.config.report == ReportMode::Stderr && (!report.findings.is_empty() || loop_end) {
            let name = st.frame_label(frame);
            let when = if loop_end {
                format!(
                    "loop {name} ended after {} iterations in {:.2?}",
                    iterations,
                    started.elapsed()
                )
            } else {
                format!("loop {name}, iteration {iterations} ended")
            };
            eprint!("tensor-lifetime: {when}\n{report}");
        }
    }

    /// Moves every thread's buffered probes into the registry.
    fn drain(&self, st: &mut State) {
        let mut merged = std::mem::take(&mut st.scratch.drained);
        self.buffers.drain_with(
            &mut merged,
            // In the order the probes were made, across threads: a tensor made on a
            // worker or loader thread and seen by the training thread right after keeps
            // the worker's site as its creation site, whichever thread's buffer is drained
            // first. Each buffer is in probe order already. Stable: the first thread's
            // probes from before `threaded` all have 0.
            |all| all.sort_by_key(|p| p.seq),
            // One thread's probes are read in place, in its ring.
            |a, b| st.merge_drained(a, b, self.threaded.load(Ordering::Relaxed)),
        );
        st.scratch.drained = merged;
        st.scratch.trim_drain();
    }

    /// The report as of now (drains pending probes first).
    pub(crate) fn report(&self, session: Option<u64>) -> Report {
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.log.is_some();
        let sweep = st.sweep(None, t_ns, log);
        st.flush_log();
        let mut report = st.analysis.report_for(session);
        report.live_tensors = sweep.live_tensors;
        report.live_bytes = sweep.live_bytes;
        report
    }

    /// Live tracked tensors now, optionally only those born in `session`.
    pub(crate) fn live(&self, session: Option<u64>) -> Vec<LiveTensor> {
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.log.is_some();
        st.sweep(None, t_ns, log);
        let st = &*st;
        let mut out: Vec<LiveTensor> = st
            .records
            .values()
            .filter(|r| session.is_none_or(|s| r.session as u64 == s))
            .map(|r| {
                let site = st.sites[r.site as usize - 1];
                let store = (r.store != 0).then(|| st.sites[r.store as usize - 1]);
                LiveTensor {
                    site,
                    store,
                    id: r.id,
                    refcount: r.weak.strong_count(),
                    storage_bytes: r.storage_bytes,
                    view_bytes: r.view_bytes,
                    device: device_name(r.device),
                    in_loop: r.frame != 0,
                }
            })
            .collect();
        out.sort_by_key(|t| t.id);
        out
    }

    /// Per-site totals of tensors born and dropped.
    pub(crate) fn site_totals(&self) -> Vec<(&'static Site, SiteTotals)> {
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.log.is_some();
        st.sweep(None, t_ns, log);
        // Births are the analysis's count; the dropped are the births not alive now.
        let mut live = vec![0u64; st.sites.len()];
        for r in st.records.values() {
            live[r.site as usize - 1] += 1;
        }
        let mut v: Vec<_> = st
            .sites
            .iter()
            .zip(1u32..)
            .zip(live)
            .filter_map(|((site, id), live)| {
                let born = st.analysis.births(id);
                (born > 0).then(|| {
                    let dropped = born.saturating_sub(live);
                    (*site, SiteTotals { born, dropped })
                })
            })
            .collect();
        v.sort_by_key(|(s, _)| (s.file, s.line, s.column));
        v
    }

    /// Live and peak tracked bytes on a device (`"cpu"`, `"cuda:0"`).
    pub(crate) fn tracked_bytes(&self, device: &str) -> (u64, u64) {
        let Some(code) = device_from_name(device) else {
            return (0, 0);
        };
        let mut st = self.state.lock();
        self.drain(&mut st);
        let t_ns = self.now_ns();
        let log = st.log.is_some();
        st.sweep(None, t_ns, log);
        st.devices
            .iter()
            .find(|(c, _)| *c == code)
            .map_or((0, 0), |(_, d)| (d.live, d.peak))
    }

    /// Resets the peak of `device` to its current live bytes.
    pub(crate) fn reset_tracked_peak(&self, device: &str) {
        if let Some(code) = device_from_name(device) {
            let mut st = self.state.lock();
            if let Some((_, d)) = st.devices.iter_mut().find(|(c, _)| *c == code) {
                d.peak = d.live;
            }
        }
    }

    /// Records a memory sample (event log, analysis).
    pub(crate) fn record_memory(&self, device: String, sample: MemorySample) {
        let t_ns = self.now_ns();
        let mut st = self.state.lock();
        st.emit(Event::Memory {
            t_ns,
            device,
            sample,
        });
    }
}

/// A live tracked tensor, as [`crate::snapshot`] lists it.
#[derive(Debug, Clone)]
pub struct LiveTensor {
    /// Creation site.
    pub site: &'static Site,
    /// Latest store site it went through.
    pub store: Option<&'static Site>,
    /// Order of first sighting.
    pub id: u64,
    /// Strong references now.
    pub refcount: usize,
    /// Bytes of its whole storage and of its own view.
    pub storage_bytes: u64,
    pub view_bytes: u64,
    /// `cpu`, `cuda:0`...
    pub device: String,
    /// Born inside a tracked loop.
    pub in_loop: bool,
}

/// A live storage's claim: its bytes count once, for its owner (the oldest live record
/// using it).
#[derive(Debug, Clone, Copy)]
struct Claim {
    owner: u64,
    owner_site: u32,
    bytes: u64,
    device: u16,
}

impl Claim {
    fn of(r: &Record) -> Claim {
        Claim {
            owner: r.id,
            owner_site: r.site,
            bytes: r.storage_bytes,
            device: r.device,
        }
    }
}

type FastMap<K, V> = tensor_lifetime_report::fast_hash::HashMap<K, V>;

struct SweepResult {
    live_tensors: u64,
    live_bytes: u64,
}

impl State {
    /// `'epoch (file:line)`, or `at file:line` for a loop without a label.
    fn frame_label(&self, frame: u64) -> String {
        match self.frames.get(&frame) {
            Some(f) if !f.site.label.is_empty() => {
                format!("{} ({})", f.site.label, f.site.location())
            }
            Some(f) => format!("at {}", f.site.location()),
            None => "?".to_string(),
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
        self.emit(Event::Site {
            id,
            info: site.info(),
        });
        id
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

    /// Merges a drain's probes (`a` then `b`, in probe order) into the registry. The
    /// probes are the drain's: a record takes its probe's weak handle. `threaded`: more
    /// than one thread has probed.
    fn merge_drained(&mut self, a: &mut [Pending], b: &mut [Pending], threaded: bool) {
        let log = self.log.is_some();
        // A tensor's first probe needs no lookup: no record of it can exist. Except when
        // several threads probe: a later probe of it, on the thread it was handed to, may
        // have been drained first and made the record (see `merge`).
        let fast = !(log || threaded);
        for part in [a, b] {
            for p in part {
                if fast && p.first {
                    let site = self.site_id(p.site);
                    self.merge_fresh(p, site);
                } else {
                    self.merge(p, log);
                }
            }
        }
    }

    /// Merges the probe of a tensor that has no record, with no event log: a loop body's
    /// temporary, dropped by now, is counted and forgotten; a tensor alive now gets a
    /// record with what it needs of the tensor read now (a tensor dropped on another
    /// thread meanwhile is counted as dropped).
    #[inline(always)]
    fn merge_fresh(&mut self, p: &mut Pending, site: u32) {
        let id = self.next_record;
        self.next_record += 1;
        let frame = (p.frame != 0).then_some(u64::from(p.frame));
        let iteration = u64::from(p.iteration);
        // Upgraded only when alive: a dead handle's count is one load.
        let tensor = match p.weak.strong_count() {
            0 => None,
            // Dropped on another thread since the line above: `None`.
            _ => p.weak.upgrade(),
        };
        let Some(tensor) = tensor else {
            self.analysis
                .note_born_dropped(site, frame, iteration, p.bytes);
            return;
        };
        let (view, storage) = (View::of(&tensor), Observed::of(&tensor));
        drop(tensor);
        self.analysis.note_born_at(site, frame, iteration, p.bytes);
        let key = p.weak.key();
        self.records
            .insert(key, Record::of(p, id, site, view, storage));
    }

    /// Merges one probe into the registry.
    ///
    /// A key names one tensor for as long as a probe entry or a record holds its weak
    /// handle (the handle keeps the address allocated), so a probe's key finds its
    /// tensor's record if it has one.
    #[inline(never)]
    fn merge(&mut self, p: &mut Pending, log: bool) {
        let site = self.site_id(p.site);
        let key = p.weak.key();
        if let Some(r) = self.records.get_mut(&key) {
            if p.store {
                r.store = site;
                let tensor = r.id;
                if log {
                    self.emit(Event::Stored {
                        t_ns: p.logged.as_ref().map_or(0, |l| l.t_ns),
                        tensor,
                        site,
                    });
                }
            } else if log && r.site != site {
                let tensor = r.id;
                self.emit(Event::Alias { tensor, site });
            }
            return;
        }
        let alive = p.weak.strong_count() > 0;
        if !alive && !p.first {
            // A later probe of a tensor that has no record and is gone: its first probe
            // found it dropped (and counted it), or a sweep removed its record since this
            // probe (another thread's, made while that sweep held the lock). Or, on
            // another thread, its first probe is still to be drained and will count it.
            return;
        }
        // With a log every probe read what the log needs (`timed` is whether it opened).
        debug_assert_eq!(log, p.logged.is_some());
        let Some(l) = p.logged.as_deref().filter(|_| log) else {
            // No event log: a birth as of a first probe's.
            self.merge_fresh(p, site);
            return;
        };
        let id = self.next_record;
        self.next_record += 1;
        let (frame, iteration) = (u64::from(p.frame), u64::from(p.iteration));
        let (t_ns, view, storage) = (l.t_ns, l.view, l.storage);
        self.emit(Event::Born {
            t_ns,
            tensor: id,
            site,
            frame: (frame != 0).then_some(frame),
            iteration,
            bytes: storage.storage_bytes,
            storage: storage.storage as u64,
            shape: Some(l.dims.clone()),
            dtype: view.dtype.as_str().to_string(),
            device: device_name(view.device),
            thread: u64::from(l.thread),
        });
        if p.store {
            self.emit(Event::Stored {
                t_ns,
                tensor: id,
                site,
            });
        }
        if alive {
            self.records
                .insert(key, Record::of(p, id, site, view, storage));
        } else {
            self.emit(Event::Dropped { t_ns, tensor: id });
        }
    }

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
        let mut live_bytes = 0;
        let mut device = None;
        for c in self.claims.values() {
            live_bytes += c.bytes;
            let d = cached_device_index(&mut self.devices, &mut device, c.device);
            self.devices[d].1.tally += c.bytes;
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
    fn sweep(&mut self, frame: Option<u64>, t_ns: u64, log: bool) -> SweepResult {
        let (records, scratch, devices) = (&mut self.records, &mut self.scratch, &mut self.devices);
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
                });
            }
            if let Some(c) = claims.as_deref_mut() {
                claim(c, r);
            } else if let Some(bits) = distinct.as_mut() {
                if bits.insert(r.storage) {
                    live_bytes += r.storage_bytes;
                    let d = cached_device_index(devices, &mut device, r.device);
                    devices[d].1.tally += r.storage_bytes;
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
    devices: &mut Vec<(u16, DeviceBytes)>,
    last: &mut Option<(u16, usize)>,
    code: u16,
) -> usize {
    match *last {
        Some((c, i)) if c == code => i,
        _ => {
            let i = device_index(devices, code);
            *last = Some((code, i));
            i
        }
    }
}

/// The index of device `code` in `devices`, added in code order when first seen.
fn device_index(devices: &mut Vec<(u16, DeviceBytes)>, code: u16) -> usize {
    match devices.iter().position(|(c, _)| *c >= code) {
        Some(i) if devices[i].0 == code => i,
        Some(i) => {
            devices.insert(i, (code, DeviceBytes::default()));
            i
        }
        None => {
            devices.push((code, DeviceBytes::default()));
            devices.len() - 1
        }
    }
}

/// Summarizes `scratch.survivors` (keys of `records`) by site into `scratch.sites`.
fn summarize_survivors(
    records: &FastMap<usize, Record>,
    scratch: &mut Scratch,
    // `None`: every live storage has a single record, which owns it.
    claims: Option<&FastMap<usize, Claim>>,
) {
    let Scratch {
        survivors,
        holders,
        sites: out,
        ..
    } = scratch;
    if survivors.is_empty() {
        out.clear();
        return;
    }
    // Graphs (out of line): only survivors that had an op when tagged can hold a graph,
    // so a sweep without any pays nothing for them.
    let graphs = survivors
        .iter()
        .any(|v| v.has_graph)
        .then(|| graph_holders(records, survivors));
    // Per site, in (site, iteration) order so distinct iterations are counted by
    // change.
    survivors.sort_unstable_by_key(|v| (v.site, v.iteration, v.id));
    holders.clear();
    let mut used = 0;
    let mut last_iteration = None;
    for r in survivors.iter() {
        let (site, iteration) = (r.site, r.iteration);
        if used == 0 || out[used - 1].site != site {
            if used > 0 {
                finish_holders(&mut out[used - 1], holders);
            }
            let (graph_tensors, graph_bytes) = graphs
                .as_ref()
                .and_then(|g| g.1.get(&site).copied())
                .unwrap_or_default();
            if used == out.len() {
                out.push(SiteSweep::default());
            }
            // A slot of an earlier sweep: its holders keep their allocation.
            let slot = &mut out[used];
            let kept = std::mem::take(&mut slot.holders);
            *slot = SiteSweep {
                site,
                first_iteration: u64::from(iteration),
                graph_tensors,
                graph_bytes,
                holders: kept,
                ..SiteSweep::default()
            };
            used += 1;
            last_iteration = None;
        }
        let a = &mut out[used - 1];
        a.survivors += 1;
        if last_iteration != Some(iteration) {
            a.iterations += 1;
            last_iteration = Some(iteration);
        }
        a.last_iteration = u64::from(iteration);
        a.refcount = a.refcount.max(u64::from(r.refcount));
        let claim = claims.map(|c| c.get(&r.storage));
        let owns = claim.is_none_or(|c| c.is_some_and(|c| c.owner == r.id));
        if owns {
            a.bytes += r.storage_bytes;
            if r.storage_bytes > r.view_bytes {
                a.view_bytes += r.view_bytes;
                a.view_storage_bytes += r.storage_bytes;
            }
        }
        let held = graphs.as_ref().and_then(|g| g.0.get(&r.id));
        let holder = if let Some(root) = held {
            HolderSpec::Graph { site: *root }
        } else if r.store != 0 {
            HolderSpec::Store { site: r.store }
        } else if !owns {
            HolderSpec::View {
                site: claim.flatten().map_or(0, |c| c.owner_site),
            }
        } else {
            HolderSpec::Unknown
        };
        match holders.iter_mut().find(|(h, _)| *h == holder) {
            Some((_, n)) => *n += 1,
            None => holders.push((holder, 1)),
        }
    }
    if used > 0 {
        finish_holders(&mut out[used - 1], holders);
    }
    out.truncate(used);
}

/// Holders by graph: the root site of each held survivor (by record id), and per root site
/// the largest graph's tensors and bytes.
type Graphs = (FastMap<u64, u32>, FastMap<u32, (u64, u64)>);

/// Autograd graphs among `survivors`: the newest survivor carrying a graph is a root, and
/// survivors in its graph are held by it. Returns the holder root's site of each held
/// survivor (by record id) and, per root site, the largest graph's tensors and bytes.
#[inline(never)]
fn graph_holders(records: &FastMap<usize, Record>, survivors: &[Survivor]) -> Graphs {
    let mut graph_held: FastMap<u64, u32> = FastMap::default();
    let mut graphs: FastMap<u32, (u64, u64)> = FastMap::default();
    let mut roots: Vec<(usize, &Record)> = survivors
        .iter()
        .filter(|v| v.has_graph)
        .filter_map(|v| records.get(&v.key).map(|r| (v.key, r)))
        .collect();
    roots.sort_unstable_by_key(|r| std::cmp::Reverse(r.1.id));
    let by_key: FastMap<usize, u64> = survivors.iter().map(|v| (v.key, v.id)).collect();
    for (own_key, r) in roots {
        if graph_held.contains_key(&r.id) {
            continue;
        }
        let Some(t) = r.weak.upgrade() else { continue };
        let mut storages: FastMap<usize, ()> = FastMap::default();
        let mut tensors = 0u64;
        let mut bytes = 0u64;
        for node in t.sorted_nodes() {
            if node.is_variable() {
                continue;
            }
            let key = weak::key(node);
            if key != own_key {
                tensors += 1;
                if let Some(held) = by_key.get(&key) {
                    graph_held.entry(*held).or_insert(r.site);
                }
            }
            let node_storage = Observed::of(node);
            if storages.insert(node_storage.storage, ()).is_none() {
                bytes += node_storage.storage_bytes;
            }
        }
        if tensors > 0 {
            let g = graphs.entry(r.site).or_default();
            g.0 = g.0.max(tensors);
            g.1 = g.1.max(bytes);
        }
    }
    (graph_held, graphs)
}

/// Moves the counted holders into a site's summary: the 4 most frequent.
#[inline]
fn finish_holders(site: &mut SiteSweep, holders: &mut Vec<(HolderSpec, u64)>) {
    if holders.len() > 1 {
        holders.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    site.holders.clear();
    for &(holder, count) in holders.iter().take(4) {
        site.holders.push(HolderCount { holder, count });
    }
    holders.clear();
}

/// Sets this thread's session (leak tests) and the creation watermark it starts at;
/// returns the previous ones.
pub(crate) fn set_session(session: (u64, u64)) -> (u64, u64) {
    LOCAL
        .try_with(|l| l.session.replace(session))
        .unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_self_test_refuses_to_start() {
        let config = Config::from_lookup(|_| None);
        let (phase, why) = decide(&config, || {
            Err(weak::LayoutMismatch("layout changed".to_string()))
        });
        assert_eq!(phase, Phase::Failed);
        assert_eq!(why.as_deref(), Some("layout changed"));
        let err = crate::Error::TrackerUnavailable(why.unwrap());
        assert_eq!(
            err.to_string(),
            "tensor-lifetime cannot track tensors: layout changed"
        );
    }

    #[test]
    fn records_stay_small() {
        // The memory budget is 128 bytes per live record, hash table overhead included.
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
        let (phase, why) = decide(&config, || panic!("must not run"));
        assert_eq!(phase, Phase::Off);
        assert!(why.is_none());
    }
}
