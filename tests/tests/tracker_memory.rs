//! The tracker's own memory, counted by the allocator (deterministic, not timed): at most
//! 128 bytes per live record, and flat over a long tracked loop (dead records fold into
//! per-site counters; the working buffers of drains and sweeps are given back when large).
//! One test in this binary: the heap count is process-wide.

use candle_core::{DType, Device, Result, Tensor};
use tensor_lifetime_examples::heap::{live_bytes as heap, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[tensor_lifetime::track]
fn small_loop(iterations: usize) -> Result<Vec<isize>> {
    let device = Device::Cpu;
    let mut acc = Tensor::zeros((64, 64), DType::F32, &device)?;
    let mut samples = Vec::with_capacity(16);
    for i in 0..iterations {
        let a = Tensor::randn(0f32, 1.0, (64, 64), &device)?;
        let b = (&a * &a)?;
        let c = b.tanh()?;
        acc = (acc + c)?;
        if (i + 1) % (iterations / 10) == 0 {
            samples.push(heap());
        }
    }
    drop(acc);
    Ok(samples)
}

#[test]
fn tracker_memory_per_record_and_over_a_long_loop() -> Result<()> {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    tensor_lifetime::init().expect("tracking is on");

    // 50 000 live records: all tagged before one drain, the case that once kept a
    // 50 000-entry probe buffer alive after the drain (144 bytes more per record).
    let records = 50_000;
    let tensors: Vec<Tensor> = (0..records)
        .map(|_| Tensor::zeros(1, DType::F32, &Device::Cpu))
        .collect::<Result<_>>()?;
    let _ = tensor_lifetime::report();
    let before = heap();
    for t in &tensors {
        tensor_lifetime::tag!(t);
    }
    let _ = tensor_lifetime::report();
    let per_record = (heap() - before) as f64 / records as f64;
    assert!(
        per_record <= 128.0,
        "{per_record:.1} bytes per live record (budget 128)"
    );
    drop(tensors);
    let _ = tensor_lifetime::report();

    // Flat: the heap at each tenth of a 20 000-iteration tracked loop varies by less than
    // 4 KiB (one record or buffer per iteration kept would add hundreds of KiB).
    let samples = small_loop(20_000)?;
    let (min, max) = (
        samples.iter().min().copied().unwrap_or(0),
        samples.iter().max().copied().unwrap_or(0),
    );
    assert!(
        max - min < 4096,
        "heap moved by {} bytes over the loop: {samples:?}",
        max - min
    );
    Ok(())
}
