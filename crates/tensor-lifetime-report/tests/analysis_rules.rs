//! The judgement's rules (`analysis` module docs) on hand-made event sequences.

use tensor_lifetime_report::event::HolderSpec;
use tensor_lifetime_report::report::FindingKind;
use tensor_lifetime_report::Analysis;
use tensor_lifetime_test_support::events::{iteration_end, loop_end, loop_start, site};

/// Runs one loop frame whose site 1 has `counts[i]` survivors after iteration `i`.
fn run(counts: &[u64]) -> Analysis {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop").into());
    a.apply(&site(1, "t").into());
    a.apply(&loop_start(1, 0).into());
    for (i, &c) in (0..).zip(counts) {
        let end = match c {
            0 => iteration_end(1, i),
            _ => iteration_end(1, i).site(1).survivors(c).born(0, i),
        };
        a.apply(&end.into());
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
    a.apply(&site(0, "'loop").into());
    a.apply(&site(1, "m").into());
    a.apply(&loop_start(1, 0).into());
    for i in 0..6 {
        a.apply(&iteration_end(1, i).site(1).survivors(4).born(0, 0).into());
    }
    assert_eq!(kinds(&a), vec![(FindingKind::Retained, false)]);
}

#[test]
fn loop_carried_value_is_no_finding() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop").into());
    a.apply(&site(1, "prev").into());
    a.apply(&loop_start(1, 0).into());
    for i in 0..10 {
        a.apply(&iteration_end(1, i).site(1).survivors(1).born(i, i).into());
    }
    assert!(kinds(&a).is_empty());
}

/// An `'epoch` loop (frame 1 of site 0) open, around `'batch` loops (site 2) that make
/// `label` (site 1).
fn epochs(label: &str) -> Analysis {
    let mut a = Analysis::default();
    a.apply(&site(0, "'epoch").into());
    a.apply(&site(2, "'batch").into());
    a.apply(&site(1, label).into());
    a.apply(&loop_start(1, 0).into());
    a
}

/// The `'batch` loop of `epoch` (frame `10 + epoch`, returned), 8 iterations that keep
/// 1, 2 ... 8 of site 1's tensors; left open.
fn batches(a: &mut Analysis, epoch: u64) -> u64 {
    let inner = 10 + epoch;
    a.apply(&loop_start(inner, 2).parent(1, epoch).into());
    for b in 0..8 {
        let end = iteration_end(inner, b).site(1).survivors(b + 1);
        a.apply(&end.born(0, b).into());
    }
    inner
}

#[test]
fn per_epoch_accumulation_in_nested_loop_is_dropped() {
    let mut a = epochs("pred");
    for epoch in 0..2u64 {
        let inner = batches(&mut a, epoch);
        assert_eq!(
            kinds(&a),
            vec![(FindingKind::Leak, true)],
            "growing mid-epoch"
        );
        a.apply(&loop_end(inner, 8));
        // The epoch iteration ends after the predictions were dropped.
        a.apply(&iteration_end(1, epoch).into());
        assert!(kinds(&a).is_empty(), "{:?}", kinds(&a));
    }
}

#[test]
fn nested_growth_that_survives_the_epoch_is_confirmed_at_outermost_loop() {
    let mut a = epochs("t");
    for epoch in 0..2u64 {
        let inner = batches(&mut a, epoch);
        a.apply(&loop_end(inner, 8));
        let kept = iteration_end(1, epoch).site(1).survivors(8 * (epoch + 1));
        a.apply(&kept.born(0, epoch).into());
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
    a.apply(&site(0, "'loop").into());
    a.apply(&site(1, "total").into());
    a.apply(&site(2, "loss").into());
    a.apply(&loop_start(1, 0).into());
    for i in 0..5u64 {
        let end = iteration_end(1, i);
        let total = end.site(1).survivors(i + 1).born(0, i);
        let total = total.graph(3 * (i + 1), 4096 * (i + 1));
        let loss = total.site(2).survivors(i + 1).born(0, i);
        let loss = loss.holder(HolderSpec::Graph { site: 1 }, i + 1);
        a.apply(&loss.into());
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
    a.apply(&site(0, "'loop").into());
    a.apply(&site(1, "row").into());
    a.apply(&loop_start(1, 0).into());
    for i in 0..5u64 {
        let end = iteration_end(1, i).site(1).survivors(i + 1).born(0, i);
        let end = end
            .views(16 * (i + 1), 4096 * (i + 1))
            .bytes(4096 * (i + 1));
        a.apply(&end.into());
    }
    let r = a.report();
    assert_eq!(r.findings[0].kind, FindingKind::ViewRetention);
    assert!(r.findings[0].is_leak());
    assert_eq!(r.findings[0].bytes, 5 * 4096);
}

/// Runs one loop frame whose site 1 has one survivor of `bytes[i]` bytes after iteration
/// `i`, born in that iteration (each replaces the previous one).
fn run_bytes(bytes: &[u64]) -> Analysis {
    let mut a = Analysis::default();
    a.apply(&site(0, "'loop").into());
    a.apply(&site(1, "cache").into());
    a.apply(&loop_start(1, 0).into());
    for (i, &b) in (0..).zip(bytes) {
        let end = iteration_end(1, i).site(1).survivors(1).born(i, i).bytes(b);
        a.apply(&end.into());
    }
    a
}

/// The rule on bytes (`analysis::growth`): one tensor replaced by a larger one every
/// iteration is a `growing_tensor`, with its growth per iteration; one whose size
/// wanders, or that grew and stays flat, is not.
#[test]
fn a_tensor_replaced_by_larger_ones_is_a_growing_tensor() {
    let growing: Vec<u64> = (1..=10).map(|i| i * 1000).collect();
    let a = run_bytes(&growing);
    assert_eq!(kinds(&a), vec![(FindingKind::GrowingTensor, true)]);
    let f = &a.report().findings[0];
    assert_eq!(
        (f.survivors, f.bytes, f.bytes_per_iteration),
        (1, 10_000, 1000)
    );
    assert!(a.report().to_string().contains("LEAK"));

    assert!(
        kinds(&run_bytes(&growing[..3])).is_empty(),
        "2 growth events"
    );
    // New highs ever more rarely: a size that wanders.
    let wandering = [
        500, 900, 300, 950, 200, 400, 990, 100, 600, 300, 200, 500, 100, 999,
    ];
    assert!(kinds(&run_bytes(&wandering)).is_empty());
    // Grown, then flat for long (a cache filled to its bound).
    let mut flat = growing.clone();
    flat.extend([10_000; 12]);
    assert!(kinds(&run_bytes(&flat)).is_empty());
}

/// A cache grown in a nested loop and dropped with the enclosing iteration (a cache per
/// request) is bounded; one kept across them makes new highs there too, and is a leak.
#[test]
fn growth_in_bytes_is_confirmed_by_the_enclosing_iteration() {
    for kept in [false, true] {
        let mut a = Analysis::default();
        a.apply(&site(0, "'requests").into());
        a.apply(&site(1, "'tokens").into());
        a.apply(&site(2, "cache").into());
        a.apply(&loop_start(1, 0).into());
        let mut positions = 0;
        for request in 0..6 {
            let frame = 10 + request;
            a.apply(&loop_start(frame, 1).parent(1, request).into());
            if !kept {
                positions = 0;
            }
            for token in 0..8 {
                positions += 1;
                let end = iteration_end(frame, token)
                    .site(2)
                    .survivors(1)
                    .born(token, token)
                    .bytes(positions * 100);
                a.apply(&end.into());
            }
            a.apply(&loop_end(frame, 8));
            let end = match kept {
                true => iteration_end(1, request)
                    .site(2)
                    .survivors(1)
                    .born(request, request)
                    .bytes(positions * 100),
                false => iteration_end(1, request),
            };
            a.apply(&end.into());
        }
        let leaks: Vec<_> = a.report().leaks().map(|f| f.kind).collect();
        match kept {
            true => assert_eq!(leaks, vec![FindingKind::GrowingTensor]),
            false => assert!(leaks.is_empty(), "{}", a.report()),
        }
    }
}

/// Kept activations that each carry an autograd graph, as a training loop that keeps
/// `hidden` in a history: the graph is measured on the latest iteration's survivors only
/// (the same 432 bytes at every end: one activation's graph with the shared weights),
/// so the leak's growth is at least its tensors' own (128 bytes an iteration).
#[test]
fn a_graph_leak_grows_at_least_as_its_tensors() {
    let mut a = Analysis::default();
    a.apply(&site(0, "'step").into());
    a.apply(&site(1, "hidden").into());
    a.apply(&loop_start(1, 0).into());
    for i in 0..6 {
        let end = iteration_end(1, i)
            .site(1)
            .survivors(i + 1)
            .bytes(128 * (i + 1))
            .born(0, i)
            .graph(5, 432);
        a.apply(&end.into());
    }
    let report = a.report();
    let f = &report.findings[0];
    assert!(f.is_leak(), "{report}");
    assert_eq!(f.kind, FindingKind::GraphRetention, "{report}");
    assert_eq!(f.bytes_per_iteration, 128, "{report}");
}
