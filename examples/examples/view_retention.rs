//! See [`tensor_lifetime_examples::view_retention`]: run with
//! `cargo run --release --example view_retention`.

fn main() -> candle_core::Result<()> {
    let result = tensor_lifetime_examples::view_retention::run()?;
    println!("view_retention finished: {result:?}");
    Ok(())
}
