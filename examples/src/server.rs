//! An async server: a tokio task answers generation requests from a channel with the
//! [`decoding`](crate::decoding) example's decoder, each request one iteration of its
//! request loop, with a KV cache made per request. The task is spawned wrapped in
//! [`tensor_lifetime::in_task`], so its loop is judged on whichever worker thread polls
//! it. With `keep`, the server keeps every answer's logits "for a later log" and never
//! drops them: a leak, found at its site with `answers` as the holder.

use crate::decoding::{prompt, Config, Decoder, KvCache};
use candle_core::{DType, Device, Result, Tensor, D};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// A request: its id, tokens to generate, and where the answer goes.
#[derive(Debug)]
pub struct Request {
    pub id: usize,
    pub tokens: usize,
    pub reply: oneshot::Sender<Vec<u32>>,
}

/// The server's state.
#[derive(Debug)]
pub struct Server {
    model: Arc<Decoder>,
    device: Device,
    /// Every answer's logits, kept when `keep` (the leak).
    pub answers: Vec<Tensor>,
    keep: bool,
}

#[tensor_lifetime::track]
impl Server {
    /// Serves requests until the channel closes; returns how many it answered. Each
    /// token yields to the runtime, so a request may resume on another worker.
    pub async fn serve(&mut self, mut requests: mpsc::Receiver<Request>) -> Result<usize> {
        let mut served = 0;
        while let Some(request) = requests.recv().await {
            let mut cache = KvCache::new(self.model.cfg.layers);
            let mut input = Tensor::new(prompt(request.id, self.model.cfg.vocab), &self.device)?;
            let mut tokens = Vec::with_capacity(request.tokens);
            for _ in 0..request.tokens {
                let logits = self.model.forward(&input, &mut cache)?;
                let next = logits
                    .argmax(D::Minus1)?
                    .to_dtype(DType::U32)?
                    .to_scalar::<u32>()?;
                tokens.push(next);
                input = Tensor::new(&[next], &self.device)?;
                if self.keep {
                    self.answers.push(logits);
                }
                tokio::task::yield_now().await;
            }
            // The client may have gone: its answer is dropped.
            let _ = request.reply.send(tokens);
            served += 1;
        }
        Ok(served)
    }
}

/// Runs the server on a runtime of 2 worker threads and sends it `requests` requests of
/// `tokens` tokens from another task; returns the answers in request order.
pub fn run(keep: bool, requests: usize, tokens: usize, device: &Device) -> Result<Vec<Vec<u32>>> {
    let model = Arc::new(Decoder::new(Config::tiny(), device)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(candle_core::Error::wrap)?;
    let device = device.clone();
    runtime.block_on(async move {
        let (tx, rx) = mpsc::channel(4);
        let mut server = Server {
            model,
            device,
            answers: Vec::new(),
            keep,
        };
        let task = tokio::spawn(tensor_lifetime::in_task(async move {
            let served = server.serve(rx).await;
            drop(server);
            served
        }));
        let mut answers = Vec::with_capacity(requests);
        for id in 0..requests {
            let (reply, answer) = oneshot::channel();
            let request = Request { id, tokens, reply };
            tx.send(request).await.map_err(candle_core::Error::wrap)?;
            answers.push(answer.await.map_err(candle_core::Error::wrap)?);
        }
        drop(tx);
        task.await.map_err(candle_core::Error::wrap)??;
        Ok(answers)
    })
}
