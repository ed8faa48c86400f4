//! Panics: a panic inside a tracked loop ends its iteration and its loop (the guards
//! drop while unwinding), the tracker stays usable afterwards (no poisoned lock, no
//! stale loop frame on the thread), and what was known before the panic is still
//! reported: a leak found before the panic is in the report and in the event log.
//!
//! Own test binary: the event log is process-wide. The tests take a lock.

use candle_core::{DType, Device, Result, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::MutexGuard;
use tensor_lifetime::{check_leaks, LeakTestOptions};
use tensor_lifetime_report::{Analysis, Event};
use tensor_lifetime_tests::{event_log_env, line_of, read_event_log, serial};

const SOURCE: &str = include_str!("panics.rs");

/// Sets the environment before the first tracked tensor of the process; takes the lock.
fn setup() -> MutexGuard<'static, ()> {
    let guard = serial();
    event_log_env("reliability_panics.jsonl");
    guard
}

/// A loop that caches a tensor per step and panics at step `panic_at` (a bad batch).
#[tensor_lifetime::track]
fn train_until_panic(cache: &mut Vec<Tensor>, panic_at: usize) -> Result<()> {
    'step: for step in 0..100 {
        let batch = Tensor::full(step as f32, (8, 8), &Device::Cpu)?; // panics: cached batch
        cache.push(batch.clone());
        if step == panic_at {
            panic!("bad batch at step {step}");
        }
        if step % 2 == 0 {
            continue 'step;
        }
    }
    Ok(())
}

/// The same, with its own loop (each test here judges its own loop and site).
#[tensor_lifetime::track]
fn train_in_session_until_panic(cache: &mut Vec<Tensor>, panic_at: usize) -> Result<()> {
    'other: for step in 0..100 {
        let batch = Tensor::full(step as f32, (8, 8), &Device::Cpu)?;
        cache.push(batch.clone());
        if step == panic_at {
            panic!("bad batch at step {step}");
        }
    }
    Ok(())
}

/// A small clean loop, to show the tracker still works after a panic.
#[tensor_lifetime::track]
fn clean_loop(steps: usize) -> Result<f32> {
    let mut sum = 0.0;
    for step in 0..steps {
        let x = Tensor::ones(16, DType::F32, &Device::Cpu)?;
        sum += (x * step as f64)?.sum_all()?.to_scalar::<f32>()?;
    }
    Ok(sum)
}

#[test]
fn a_panic_ends_its_iteration_and_the_tracker_goes_on() {
    let _serial = setup();
    let mut cache = Vec::new();
    let panicked = catch_unwind(AssertUnwindSafe(|| train_until_panic(&mut cache, 7)));
    let message = panicked.expect_err("the loop panicked");
    assert_eq!(
        message.downcast_ref::<String>().map(String::as_str),
        Some("bad batch at step 7")
    );
    assert_eq!(cache.len(), 8);

    // What was known before the panic is reported: the cache leaked for 8 iterations,
    // the 8th (the panicking one) included, since its guard ended it while unwinding.
    let report = tensor_lifetime::report();
    let line = line_of(SOURCE, "// panics: cached batch");
    let leak = report
        .leaks()
        .find(|f| f.site.line == line)
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(leak.survivors, 8);
    assert_eq!(leak.iteration, 7);
    assert_eq!(leak.bytes, 8 * 8 * 8 * 4);
    let summary = report
        .loops
        .iter()
        .find(|l| l.name == "'step")
        .expect("the loop is in the report");
    assert_eq!(
        (summary.runs, summary.iterations, summary.running),
        (1, 8, 0)
    );

    // The event log says the same: 8 iteration ends and the loop's end, and the CLI's
    // judgement of it finds the same leak.
    let events = read_log();
    let loop_frame = events
        .iter()
        .find_map(|e| match e {
            Event::LoopStart { frame, name, .. } if name == "'step" => Some(*frame),
            _ => None,
        })
        .expect("loop_start in the log");
    let ends = events
        .iter()
        .filter(|e| matches!(e, Event::IterationEnd { frame, .. } if *frame == loop_frame))
        .count();
    assert_eq!(ends, 8);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::LoopEnd { frame, iterations: 8, .. } if *frame == loop_frame)));
    let mut analysis = Analysis::default();
    events.iter().for_each(|e| analysis.apply(e));
    let from_log = analysis.report();
    assert!(
        from_log
            .leaks()
            .any(|f| f.site.line == line && f.survivors == 8),
        "{from_log}"
    );

    // The tracker is usable: a new loop on the same thread is a top-level loop again
    // (no stale frame left by the panic), sweeps and reports work.
    drop(cache);
    assert_eq!(clean_loop(5).unwrap(), 16.0 * 10.0);
    let (_, outcome) = check_leaks(LeakTestOptions::default(), || clean_loop(6)).unwrap();
    assert!(!outcome.failed(), "{}", outcome.message("clean"));
    let report = tensor_lifetime::report();
    assert!(
        report.loops.iter().all(|l| l.running == 0),
        "{:?}",
        report.loops
    );
    assert_eq!(report.live_tensors, 0);
}

#[test]
fn a_panic_inside_a_leak_test_session_restores_the_thread() {
    let _serial = setup();
    let mut cache = Vec::new();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        check_leaks(LeakTestOptions::default(), || {
            train_in_session_until_panic(&mut cache, 5)
        })
    }));
    assert!(panicked.is_err());
    drop(cache);
    // The thread left the panicked session: a new session judges only its own tensors.
    let (result, outcome) = check_leaks(LeakTestOptions::default(), || clean_loop(6)).unwrap();
    assert_eq!(result.unwrap(), 16.0 * 15.0);
    assert!(!outcome.failed(), "{}", outcome.message("after a panic"));
    assert!(outcome.report.findings.is_empty(), "{}", outcome.report);
}

#[test]
fn a_panicking_loader_thread_does_not_break_the_loop() {
    let _serial = setup();
    // The loader (no loop of its own) panics after 3 batches; the training loop sees the
    // channel close and ends; the tracker keeps every count.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Tensor>(1);
    let loader = std::thread::spawn(move || {
        for i in 0..3 {
            let t = Tensor::full(i as f32, 4, &Device::Cpu).unwrap();
            tensor_lifetime::tag!(t, "loaded_before_panic");
            tx.send(t).unwrap();
        }
        panic!("loader failed");
    });
    let steps = tensor_lifetime::loop_scope!("'consume");
    let mut seen = 0;
    while let Ok(t) = rx.recv() {
        let _it = steps.iteration();
        seen += t.to_vec1::<f32>().unwrap().len();
    }
    drop(steps);
    assert!(loader.join().is_err());
    assert_eq!(seen, 12);
    let totals: Vec<_> = tensor_lifetime::site_totals()
        .into_iter()
        .filter(|t| t.site.label == "loaded_before_panic")
        .map(|t| (t.born, t.dropped))
        .collect();
    assert_eq!(totals, [(3, 3)]);
}

fn read_log() -> Vec<Event> {
    read_event_log().into_iter().map(|(_, e)| e).collect()
}
