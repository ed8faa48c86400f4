//! The merge of ranks' logs: divergence, rank lists, the series' downsampling, estimates.

use super::*;

fn rank(rank: u32, growth: i64) -> RankLog {
    let mut c = RankCollector::default();
    c.apply(&Event::rank_header(1, 0, Some(rank), Some(4), None));
    c.apply(&Event::LoopStart {
        t_ns: 0,
        frame: 1,
        site: 1,
        name: "'epoch".into(),
        parent: None,
        parent_iteration: None,
        thread: 1,
        session: 0,
        warmup: None,
        window: None,
    });
    for i in 0..6u64 {
        c.apply(&Event::IterationEnd {
            t_ns: i,
            frame: 1,
            iteration: i,
            duration_ns: 1,
            live_tensors: 1,
            live_bytes: (100_000 + growth * i as i64) as u64,
            sites: Vec::new(),
            roles: Vec::new(),
        });
    }
    let report = Report {
        findings: Vec::new(),
        loops: Vec::new(),
        live_tensors: 0,
        live_bytes: 0,
        peak_live_bytes: 0,
        sites_seen: 0,
        memory: BTreeMap::new(),
        memory_by_role: crate::roles::MemoryByRole::default(),
        post_mortem: None,
        estimated: false,
        sample_interval: None,
        forecast: None,
    };
    c.finish(format!("rank-{rank}.jsonl"), report)
}

#[test]
fn a_rank_growing_while_the_others_stay_flat_diverges() {
    let mut m = Merge::default();
    for (r, g) in [(0, 0), (1, 8192), (2, 0), (3, 10)] {
        m.add(rank(r, g));
    }
    let merged = m.finish().unwrap();
    let div: Vec<_> = merged
        .findings
        .iter()
        .filter(|f| f.finding.kind == FindingKind::RankDivergence)
        .collect();
    assert_eq!(div.len(), 1);
    assert_eq!(div[0].ranks, vec![1]);
    assert_eq!(div[0].finding.bytes_per_iteration, 8192);
}

#[test]
fn ranks_that_sample_make_the_merged_report_an_estimate() {
    let merged = |sampled: &[u32]| {
        let mut m = Merge::default();
        for r in 0..4 {
            let mut log = rank(r, 0);
            if sampled.contains(&r) {
                log.report.mark_estimated(512 * 1024);
            }
            m.add(log);
        }
        m.finish().unwrap()
    };
    let exact = merged(&[]);
    assert!(!exact.combined().estimated);
    assert!(!exact.to_string().contains("estimated"));
    let one = merged(&[2]);
    let combined = one.combined();
    assert!(combined.estimated);
    assert_eq!(combined.sample_interval, Some(512 * 1024));
    let text = one.to_string();
    assert_eq!(
        text.lines().nth(1),
        Some(crate::model::estimate_sentence(Some(512 * 1024)).as_str()),
        "{text}"
    );
}

#[test]
fn ranks_growing_alike_do_not_diverge() {
    let mut m = Merge::default();
    for (r, g) in [(0, 8000), (1, 9000), (2, 8500), (3, 8200)] {
        m.add(rank(r, g));
    }
    assert!(m.finish().unwrap().findings.is_empty());
}

#[test]
fn rank_lists_compress_runs() {
    assert_eq!(rank_list(&[1, 3]), "1, 3");
    assert_eq!(rank_list(&[0, 1, 2, 3, 7]), "0-3, 7");
    assert_eq!(rank_list(&[0, 1]), "0, 1");
}

#[test]
fn the_series_keeps_its_peaks_when_it_downsamples() {
    let mut s = Series::default();
    for i in 0..5000u64 {
        s.push(if i == 4321 { 1 << 40 } else { i });
    }
    assert!(s.points.len() < SERIES_POINTS);
    assert_eq!(s.count, 5000);
    assert!(s.points.iter().any(|p| p.1 == 1 << 40));
}
