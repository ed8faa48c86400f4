//! See [`tensor_lifetime_examples::cuda_oom`]. On a GPU host (built by
//! `cargo xtask gpu-build`, run there with `sh gpu-bin/run.sh cuda_oom`): trains a leaky
//! loop until the device is out of memory and prints the post-mortem. `--cpu` runs the
//! small configuration on the CPU, ending with a stand-in for the out-of-memory error.

use candle_core::{Device, Result};
use tensor_lifetime_examples::cuda_oom::{train_until_oom, Config};

fn main() -> Result<()> {
    let cpu = std::env::args().any(|a| a == "--cpu");
    let (device, cfg) = if cpu {
        (Device::Cpu, Config::cpu())
    } else {
        (Device::new_cuda(0)?, Config::gpu())
    };
    println!("== cuda_oom on {device:?}: {cfg:?} ==");
    let start = std::time::Instant::now();
    match train_until_oom(&device, &cfg) {
        Ok(steps) => println!("{steps} steps without running out of memory"),
        // candle's error prints its captured backtrace after its first line.
        Err(e) => println!(
            "stopped after {:.1} s: {}",
            start.elapsed().as_secs_f64(),
            e.to_string().lines().next().unwrap_or_default()
        ),
    }
    // The post-mortem was written (stderr, TENSOR_LIFETIME_JSON, TENSOR_LIFETIME_LOG) when
    // the error crossed a `?` in tracked code, while the leaked history was still alive.
    println!("live now (the history was freed when the loop returned):");
    print!("{}", tensor_lifetime::post_mortem());
    Ok(())
}
