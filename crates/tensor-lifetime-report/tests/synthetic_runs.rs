//! The renderers (trace, timeline, HTML) and the diff on synthetic runs
//! (`tensor_lifetime_test_support::synth`): a training loop simulated event by event,
//! clean or with a dataset cache that leaks.

use tensor_lifetime_report::Report;
use tensor_lifetime_report::{Analysis, Event};
use tensor_lifetime_test_support::synth::{self, SynthLoop};

fn report(cfg: &SynthLoop) -> Report {
    let mut a = Analysis::default();
    synth::generate(cfg, |e| a.apply(&e));
    a.report()
}

mod trace {
    use super::*;
    use serde_json::Value;
    use tensor_lifetime_report::trace::TraceWriter;
    use tensor_lifetime_test_support::trace_check::check_trace;

    fn trace(cfg: &SynthLoop) -> (Value, Report) {
        let report = report(cfg);
        let mut w = TraceWriter::new(Vec::new(), &report.findings).unwrap();
        synth::generate(cfg, |e| w.apply(&e).unwrap());
        let bytes = w.finish().unwrap();
        (serde_json::from_slice(&bytes).unwrap(), report)
    }

    #[test]
    fn writes_valid_trace_events() {
        let (t, report) = trace(&SynthLoop::leaky(3, 4));
        let stats = check_trace(&t).unwrap();
        // 12 batch + 3 epoch iterations, 3 batch loops + 1 epoch loop.
        assert_eq!(stats.slices, 12 + 3 + 3 + 1);
        assert_eq!(stats.instants, report.findings.len() as u64);
        assert_eq!(stats.metadata, 2);
        // Every counter is there, and none repeats its last value.
        let mut last: std::collections::BTreeMap<String, Value> = Default::default();
        for e in t["traceEvents"].as_array().unwrap() {
            if e["ph"] == "C" {
                let name = e["name"].as_str().unwrap().to_string();
                assert_ne!(last.get(&name), Some(&e["args"]), "{name} repeated");
                last.insert(name, e["args"].clone());
            }
        }
        let names: Vec<&str> = last.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "device used (cuda:0)",
                "live bytes",
                "live tensors",
                "pool reserved (cuda:0)",
                "pool used (cuda:0)"
            ]
        );
        // The cache grows each batch: live bytes at each of the 12 batch ends.
        assert!(stats.counters >= 2 * 12 + 12, "{}", stats.counters);
    }

    #[test]
    fn findings_are_placed_where_they_were_judged() {
        let (t, report) = trace(&SynthLoop::leaky(5, 4));
        let leak = &report.findings[0];
        assert!(leak.is_leak());
        let events = t["traceEvents"].as_array().unwrap();
        let instant = events
            .iter()
            .find(|e| e["ph"] == "i" && e["args"]["label"] == "t")
            .unwrap();
        assert_eq!(instant["s"], "g");
        assert!(instant["name"].as_str().unwrap().starts_with("LEAK `t`"));
        // At the end of the iteration of the judging loop, not at the end of the trace.
        let slice = events
            .iter()
            .find(|e| {
                e["ph"] == "X"
                    && e["args"]["loop"] == leak.loop_name.as_str()
                    && e["args"]["iteration"] == leak.iteration
            })
            .unwrap();
        let end = slice["ts"].as_f64().unwrap() + slice["dur"].as_f64().unwrap();
        assert!((instant["ts"].as_f64().unwrap() - end).abs() < 1e-3);
    }

    #[test]
    fn overlapping_iteration_times_still_nest() {
        let mut events = synth::events(&SynthLoop::leaky(2, 4));
        // Each iteration claims to have started 5 us before the previous one ended.
        for e in &mut events {
            if let Event::IterationEnd { duration_ns, .. } = e {
                *duration_ns += 5_000;
            }
        }
        let mut w = TraceWriter::new(Vec::new(), &[]).unwrap();
        for e in &events {
            w.apply(e).unwrap();
        }
        let t: Value = serde_json::from_slice(&w.finish().unwrap()).unwrap();
        check_trace(&t).unwrap();
    }

    /// An outer iteration whose start was measured a little after its inner loop's
    /// (its stamp placed by the drain's clock) still holds that loop's slice.
    #[test]
    fn an_iteration_measured_to_start_after_its_inner_loop_still_holds_it() {
        let mut events = synth::events(&SynthLoop::leaky(3, 4));
        let mut outer = 0;
        for e in &mut events {
            if let Event::IterationEnd {
                frame, duration_ns, ..
            } = e
            {
                if *frame == 1 {
                    *duration_ns -= 700;
                    outer += 1;
                }
            }
        }
        assert_eq!(outer, 3, "the epoch frame's iterations");
        let mut w = TraceWriter::new(Vec::new(), &[]).unwrap();
        for e in &events {
            w.apply(e).unwrap();
        }
        let t: Value = serde_json::from_slice(&w.finish().unwrap()).unwrap();
        check_trace(&t).unwrap();
    }
}

mod timeline {
    use super::*;
    use tensor_lifetime_report::{Timeline, TimelineBuilder};

    fn build(cfg: &SynthLoop, max_points: usize) -> Timeline {
        let mut b = TimelineBuilder::new(max_points);
        synth::generate(cfg, |e| b.apply(&e));
        b.finish()
    }

    #[test]
    fn live_bytes_by_site_follow_births_and_drops() {
        let t = build(&SynthLoop::leaky(2, 5), 10_000);
        assert_eq!(t.iteration_ends, 2 * 5 + 2);
        assert_eq!(t.points.len(), 12);
        assert_eq!(t.loops, vec!["'epoch".to_string(), "'batch".to_string()]);
        let last = t.points.last().unwrap();
        // Only the optimizer state (5) and the cache (6) are alive at iteration ends, and
        // together they are what the tracker counted.
        let sites: Vec<u32> = last.sites.iter().map(|s| s.site).collect();
        assert_eq!(sites, vec![5, 6]);
        assert_eq!(
            last.sites.iter().map(|s| s.bytes).sum::<u64>(),
            last.live_bytes
        );
        assert_eq!(t.top_sites(1), vec![6]);
        assert_eq!(t.stats[&6].born, 10);
        assert_eq!(t.stats[&7].stored, 10);
        assert_eq!(t.stats[&6].peak_survivors, 10);
        assert_eq!(t.marks.len(), 2);
        assert_eq!(t.memory["cuda:0"].len(), 10);
    }

    #[test]
    fn long_runs_are_downsampled_to_the_cap() {
        let t = build(&SynthLoop::leaky(10, 500), 64);
        assert!(t.points.len() <= 64, "{}", t.points.len());
        assert!(t.points.len() >= 32, "{}", t.points.len());
        assert_eq!(t.points.iter().map(|p| p.count).sum::<u64>(), 10 * 500 + 10);
        assert!(t.memory["cuda:0"].len() <= 64);
        // The last point has the most live bytes of a leak, and it was kept.
        let max = t.points.iter().map(|p| p.live_bytes).max().unwrap();
        assert_eq!(max, t.points.last().unwrap().live_bytes);
    }
}

mod html {
    use super::*;
    use tensor_lifetime_report::html::{render, HtmlOptions};
    use tensor_lifetime_report::TimelineBuilder;

    fn page(cfg: &SynthLoop, max_points: usize) -> String {
        let mut a = Analysis::default();
        let mut t = TimelineBuilder::new(max_points);
        synth::generate(cfg, |e| {
            a.apply(&e);
            t.apply(&e);
        });
        render(&t.finish(), &a.report(), &HtmlOptions::default())
    }

    #[test]
    fn the_page_is_self_contained() {
        let html = page(&SynthLoop::leaky(3, 10), 2048);
        for outside in ["http://", "https://", "<link", " src=", "@import", "url("] {
            assert!(!html.contains(outside), "found {outside:?}");
        }
        assert!(html.contains("<svg id=\"timeline\""));
        assert!(html.contains("<table id=\"findings\""));
    }

    #[test]
    fn the_leaking_site_is_stacked_and_in_the_table() {
        let html = page(&SynthLoop::leaky(3, 10), 2048);
        // The cache site is the largest series, marked as a leak, with its holder.
        assert!(
            html.contains("class=\"area leak\" data-series=\"0\""),
            "no leak area"
        );
        assert!(html.contains("stored into `self.cache` at src/dataset.rs:42"));
        assert!(html.contains("id=\"site-6\""));
        assert!(html.contains("pool used (cuda:0)"));
        assert_eq!(html.matches("<path class=\"area").count(), 2, "m and t");
    }

    #[test]
    fn a_clean_run_says_so() {
        let html = page(&SynthLoop::clean(3, 10), 2048);
        assert!(html.contains("class=\"clean\""));
        assert!(!html.contains("class=\"area leak\""));
    }
}

mod diff {
    use super::*;
    use tensor_lifetime_report::diff::{Change, SiteDiff};
    use tensor_lifetime_report::Diff;

    #[test]
    fn a_run_against_itself_did_not_grow() {
        let r = report(&SynthLoop::leaky(4, 5));
        let d = Diff::new(&r, &r);
        assert!(!d.grew());
        assert!(d.sites.iter().all(|s| s.change == Change::Same));
    }

    #[test]
    fn clean_against_leaky_names_the_leaking_site() {
        let d = Diff::new(
            &report(&SynthLoop::clean(4, 5)),
            &report(&SynthLoop::leaky(4, 5)),
        );
        assert!(d.grew());
        let grown: Vec<&SiteDiff> = d.grown().collect();
        assert_eq!(grown.len(), 1, "{d}");
        assert_eq!(
            (grown[0].file.as_str(), grown[0].line),
            ("src/dataset.rs", 41)
        );
        assert!(grown[0].base.is_none());
        assert!(grown[0].new.as_ref().unwrap().leak);
        // The other way round the leak is gone: nothing grew.
        let back = Diff::new(
            &report(&SynthLoop::leaky(4, 5)),
            &report(&SynthLoop::clean(4, 5)),
        );
        assert!(!back.grew(), "{back}");
        assert_eq!(back.sites[0].change, Change::Shrank);
    }

    #[test]
    fn a_longer_leak_grew_and_a_moved_line_still_matches() {
        let base = report(&SynthLoop::leaky(4, 5));
        let mut new = report(&SynthLoop::leaky(6, 5));
        for f in &mut new.findings {
            f.site.line += 3;
        }
        let d = Diff::new(&base, &new);
        assert_eq!(d.sites.len(), 2, "{d}");
        let t = d.sites.iter().find(|s| s.label == "t").unwrap();
        assert_eq!(t.change, Change::Grew);
        assert_eq!((t.line, t.base.as_ref().unwrap().line), (44, 41));
        let m = d.sites.iter().find(|s| s.label == "m").unwrap();
        assert_eq!(m.change, Change::Same);
    }
}

/// The live tensors of a log replayed to a moment (`pprof::LiveReplay`): the leaking
/// cache is the largest group, with the leak finding's bytes at the end; an earlier
/// iteration holds less of it; the peak is where the most bytes were live.
mod pprof_replay {
    use super::*;
    use tensor_lifetime_report::pprof::{At, LiveReplay};

    fn replay(cfg: &SynthLoop, at: At) -> LiveReplay {
        let mut r = LiveReplay::new(at);
        synth::generate(cfg, |e| r.apply(&e));
        r
    }

    #[test]
    fn the_leak_is_the_largest_group_with_its_bytes_at_the_end() {
        let cfg = SynthLoop::leaky(4, 6);
        let report = report(&cfg);
        let leak = report.leaks().next().expect("the synthetic cache leaks");
        let end = replay(&cfg, At::End);
        let profile = end.profile("at the end");
        let top = &profile.live[0];
        assert_eq!(top.site, leak.site);
        assert_eq!(top.bytes, leak.bytes, "{profile:#?}");
        assert_eq!(top.tensors, leak.survivors);
        assert_eq!(top.role, leak.role.unwrap_or_default());
        assert!(top.holder.starts_with("stored into"), "{}", top.holder);
        assert_eq!(profile.live_bytes(), end.live_bytes());
        // Every tensor born is allocated, the dead ones too.
        let born: u64 = profile.allocated.iter().map(|a| a.tensors).sum();
        assert!(born > top.tensors, "{born}");

        let early = replay(&cfg, At::Iteration(1)).profile("iteration 1");
        let early_top = early.live.iter().find(|g| g.site == leak.site).unwrap();
        assert!(early_top.bytes < top.bytes, "{early_top:?}");
        assert!(early_top.bytes > 0);

        let (peak, after) = end.peak_event();
        assert!(peak >= end.live_bytes());
        let at_peak = replay(&cfg, At::Event(after));
        assert!(at_peak.reached());
        assert_eq!(at_peak.live_bytes(), peak);
    }

    #[test]
    fn an_iteration_no_loop_reached_is_not_reached() {
        let r = replay(&SynthLoop::leaky(2, 3), At::Iteration(50));
        assert!(!r.reached());
    }
}

mod loops {
    use super::*;
    use tensor_lifetime_report::report::LoopSummary;

    /// (runs, iterations, running) of the `'epoch` loop and of the batch loop.
    fn summaries(report: &Report) -> [(u64, u64, u64); 2] {
        let of = |epoch: bool| {
            let l: &LoopSummary = (report.loops.iter())
                .find(|l| (l.name == "'epoch") == epoch)
                .unwrap_or_else(|| panic!("no such loop: {:?}", report.loops));
            (l.runs, l.iterations, l.running)
        };
        [of(true), of(false)]
    }

    #[test]
    fn a_loop_summary_counts_the_iterations_of_its_ended_and_running_frames() {
        // 3 epochs of 4 batches; a report after the 6th iteration end: the first batch
        // loop ended (4), the second ran 1, the epoch loop ended 1.
        let cfg = SynthLoop::leaky(3, 4);
        let mut a = Analysis::default();
        let (mut ends, mut during) = (0, None);
        synth::generate(&cfg, |e| {
            a.apply(&e);
            if matches!(e, Event::IterationEnd { .. }) {
                ends += 1;
                if ends == 6 {
                    during = Some(a.report());
                }
            }
        });
        let during = summaries(&during.expect("a 6th iteration end"));
        assert_eq!(during, [(1, 1, 1), (2, 5, 1)]);
        // At the end: every frame closed, every iteration counted once.
        assert_eq!(summaries(&a.report()), [(1, 3, 0), (3, 12, 0)]);
    }
}

/// What an automatic report compares: the findings' keys, taken without building the
/// report, name the report's findings (their kinds and leaks) at every iteration end of a
/// run whose findings come and go, and change exactly when the report's findings do.
#[test]
fn finding_keys_follow_the_reports_findings_through_a_run() {
    use tensor_lifetime_report::FindingKind;
    let ident = |r: &Report| {
        let mut v: Vec<(String, u32, FindingKind, bool)> = (r.findings.iter())
            .map(|f| (f.site.file.clone(), f.site.line, f.kind, f.is_leak()))
            .collect();
        v.sort();
        v
    };
    let kinds = |mut v: Vec<(FindingKind, bool)>| {
        v.sort();
        v
    };
    for cfg in [SynthLoop::leaky(5, 6), SynthLoop::clean(5, 6)] {
        let mut a = Analysis::default();
        let (mut ends, mut changes) = (0, 0);
        let mut last = (Vec::new(), Vec::new());
        synth::generate(&cfg, |e| {
            let end = matches!(e, Event::IterationEnd { .. });
            a.apply(&e);
            if !end {
                return;
            }
            ends += 1;
            let (keys, report) = (a.finding_keys(), a.report());
            let of_keys: Vec<_> = keys.iter().map(|k| (k.kind(), k.is_leak())).collect();
            let of_report = report
                .findings
                .iter()
                .map(|f| (f.kind, f.is_leak()))
                .collect();
            assert_eq!(kinds(of_keys), kinds(of_report), "iteration end {ends}");
            let now = (keys, ident(&report));
            assert_eq!(
                now.0 != last.0,
                now.1 != last.1,
                "iteration end {ends}: {now:?}"
            );
            changes += usize::from(now.0 != last.0);
            last = now;
        });
        assert!(ends > 20, "{ends}");
        assert!(changes >= 1, "the findings appeared: {changes}");
    }
}
