//! `cargo xtask <task>`: the project's chores that need more than cargo.
//!
//! One module per task; `main` only dispatches. Errors print as `error: ...` with a
//! non-zero exit (anyhow's `Result` from `main`).

mod bench;
mod candle_matrix;
mod cuda_toolkit;
mod doc_commands;
mod gpu_build;
mod layers;
mod log_cost;
mod sample_cost;
mod util;

use anyhow::{bail, Result};

const USAGE: &str = "\
usage: cargo xtask <task> [options]

tasks:
  cuda-toolkit [--force] [--candle VERSION]
      Install the CUDA 13.0 toolkit wheels (nvcc, nvvm, cudart, crt, cccl) into
      target/cuda-toolkit with pip, add the libcudart.so link, generate the link-time
      stubs when the CUDA rlibs exist, and print the environment to build with.
      Idempotent; --force reinstalls. No system install. --candle VERSION: the toolkit
      that candle release's cudarc accepts (CUDA 12.8 for 0.8.x and 0.9.0/0.9.1, in
      target/cuda-toolkit-12.8; 13.0 from 0.9.2).
  gpu-build [--example NAME]... [--bench NAME]... [--all-examples] [--candle VERSION]
      Build the GPU binaries with --features cuda (CARGO_TARGET_DIR=target/cuda),
      generating the link stubs from the rlibs' undefined symbols, strip them and put
      them, gzip-compressed, in gpu-bin/ with gpu-bin/run.sh, ready to carry to the GPU
      host. By default: every examples/examples/cuda_*.rs and every benches/cuda_*.rs.
      --candle VERSION: against that candle-core release (its toolkit, its lockfile in
      the candle-matrix copy of the workspace, target/cuda-VERSION); binaries are named
      NAME-candle-VERSION.
  bench [--rounds N] [--small-steps N] [--mlp-steps N] [--device cpu|cuda] [--no-dhat]
        [--no-callgrind] [--records N] [--iterations N]
      The overhead benchmark: builds bench_loops and bench_loops_dhat (release), runs the
      small-tensor loop and the MLP step untracked, tracked, with TENSOR_LIFETIME=off and
      under dhat-rs as paired processes interleaved round by round, prints medians and
      ratios (CPU time), instructions per step under callgrind when valgrind is
      installed, then the tracker's memory per live record and over a long tracked loop.
      Figures: docs/performance.md.
  tracker-cost [--top N]
      The tracker's own instructions per inner iteration of the small-tensor loop:
      callgrind on the tracked and the plain loop at 2 and 6 steps, tracked minus plain
      per function, without the math and random-number functions whose counts depend on
      the run's random values. Prints the total and the N costliest functions (25).
  sample-cost [--interval SIZE] [--rollout N,N,...] [--log] [--no-build]
      The sampled mode's cost: the small loop, the MLP step and the rollout epoch at each
      N (1000,10000,100000) untracked and tracked with TENSOR_LIFETIME_SAMPLE=SIZE
      (512KiB), instructions under callgrind side by side, and their ratios; --log adds
      the same sampled runs with the binary event log on.
  log-cost [--steps N]
      What the event log costs: callgrind instructions of one rollout epoch of N steps
      (1000) tracked without a log, with the binary log and with the JSON-lines log, side
      by side, each log's ratio to none; then bytes per event of the rollout and the four
      CPU examples, binary beside JSON lines. Figures: docs/performance.md.
  candle-matrix [--only VERSION]... [--no-patch] [--update-locks]
      For each supported candle-core release (0.8.4, 0.9.1, 0.10.2, 0.11.1), with its own
      lockfile (xtask/candle-matrix/VERSION.lock) in a copy of the workspace under
      target/candle-matrix/VERSION: build the library crates, run the tracker's tests and
      the four CPU examples' checks; then the same with a path copy of candle-core 0.9.1
      used through [patch.crates-io]. Prints a table.
  layers [--graph]
      For each crate under crates/, read the module tree and every use between modules
      (`use` items, `crate::`/`super::`/`self::` paths in code and in macro tokens; not
      #[cfg(test)]) and check them against the rooms of docs/architecture.md's Layers
      section: a use the table does not allow, a cycle between rooms, a stale row and a
      module in no room fail, each named by file and line. Then check that the page names
      every source file (crates/*/src, examples/src, tests/src, xtask/src). Reports every
      problem. --graph: print the uses between rooms as tables instead.
  doc-commands [--slow] [--only PAGE]...
      Run the commands of README.md and docs/*.md (their ```sh blocks) in the
      repository's root, a page's blocks in order in one bash session, with a temporary
      install root; what they leave that was not there before is removed. Blocks marked `sh ci` must be lines of .ci/run,
      `sh slow` run only with --slow, `sh gpu-host` on the GPU machine (not here).
      Prints a table per page; fails with the output of a page whose commands fail.
  help
      This text.
";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(task) = args.next() else {
        eprint!("{USAGE}");
        bail!("no task given");
    };
    let rest: Vec<String> = args.collect();
    match task.as_str() {
        "cuda-toolkit" => cuda_toolkit::run(&rest),
        "gpu-build" => gpu_build::run(&rest),
        "bench" => bench::run(&rest),
        "candle-matrix" => candle_matrix::run(&rest),
        "user-crates" => candle_matrix::user_crates::run(&rest),
        "tracker-cost" => bench::tracker_cost(&rest),
        "sample-cost" => sample_cost::run(&rest),
        "layers" => layers::run(&rest),
        "doc-commands" => doc_commands::run(&rest),
        "log-cost" => log_cost::run(&rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => {
            eprint!("{USAGE}");
            bail!("unknown task `{other}`")
        }
    }
}
