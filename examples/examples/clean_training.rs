//! See [`tensor_lifetime_examples::clean_training`]: run with
//! `cargo run --release --example clean_training`.

fn main() -> candle_core::Result<()> {
    let result = tensor_lifetime_examples::clean_training::run()?;
    println!("clean_training finished: {result:?}");
    Ok(())
}
