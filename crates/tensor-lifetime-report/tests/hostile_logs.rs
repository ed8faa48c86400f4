//! Event logs are input: a corrupt or hand-made one must not crash the CLI. Every
//! renderer gets what the `event_log` fuzz target (fuzz/fuzz_targets/event_log.rs) gives
//! it, on stable Rust and in the normal test run:
//!
//! - the fuzz corpus (`fuzz/corpus/event_log/`), replayed file by file, each file also
//!   as the frames of a binary log (as the target's raw mode reads it);
//! - a log with the extreme numbers that made the renderers panic when the fuzz target
//!   first ran (byte counts and sizes near `u64::MAX` added up in the timeline, the chart
//!   and the memory judgement; times near `u64::MAX` on the chart's time axis).

use std::path::Path;
use tensor_lifetime_report::event::{
    binary, EventReader, HolderCount, HolderSpec, MemorySample, ReadOutcome, SiteInfo, SiteSweep,
};
use tensor_lifetime_report::html::{self, HtmlOptions};
use tensor_lifetime_report::trace::TraceWriter;
use tensor_lifetime_report::{
    Analysis, Diff, Event, MemoryFindings, Report, SiteKind, TimelineBuilder,
};

/// What the CLI does with a log, every command; panics only on a broken property.
fn every_command(data: &[u8]) {
    let mut analysis = Analysis::default();
    let mut memory = MemoryFindings::default();
    let mut timeline = TimelineBuilder::new(16);
    let mut events = Vec::new();
    for outcome in EventReader::new(data) {
        match outcome {
            Ok(ReadOutcome::Event { event, .. }) => {
                analysis.apply(&event);
                memory.apply(&event);
                timeline.apply(&event);
                events.push(event);
            }
            Ok(ReadOutcome::Truncated { .. }) => break,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        }
    }
    let report = analysis.report();
    let _ = report.to_string();
    let back: Report = serde_json::from_str(&report.to_json()).expect("the report parses back");
    let _ = memory.findings(|id| analysis.site(id));
    let page = html::render(&timeline.finish(), &report, &HtmlOptions::default());
    assert!(page.contains("</html>"));
    let mut writer = TraceWriter::new(Vec::new(), &report.findings).unwrap();
    for e in &events {
        writer.apply(e).unwrap();
    }
    let trace = writer.finish().unwrap();
    serde_json::from_slice::<serde_json::Value>(&trace).expect("the trace is JSON");
    let diff = Diff::new(&back, &report);
    let _ = diff.to_string();
}

#[test]
fn the_fuzz_corpus_replays_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/event_log");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("the committed fuzz corpus") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| every_command(&data));
        assert!(outcome.is_ok(), "{} panicked", path.display());
        // As the fuzz target's raw mode does: the bytes after the first as a binary log.
        let mut binary_log = binary::MAGIC.to_vec();
        binary_log.extend_from_slice(&[binary::MAJOR_VERSION, binary::MINOR_VERSION]);
        binary_log.extend_from_slice(data.get(1..).unwrap_or_default());
        let outcome = std::panic::catch_unwind(|| every_command(&binary_log));
        assert!(
            outcome.is_ok(),
            "{} as a binary log panicked",
            path.display()
        );
        files += 1;
    }
    assert!(files > 10, "{files} files in {}", dir.display());
}

#[test]
fn extreme_numbers_do_not_panic() {
    every_command(&extreme_log(|t| t));
    // Every event at the last representable time: the chart's time axis overflowed.
    every_command(&extreme_log(|_| u64::MAX));
}

/// A log whose numbers are at the extremes; `time` maps each event's time.
fn extreme_log(time: fn(u64) -> u64) -> Vec<u8> {
    const MAX: u64 = u64::MAX;
    let mut log = Vec::new();
    let mut write = |e: Event| e.write_line(&mut log).unwrap();
    write(Event::header(1, 0));
    for (id, kind) in [
        (1, SiteKind::Loop),
        (2, SiteKind::Binding),
        (3, SiteKind::Store),
    ] {
        write(Event::Site {
            id,
            info: SiteInfo {
                file: "src/train.rs".into(),
                line: u32::MAX,
                column: 1,
                function: "train".into(),
                label: "x".into(),
                kind,
                note: None,
                from: Vec::new(),
            },
        });
    }
    write(Event::LoopStart {
        t_ns: time(MAX - 10),
        frame: 1,
        site: 1,
        name: "'epoch".into(),
        parent: None,
        parent_iteration: None,
        thread: 1,
        session: 0,
        warmup: Some(MAX),
        window: Some(MAX),
    });
    for (tensor, site) in [(1, 2), (2, 2), (3, 3)] {
        write(Event::Born {
            t_ns: time(0),
            tensor,
            site,
            frame: Some(1),
            iteration: MAX,
            bytes: MAX,
            storage: tensor,
            shape: Some(vec![usize::MAX, 2]),
            dtype: "f32".into(),
            device: "cuda:0".into(),
            thread: 1,
        });
    }
    for iteration in [0, MAX - 1, MAX] {
        let sweep = |site| SiteSweep {
            site,
            survivors: MAX,
            bytes: MAX,
            iterations: MAX,
            first_iteration: MAX,
            last_iteration: 0,
            refcount: MAX,
            holders: vec![HolderCount {
                holder: HolderSpec::Graph { site },
                count: MAX,
            }],
            graph_tensors: MAX,
            graph_bytes: MAX,
            view_bytes: MAX,
            view_storage_bytes: MAX,
            role: None,
            call_paths: vec![u32::MAX],
        };
        write(Event::IterationEnd {
            t_ns: time(MAX - iteration),
            frame: 1,
            iteration,
            duration_ns: MAX,
            live_tensors: MAX,
            live_bytes: MAX,
            sites: vec![sweep(2), sweep(3)],
            roles: Vec::new(),
        });
        for (tracked, used) in [(0, MAX), (MAX, 0), (MAX, MAX)] {
            write(Event::Memory {
                t_ns: time(iteration),
                device: "cuda:0".into(),
                sample: MemorySample {
                    tracked,
                    pool_used: Some(used),
                    pool_reserved: Some(MAX),
                    device_used: Some(MAX),
                    device_total: Some(0),
                    process_resident: Some(MAX),
                },
            });
        }
    }
    write(Event::Dropped {
        t_ns: time(0),
        tensor: 1,
    });
    write(Event::LoopEnd {
        t_ns: time(0),
        frame: 1,
        iterations: MAX,
    });
    log
}
