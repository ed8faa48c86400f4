//! The `multi_rank` example with 4 and 16 worker processes (this test binary re-executed
//! as the workers): the merged report of their logs names the leaking rank and the site
//! it leaks at, and a run with no leaking rank has no leak.
//!
//! `harness = false`: the binary is both the test and, with the example's worker
//! environment set, a worker.

use std::path::Path;
use tensor_lifetime_examples::multi_rank::{self, worker_from_env};
use tensor_lifetime_report::event::{EventReader, ReadOutcome};
use tensor_lifetime_report::ranks::{Merge, MergedReport, RankCollector};
use tensor_lifetime_report::{Analysis, FindingKind};

/// The logs in `dir`, each judged on its own, merged as `tensor-lifetime report DIR` does.
fn merged(dir: &Path, ranks: usize) -> MergedReport {
    let mut merge = Merge::default();
    for rank in 0..ranks {
        let path = dir.join(format!("rank-{rank}.jsonl"));
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut analysis = Analysis::default();
        let mut collector = RankCollector::default();
        for outcome in EventReader::new(std::io::BufReader::new(file)) {
            if let ReadOutcome::Event { event, .. } = outcome.expect("a valid log") {
                analysis.apply(&event);
                collector.apply(&event);
            }
        }
        merge.add(collector.finish(path.display().to_string(), analysis.report()));
    }
    merge.finish().expect("one log per rank")
}

fn run(ranks: usize, leak_rank: Option<usize>) -> MergedReport {
    let dir = tempfile_dir(ranks, leak_rank);
    let exe = std::env::current_exe().unwrap();
    multi_rank::launch(&exe, &[], ranks, leak_rank, &dir).expect("the workers ran");
    let merged = merged(&dir, ranks);
    let _ = std::fs::remove_dir_all(&dir);
    merged
}

fn tempfile_dir(ranks: usize, leak: Option<usize>) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tensor-lifetime-multi-rank-{}-{ranks}-{leak:?}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn check_leak_on(ranks: usize, leak_rank: usize) {
    let report = run(ranks, Some(leak_rank));
    assert_eq!(report.world_size as usize, ranks);
    let source = include_str!("../../examples/src/multi_rank.rs");
    let line = source
        .lines()
        .position(|l| l.contains("let (x, y) = shard_batch(w.rank, w.world_size, step, &device)?;"))
        .expect("the batch line") as u32
        + 1;
    let leaks: Vec<_> = report.leaks().collect();
    assert_eq!(leaks.len(), 1, "{report}");
    let leak = leaks[0];
    assert_eq!(leak.ranks, vec![leak_rank as u32], "{report}");
    assert_eq!(leak.finding.site.file, "examples/src/multi_rank.rs");
    assert_eq!(leak.finding.site.line, line);
    assert_eq!(leak.finding.site.label, "x");
    let text = report.to_string();
    assert!(
        text.contains(&format!("leak on rank {leak_rank} of {ranks}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("examples/src/multi_rank.rs:{line}  `x`")),
        "{text}"
    );
    // Its live bytes grow while the others' stay flat.
    let apart: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.finding.kind == FindingKind::RankDivergence)
        .map(|f| f.ranks.clone())
        .collect();
    assert_eq!(apart, vec![vec![leak_rank as u32]], "{text}");
    eprintln!("multi_rank: {ranks} ranks, leak on rank {leak_rank}: ok");
}

fn main() {
    if let Some(worker) = worker_from_env() {
        if let Err(e) = multi_rank::train(&worker) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    check_leak_on(4, 1);
    check_leak_on(16, 11);
    let clean = run(4, None);
    assert!(clean.leaks().next().is_none(), "{clean}");
    assert!(
        clean
            .findings
            .iter()
            .all(|f| f.finding.kind != FindingKind::RankDivergence),
        "{clean}"
    );
    eprintln!("multi_rank: 4 ranks, none leaking: no leak");
}
