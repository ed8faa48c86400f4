//! See [`tensor_lifetime_examples::cuda_training`]. On a GPU host (built by
//! `cargo xtask gpu-build`, run there with `sh gpu-bin/run.sh cuda_training MODE`):
//!
//! ```text
//! cuda_training clean       # no leak; memory_summary agrees with the driver
//! cuda_training leaky       # replay-buffer leak + running loss graph: sites with GPU bytes
//! cuda_training untracked   # untracked_growth and shape_churn (set TENSOR_LIFETIME_LOG)
//! cuda_training memory      # pool rounding, empty_cache, release threshold vs step time
//! ```
//!
//! `--cpu` runs on the CPU with small sizes (what CI can run), `--small` keeps small sizes
//! on the GPU.

use candle_core::{Device, Result};
use std::io::BufReader;
use tensor_lifetime::memory;
use tensor_lifetime::report_model::event::read_events;
use tensor_lifetime::report_model::{Analysis, Judgement, MemoryFindings};
use tensor_lifetime_examples::cuda_training::{self as ex, Config, Mode};

fn wrap(e: tensor_lifetime::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

const MIB: f64 = (1 << 20) as f64;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cpu = args.iter().any(|a| a == "--cpu");
    let small = cpu || args.iter().any(|a| a == "--small");
    let what = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map_or("clean", String::as_str);
    let device = if cpu {
        Device::Cpu
    } else {
        Device::new_cuda(0)?
    };
    let cfg = if small {
        Config::small()
    } else {
        Config::gpu()
    };
    println!(
        "== cuda_training {what} on {} ==",
        memory::memory_stats(&device).map_err(wrap)?.device
    );
    if what == "memory" {
        return memory_checks(&device, &cfg);
    }
    let mode: Mode = what.parse().map_err(candle_core::Error::Msg)?;
    let out = ex::train(&device, mode, &cfg)?;
    println!(
        "{} steps, {:.2} ms/step after the first (tracking on, one synchronize per step), \
         final loss {:.4}",
        out.steps, out.step_ms, out.final_loss
    );
    println!("\n-- leak report --\n{}", out.report);
    println!("-- memory_summary after a synchronize (everything the run keeps is alive) --");
    println!("{}", out.stats);
    let s = &out.stats;
    if let Some(used) = s.pool_used {
        println!(
            "pool used {} B, tracked {} B, untracked {} B",
            used,
            s.tracked,
            used as i64 - s.tracked as i64
        );
    }
    if mode == Mode::Clean {
        println!("-- live tracked tensors (storage bytes) --");
        for (site, bytes) in &out.live {
            println!("{bytes:>12} B  {site}");
        }
    }
    if mode == Mode::Untracked {
        memory_findings_from_log();
    }
    Ok(())
}

/// Re-judges the event log (`TENSOR_LIFETIME_LOG`) as the CLI does, memory findings
/// included.
fn memory_findings_from_log() {
    let Some(path) = std::env::var_os("TENSOR_LIFETIME_LOG") else {
        println!("(set TENSOR_LIFETIME_LOG to judge the memory findings from the event log)");
        return;
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            println!("cannot open {}: {e}", path.to_string_lossy());
            return;
        }
    };
    let mut analysis = Analysis::new(Judgement::default());
    let mut findings = MemoryFindings::default();
    let mut samples = Vec::new();
    let read = read_events(BufReader::new(file), |e| {
        if let tensor_lifetime::report_model::Event::Memory { sample, .. } = &e {
            samples.push((
                sample.tracked,
                sample.pool_used.or(sample.process_resident).unwrap_or(0),
                sample.pool_reserved.unwrap_or(0),
            ));
        }
        analysis.apply(&e);
        findings.apply(&e);
    });
    if let Err(e) = read {
        println!("cannot read the event log: {e}");
        return;
    }
    println!(
        "-- memory samples (every step, after its synchronize): tracked / pool used (CPU: \
         resident) / reserved, MiB --"
    );
    for (i, (t, u, r)) in samples.iter().enumerate() {
        if i < 3 || i % 10 == 9 || i + 1 == samples.len() {
            println!(
                "step {:>3}: {:>9.1} {:>9.1} {:>9.1}  untracked {:>8.1}",
                i + 1,
                *t as f64 / MIB,
                *u as f64 / MIB,
                *r as f64 / MIB,
                (*u as f64 - *t as f64) / MIB
            );
        }
    }
    println!("\n-- memory findings, judged from the event log --");
    for f in findings.findings(|id| analysis.site(id)) {
        print!("{f}");
    }
}

fn memory_checks(device: &Device, cfg: &Config) -> Result<()> {
    if !device.is_cuda() {
        println!("the memory checks need the CUDA pool: run them on a CUDA device");
        return Ok(());
    }
    println!("-- pool rounding: pool used grows by, per tensor of n bytes --");
    let sizes = [
        1usize,
        4,
        100,
        511,
        512,
        513,
        1000,
        1024,
        2047,
        2048,
        2049,
        4096,
        10_000,
        65_536,
        65_537,
        1 << 20,
        (1 << 20) + 1,
        2 << 20,
        (2 << 20) + 1,
        3_000_000,
        16 << 20,
        (16 << 20) + 1,
        100_000_000,
    ];
    for (n, delta) in ex::rounding_probe(device, &sizes)? {
        println!("{n:>12} B -> {delta:>12} B  (+{})", delta - n as i64);
    }

    println!("\n-- empty_cache: a 2 GiB temporary, dropped, with the threshold at `keep all` --");
    let (cached, released, after) = ex::empty_cache_demo(device, 2 << 30)?;
    println!("before empty_cache:\n{}", cached);
    println!(
        "empty_cache released {} B ({:.1} MiB)",
        released,
        released as f64 / MIB
    );
    println!("after empty_cache:\n{}", after);
    if let (Some(b), Some(a)) = (cached.device_used, after.device_used) {
        println!(
            "device used (cuMemGetInfo): {:.1} MiB -> {:.1} MiB ({:+.1} MiB)",
            b as f64 / MIB,
            a as f64 / MIB,
            (a as f64 - b as f64) / MIB
        );
    }

    println!(
        "\n-- release threshold vs step time (3 rounds x 30 steps per threshold, alternating; \
         reserved = pool reserved right after each step, mean) --"
    );
    let line = |what: &str, zero: &ex::StepTimes, max: &ex::StepTimes| {
        let (z_mean, z_med) = ex::mean_median(&zero.times);
        let (m_mean, m_med) = ex::mean_median(&max.times);
        println!(
            "{what:<34} threshold 0: median {z_med:8.3} ms (mean {z_mean:8.3}), reserved {:7.1} MiB \
             | max: median {m_med:8.3} ms (mean {m_mean:8.3}), reserved {:7.1} MiB | 0/max {:.2}x",
            zero.reserved_after_step / MIB,
            max.reserved_after_step / MIB,
            z_med / m_med
        );
    };
    for (batch, sync) in [
        (cfg.batch, ex::StepSync::Metric),
        (cfg.batch * 8, ex::StepSync::Metric),
        (cfg.batch, ex::StepSync::AfterDrop),
        (cfg.batch * 8, ex::StepSync::AfterDrop),
    ] {
        let c = Config { batch, ..*cfg };
        let (zero, max) = ex::threshold_benchmark(device, &c, sync, 3, 30)?;
        line(&format!("MLP batch {batch}, sync {sync:?}"), &zero, &max);
    }
    for bytes in [64usize << 20, 1 << 30] {
        let mut zero = ex::StepTimes::default();
        let mut max = ex::StepTimes::default();
        for _ in 0..3 {
            for (threshold, acc) in [(0, &mut zero), (u64::MAX, &mut max)] {
                let run = ex::alloc_benchmark(device, bytes, threshold, 30)?;
                acc.times.extend(run.times);
                acc.reserved_after_step += run.reserved_after_step / 3.0;
            }
        }
        line(&format!("alloc+free {} MiB", bytes >> 20), &zero, &max);
    }
    let end = memory::memory_stats(device).map_err(wrap)?;
    println!("\n{}", end);
    Ok(())
}
