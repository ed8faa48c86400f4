//! Writes a synthetic event log (a simulated training loop, see `synth`), for benchmarks
//! of the CLI on long logs:
//!
//! ```text
//! cargo run --release -p tensor-lifetime-test-support --example synth_log -- 1000000 big.jsonl
//! cargo run --release -p tensor-lifetime-test-support --example synth_log -- clean 4 50 clean.jsonl
//! # 64 ranks' logs of about 1,000,000 events each in ranks/rank-N.jsonl; rank 1 leaks
//! cargo run --release -p tensor-lifetime-test-support --example synth_log -- ranks 64 1000000 ranks
//! ```

use std::io::{BufWriter, Write};
use tensor_lifetime_test_support::synth::{self, SynthLoop};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: synth_log EVENTS OUT | synth_log clean|leaky EPOCHS BATCHES OUT \
                 | synth_log ranks RANKS EVENTS DIR";
    if let [kind, ranks, events, dir] = args.as_slice() {
        if kind == "ranks" {
            let ranks: u32 = ranks.parse().expect(usage);
            std::fs::create_dir_all(dir)?;
            for rank in 0..ranks {
                let mut cfg = SynthLoop::with_events(events.parse().expect(usage));
                cfg.leak = rank == 1;
                let path = format!("{dir}/rank-{rank}.jsonl");
                let mut w = BufWriter::new(std::fs::File::create(&path)?);
                let n = synth::write_rank_log(&cfg, rank, ranks, &mut w)?;
                w.flush()?;
                eprintln!("wrote {n} events to {path}");
            }
            return Ok(());
        }
    }
    let (cfg, out) = match args.as_slice() {
        [n, out] => (SynthLoop::with_events(n.parse().expect(usage)), out),
        [kind, epochs, batches, out] => {
            let (e, b) = (epochs.parse().expect(usage), batches.parse().expect(usage));
            match kind.as_str() {
                "clean" => (SynthLoop::clean(e, b), out),
                "leaky" => (SynthLoop::leaky(e, b), out),
                _ => panic!("{usage}"),
            }
        }
        _ => panic!("{usage}"),
    };
    let mut w = BufWriter::new(std::fs::File::create(out)?);
    let n = synth::write_log(&cfg, &mut w)?;
    w.flush()?;
    eprintln!("wrote {n} events to {out}");
    Ok(())
}
