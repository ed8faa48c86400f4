//! See [`tensor_lifetime_examples::leaky_dataset`]: run with
//! `cargo run --release --example leaky_dataset`.

fn main() -> candle_core::Result<()> {
    let result = tensor_lifetime_examples::leaky_dataset::run()?;
    println!("leaky_dataset finished: {result:?}");
    Ok(())
}
