//! See [`tensor_lifetime_examples::server`]: a tokio task answering 25 generation
//! requests of 12 tokens, a KV cache per request.
//!
//! ```text
//! cargo run --release --example server                  # clean
//! cargo run --release --example server -- --leak        # keeps every answer's logits: leak
//! cargo run --release --features cuda --example server -- --device cuda [--leak]
//! ```

use tensor_lifetime_examples::{decoding, server};

fn main() -> candle_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let leak = args.iter().any(|a| a == "--leak");
    let device = decoding::device_arg(&args)?;
    let answers = server::run(leak, 25, 12, &device)?;
    println!(
        "server finished: {} requests answered on {device:?}",
        answers.len()
    );
    Ok(())
}
