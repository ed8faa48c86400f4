//! The judgement on hand-made event sequences.

use super::*;
use crate::event::HolderSpec;
use crate::event::{HolderCount, SiteKind};
use crate::report::FindingKind;

fn site(id: u32, label: &str) -> Event {
    Event::Site {
        id,
        info: SiteInfo {
            file: "src/train.rs".into(),
            line: 10 + id,
            column: 5,
            function: "train".into(),
            label: label.into(),
            kind: SiteKind::Binding,
            note: None,
        },
    }
}

fn start(frame: u64, site: u32, parent: Option<u64>) -> Event {
    Event::LoopStart {
        t_ns: 0,
        frame,
        site,
        name: format!("loop{site}"),
        parent,
        parent_iteration: parent.map(|_| 0),
        thread: 1,
        session: 0,
        warmup: None,
        window: None,
    }
}

fn sweep(site: u32, survivors: u64, first: u64, last: u64) -> SiteSweep {
    SiteSweep {
        site,
        survivors,
        bytes: survivors * 1024,
        iterations: last - first + 1,
        first_iteration: first,
        last_iteration: last,
        refcount: 1,
        ..SiteSweep::default()
    }
}

fn end(frame: u64, iteration: u64, sites: Vec<SiteSweep>) -> Event {
    Event::IterationEnd {
        t_ns: 0,
        frame,
        iteration,
        duration_ns: 0,
        live_tensors: 0,
        live_bytes: 0,
        sites,
        roles: Vec::new(),
    }
}

/// Runs one loop frame whose site 1 has `counts[i]` survivors after iteration `i`.
fn run(counts: &[u64]) -> Analysis {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop"));
    a.apply(&site(1, "t"));
    a.apply(&start(1, 0, None));
    for (i, &c) in counts.iter().enumerate() {
        let sites = if c > 0 {
            vec![sweep(1, c, 0, i as u64)]
        } else {
            vec![]
        };
        a.apply(&end(1, i as u64, sites));
    }
    a
}

fn kinds(a: &Analysis) -> Vec<(FindingKind, bool)> {
    a.report()
        .findings
        .iter()
        .map(|f| (f.kind, f.is_leak()))
        .collect()
}

#[test]
fn steady_growth_is_a_leak_after_warmup_and_k() {
    assert!(kinds(&run(&[1, 2, 3])).is_empty(), "only 2 growth events");
    let a = run(&[1, 2, 3, 4]);
    assert_eq!(kinds(&a), vec![(FindingKind::Leak, true)]);
    let f = &a.report().findings[0];
    assert_eq!(f.survivors, 4);
    assert_eq!(f.bytes, 4096);
    assert_eq!(f.bytes_per_iteration, 1024);
}

#[test]
fn sparse_growth_is_still_a_leak() {
    let a = run(&[1, 1, 2, 2, 3, 3, 4, 4, 5, 5]);
    assert_eq!(kinds(&a), vec![(FindingKind::Leak, true)]);
}

#[test]
fn bounded_window_is_not_a_leak_once_flat() {
    let a = run(&[1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5]);
    assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
    // While it fills it cannot be told from a leak.
    assert_eq!(
        kinds(&run(&[1, 2, 3, 4, 5])),
        vec![(FindingKind::Leak, true)]
    );
}

#[test]
fn accumulate_then_clear_is_not_a_leak() {
    let a = run(&[1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
    assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
}

#[test]
fn state_created_once_is_retained_not_leak() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop"));
    a.apply(&site(1, "m"));
    a.apply(&start(1, 0, None));
    for i in 0..6 {
        a.apply(&end(1, i, vec![sweep(1, 4, 0, 0)]));
    }
    assert_eq!(kinds(&a), vec![(FindingKind::Retained, false)]);
}

#[test]
fn loop_carried_value_is_no_finding() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop"));
    a.apply(&site(1, "prev"));
    a.apply(&start(1, 0, None));
    for i in 0..10 {
        a.apply(&end(1, i, vec![sweep(1, 1, i, i)]));
    }
    assert!(kinds(&a).is_empty());
}

#[test]
fn per_epoch_accumulation_in_nested_loop_is_dropped() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'epoch"));
    a.apply(&site(2, "'batch"));
    a.apply(&site(1, "pred"));
    a.apply(&start(1, 0, None));
    for epoch in 0..2u64 {
        let inner = 10 + epoch;
        a.apply(&start(inner, 2, Some(1)));
        for b in 0..8 {
            a.apply(&end(inner, b, vec![sweep(1, b + 1, 0, b)]));
        }
        assert_eq!(
            kinds(&a),
            vec![(FindingKind::Leak, true)],
            "growing mid-epoch"
        );
        a.apply(&Event::LoopEnd {
            t_ns: 0,
            frame: inner,
            iterations: 8,
        });
        // The epoch iteration ends after the predictions were dropped.
        a.apply(&end(1, epoch, vec![]));
        assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
    }
}

#[test]
fn nested_growth_that_survives_the_epoch_is_confirmed_at_outermost_loop() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'epoch"));
    a.apply(&site(2, "'batch"));
    a.apply(&site(1, "t"));
    a.apply(&start(1, 0, None));
    for epoch in 0..2u64 {
        let inner = 10 + epoch;
        a.apply(&start(inner, 2, Some(1)));
        for b in 0..8 {
            a.apply(&end(inner, b, vec![sweep(1, b + 1, 0, b)]));
        }
        a.apply(&Event::LoopEnd {
            t_ns: 0,
            frame: inner,
            iterations: 8,
        });
        a.apply(&end(1, epoch, vec![sweep(1, 8 * (epoch + 1), 0, epoch)]));
        if epoch == 0 {
            // The warm-up epoch confirms nothing (lazily created state grows there).
            assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
        }
    }
    let r = a.report();
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].kind, FindingKind::Leak);
    assert_eq!(r.findings[0].loop_name, "loop2");
}

#[test]
fn graph_held_leaks_fold_into_the_graph_retention() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop"));
    a.apply(&site(1, "total"));
    a.apply(&site(2, "loss"));
    a.apply(&start(1, 0, None));
    for i in 0..5u64 {
        let mut total = sweep(1, i + 1, 0, i);
        total.graph_tensors = 3 * (i + 1);
        total.graph_bytes = 4096 * (i + 1);
        let mut loss = sweep(2, i + 1, 0, i);
        loss.holders = vec![HolderCount {
            holder: HolderSpec::Graph { site: 1 },
            count: i + 1,
        }];
        a.apply(&end(1, i, vec![total, loss]));
    }
    let r = a.report();
    assert_eq!(r.findings.len(), 1, "{r}");
    let f = &r.findings[0];
    assert_eq!(f.kind, FindingKind::GraphRetention);
    assert!(f.is_leak());
    assert_eq!(f.graph_tensors, 15);
    assert_eq!(f.bytes, 5 * 4096);
    assert_eq!(f.held_sites.len(), 1);
    assert_eq!(f.held_sites[0].label, "loss");
}

#[test]
fn small_views_of_large_storages_are_view_retention() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop"));
    a.apply(&site(1, "row"));
    a.apply(&start(1, 0, None));
    for i in 0..5u64 {
        let mut s = sweep(1, i + 1, 0, i);
        s.view_bytes = 16 * (i + 1);
        s.view_storage_bytes = 4096 * (i + 1);
        s.bytes = s.view_storage_bytes;
        a.apply(&end(1, i, vec![s]));
    }
    let r = a.report();
    assert_eq!(r.findings[0].kind, FindingKind::ViewRetention);
    assert!(r.findings[0].is_leak());
    assert_eq!(r.findings[0].bytes, 5 * 4096);
}
