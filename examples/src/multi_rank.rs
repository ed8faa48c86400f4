//! Data-parallel training on N CPU worker processes, one of which can leak.
//!
//! The launcher ([`launch`]) starts N copies of a program (the example binary re-executes
//! itself, a test binary too) with `RANK`, `WORLD_SIZE` and
//! `TENSOR_LIFETIME_LOG=DIR/rank-{rank}.jsonl` set, as `torchrun` or a cluster scheduler
//! would; each worker ([`worker_from_env`]) trains the same MLP on its shard of a
//! synthetic dataset. After each step's backward pass the ranks exchange their gradients
//! through files (`DIR/exchange/step-S-rank-R.bin`, written to a temporary name and
//! renamed, so a file that exists is complete) and wait for each other by polling, with a
//! timeout that names the ranks missing; every rank averages the same gradients in the
//! same order and applies the same update, so all ranks keep the same weights. (On GPUs
//! the exchange is an all-reduce through NCCL; files keep this example CPU-only.)
//!
//! With `--leak-rank R` rank R keeps each step's input batch in a `Vec` ("for a debug
//! dump") and never clears it: a leak on that rank only, which the merged report of the
//! ranks' logs (`tensor-lifetime report DIR`) names with its rank and site.

use crate::common::{loss_fn, Mlp, BATCH, CLASSES, FEATURES};
use candle_core::{Device, Result, Tensor, Var};
use candle_nn::VarMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Epochs and steps per epoch each rank runs.
pub const EPOCHS: usize = 5;
pub const STEPS: usize = 4;
/// Hidden units of the MLP.
pub const HIDDEN: usize = 16;
/// How long a rank waits for the others at a step before it gives up.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(120);

/// Set (to the exchange directory) in a worker's environment: the program runs as a
/// worker instead of a launcher.
pub const WORKER_ENV: &str = "TENSOR_LIFETIME_EXAMPLE_EXCHANGE";
/// The rank that leaks, in a worker's environment.
pub const LEAK_ENV: &str = "TENSOR_LIFETIME_EXAMPLE_LEAK_RANK";

/// What a worker knows of the job.
#[derive(Debug, Clone)]
pub struct Worker {
    pub rank: usize,
    pub world_size: usize,
    pub leak: bool,
    pub exchange: PathBuf,
}

fn err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

/// Starts `world_size` workers running `program` with `args`, their logs in `dir`
/// (`rank-{rank}.jsonl`), and waits for them; rank `leak_rank` leaks. Fails when a worker
/// fails, naming it.
pub fn launch(
    program: &Path,
    args: &[&str],
    world_size: usize,
    leak_rank: Option<usize>,
    dir: &Path,
) -> Result<()> {
    let exchange = dir.join("exchange");
    std::fs::create_dir_all(&exchange).map_err(|e| err(format!("{}: {e}", exchange.display())))?;
    let mut children: Vec<(usize, Child)> = Vec::new();
    for rank in 0..world_size {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world_size.to_string())
            .env("TENSOR_LIFETIME_LOG", dir.join("rank-{rank}.jsonl"))
            .env(WORKER_ENV, &exchange)
            .env_remove("TENSOR_LIFETIME_RANK")
            .env_remove("TENSOR_LIFETIME_WORLD_SIZE")
            .env_remove("TENSOR_LIFETIME_JSON");
        match leak_rank {
            Some(r) => cmd.env(LEAK_ENV, r.to_string()),
            None => cmd.env_remove(LEAK_ENV),
        };
        let child = cmd
            .spawn()
            .map_err(|e| err(format!("cannot start rank {rank}: {e}")))?;
        children.push((rank, child));
    }
    let mut failed = Vec::new();
    for (rank, mut child) in children {
        match child.wait() {
            Ok(s) if s.success() => {}
            Ok(s) => failed.push(format!("rank {rank} ({s})")),
            Err(e) => failed.push(format!("rank {rank} ({e})")),
        }
    }
    if !failed.is_empty() {
        return Err(err(format!("workers failed: {}", failed.join(", "))));
    }
    Ok(())
}

/// The worker this process is, when the launcher started it.
pub fn worker_from_env() -> Option<Worker> {
    let exchange = std::env::var_os(WORKER_ENV)?;
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    let rank = var("RANK").unwrap_or(0);
    Some(Worker {
        rank,
        world_size: var("WORLD_SIZE").unwrap_or(1),
        leak: var(LEAK_ENV) == Some(rank),
        exchange: PathBuf::from(exchange),
    })
}

/// The batch of `rank` at `step`: sample `i` of the global batch goes to rank
/// `i % world_size` (a sharded synthetic dataset).
pub fn shard_batch(
    rank: usize,
    world_size: usize,
    step: usize,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let global = step * world_size + rank;
    let xs: Vec<f32> = (0..BATCH * FEATURES)
        .map(|i| ((i * 7 + global * 13) % 101) as f32 / 101.0 - 0.5)
        .collect();
    let ys: Vec<u32> = (0..BATCH)
        .map(|i| ((i + global) % CLASSES) as u32)
        .collect();
    Ok((
        Tensor::from_vec(xs, (BATCH, FEATURES), device)?,
        Tensor::from_vec(ys, BATCH, device)?,
    ))
}

/// The model's variables in name order (the same on every rank), set to the same
/// deterministic values everywhere.
fn shared_vars(varmap: &VarMap) -> Result<Vec<Var>> {
    let data = varmap.data().lock().expect("the var map's lock");
    let mut named: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    drop(data);
    named.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, (_, var)) in named.iter().enumerate() {
        let n = var.elem_count();
        let values: Vec<f32> = (0..n)
            .map(|j| (((j * 31 + i * 17) % 97) as f32 / 97.0 - 0.5) * 0.1)
            .collect();
        var.set(&Tensor::from_vec(values, var.dims(), var.device())?)?;
    }
    Ok(named.into_iter().map(|(_, v)| v).collect())
}

/// Writes this rank's gradients for `step`, waits for every rank's, and returns their
/// average (flattened, in the variables' order).
fn all_reduce(w: &Worker, step: usize, grads: &[f32]) -> Result<Vec<f32>> {
    let file = |rank: usize| w.exchange.join(format!("step-{step}-rank-{rank}.bin"));
    let tmp = w.exchange.join(format!("step-{step}-rank-{}.tmp", w.rank));
    let bytes: Vec<u8> = grads.iter().flat_map(|g| g.to_le_bytes()).collect();
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, file(w.rank)))
        .map_err(|e| err(format!("rank {}: cannot write its gradients: {e}", w.rank)))?;
    let start = Instant::now();
    let mut sum = vec![0f32; grads.len()];
    for rank in 0..w.world_size {
        loop {
            match std::fs::read(file(rank)) {
                Ok(b) if b.len() == grads.len() * 4 => {
                    for (s, c) in sum.iter_mut().zip(b.chunks_exact(4)) {
                        *s += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                    break;
                }
                Ok(b) => {
                    return Err(err(format!(
                    "rank {}: rank {rank}'s gradients at step {step} have {} bytes, expected {}",
                    w.rank,
                    b.len(),
                    grads.len() * 4
                )))
                }
                Err(_) if start.elapsed() < BARRIER_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(_) => {
                    let missing: Vec<String> = (0..w.world_size)
                        .filter(|r| !file(*r).exists())
                        .map(|r| r.to_string())
                        .collect();
                    return Err(err(format!(
                        "rank {}: timed out after {:?} at step {step} waiting for the gradients of rank(s) {} (did a worker die?)",
                        w.rank,
                        BARRIER_TIMEOUT,
                        missing.join(", ")
                    )));
                }
            }
        }
    }
    // Every rank has written this step, so all have read step - 1: its file can go.
    if step > 0 {
        let _ = std::fs::remove_file(w.exchange.join(format!(
            "step-{}-rank-{}.bin",
            step - 1,
            w.rank
        )));
    }
    let n = w.world_size as f32;
    Ok(sum.into_iter().map(|s| s / n).collect())
}

/// The gradients of `vars` flattened in order.
fn flat_grads(grads: &candle_core::backprop::GradStore, vars: &[Var]) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for var in vars {
        match grads.get(var) {
            Some(g) => out.extend(g.flatten_all()?.to_vec1::<f32>()?),
            None => out.extend(std::iter::repeat_n(0.0, var.elem_count())),
        }
    }
    Ok(out)
}

/// Applies the averaged gradients (plain SGD).
fn apply(vars: &[Var], avg: &[f32], lr: f32) -> Result<()> {
    let mut at = 0;
    for var in vars {
        let n = var.elem_count();
        let g = Tensor::from_slice(&avg[at..at + n], var.dims(), var.device())?;
        var.set(&(var.as_tensor() - (g * lr as f64)?)?)?;
        at += n;
    }
    Ok(())
}

/// One worker's training: [`EPOCHS`] epochs of [`STEPS`] steps on its shard; returns the
/// last step's loss and a checksum of the weights (equal on every rank).
#[tensor_lifetime::track]
pub fn train(w: &Worker) -> Result<(f32, f32)> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let model = Mlp::new(&varmap, HIDDEN, &device)?;
    let vars = shared_vars(&varmap)?;
    let mut debug_dump: Vec<Tensor> = Vec::new();
    let mut last = 0.0;
    'epoch: for epoch in 0..EPOCHS {
        for s in 0..STEPS {
            let step = epoch * STEPS + s;
            let (x, y) = shard_batch(w.rank, w.world_size, step, &device)?;
            let logits = model.forward(&x)?;
            let loss = loss_fn(&logits, &y)?;
            let grads = loss.backward()?;
            let avg = all_reduce(w, step, &flat_grads(&grads, &vars)?)?;
            apply(&vars, &avg, 0.05)?;
            if w.leak {
                debug_dump.push(x.clone());
            }
            last = loss.to_scalar::<f32>()?;
        }
    }
    let mut checksum = 0.0;
    for var in &vars {
        checksum += var.as_tensor().sum_all()?.to_scalar::<f32>()?;
    }
    Ok((last, checksum))
}
