//! The small-tensor loop's body with the whole tracker (probes, drain, sweep, analysis),
//! measured with criterion: the loop of `cargo xtask bench` on one-element tensors, so the
//! tensor math is as cheap as candle makes it and the tracker's share shows. Each measured
//! step runs in the benchmark's driving loop, tracked in the tracked variant, so the
//! step's own loop is nested (no report at its iteration ends). Tracked minus plain,
//! divided by `SMALL_OPS`, is the tracker's wall time per inner iteration.
//!
//! `cargo bench -p tensor-lifetime-examples --bench loop_body`; figures in
//! docs/performance.md.

use candle_core::Device;
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use tensor_lifetime_examples::bench::{
    drive_plain, drive_tracked, small_step_plain, small_step_tracked, wall_time_ns,
};

/// One-element tensors.
const DIMS: (usize, usize) = (1, 1);

fn loop_body(c: &mut Criterion) {
    // Measured without the automatic report (a loop's end prints one to stderr).
    if std::env::var_os("TENSOR_LIFETIME_REPORT").is_none() {
        std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    }
    let device = Device::Cpu;
    let total = |times: Vec<u64>| Duration::from_nanos(times.iter().sum());
    let mut group = c.benchmark_group("small_loop_body_x200");
    group.bench_function("plain", |b| {
        b.iter_custom(|n| {
            let mut step = || small_step_plain(&device, DIMS).map(drop);
            total(drive_plain(&mut step, wall_time_ns, 0, n as usize).unwrap())
        })
    });
    group.bench_function("tracked", |b| {
        b.iter_custom(|n| {
            let mut step = || small_step_tracked(&device, DIMS).map(drop);
            total(drive_tracked(&mut step, wall_time_ns, 0, n as usize).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, loop_body);
criterion_main!(benches);
