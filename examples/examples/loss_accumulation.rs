//! See [`tensor_lifetime_examples::loss_accumulation`]: run with
//! `cargo run --release --example loss_accumulation`.

fn main() -> candle_core::Result<()> {
    let result = tensor_lifetime_examples::loss_accumulation::run()?;
    println!("loss_accumulation finished: {result:?}");
    Ok(())
}
