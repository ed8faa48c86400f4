//! The tracker's own memory, measured with the counting global allocator of the test
//! support crate (`bench_loops memory`, `tests/tests/tracker/memory.rs`): install it in a
//! binary with `#[global_allocator] static ALLOC: CountingAlloc = CountingAlloc;` and read
//! [`live_bytes`], or the measurements both use: [`record_bytes`], [`tracked_loop_heap`]
//! and [`nested_loop_heap`].

pub use tensor_lifetime_test_support::alloc::{live_bytes, CountingAlloc};

/// The heap before and after `records` live tensors (made and drained first) are tagged
/// and drained into records: the tracker's bytes for them.
pub fn record_bytes(records: usize) -> candle_core::Result<(isize, isize)> {
    use candle_core::{DType, Device, Tensor};
    let tensors: Vec<Tensor> = (0..records)
        .map(|_| Tensor::zeros(1, DType::F32, &Device::Cpu))
        .collect::<candle_core::Result<_>>()?;
    let _ = tensor_lifetime::report();
    let before = live_bytes();
    for t in &tensors {
        tensor_lifetime::tag!(t);
    }
    let _ = tensor_lifetime::report(); // drains the probes into records
    let after = live_bytes();
    drop(tensors);
    let _ = tensor_lifetime::report();
    Ok((before, after))
}

/// The heap at every tenth of a tracked loop of `iterations` small-tensor ops (randn
/// 64x64, mul, tanh, add): (iterations done, live bytes).
#[tensor_lifetime::track]
pub fn tracked_loop_heap(iterations: usize) -> candle_core::Result<Vec<(usize, isize)>> {
    use candle_core::{DType, Device, Tensor};
    let device = Device::Cpu;
    let mut acc = Tensor::zeros((64, 64), DType::F32, &device)?;
    let every = (iterations / 10).max(1);
    let mut samples = Vec::with_capacity(16);
    for i in 0..iterations {
        let a = Tensor::randn(0f32, 1.0, (64, 64), &device)?;
        let b = (&a * &a)?;
        let c = b.tanh()?;
        acc = (acc + c)?;
        if (i + 1) % every == 0 {
            samples.push((i + 1, live_bytes()));
        }
    }
    drop(acc);
    Ok(samples)
}

/// The heap at every tenth of `runs` iterations of a tracked loop that runs a nested
/// tracked loop of 4 steps in each (a request loop decoding a few tokens per request: a
/// loop opened and closed `runs` times): (runs done, live bytes).
#[tensor_lifetime::track]
pub fn nested_loop_heap(runs: usize) -> candle_core::Result<Vec<(usize, isize)>> {
    use candle_core::{DType, Device, Tensor};
    let device = Device::Cpu;
    let every = (runs / 10).max(1);
    let mut samples = Vec::with_capacity(16);
    for request in 0..runs {
        let prompt = Tensor::ones(8, DType::F32, &device)?;
        let mut context = prompt.clone();
        for _ in 0..4 {
            let token = (&context * 0.5)?;
            context = token.tanh()?;
        }
        drop(context);
        if (request + 1) % every == 0 {
            samples.push((request + 1, live_bytes()));
        }
    }
    Ok(samples)
}
