//! See [`tensor_lifetime_examples::decoding`]: text generation with a KV cache in a
//! request loop, 25 requests of 12 tokens.
//!
//! ```text
//! cargo run --release --example decoding                  # a cache per request: clean
//! cargo run --release --example decoding -- --leak        # one cache never reset: growing_tensor
//! cargo run --release --features cuda --example decoding -- --device cuda [--leak]
//! ```

use tensor_lifetime_examples::decoding;

fn main() -> candle_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let leak = args.iter().any(|a| a == "--leak");
    let device = decoding::device_arg(&args)?;
    let outcome = decoding::run(leak, &device)?;
    println!(
        "decoding finished: {} requests answered on {device:?}, the last cache held {} positions",
        outcome.answers.len(),
        outcome.cache_positions
    );
    Ok(())
}
