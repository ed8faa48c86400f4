//! Text generation with a KV cache in a request loop: a tiny decoder with a random
//! configuration (candle-nn layers, no weights to download) answers requests token by
//! token. Each request gets a fresh cache; with `leak` one cache is kept for every
//! request and never reset (the positions continue), so it grows by `Tensor::cat` at
//! every token: after 25 requests of 12 tokens it holds 300 positions per layer instead
//! of 12. Each token's cache replaces the previous one, so no tensor piles up; the
//! bytes do, and the report names the cache's sites as `growing_tensor`.
//!
//! The [`server`](crate::server) example serves the same decoder from a tokio task.

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{Embedding, Linear};

/// The decoder's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
}

impl Config {
    /// A few kilobytes of weights: what CI and the examples' tests run.
    pub fn tiny() -> Config {
        Config {
            vocab: 128,
            hidden: 64,
            layers: 2,
        }
    }
}

/// One attention layer (single head) over the positions in its cache.
#[derive(Debug)]
pub struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    scale: f64,
}

/// The keys and values of one layer for the positions seen so far.
#[derive(Debug, Default, Clone)]
pub struct LayerCache {
    pub k: Option<Tensor>,
    pub v: Option<Tensor>,
}

/// The caches of every layer of a sequence.
#[derive(Debug, Default)]
pub struct KvCache {
    pub layers: Vec<LayerCache>,
}

impl KvCache {
    /// An empty cache for `layers` layers.
    pub fn new(layers: usize) -> KvCache {
        KvCache {
            layers: vec![LayerCache::default(); layers],
        }
    }

    /// Positions held (those of the first layer).
    pub fn positions(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.k.as_ref())
            .map_or(0, |k| k.dims()[0])
    }
}

#[tensor_lifetime::track]
impl Attention {
    /// Attends from the positions of `x` (one row each) to every cached position and
    /// these; appends their keys and values to `cache`.
    pub fn forward(&self, x: &Tensor, cache: &mut LayerCache) -> Result<Tensor> {
        let q = self.q.forward(x)?;
        let k_new = self.k.forward(x)?;
        let v_new = self.v.forward(x)?;
        let (k, v) = match (cache.k.take(), cache.v.take()) {
            (Some(k_old), Some(v_old)) => (
                Tensor::cat(&[&k_old, &k_new], 0)?,
                Tensor::cat(&[&v_old, &v_new], 0)?,
            ),
            _ => (k_new, v_new),
        };
        cache.k = Some(k.clone());
        cache.v = Some(v.clone());
        let scores = (q.matmul(&k.t()?)? * self.scale)?;
        let scores = match causal_mask(x.dim(0)?, k.dim(0)?, x.device())? {
            Some(mask) => scores.broadcast_add(&mask)?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        self.o.forward(&weights.matmul(&v)?)
    }
}

/// For `new` positions after `total - new` cached ones: the mask that hides from each
/// the positions after it (none for a single position).
fn causal_mask(new: usize, total: usize, device: &Device) -> Result<Option<Tensor>> {
    if new <= 1 {
        return Ok(None);
    }
    let offset = total - new;
    let values: Vec<f32> = (0..new)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j > offset + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(values, (new, total), device).map(Some)
}

/// Embedding, attention layers with residual connections, output head.
#[derive(Debug)]
pub struct Decoder {
    pub cfg: Config,
    embed: Embedding,
    layers: Vec<Attention>,
    head: Linear,
}

/// A weight matrix of `rows` x `cols` drawn from a normal distribution (a random
/// configuration: inference weights, not variables).
fn weight(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    Tensor::randn(
        0f32,
        (1.0 / cols as f64).sqrt() as f32,
        (rows, cols),
        device,
    )
}

impl Decoder {
    /// A decoder with random weights on `device`.
    pub fn new(cfg: Config, device: &Device) -> Result<Decoder> {
        let h = cfg.hidden;
        let linear =
            |i: usize, o: usize| -> Result<Linear> { Ok(Linear::new(weight(o, i, device)?, None)) };
        let layers = (0..cfg.layers)
            .map(|_| {
                Ok(Attention {
                    q: linear(h, h)?,
                    k: linear(h, h)?,
                    v: linear(h, h)?,
                    o: linear(h, h)?,
                    scale: 1.0 / (h as f64).sqrt(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Decoder {
            cfg,
            embed: Embedding::new(weight(cfg.vocab, h, device)?, h),
            layers,
            head: linear(h, cfg.vocab)?,
        })
    }

    /// The logits of the next token after `tokens` (the positions not yet in `cache`).
    pub fn forward(&self, tokens: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let mut x = self.embed.forward(tokens)?;
        for (layer, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            x = (&x + layer.forward(&x, kv)?)?;
        }
        let last = x.get(x.dim(0)? - 1)?;
        self.head.forward(&last.unsqueeze(0)?)?.squeeze(0)
    }
}

/// What a run answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The tokens generated for each request.
    pub answers: Vec<Vec<u32>>,
    /// Positions in the cache of the last request at its end.
    pub cache_positions: usize,
}

/// The prompt of request `i`: 4 tokens.
pub fn prompt(i: usize, vocab: usize) -> Vec<u32> {
    (0..4).map(|j| ((i * 31 + j * 7) % vocab) as u32).collect()
}

/// Greedy decoding of `tokens` tokens after `prompt`, continuing `cache`.
pub fn generate(
    model: &Decoder,
    prompt: &[u32],
    tokens: usize,
    cache: &mut KvCache,
    device: &Device,
) -> Result<Vec<u32>> {
    let mut input = Tensor::new(prompt, device)?;
    let mut out = Vec::with_capacity(tokens);
    for _ in 0..tokens {
        let logits = model.forward(&input, cache)?;
        let next = logits
            .argmax(D::Minus1)?
            .to_dtype(DType::U32)?
            .to_scalar::<u32>()?;
        out.push(next);
        input = Tensor::new(&[next], device)?;
    }
    Ok(out)
}

/// Answers `requests` requests of `tokens` tokens each; with `leak` one cache serves
/// them all and is never reset.
#[tensor_lifetime::track]
pub fn serve(
    model: &Decoder,
    requests: usize,
    tokens: usize,
    leak: bool,
    device: &Device,
) -> Result<Outcome> {
    let mut shared = KvCache::new(model.cfg.layers);
    let mut answers = Vec::with_capacity(requests);
    let mut cache_positions = 0;
    // Labeled: the loop is a phase of the run (it fills `answers`, which the function
    // returns, but it does not build a value the way a model's constructor does).
    'requests: for request in 0..requests {
        let mut fresh = KvCache::new(model.cfg.layers);
        let cache = if leak { &mut shared } else { &mut fresh };
        let prompt = prompt(request, model.cfg.vocab);
        answers.push(generate(model, &prompt, tokens, cache, device)?);
        cache_positions = cache.positions();
    }
    Ok(Outcome {
        answers,
        cache_positions,
    })
}

/// The example: 25 requests of 12 tokens with the tiny decoder on `device`.
pub fn run(leak: bool, device: &Device) -> Result<Outcome> {
    let model = Decoder::new(Config::tiny(), device)?;
    serve(&model, 25, 12, leak, device)
}

/// `--device cpu|cuda` (default `cpu`) from the command line.
pub fn device_arg(args: &[String]) -> Result<Device> {
    let name = args
        .iter()
        .position(|a| a == "--device")
        .and_then(|i| args.get(i + 1))
        .map_or("cpu", String::as_str);
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0),
        other => Err(candle_core::Error::Msg(format!(
            "--device {other}: expected `cpu` or `cuda`"
        ))),
    }
}
