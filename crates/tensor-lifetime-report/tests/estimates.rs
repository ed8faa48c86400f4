//! A report of a sampled run says its figures are estimates in every output that reads
//! it (JSON `estimated` and `sample_interval`, the text, the HTML page, Markdown, a diff,
//! the trace); an exact one carries neither field, so exact reports are unchanged byte
//! for byte. A log that says it samples weighs its births in the live profile and the
//! births per site.

use tensor_lifetime_report::trace::TraceWriter;
use tensor_lifetime_report::{Analysis, Diff, Event, Report, SiteKind, TimelineBuilder};

#[test]
fn sampled_reports_say_they_are_estimates_and_exact_ones_do_not() {
    let mut analysis = Analysis::default();
    let exact = analysis.report();
    let json = exact.to_json();
    assert!(
        !json.contains("estimated") && !json.contains("sample_interval"),
        "{json}"
    );
    assert!(!exact.to_string().contains("estimated"));

    analysis.set_sample_interval(Some(512 * 1024));
    let sampled = analysis.report();
    assert!(sampled.estimated);
    assert_eq!(sampled.sample_interval, Some(512 * 1024));
    let value: serde_json::Value = serde_json::from_str(&sampled.to_json()).unwrap();
    assert_eq!(value["estimated"], true);
    assert_eq!(value["sample_interval"], 524288);
    let text = sampled.to_string();
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("estimated: tensors sampled by size (one per 512.0 KiB")),
        "{text}"
    );
    let page = tensor_lifetime_report::html::render(
        &TimelineBuilder::new(64).finish(),
        &sampled,
        &Default::default(),
    );
    assert!(
        page.contains("id=\"estimated\""),
        "no estimate note on the page"
    );
    // A leak test's session report is exact even in a sampled process.
    assert!(!analysis.report_for(Some(1)).estimated);
    // The JSON reads back.
    let back: tensor_lifetime_report::Report = serde_json::from_str(&sampled.to_json()).unwrap();
    assert_eq!(back.sample_interval, Some(512 * 1024));
}

/// Events of a sampled run at a 1 KiB interval: four 16-value `f32` tensors (64 own bytes
/// each, each standing for `1 / (1 - exp(-64 / 1024))` = 16.5 tensors) born and kept in
/// one iteration of a loop. `sampled`: the log says it samples.
fn run(sampled: bool) -> Vec<Event> {
    use tensor_lifetime_test_support::events::{iteration_end, loop_end, loop_start, site};
    let mut events = vec![Event::header(1, 0)];
    if sampled {
        events.push(Event::Sampling { interval: 1024 });
    }
    events.push(site(1, "'loop").kind(SiteKind::Loop).into());
    events.push(site(2, "x").into());
    events.push(loop_start(1, 1).into());
    for tensor in 1..=4 {
        events.push(Event::Born {
            t_ns: tensor,
            tensor,
            site: 2,
            frame: Some(1),
            iteration: 0,
            bytes: 64,
            storage: 0x1000 * tensor,
            shape: Some(vec![16]),
            dtype: "f32".into(),
            device: "cpu".into(),
            thread: 1,
        });
    }
    events.push(iteration_end(1, 0).at(10).into());
    events.push(loop_end(1, 1));
    events
}

#[test]
fn a_sampled_log_says_so_in_every_output_and_weighs_its_births() {
    use tensor_lifetime_report::model::sample_weight;
    use tensor_lifetime_report::pprof::{At, LiveReplay};
    let w = sample_weight(1024, 64);
    assert!((w - 16.5).abs() < 0.01, "{w}");
    let reports: Vec<Report> = [false, true]
        .into_iter()
        .map(|sampled| {
            let events = run(sampled);
            let mut analysis = Analysis::default();
            let mut replay = LiveReplay::new(At::End);
            let mut timeline = TimelineBuilder::new(64);
            let mut trace = TraceWriter::new(Vec::new(), &[]).unwrap();
            for e in &events {
                analysis.apply(e);
                replay.apply(e);
                timeline.apply(e);
                trace.apply(e).unwrap();
            }
            let report = analysis.report();
            assert_eq!(report.estimated, sampled);
            assert_eq!(report.sample_interval, sampled.then_some(1024));
            // Each birth stands for its weight: in the live profile (pprof) and in the
            // births per site (the HTML page's table, pprof's allocations).
            let weight = if sampled { w } else { 1.0 };
            let profile = replay.profile("at the end");
            let live = &profile.live[0];
            assert_eq!(live.tensors, (4.0 * weight).round() as u64);
            assert_eq!(live.bytes, (4.0 * 64.0 * weight).round() as u64);
            assert_eq!(replay.live_bytes(), 4 * (64.0 * weight).round() as u64);
            assert_eq!(
                profile
                    .comments
                    .iter()
                    .any(|c| c.starts_with("estimated: ")),
                sampled
            );
            // The births per site round each weight at random, up or down (unbiased).
            let allocated = &profile.allocated[0];
            assert!((allocated.tensors as f64 - 4.0 * weight).abs() < 4.0);
            let stats = &timeline.finish().stats[&2];
            assert_eq!(stats.born, (4.0 * weight).round() as u64);
            assert_eq!(stats.born_bytes, (4.0 * 64.0 * weight).round() as u64);
            assert_eq!(stats.live_bytes, 4 * (64.0 * weight).round() as u64);
            // The trace marks where the sampling starts; Markdown says so under its
            // heading.
            let trace = String::from_utf8(trace.finish().unwrap()).unwrap();
            assert_eq!(trace.contains("\"cat\":\"sampling\""), sampled, "{trace}");
            let parsed: serde_json::Value = serde_json::from_str(&trace).unwrap();
            tensor_lifetime_test_support::trace_check::check_trace(&parsed).unwrap();
            let markdown = tensor_lifetime_report::markdown::report(&report, &Default::default());
            assert_eq!(
                markdown.contains("_estimated: tensors sampled by size (one per 1.0 KiB"),
                sampled,
                "{markdown}"
            );
            report
        })
        .collect();
    // A comparison says which run's figures are estimates.
    let diff = Diff::new(&reports[0], &reports[1]);
    assert!(!diff.base.estimated && diff.new.estimated);
    let text = diff.to_string();
    assert!(
        text.lines().any(|l| l.starts_with("  new ")
            && l.ends_with("(estimated: sampled, one per 1.0 KiB on average)")),
        "{text}"
    );
    assert!(!text
        .lines()
        .any(|l| l.starts_with("  base ") && l.contains("estimated")));
}
