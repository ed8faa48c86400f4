//! Threads: a data-loader thread and rayon workers create tensors while a tracked loop
//! runs, and a stress test with several tracked loops on their own threads while other
//! threads sweep. Every count is exact: the per-site totals (born, dropped), the live
//! tensors, and the event log (one `born` per tensor, one `dropped` per death, no id
//! twice), so no record is lost or duplicated.
//!
//! Own test binary: the event log and the per-site totals are process-wide. The
//! tests take a lock: tensors of threads without a loop belong to the primary loop.

use candle_core::{Device, Result, Tensor};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Arc, Barrier, MutexGuard};
use tensor_lifetime_report::Event;
use tensor_lifetime_tests::{event_log_env, read_event_log, serial};

/// Sets the environment before the first tracked tensor of the process; takes the lock.
fn setup() -> MutexGuard<'static, ()> {
    let guard = serial();
    event_log_env("reliability_threads.jsonl");
    assert!(tensor_lifetime::enabled());
    guard
}

/// Born and dropped so far at the sites with `label`.
fn totals(label: &str) -> (u64, u64) {
    tensor_lifetime::site_totals()
        .into_iter()
        .filter(|t| t.site.label == label)
        .fold((0, 0), |(b, d), t| (b + t.born, d + t.dropped))
}

/// Reads the event log: per creation-site label, `born` and `dropped` events; checks that
/// no tensor is born twice or dropped twice or dropped before it was born.
fn log_counts() -> HashMap<String, (u64, u64)> {
    let mut labels: HashMap<u32, String> = HashMap::new();
    let mut site_of: HashMap<u64, u32> = HashMap::new();
    let mut dropped: HashSet<u64> = HashSet::new();
    let mut counts: HashMap<String, (u64, u64)> = HashMap::new();
    for (line, event) in read_event_log() {
        match event {
            Event::Site { id, info } => {
                labels.insert(id, info.label);
            }
            Event::Born { tensor, site, .. } => {
                assert!(
                    site_of.insert(tensor, site).is_none(),
                    "line {line}: tensor {tensor} born twice"
                );
                counts.entry(labels[&site].clone()).or_default().0 += 1;
            }
            Event::Dropped { tensor, .. } => {
                let site = site_of
                    .get(&tensor)
                    .unwrap_or_else(|| panic!("line {line}: tensor {tensor} dropped, never born"));
                assert!(
                    dropped.insert(tensor),
                    "line {line}: tensor {tensor} dropped twice"
                );
                counts.entry(labels[site].clone()).or_default().1 += 1;
            }
            _ => {}
        }
    }
    counts
}

const STEPS: usize = 60;
const PER_STEP: usize = 32;
const KEEP_EVERY: usize = 10;

/// A training loop fed by a loader thread (no loop of its own: its tensors belong to this
/// loop's iterations), whose features are computed by rayon workers.
#[tensor_lifetime::track]
fn train_with_workers(steps: usize) -> Result<Vec<Tensor>> {
    let (tx, rx) = mpsc::sync_channel::<Tensor>(4);
    let loader = std::thread::spawn(move || {
        (0..steps).try_for_each(|i| {
            let loaded = Tensor::full(i as f32, (4, 8), &Device::Cpu)?;
            tx.send(loaded).map_err(candle_core::Error::wrap)
        })
    });
    let mut kept = Vec::new();
    'step: for step in 0..steps {
        let input = rx.recv().map_err(candle_core::Error::wrap)?;
        let features = (0..PER_STEP)
            .into_par_iter()
            .map(|j| {
                let worker_out = (&input * (j + 1) as f64)?;
                Ok(worker_out)
            })
            .collect::<Result<Vec<Tensor>>>()?;
        let summed = Tensor::stack(&features, 0)?.sum_all()?;
        let expected = (step * PER_STEP * (PER_STEP + 1) / 2 * 32) as f32;
        assert_eq!(summed.to_scalar::<f32>()?, expected);
        if step % KEEP_EVERY != 0 {
            continue 'step;
        }
        kept.push(features[0].clone());
    }
    loader.join().expect("the loader panicked")?;
    Ok(kept)
}

#[test]
fn loader_thread_and_rayon_workers_while_the_loop_runs() {
    let _serial = setup();
    let kept = train_with_workers(STEPS).unwrap();
    let kept_count = STEPS.div_ceil(KEEP_EVERY) as u64;
    assert_eq!(kept.len() as u64, kept_count);

    // Each tensor keeps the site of the thread that made it, though the training thread
    // saw it too (as `input`, in `features`): first sightings are ordered by time, not by
    // which thread's buffer is drained first.
    let all: Vec<_> = tensor_lifetime::site_totals()
        .into_iter()
        .map(|t| (t.site.label, t.site.line, t.born, t.dropped))
        .collect();
    assert_eq!(totals("loaded"), (STEPS as u64, STEPS as u64), "{all:?}");
    let workers = (STEPS * PER_STEP) as u64;
    assert_eq!(totals("worker_out"), (workers, workers - kept_count));
    for label in ["input", "features", "summed"] {
        let (born, dropped) = totals(label);
        assert_eq!(born, dropped, "{label}");
    }
    assert_eq!(totals("summed").0, STEPS as u64);
    assert_eq!(totals("input").0, 0, "`input` is the loader's tensor");
    assert_eq!(
        totals("features").0,
        0,
        "`features` are the workers' tensors"
    );

    // The kept features, made on rayon threads, count in the training loop: a leak of
    // the worker site, its survivors exactly the kept ones.
    let report = tensor_lifetime::report();
    let finding = report
        .findings
        .iter()
        .find(|f| f.site.label == "worker_out")
        .unwrap_or_else(|| panic!("{report}"));
    assert!(finding.is_leak(), "{report}");
    assert_eq!(finding.survivors, kept_count);
    assert_eq!(finding.bytes, kept_count * 4 * 8 * 4);

    let live: Vec<_> = tensor_lifetime::snapshot()
        .into_iter()
        .filter(|t| t.site.label == "worker_out")
        .collect();
    assert_eq!(live.len() as u64, kept_count);
    drop(kept);
    assert_eq!(totals("worker_out"), (workers, workers));

    let log = log_counts();
    assert_eq!(log["loaded"], (STEPS as u64, STEPS as u64));
    assert_eq!(log["worker_out"], (workers, workers));
    assert_eq!(log["summed"], (STEPS as u64, STEPS as u64));
}

const THREADS: usize = 4;
const ITERATIONS: usize = 250;
const FANOUT: usize = 8;
const STRESS_KEEP_EVERY: usize = 25;

/// One thread's tracked loop: a tensor per iteration and `FANOUT` more from rayon workers;
/// every 25th loop tensor is kept.
#[tensor_lifetime::track]
fn stress_loop(thread: usize, barrier: &Barrier) -> Result<Vec<Tensor>> {
    barrier.wait();
    let mut kept = Vec::new();
    for i in 0..ITERATIONS {
        let step_tensor = Tensor::full((thread * ITERATIONS + i) as f32, 16, &Device::Cpu)?;
        let fanned = (0..FANOUT)
            .into_par_iter()
            .map(|j| {
                let fanout_out = (&step_tensor + j as f64)?;
                fanout_out.sum_all()?.to_scalar::<f32>()
            })
            .collect::<Result<Vec<f32>>>()?;
        assert_eq!(fanned.len(), FANOUT);
        if i % STRESS_KEEP_EVERY == 0 {
            kept.push(step_tensor);
        }
    }
    Ok(kept)
}

#[test]
fn stress_many_loops_workers_and_sweeps_exact_counts() {
    let _serial = setup();
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let barrier = barrier.clone();
            std::thread::spawn(move || stress_loop(t, &barrier).unwrap())
        })
        .collect();
    barrier.wait();
    // Sweeps, reports and snapshots from another thread while the loops run.
    let mut sweeps = 0;
    while !handles.iter().all(|h| h.is_finished()) {
        let _ = tensor_lifetime::report();
        let _ = tensor_lifetime::snapshot();
        sweeps += 1;
    }
    let kept: Vec<Vec<Tensor>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let kept_per_thread = ITERATIONS.div_ceil(STRESS_KEEP_EVERY) as u64;
    let loop_born = (THREADS * ITERATIONS) as u64;
    let fanout_born = loop_born * FANOUT as u64;
    assert_eq!(
        totals("step_tensor"),
        (loop_born, loop_born - THREADS as u64 * kept_per_thread)
    );
    assert_eq!(totals("fanout_out"), (fanout_born, fanout_born));
    let live: Vec<_> = tensor_lifetime::snapshot()
        .into_iter()
        .filter(|t| t.site.label == "step_tensor")
        .collect();
    assert_eq!(live.len() as u64, THREADS as u64 * kept_per_thread);
    // Each thread's loop judged its own kept tensors: 4 loops, a leak each, exactly the
    // kept ones.
    let report = tensor_lifetime::report();
    let loop_summary = report
        .loops
        .iter()
        .filter(|l| {
            l.site
                .as_ref()
                .is_some_and(|s| s.function.ends_with("stress_loop"))
        })
        .map(|l| (l.runs, l.iterations, l.running))
        .collect::<Vec<_>>();
    assert_eq!(
        loop_summary,
        [(THREADS as u64, loop_born, 0)],
        "{sweeps} sweeps"
    );
    drop(kept);
    let log = log_counts();
    assert_eq!(log["step_tensor"], (loop_born, loop_born));
    assert_eq!(log["fanout_out"], (fanout_born, fanout_born));
    println!("stress: {THREADS} loops x {ITERATIONS} iterations, {fanout_born} worker tensors, {sweeps} concurrent sweeps: exact");
}
