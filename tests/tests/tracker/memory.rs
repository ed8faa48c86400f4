//! The tracker's own memory, counted by the allocator (deterministic, not timed): at most
//! 128 bytes per live record, and flat over a long tracked loop (dead records fold into
//! per-site counters; the working buffers of drains and sweeps are given back when large).
//! The heap count is process-wide: the test runs alone in its process.

use candle_core::Result;
use tensor_lifetime_examples::heap::{record_bytes, tracked_loop_heap};

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
    let (min, max) = (
        samples.iter().map(|s| s.1).min().unwrap_or(0),
        samples.iter().map(|s| s.1).max().unwrap_or(0),
    );
    assert!(
        max - min < 4096,
        "heap moved by {} bytes over the loop: {samples:?}",
        max - min
    );
    Ok(())
}
