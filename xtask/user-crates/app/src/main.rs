//! A user's training script with three mistakes, run by `cargo xtask user-crates` against
//! each supported candle-core: each line with an `expect` comment (the finding's kind as
//! the text report writes it, its label, then `field=value` of its JSON) must be reported
//! as that finding, at that line, and nothing else.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{linear, Linear, Module, Optimizer, VarBuilder, VarMap, SGD};

/// Keeps every step's tensor: a leak.
#[tensor_lifetime::track]
fn kept_steps(device: &Device) -> Result<usize> {
    let mut kept = Vec::new();
    for _ in 0..8 {
        let x = Tensor::ones((64, 64), DType::F32, device)?; // expect: LEAK x survivors=8 bytes=131072
        kept.push(x);
    }
    Ok(kept.len())
}

/// Keeps a one-row view of each batch: the view pins the whole batch's storage. The
/// batches cycle through every element type, so the storage bytes of each are read.
#[tensor_lifetime::track]
fn kept_rows(device: &Device) -> Result<usize> {
    let dtypes = [
        DType::U8,
        DType::U32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
    ];
    let mut rows = Vec::new();
    for step in 0..14 {
        let batch = Tensor::ones((64, 16), dtypes[step % dtypes.len()], device)?;
        let row = batch.narrow(0, 0, 1)?; // expect: VIEW row survivors=14 view_bytes=928 view_storage_bytes=59392
        rows.push(row);
    }
    Ok(rows.len())
}

/// A linear layer and its optimizer (candle-nn).
fn model(device: &Device) -> Result<(Linear, SGD)> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
    let model = linear(16, 4, vb.pp("fc"))?;
    let opt = SGD::new(varmap.all_vars(), 0.05)?;
    Ok((model, opt))
}

/// Trains a linear layer with candle-nn, summing the loss without `detach`: the running
/// total holds every step's autograd graph.
#[tensor_lifetime::track]
fn training(device: &Device) -> Result<f32> {
    let (model, mut opt) = model(device)?;
    let mut total = Tensor::zeros((), DType::F32, device)?;
    for step in 0..10 {
        let x = Tensor::ones((8, 16), DType::F32, device)?.affine(0.1, step as f64)?;
        let y = model.forward(&x)?;
        let loss = y.sqr()?.mean_all()?;
        opt.backward_step(&loss)?;
        total = (total + &loss)?; // expect: GRAPH total survivors=10
    }
    Ok(total.to_scalar::<f32>()?)
}

/// The same training done right: no finding.
#[tensor_lifetime::track]
fn clean_training(device: &Device) -> Result<f32> {
    let (model, mut opt) = model(device)?;
    let mut total = 0.0;
    for step in 0..10 {
        let x = Tensor::ones((8, 16), DType::F32, device)?.affine(0.1, step as f64)?;
        let y = model.forward(&x)?;
        let loss = y.sqr()?.mean_all()?;
        opt.backward_step(&loss)?;
        total += loss.to_scalar::<f32>()?;
    }
    Ok(total)
}

fn main() -> Result<()> {
    let device = Device::Cpu;
    println!("kept {} steps", kept_steps(&device)?);
    println!("kept {} rows", kept_rows(&device)?);
    println!("loss {}", training(&device)?);
    println!("clean loss {}", clean_training(&device)?);
    Ok(())
}
