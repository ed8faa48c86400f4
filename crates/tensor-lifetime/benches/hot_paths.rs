//! Hot paths of the tracker, measured with criterion:
//! tagging a tensor at a site, recording a store, an iteration end (sweep) of a loop that
//! makes no tensors, nested in an outer loop, against live records (1 000 to 1 000 000:
//! the curve of issue 16, which should be flat), the same with as many more records as
//! survivors of the ending frame, building a report, writing the event log. (The small
//! loop's body with the whole tracker: `examples/benches/loop_body.rs`.)
//!
//! And a call of a `#[track]`ed function against the same plain function (the call-path
//! guard and the out-of-memory check of its `Result`: issue 18's budget, at most 5 ns).
//!
//! `cargo bench -p tensor-lifetime --bench hot_paths`; figures in docs/performance.md.

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use std::hint::black_box;
use tensor_lifetime::site;

fn tagging(c: &mut Criterion) {
    // Measured without the automatic report (a loop's end prints one to stderr).
    if std::env::var_os("TENSOR_LIFETIME_REPORT").is_none() {
        std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    }
    let t = Tensor::zeros(16, DType::F32, &Device::Cpu).unwrap();
    let scope = tensor_lifetime::loop_scope!("'bench");
    let mut group = c.benchmark_group("probe");
    // Each iteration guard drains the buffered probes, so the buffer stays small.
    group.bench_function("tag_tensor", |b| {
        b.iter_batched_ref(
            || scope.iteration(),
            |_it| tensor_lifetime::__private::tag(black_box(&t), site!("t")),
            BatchSize::NumIterations(1000),
        )
    });
    group.bench_function("store_tensor", |b| {
        b.iter_batched_ref(
            || scope.iteration(),
            |_it| tensor_lifetime::__private::store(black_box(&t), site!(store "self.cache")),
            BatchSize::NumIterations(1000),
        )
    });
    group.bench_function("tag_non_tensor", |b| {
        let v = vec![1u32, 2, 3];
        b.iter(|| tensor_lifetime::__private::tag(black_box(&v), site!("v")))
    });
    group.finish();
    drop(scope);
}

fn live_tensors(n: usize) -> Vec<Tensor> {
    (0..n)
        .map(|_| {
            let t = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
            tensor_lifetime::__private::tag(&t, site!("live"));
            t
        })
        .collect()
}

fn sweeps(c: &mut Criterion) {
    let mut group = c.benchmark_group("sweep");
    group.sample_size(30);
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        // Live records born before the loops (weights, a dataset): walked, not survivors.
        let kept = live_tensors(n);
        // The measured loop is an inner one, as a training step's or a rollout's is: its
        // iteration ends are the ones whose cost must not grow with live records (an
        // outermost iteration end walks them all; docs/performance.md).
        let outer = tensor_lifetime::loop_scope!("'sweep_epoch");
        let epoch = outer.iteration();
        let scope = tensor_lifetime::loop_scope!("'sweep");
        group.bench_with_input(BenchmarkId::new("iteration_end", n), &n, |b, _| {
            b.iter(|| drop(scope.iteration()))
        });
        drop(scope);
        // The same records as survivors of the ending frame (the worst case: a leak).
        let scope = tensor_lifetime::loop_scope!("'sweep_survivors");
        let survivors = {
            let _it = scope.iteration();
            live_tensors(n)
        };
        group.bench_with_input(
            BenchmarkId::new("iteration_end_survivors", n),
            &n,
            |b, _| b.iter(|| drop(scope.iteration())),
        );
        drop(scope);
        drop(epoch);
        drop(outer);
        drop(survivors);
        drop(kept);
        let _ = tensor_lifetime::report();
    }
    group.finish();
}

fn reports(c: &mut Criterion) {
    let kept = live_tensors(10_000);
    c.bench_function("report/10000_live", |b| {
        b.iter(|| black_box(tensor_lifetime::report()))
    });
    drop(kept);
}

fn event_log(c: &mut Criterion) {
    use tensor_lifetime_report::event::{Event, SiteSweep};
    let event = Event::IterationEnd {
        t_ns: 123_456_789,
        frame: 3,
        iteration: 41,
        duration_ns: 2_000_000,
        live_tensors: 1200,
        live_bytes: 96 << 20,
        sites: vec![
            SiteSweep {
                site: 7,
                survivors: 300,
                bytes: 1 << 20,
                iterations: 3,
                last_iteration: 41,
                refcount: 1,
                ..SiteSweep::default()
            };
            4
        ],
        roles: Vec::new(),
    };
    let born = Event::Born {
        t_ns: 1,
        tensor: 99,
        site: 7,
        frame: Some(3),
        iteration: 41,
        bytes: 16384,
        storage: 0x7f00_0000,
        shape: Some(vec![64, 64]),
        dtype: "f32".into(),
        device: "cpu".into(),
        thread: 1,
    };
    let mut out = std::io::BufWriter::new(std::io::sink());
    c.bench_function("event_log/born", |b| {
        b.iter(|| born.write_line(&mut out).unwrap())
    });
    c.bench_function("event_log/iteration_end", |b| {
        b.iter(|| event.write_line(&mut out).unwrap())
    });
}

#[inline(never)]
fn plain_call(x: u64) -> candle_core::Result<u64> {
    Ok(black_box(x) + 1)
}

#[tensor_lifetime::track]
#[inline(never)]
fn tracked_call(x: u64) -> candle_core::Result<u64> {
    Ok(black_box(x) + 1)
}

#[inline(never)]
fn plain_outer(x: u64) -> candle_core::Result<u64> {
    plain_call(x)
}

#[tensor_lifetime::track]
#[inline(never)]
fn tracked_outer(x: u64) -> candle_core::Result<u64> {
    Ok(tracked_call(x)? + 1)
}

fn calls(c: &mut Criterion) {
    let mut group = c.benchmark_group("call");
    group.bench_function("plain", |b| b.iter(|| plain_call(black_box(7))));
    group.bench_function("tracked", |b| b.iter(|| tracked_call(black_box(7))));
    group.bench_function("plain_nested", |b| b.iter(|| plain_outer(black_box(7))));
    group.bench_function("tracked_nested", |b| b.iter(|| tracked_outer(black_box(7))));
    group.finish();
}

criterion_group!(benches, tagging, sweeps, reports, event_log, calls);
criterion_main!(benches);
