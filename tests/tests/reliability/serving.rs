//! The serving and model-building cases of the reliability matrix: KV caches kept across
//! requests or made per request, running concatenations reset per epoch or never, and
//! models built by a builder, by a collected iterator or into a map, then used. Each is
//! a small `#[track]`ed function of a case's seeded parameters (`Params`), with the
//! comment `// matrix: ...` on the line of each leak's site; the table is in `main.rs`.

use super::cases::{batch, setup, Params};
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{Optimizer, SGD};
use std::collections::HashMap;
use tensor_lifetime_tests::fixtures::{CLASSES, FEATURES};
use tensor_lifetime_tests::Source;

/// This file: where the cases' sites are.
pub const SERVING: Source = Source {
    file: "tests/tests/reliability/serving.rs",
    text: include_str!("serving.rs"),
};

/// Requests a server answers, and tokens each request decodes.
pub const REQUESTS: usize = 25;
pub const REQUEST_TOKENS: usize = 12;

/// Bytes of one cache position (a row of `FEATURES` f32).
pub const POSITION_BYTES: u64 = (FEATURES * 4) as u64;

/// The key and value of one decoded token: the mean row of a seeded batch.
fn kv(p: &Params, request: usize, token: usize) -> Result<Tensor> {
    batch(p, request * REQUEST_TOKENS + token)?
        .0
        .mean_keepdim(0)
}

/// L18: one KV cache for every request, grown by `Tensor::cat` and never reset (the
/// positions continue): after 25 requests it holds 300 positions instead of 12. Each
/// token's cache replaces the previous one, so the survivor count stays 1.
#[tensor_lifetime::track]
pub fn l18_kv_cache_never_reset(p: Params) -> Result<f32> {
    let mut cache = Tensor::zeros((0, FEATURES), DType::F32, &Device::Cpu)?;
    let mut total = 0.0;
    for request in 0..REQUESTS {
        for token in 0..REQUEST_TOKENS {
            let entry = kv(&p, request, token)?;
            cache = Tensor::cat(&[&cache, &entry], 0)?; // matrix: L18 kv cache
            total += cache.sum_all()?.to_scalar::<f32>()?;
        }
    }
    Ok(total)
}

/// C17: a preallocated cache of `REQUEST_TOKENS` positions written in place by `slice_assign`,
/// its position wrapping: bounded, whatever the number of requests.
#[tensor_lifetime::track]
pub fn c17_preallocated_cache(p: Params) -> Result<f32> {
    let mut cache = Tensor::zeros((REQUEST_TOKENS, FEATURES), DType::F32, &Device::Cpu)?;
    let mut total = 0.0;
    for request in 0..REQUESTS {
        for token in 0..REQUEST_TOKENS {
            let entry = kv(&p, request, token)?;
            let at = (request * REQUEST_TOKENS + token) % REQUEST_TOKENS;
            cache = cache.slice_assign(&[at..at + 1, 0..FEATURES], &entry)?;
            total += cache.narrow(0, 0, at + 1)?.sum_all()?.to_scalar::<f32>()?;
        }
    }
    Ok(total)
}

/// C18: a cache made per request, grown by `Tensor::cat` token by token and dropped
/// with the request.
#[tensor_lifetime::track]
pub fn c18_per_request_cache(p: Params) -> Result<f32> {
    let mut total = 0.0;
    for request in 0..REQUESTS {
        let mut cache = Tensor::zeros((0, FEATURES), DType::F32, &Device::Cpu)?;
        for token in 0..REQUEST_TOKENS {
            let entry = kv(&p, request, token)?;
            cache = Tensor::cat(&[&cache, &entry], 0)?;
            total += cache.sum_all()?.to_scalar::<f32>()?;
        }
    }
    Ok(total)
}

/// Steps of an epoch in the concatenation cases.
pub const EPOCH_STEPS: usize = 3;

/// Trains `p.steps` epochs of `EPOCH_STEPS` steps, concatenating the (detached)
/// predictions of each step onto `all_preds`: reset at each epoch's start (`reset`, C19)
/// or never (L19).
#[tensor_lifetime::track]
pub fn running_concatenation(p: Params, reset: bool) -> Result<usize> {
    let (varmap, model) = setup(&p)?;
    let mut opt = SGD::new(varmap.all_vars(), 0.05)?;
    let mut all_preds = Tensor::zeros((0, CLASSES), DType::F32, &Device::Cpu)?;
    'epoch: for epoch in 0..p.steps {
        if reset {
            all_preds = Tensor::zeros((0, CLASSES), DType::F32, &Device::Cpu)?;
        }
        for step in 0..EPOCH_STEPS {
            let (x, y) = batch(&p, epoch * EPOCH_STEPS + step)?;
            let logits = model.forward(&x)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &y)?;
            opt.backward_step(&loss)?;
            let preds = logits.detach();
            all_preds = Tensor::cat(&[&all_preds, &preds], 0)?; // matrix: L19 all preds
        }
    }
    Ok(all_preds.dims()[0])
}

// ---------------------------------------------------------------------------------------
// Models built in a constructor, then served.

/// A block with two constant tensors: a causal mask and a scale.
#[derive(Debug)]
pub struct Block {
    pub mask: Tensor,
    pub scale: Tensor,
}

#[tensor_lifetime::track]
impl Block {
    pub fn new(size: usize) -> Result<Block> {
        let mask = Tensor::tril2(size, DType::F32, &Device::Cpu)?;
        let scale = Tensor::new(1.0 / (size as f32).sqrt(), &Device::Cpu)?;
        Ok(Block { mask, scale })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.mask)?.broadcast_mul(&self.scale)
    }
}

/// A sequence of blocks grown by a builder (`seq().add(..)`), as `candle_nn::seq` is.
#[derive(Debug, Default)]
pub struct Seq {
    pub blocks: Vec<Block>,
}

pub fn seq() -> Seq {
    Seq::default()
}

impl Seq {
    // Named as `candle_nn::Sequential::add`, the builder users write.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, block: Block) -> Seq {
        self.blocks.push(block);
        self
    }
}

/// A model of `FEATURES`-wide blocks.
#[derive(Debug)]
pub struct Model {
    pub blocks: Seq,
    pub layers: usize,
}

/// A model whose named weights are loaded into a map.
#[derive(Debug)]
pub struct Weights {
    pub weights: HashMap<String, Tensor>,
}

#[tensor_lifetime::track]
impl Model {
    /// Built through the builder: `blocks = blocks.add(Block::new(..)?)`, moved into the
    /// returned struct literal.
    pub fn new(layers: usize) -> Result<Model> {
        let mut blocks = seq();
        for _ in 0..layers {
            blocks = blocks.add(Block::new(FEATURES)?);
        }
        Ok(Self { blocks, layers })
    }

    /// Built from a collected iterator.
    pub fn collected(layers: usize) -> Result<Model> {
        let blocks = (0..layers)
            .map(|_| Block::new(FEATURES))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            blocks: Seq { blocks },
            layers,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for block in &self.blocks.blocks {
            h = block.forward(&h)?;
        }
        Ok(h)
    }
}

#[tensor_lifetime::track]
impl Weights {
    /// Loaded into a map filled in a loop, the map moved into a value bound to the
    /// returned local.
    pub fn load(layers: usize) -> Result<Weights> {
        let mut weights = HashMap::new();
        for i in 0..layers {
            let w = Tensor::tril2(FEATURES, DType::F32, &Device::Cpu)?;
            weights.insert(format!("layer{i}.weight"), w);
        }
        let model = Weights { weights };
        Ok(model)
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for i in 0..self.weights.len() {
            h = h.matmul(&self.weights[&format!("layer{i}.weight")])?;
        }
        Ok(h)
    }
}

/// How a served model is built.
#[derive(Debug, Clone, Copy)]
pub enum Build {
    Builder,
    Collected,
    Map,
}

/// C20-C22: builds a model of `layers` blocks, then answers `p.steps` requests with it.
#[tensor_lifetime::track]
pub fn serve_built_model(p: Params, build: Build, layers: usize) -> Result<f32> {
    let (model, weights) = match build {
        Build::Builder => (Some(Model::new(layers)?), None),
        Build::Collected => (Some(Model::collected(layers)?), None),
        Build::Map => (None, Some(Weights::load(layers)?)),
    };
    let mut total = 0.0;
    for request in 0..p.steps {
        let (x, _y) = batch(&p, request)?;
        let out = match (&model, &weights) {
            (Some(m), _) => m.forward(&x)?,
            (_, Some(w)) => w.forward(&x)?,
            _ => x,
        };
        total += out.mean_all()?.to_scalar::<f32>()?;
    }
    Ok(total)
}
