//! The tracker's own memory, counted by the allocator (deterministic, not timed): at most
//! 128 bytes per live record, flat over a long tracked loop (dead records fold into
//! per-site counters; the working buffers of drains and sweeps are given back when large),
//! and flat over many runs of a nested loop (what a loop's run leaves behind is bounded by
//! its sites, not by how often it ran).
//! The heap count is process-wide: the test runs alone in its process.

use candle_core::Result;
use tensor_lifetime_examples::heap::{
    live_bytes, nested_loop_heap, record_bytes, tracked_loop_heap,
};

#[test]
fn tracker_memory_per_record_and_over_a_long_loop() -> Result<()> {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "tracker_memory_per_record_and_over_a_long_loop",
    ) {
        return Ok(());
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    tensor_lifetime::init().expect("tracking is on");

    // 50 000 live records: all tagged before one drain, the case that once kept a
    // 50 000-entry probe buffer alive after the drain (144 bytes more per record).
    let records = 50_000;
    let (before, after) = record_bytes(records)?;
    let per_record = (after - before) as f64 / records as f64;
    assert!(
        per_record <= 128.0,
        "{per_record:.1} bytes per live record (budget 128)"
    );

    // Flat: the heap at each tenth of a 20 000-iteration tracked loop varies by less than
    // 4 KiB (one record or buffer per iteration kept would add hundreds of KiB).
    let samples = tracked_loop_heap(20_000)?;
    let moved = spread(&samples);
    assert!(
        moved < 4096,
        "heap moved by {moved} bytes over the loop: {samples:?}"
    );

    // Flat over 20 000 runs of a nested loop: a few bytes kept per run (a frame's entry
    // in a map never emptied) would add hundreds of KiB.
    let samples = nested_loop_heap(20_000)?;
    let moved = spread(&samples);
    assert!(
        moved < 4096,
        "heap moved by {moved} bytes over the runs of the nested loop: {samples:?}"
    );
    Ok(())
}

/// How far the heap moved between its samples.
fn spread(samples: &[(usize, isize)]) -> isize {
    let heap = || samples.iter().map(|s| s.1);
    heap().max().unwrap_or(0) - heap().min().unwrap_or(0)
}

/// Threads that probe and exit leave no probe ring behind, with an event log written
/// (the probes then go to the log's rings: the plain ones are not registered, since no
/// drain would visit them and drop those of exited threads).
#[test]
fn threads_that_come_and_go_leave_no_ring_behind_with_a_log() -> Result<()> {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "threads_that_come_and_go_leave_no_ring_behind_with_a_log",
    ) {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("tl-ring-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    std::env::set_var("TENSOR_LIFETIME_LOG", dir.join("churn.tlog"));
    tensor_lifetime::init().expect("tracking is on");
    let churn = |threads: usize| -> Result<()> {
        for _ in 0..threads {
            std::thread::spawn(|| -> Result<()> {
                let t = candle_core::Tensor::ones(
                    4,
                    candle_core::DType::F32,
                    &candle_core::Device::Cpu,
                )?;
                tensor_lifetime::tag!(t);
                Ok(())
            })
            .join()
            .expect("the thread ran")?;
            // Drains the rings: an exited thread's empty ring is dropped.
            let _ = tensor_lifetime::report();
        }
        Ok(())
    };
    churn(20)?;
    let mut samples = Vec::new();
    for round in 0..10 {
        churn(20)?;
        samples.push((round, live_bytes()));
    }
    // A ring left per thread is 16 KiB or more: 200 threads would add megabytes.
    let moved = spread(&samples);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        moved < 64 * 1024,
        "heap moved by {moved} bytes over 200 threads: {samples:?}"
    );
    Ok(())
}
