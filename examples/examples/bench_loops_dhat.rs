//! The plain benchmark loops under dhat-rs heap profiling: the peer that `bench_loops
//! compare` measures tracking against (a heap profiler people leave on is the nearest
//! thing to tensor-lifetime in the Rust ecosystem).
//!
//! `bench_loops_dhat run <small|mlp> plain [--device cpu|cuda] [--warmup N] [--steps N]`

use candle_core::{Device, Result};
use tensor_lifetime_examples::bench::{self, Workload};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let workload = match args.get(1).map(String::as_str) {
        Some("small") => Workload::Small,
        Some("mlp") => Workload::Mlp,
        other => panic!("workload {other:?}: expected small or mlp"),
    };
    let device = match args
        .iter()
        .position(|a| a == "--device")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        Some("cuda") => Device::new_cuda(0)?,
        _ => Device::Cpu,
    };
    let out = std::env::temp_dir().join(format!("dhat-heap-{}.json", std::process::id()));
    let profiler = dhat::Profiler::builder().file_name(&out).build();
    let mut times = bench::run(
        workload,
        false,
        &device,
        value("--warmup", 5),
        value("--steps", 50),
    )?;
    println!("median_ns {}", bench::median(&mut times));
    drop(profiler);
    let _ = std::fs::remove_file(out);
    Ok(())
}
