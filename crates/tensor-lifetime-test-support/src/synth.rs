//! Synthetic event logs: a training loop simulated event by event, without candle.
//!
//! For tests and benchmarks of the renderers and the CLI: they must not depend on the
//! runtime tracker, and a benchmark needs logs of any length. The loop is an `'epoch` loop
//! around a `'batch` loop; each batch makes an input `x`, `logits` and a `loss` that die
//! in the iteration, the optimizer state `m` is made once in the first batch and kept
//! (a `retained` finding), and with [`SynthLoop::leak`] each batch also stores a copy `t`
//! into `self.cache` that is never cleared (a `leak`). The sweeps, live counts and memory
//! samples are what the tracker would write for that program.

use std::io::{self, Write};
use tensor_lifetime_report::event::{
    Event, HolderCount, HolderSpec, MemorySample, SiteInfo, SiteKind, SiteSweep,
};

/// The shape of a synthetic run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthLoop {
    pub epochs: u64,
    pub batches: u64,
    /// Store a copy of every batch into a cache that is never cleared.
    pub leak: bool,
    /// Write memory samples of a `cuda:0` pool after every batch.
    pub pool: bool,
}

impl SynthLoop {
    /// A clean run: `epochs` x `batches`.
    pub fn clean(epochs: u64, batches: u64) -> Self {
        SynthLoop {
            epochs,
            batches,
            leak: false,
            pool: true,
        }
    }

    /// The same run with the dataset cache leak.
    pub fn leaky(epochs: u64, batches: u64) -> Self {
        SynthLoop {
            leak: true,
            ..SynthLoop::clean(epochs, batches)
        }
    }

    /// A run of about `n` events (leaky), for benchmarks.
    pub fn with_events(n: u64) -> Self {
        // A leaky batch writes 10 events; 100 epochs, as many batches as it takes.
        let epochs = 100;
        SynthLoop::leaky(epochs, (n / 10 / epochs).max(1))
    }
}

const EPOCH: u32 = 0;
const BATCH: u32 = 1;
const X: u32 = 2;
const LOGITS: u32 = 3;
const LOSS: u32 = 4;
const M: u32 = 5;
const T: u32 = 6;
const CACHE: u32 = 7;

const X_BYTES: u64 = 32 * 784 * 4;
const LOGITS_BYTES: u64 = 32 * 10 * 4;
const LOSS_BYTES: u64 = 4;
const M_BYTES: u64 = 784 * 10 * 4;
const CHUNK: u64 = 2 << 20;

/// The one thread of the run, and the frame of its `'epoch` loop.
const THREAD: u64 = 1;
const EPOCH_FRAME: u64 = 1;

const TRAIN: &str = "examples::train::run";
const NEXT: &str = "examples::dataset::next";

/// A site: id, file, line, function, label, kind.
type SiteRow = (u32, &'static str, u32, &'static str, &'static str, SiteKind);

/// The sites of every run, in the order they are declared.
const SITES: [SiteRow; 6] = [
    (EPOCH, "src/train.rs", 12, TRAIN, "'epoch", SiteKind::Loop),
    (BATCH, "src/train.rs", 13, TRAIN, "'batch", SiteKind::Loop),
    (X, "src/dataset.rs", 30, NEXT, "x", SiteKind::Binding),
    (
        LOGITS,
        "src/train.rs",
        14,
        TRAIN,
        "logits",
        SiteKind::Binding,
    ),
    (LOSS, "src/train.rs", 15, TRAIN, "loss", SiteKind::Binding),
    (
        M,
        "src/optim.rs",
        22,
        "examples::optim::step",
        "m",
        SiteKind::Binding,
    ),
];

/// The sites of the dataset cache leak.
const LEAK_SITES: [SiteRow; 2] = [
    (T, "src/dataset.rs", 41, NEXT, "t", SiteKind::Binding),
    (
        CACHE,
        "src/dataset.rs",
        42,
        NEXT,
        "self.cache",
        SiteKind::Store,
    ),
];

fn site((id, file, line, function, label, kind): SiteRow) -> Event {
    Event::Site {
        id,
        info: SiteInfo {
            file: file.into(),
            line,
            column: 9,
            function: function.into(),
            label: label.into(),
            kind,
            note: None,
            from: Vec::new(),
        },
    }
}

/// A `loop_start` event. Built through serde, so that optional fields the event model
/// gains later take their defaults here as they do in old logs.
fn loop_start(t_ns: u64, frame: u64, site: u32, name: &str, parent: Option<(u64, u64)>) -> Event {
    let mut v = serde_json::json!({
        "event": "loop_start",
        "t_ns": t_ns,
        "frame": frame,
        "site": site,
        "name": name,
        "thread": THREAD,
    });
    if let Some((frame, iteration)) = parent {
        v["parent"] = frame.into();
        v["parent_iteration"] = iteration.into();
    }
    serde_json::from_value(v).expect("a valid loop_start event")
}

/// Writes the whole run as an event log; returns the number of events written.
pub fn write_log(cfg: &SynthLoop, out: &mut impl Write) -> io::Result<u64> {
    let mut n = 0;
    let mut err = None;
    generate(cfg, |e| {
        if err.is_none() {
            if let Err(e2) = e.write_line(out) {
                err = Some(e2);
            }
            n += 1;
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// Writes the run as the log of rank `rank` of a job of `world_size` ranks (the header
/// names them); returns the number of events written.
pub fn write_rank_log(
    cfg: &SynthLoop,
    rank: u32,
    world_size: u32,
    out: &mut impl Write,
) -> io::Result<u64> {
    let mut n = 0;
    let mut err = None;
    generate(cfg, |e| {
        let e = match e {
            Event::Header { .. } => Event::rank_header(
                4242 + rank,
                1_700_000_000_000,
                Some(rank),
                Some(world_size),
                Some("synth".to_string()),
            ),
            e => e,
        };
        if err.is_none() {
            if let Err(e2) = e.write_line(out) {
                err = Some(e2);
            }
            n += 1;
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// All events of the run, in memory (for small runs).
pub fn events(cfg: &SynthLoop) -> Vec<Event> {
    let mut v = Vec::new();
    generate(cfg, |e| v.push(e));
    v
}

/// Calls `f` with each event of the run, in log order.
pub fn generate(cfg: &SynthLoop, mut f: impl FnMut(Event)) {
    f(Event::header(4242, 1_700_000_000_000));
    for row in SITES {
        f(site(row));
    }
    if cfg.leak {
        for row in LEAK_SITES {
            f(site(row));
        }
    }
    let mut run = Run::new(cfg);
    f(loop_start(run.t, EPOCH_FRAME, EPOCH, "'epoch", None));
    for epoch in 0..cfg.epochs {
        run.epoch(epoch, &mut f);
    }
    f(Event::LoopEnd {
        t_ns: run.t,
        frame: EPOCH_FRAME,
        iterations: cfg.epochs,
    });
}

/// The state of the simulated program between events.
struct Run<'a> {
    cfg: &'a SynthLoop,
    /// The clock, in nanoseconds.
    t: u64,
    /// The last tensor id and storage address handed out.
    tensor: u64,
    storage: u64,
    /// Tensors in the dataset cache.
    cached: u64,
    /// The pool's reserved bytes (it never shrinks).
    reserved: u64,
    /// The optimizer state was made.
    m_alive: bool,
    /// Batches run so far, in all epochs.
    step: u64,
}

/// Where a tensor is born: the `'batch` frame and its iteration.
#[derive(Clone, Copy)]
struct Batch {
    frame: u64,
    iteration: u64,
}

impl<'a> Run<'a> {
    fn new(cfg: &'a SynthLoop) -> Self {
        Run {
            cfg,
            t: 1_000_000,
            tensor: 0,
            storage: 0x1000,
            cached: 0,
            reserved: 0,
            m_alive: false,
            step: 0,
        }
    }

    /// One iteration of the `'epoch` loop: a run of the `'batch` loop, then the sweep.
    fn epoch(&mut self, epoch: u64, f: &mut impl FnMut(Event)) {
        let epoch_start = self.t;
        let frame = 2 + epoch;
        f(loop_start(
            self.t,
            frame,
            BATCH,
            "'batch",
            Some((EPOCH_FRAME, epoch)),
        ));
        let cached_at_epoch_start = self.cached;
        for iteration in 0..self.cfg.batches {
            let at = Batch { frame, iteration };
            self.batch(epoch, at, cached_at_epoch_start, f);
        }
        f(Event::LoopEnd {
            t_ns: self.t,
            frame,
            iterations: self.cfg.batches,
        });
        self.t += 50_000;
        let mut sites = vec![optimizer_sweep()];
        if self.cfg.leak {
            sites.push(cache_sweep(self.cached, 0, epoch));
        }
        f(Event::IterationEnd {
            t_ns: self.t,
            frame: EPOCH_FRAME,
            iteration: epoch,
            duration_ns: self.t - epoch_start,
            live_tensors: 1 + self.cached,
            live_bytes: M_BYTES + self.cached * X_BYTES,
            sites,
            roles: Vec::new(),
        });
    }

    /// One iteration of the `'batch` loop: births, drops, the sweep and a pool sample.
    fn batch(
        &mut self,
        epoch: u64,
        at: Batch,
        cached_at_epoch_start: u64,
        f: &mut impl FnMut(Event),
    ) {
        let start = self.t;
        let x = self.born(at, X, X_BYTES, start + 10_000, f);
        if self.cfg.leak {
            let id = self.born(at, T, X_BYTES, start + 20_000, f);
            f(Event::Stored {
                t_ns: start + 21_000,
                tensor: id,
                site: CACHE,
            });
            self.cached += 1;
        }
        let logits = self.born(at, LOGITS, LOGITS_BYTES, start + 300_000, f);
        let loss = self.born(at, LOSS, LOSS_BYTES, start + 400_000, f);
        if !self.m_alive {
            self.born(at, M, M_BYTES, start + 500_000, f);
            self.m_alive = true;
        }
        // Iteration lengths vary a little, deterministically.
        let duration = 2_000_000 + (self.step * 7919 % 500_000);
        self.step += 1;
        self.t = start + duration;
        for id in [x, logits, loss] {
            f(Event::Dropped {
                t_ns: self.t - 1_000,
                tensor: id,
            });
        }
        let live_bytes = M_BYTES + self.cached * X_BYTES;
        let mut sites = Vec::new();
        if epoch == 0 {
            sites.push(optimizer_sweep());
        }
        if self.cfg.leak {
            let n = self.cached - cached_at_epoch_start;
            sites.push(cache_sweep(n, 0, at.iteration));
        }
        f(Event::IterationEnd {
            t_ns: self.t,
            frame: at.frame,
            iteration: at.iteration,
            duration_ns: duration,
            live_tensors: 1 + self.cached,
            live_bytes,
            sites,
            roles: Vec::new(),
        });
        if self.cfg.pool {
            self.pool_sample(live_bytes, f);
        }
    }

    /// A tensor born at `site` in the batch `at`; returns its id.
    fn born(
        &mut self,
        at: Batch,
        site: u32,
        bytes: u64,
        t_ns: u64,
        f: &mut impl FnMut(Event),
    ) -> u64 {
        self.tensor += 1;
        self.storage += 0x40;
        let shape = match site {
            X | T => vec![32, 784],
            LOGITS => vec![32, 10],
            LOSS => vec![],
            _ => vec![784, 10],
        };
        f(Event::Born {
            t_ns,
            tensor: self.tensor,
            site,
            frame: Some(at.frame),
            iteration: at.iteration,
            bytes,
            storage: self.storage,
            shape: Some(shape),
            dtype: "f32".into(),
            device: if self.cfg.pool { "cuda:0" } else { "cpu" }.into(),
            thread: THREAD,
        });
        self.tensor
    }

    /// A memory sample of the `cuda:0` pool, which keeps the batch's transient tensors'
    /// blocks cached.
    fn pool_sample(&mut self, live_bytes: u64, f: &mut impl FnMut(Event)) {
        let used = live_bytes + X_BYTES + LOGITS_BYTES + 512;
        self.reserved = self.reserved.max(used.div_ceil(CHUNK) * CHUNK);
        f(Event::Memory {
            t_ns: self.t,
            device: "cuda:0".into(),
            sample: MemorySample {
                tracked: live_bytes,
                pool_used: Some(used),
                pool_reserved: Some(self.reserved),
                device_used: Some(self.reserved + (500 << 20)),
                device_total: Some(141 << 30),
                process_resident: None,
            },
        });
    }
}

/// The optimizer state: made once in the first batch and kept.
fn optimizer_sweep() -> SiteSweep {
    SiteSweep {
        site: M,
        survivors: 1,
        bytes: M_BYTES,
        iterations: 1,
        first_iteration: 0,
        last_iteration: 0,
        refcount: 2,
        ..SiteSweep::default()
    }
}

fn cache_sweep(survivors: u64, first: u64, last: u64) -> SiteSweep {
    SiteSweep {
        site: T,
        survivors,
        bytes: survivors * X_BYTES,
        iterations: last - first + 1,
        first_iteration: first,
        last_iteration: last,
        refcount: 1,
        holders: vec![HolderCount {
            holder: HolderSpec::Store { site: CACHE },
            count: survivors,
        }],
        ..SiteSweep::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensor_lifetime_report::{Analysis, FindingKind};

    fn judge(cfg: &SynthLoop) -> Vec<(FindingKind, String)> {
        let mut a = Analysis::default();
        for e in events(cfg) {
            a.apply(&e);
        }
        a.report()
            .findings
            .iter()
            .map(|f| (f.kind, f.site.label.clone()))
            .collect()
    }

    #[test]
    fn clean_run_has_only_the_optimizer_state() {
        assert_eq!(
            judge(&SynthLoop::clean(4, 6)),
            vec![(FindingKind::Retained, "m".to_string())]
        );
    }

    #[test]
    fn leaky_run_is_judged_a_leak_at_the_cache_site() {
        let got = judge(&SynthLoop::leaky(4, 6));
        assert_eq!(got[0], (FindingKind::Leak, "t".to_string()), "{got:?}");
    }

    #[test]
    fn event_count_is_about_what_was_asked() {
        let cfg = SynthLoop::with_events(20_000);
        let mut n = 0u64;
        generate(&cfg, |_| n += 1);
        assert!((19_000..=21_000).contains(&n), "{n}");
    }
}
