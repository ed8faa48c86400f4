//! See [`tensor_lifetime_examples::multi_rank`]: data-parallel training on N CPU worker
//! processes, their logs merged by the CLI.
//!
//! ```text
//! cargo run --release --example multi_rank -- --ranks 4 --leak-rank 1 --dir ranks
//! tensor-lifetime report ranks            # leak on rank 1 of 4, rank 1 grows apart
//! ```

use std::path::PathBuf;
use tensor_lifetime_examples::multi_rank::{self, worker_from_env};

fn main() -> candle_core::Result<()> {
    if let Some(worker) = worker_from_env() {
        let (loss, checksum) = multi_rank::train(&worker)?;
        println!(
            "rank {} of {}: last loss {loss:.4}, weights checksum {checksum:.6}",
            worker.rank, worker.world_size
        );
        return Ok(());
    }
    let usage = "usage: multi_rank [--ranks N] [--leak-rank R] [--dir DIR]";
    let mut ranks = 4;
    let mut leak_rank = None;
    let mut dir = PathBuf::from("multi_rank_logs");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_else(|| panic!("{usage}"));
        match arg.as_str() {
            "--ranks" => ranks = value.parse().unwrap_or_else(|_| panic!("{usage}")),
            "--leak-rank" => leak_rank = Some(value.parse().unwrap_or_else(|_| panic!("{usage}"))),
            "--dir" => dir = PathBuf::from(value),
            _ => panic!("{usage}"),
        }
    }
    let exe = std::env::current_exe()?;
    multi_rank::launch(&exe, &[], ranks, leak_rank, &dir)?;
    println!(
        "multi_rank: {ranks} ranks wrote their logs to {}; merge them with\n  tensor-lifetime report {}",
        dir.display(),
        dir.display()
    );
    Ok(())
}
