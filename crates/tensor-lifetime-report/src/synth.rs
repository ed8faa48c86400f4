//! Synthetic event logs: a training loop simulated event by event, without candle.
//!
//! For tests and benchmarks of the renderers and the CLI: they must not depend on the
//! runtime tracker, and a benchmark needs logs of any length. The loop is an `'epoch` loop
//! around a `'batch` loop; each batch makes an input `x`, `logits` and a `loss` that die
//! in the iteration, the optimizer state `m` is made once in the first batch and kept
//! (a `retained` finding), and with [`SynthLoop::leak`] each batch also stores a copy `t`
//! into `self.cache` that is never cleared (a `leak`). The sweeps, live counts and memory
//! samples are what the tracker would write for that program.
//!
//! Not part of the public API; it may change with the tests.

use crate::event::{Event, HolderCount, HolderSpec, MemorySample, SiteInfo, SiteKind, SiteSweep};
use std::io::{self, Write};

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

fn site(id: u32, file: &str, line: u32, function: &str, label: &str, kind: SiteKind) -> Event {
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
        },
    }
}

/// A `loop_start` event. Built through serde, so that optional fields the event model
/// gains later take their defaults here as they do in old logs.
fn loop_start(
    t_ns: u64,
    frame: u64,
    site: u32,
    name: &str,
    parent: Option<(u64, u64)>,
    thread: u64,
) -> Event {
    let mut v = serde_json::json!({
        "event": "loop_start",
        "t_ns": t_ns,
        "frame": frame,
        "site": site,
        "name": name,
        "thread": thread,
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

/// All events of the run, in memory (for small runs).
pub fn events(cfg: &SynthLoop) -> Vec<Event> {
    let mut v = Vec::new();
    generate(cfg, |e| v.push(e));
    v
}

/// Calls `f` with each event of the run, in log order.
pub fn generate(cfg: &SynthLoop, mut f: impl FnMut(Event)) {
    f(Event::header(4242, 1_700_000_000_000));
    let train = "examples::train::run";
    f(site(
        EPOCH,
        "src/train.rs",
        12,
        train,
        "'epoch",
        SiteKind::Loop,
    ));
    f(site(
        BATCH,
        "src/train.rs",
        13,
        train,
        "'batch",
        SiteKind::Loop,
    ));
    f(site(
        X,
        "src/dataset.rs",
        30,
        "examples::dataset::next",
        "x",
        SiteKind::Binding,
    ));
    f(site(
        LOGITS,
        "src/train.rs",
        14,
        train,
        "logits",
        SiteKind::Binding,
    ));
    f(site(
        LOSS,
        "src/train.rs",
        15,
        train,
        "loss",
        SiteKind::Binding,
    ));
    f(site(
        M,
        "src/optim.rs",
        22,
        "examples::optim::step",
        "m",
        SiteKind::Binding,
    ));
    if cfg.leak {
        let next = "examples::dataset::next";
        f(site(T, "src/dataset.rs", 41, next, "t", SiteKind::Binding));
        f(site(
            CACHE,
            "src/dataset.rs",
            42,
            next,
            "self.cache",
            SiteKind::Store,
        ));
    }
    let thread = 1;
    let mut t: u64 = 1_000_000;
    let mut tensor: u64 = 0;
    let mut storage: u64 = 0x1000;
    let mut cached: u64 = 0;
    let mut reserved: u64 = 0;
    let mut m_alive = false;
    f(loop_start(t, 1, EPOCH, "'epoch", None, thread));
    let mut step: u64 = 0;
    for epoch in 0..cfg.epochs {
        let epoch_start = t;
        let frame = 2 + epoch;
        f(loop_start(
            t,
            frame,
            BATCH,
            "'batch",
            Some((1, epoch)),
            thread,
        ));
        let cached_at_epoch_start = cached;
        for b in 0..cfg.batches {
            let start = t;
            let mut born = |site: u32, bytes: u64, t: u64, f: &mut dyn FnMut(Event)| {
                tensor += 1;
                storage += 0x40;
                let shape = match site {
                    X | T => vec![32, 784],
                    LOGITS => vec![32, 10],
                    LOSS => vec![],
                    _ => vec![784, 10],
                };
                f(Event::Born {
                    t_ns: t,
                    tensor,
                    site,
                    frame: Some(frame),
                    iteration: b,
                    bytes,
                    storage,
                    shape: Some(shape),
                    dtype: "f32".into(),
                    device: if cfg.pool { "cuda:0" } else { "cpu" }.into(),
                    thread,
                });
                tensor
            };
            let x = born(X, X_BYTES, t + 10_000, &mut f);
            if cfg.leak {
                let id = born(T, X_BYTES, t + 20_000, &mut f);
                f(Event::Stored {
                    t_ns: t + 21_000,
                    tensor: id,
                    site: CACHE,
                });
                cached += 1;
            }
            let logits = born(LOGITS, LOGITS_BYTES, t + 300_000, &mut f);
            let loss = born(LOSS, LOSS_BYTES, t + 400_000, &mut f);
            if !m_alive {
                born(M, M_BYTES, t + 500_000, &mut f);
                m_alive = true;
            }
            // Iteration lengths vary a little, deterministically.
            let duration = 2_000_000 + (step * 7919 % 500_000);
            step += 1;
            t = start + duration;
            for id in [x, logits, loss] {
                f(Event::Dropped {
                    t_ns: t - 1_000,
                    tensor: id,
                });
            }
            let live_tensors = 1 + cached;
            let live_bytes = M_BYTES + cached * X_BYTES;
            let mut sites = Vec::new();
            if epoch == 0 {
                sites.push(SiteSweep {
                    site: M,
                    survivors: 1,
                    bytes: M_BYTES,
                    iterations: 1,
                    first_iteration: 0,
                    last_iteration: 0,
                    refcount: 2,
                    ..SiteSweep::default()
                });
            }
            if cfg.leak {
                let n = cached - cached_at_epoch_start;
                sites.push(cache_sweep(n, 0, b));
            }
            f(Event::IterationEnd {
                t_ns: t,
                frame,
                iteration: b,
                duration_ns: duration,
                live_tensors,
                live_bytes,
                sites,
            });
            if cfg.pool {
                // The pool keeps the batch's transient tensors' blocks cached.
                let used = live_bytes + X_BYTES + LOGITS_BYTES + 512;
                reserved = reserved.max(used.div_ceil(CHUNK) * CHUNK);
                f(Event::Memory {
                    t_ns: t,
                    device: "cuda:0".into(),
                    sample: MemorySample {
                        tracked: live_bytes,
                        pool_used: Some(used),
                        pool_reserved: Some(reserved),
                        device_used: Some(reserved + (500 << 20)),
                        device_total: Some(141 << 30),
                        process_resident: None,
                    },
                });
            }
        }
        f(Event::LoopEnd {
            t_ns: t,
            frame,
            iterations: cfg.batches,
        });
        t += 50_000;
        let mut sites = vec![SiteSweep {
            site: M,
            survivors: 1,
            bytes: M_BYTES,
            iterations: 1,
            first_iteration: 0,
            last_iteration: 0,
            refcount: 2,
            ..SiteSweep::default()
        }];
        if cfg.leak {
            sites.push(cache_sweep(cached, 0, epoch));
        }
        f(Event::IterationEnd {
            t_ns: t,
            frame: 1,
            iteration: epoch,
            duration_ns: t - epoch_start,
            live_tensors: 1 + cached,
            live_bytes: M_BYTES + cached * X_BYTES,
            sites,
        });
    }
    f(Event::LoopEnd {
        t_ns: t,
        frame: 1,
        iterations: cfg.epochs,
    });
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
    use crate::analysis::Analysis;
    use crate::report::FindingKind;

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
