//! Runnable examples of tensor-lifetime, one leak pattern each plus clean loops.
//!
//! Each example is a module with a `run` function (the example binary under
//! `examples/examples/` calls it), so the integration tests in `tests/` run exactly the
//! code users run and read its report.
//!
//! - [`leaky_dataset`]: a dataset that caches every tensor it yields in a `Vec`.
//! - [`loss_accumulation`]: a running loss summed without `detach`.
//! - [`view_retention`]: keeps a one-row view of each large batch.
//! - [`clean_training`]: an MLP with candle-nn, lazily created optimizer state, detached
//!   metrics: no leak.
//! - [`multi_rank`]: data-parallel training on N worker processes exchanging gradients
//!   through files; one rank can leak.
//! - [`cuda_training`]: a larger MLP on the GPU in clean, leaky and untracked modes, and
//!   the memory statistics (pool rounding, `empty_cache`, release threshold).
//! - [`cuda_oom`]: a leaky loop run until the GPU is out of memory, and its post-mortem.
//! - [`decoding`]: text generation with a KV cache in a request loop; `--leak` keeps one
//!   cache for every request (`growing_tensor`). CPU or `--device cuda`.
//! - [`server`]: the same decoder served from a tokio task (`in_task`), a cache per
//!   request; `--leak` keeps every answer's logits. CPU or `--device cuda`.
//! - [`prometheus`]: a training loop, clean or leaky, whose metrics the example binary
//!   serves to Prometheus.

pub mod bench;
pub mod clean_training;
pub mod common;
pub mod cuda_oom;
pub mod cuda_training;
pub mod decoding;
pub mod heap;
pub mod leaky_dataset;
pub mod loss_accumulation;
pub mod multi_rank;
pub mod prometheus;
pub mod server;
pub mod view_retention;
