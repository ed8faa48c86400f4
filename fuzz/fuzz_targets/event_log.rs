//! Fuzzes the event-log reader and everything the CLI does with what it reads.
//!
//! The input is read two ways, chosen by its first byte:
//!
//! - **raw** (even): the bytes are a log file, as `tensor-lifetime report` reads one; then
//!   the same bytes after the first one, behind a binary log's file header (magic and
//!   version), as a binary log: every input reaches the binary reader's frames too;
//! - **structured** (odd): the bytes are a program of events with small ids and numbers
//!   that include the extremes (0, `u64::MAX`, ...), written as a log with the tracker's
//!   own writers (`Event::write_line` and the binary `BinaryWriter`) and then read back:
//!   both read back event for event, the same events. Random bytes seldom make a JSON
//!   line that is valid *and* meaningful (a loop's iterations going backwards, counts
//!   near `u64::MAX`); this mode makes them all the time. The binary log is also read
//!   cut off at a point the program chooses: it reads up to its last whole record.
//!
//! Either way every event read goes to the judgement (`Analysis`), the memory judgement,
//! the HTML timeline and the trace writer, and the outcome is rendered the ways the CLI
//! renders it: text, JSON, HTML, Chrome trace, diff. Besides not panicking, these are
//! checked: a written log reads back event for event, the JSON report parses back (`diff`
//! reads saved reports) and the trace is valid JSON whatever the log said.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensor_lifetime_report::event::binary::{self, BinaryWriter};
use tensor_lifetime_report::event::{
    EventReader, HolderCount, HolderSpec, MemorySample, ReadOutcome, SiteInfo, SiteSweep,
};
use tensor_lifetime_report::html::{self, HtmlOptions};
use tensor_lifetime_report::trace::TraceWriter;
use tensor_lifetime_report::{
    Analysis, Diff, Event, MemoryFindings, Report, SiteKind, TimelineBuilder,
};

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, program)) if mode % 2 == 1 => {
            let events = decode(program);
            let mut log = Vec::new();
            Event::header(1, 0).write_line(&mut log).unwrap();
            for e in &events {
                e.write_line(&mut log).unwrap();
            }
            let read = judge(&log).expect("a written log reads back");
            assert_eq!(read.len(), events.len() + 1, "every event reads back");

            let mut bin = Vec::new();
            {
                let mut w = BinaryWriter::new(&mut bin);
                w.write(&Event::header(1, 0)).unwrap();
                for e in &events {
                    w.write(e).unwrap();
                }
                w.flush().unwrap();
            }
            let read_bin = judge(&bin).expect("a written binary log reads back");
            assert_eq!(read_bin, read, "the binary log reads back as the JSON lines");
            // Cut off anywhere: no error, a prefix of the events.
            let cut = program.first().map_or(0, |b| *b as usize * bin.len() / 256);
            let read_cut = judge(&bin[..cut]).unwrap_or_default();
            assert!(read_cut.len() <= read.len() && read_cut[..] == read[..read_cut.len()]);
        }
        _ => {
            judge(data);
            let mut bin = binary::MAGIC.to_vec();
            bin.extend_from_slice(&[binary::MAJOR_VERSION, binary::MINOR_VERSION]);
            bin.extend_from_slice(data.get(1..).unwrap_or_default());
            judge(&bin);
        }
    }
});

/// Reads a log and renders it every way the CLI does; the events read, or `None` when
/// the log is refused.
fn judge(data: &[u8]) -> Option<Vec<Event>> {
    let mut analysis = Analysis::default();
    let mut memory = MemoryFindings::default();
    // A small point budget so that downsampling (merging neighbours) is exercised.
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
                // The CLI prints the error: it must format.
                let _ = e.to_string();
                return None;
            }
        }
    }
    let report = analysis.report();
    let _ = report.to_string();
    let json = report.to_json();
    let back: Report = serde_json::from_str(&json).expect("a JSON report parses back");
    let _ = memory.findings(|id| analysis.site(id));

    let page = html::render(
        &timeline.finish(),
        &report,
        &HtmlOptions {
            top_sites: 3,
            ..HtmlOptions::default()
        },
    );
    assert!(page.contains("</html>"));

    let mut writer = TraceWriter::new(Vec::new(), &report.findings).expect("writes to a Vec");
    for event in &events {
        writer.apply(event).expect("writes to a Vec");
    }
    let trace = writer.finish().expect("writes to a Vec");
    serde_json::from_slice::<serde_json::Value>(&trace).expect("the trace is valid JSON");

    let diff = Diff::new(&back, &report);
    let _ = diff.to_string();
    let _ = diff.to_json();
    Some(events)
}

/// Bytes consumed one at a time; zeros once exhausted.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn small(&mut self, n: u8) -> u64 {
        u64::from(self.byte() % n)
    }

    /// A number: mostly small, sometimes large or extreme.
    fn num(&mut self) -> u64 {
        match self.byte() {
            b @ 0..=199 => u64::from(b),
            b @ 200..=239 => u64::from(b - 200) << 20,
            240 => u64::MAX,
            241 => u64::MAX - 1,
            242 => 1 << 63,
            243 => u64::from(u32::MAX),
            244 => u64::from(u32::MAX) + 1,
            245 => (1 << 53) + 1,
            b => u64::from(self.byte()) << (b - 240),
        }
    }

    fn opt(&mut self) -> Option<u64> {
        self.byte().is_multiple_of(3).then(|| self.num())
    }

    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

const LABELS: [&str; 6] = ["x", "'epoch", "self.cache", "total", "", "\"<é>\u{0}"];
const DEVICES: [&str; 4] = ["cpu", "cuda:0", "cuda:1", "metal:0"];

fn decode(program: &[u8]) -> Vec<Event> {
    let mut b = Bytes(program);
    let mut events = Vec::new();
    while !b.done() && events.len() < 512 {
        let t_ns = b.num();
        let event = match b.byte() % 9 {
            0 => Event::Site {
                id: b.small(8) as u32,
                info: SiteInfo {
                    file: ["src/a.rs", "src/b.rs", ""][b.small(3) as usize].to_string(),
                    line: b.num() as u32,
                    column: b.small(80) as u32,
                    function: "f".to_string(),
                    label: LABELS[b.small(6) as usize].to_string(),
                    kind: [
                        SiteKind::Binding,
                        SiteKind::Assignment,
                        SiteKind::Store,
                        SiteKind::Explicit,
                        SiteKind::Loop,
                    ][b.small(5) as usize],
                    note: None,
                    from: Vec::new(),
                },
            },
            1 => Event::LoopStart {
                t_ns,
                frame: b.small(5),
                site: b.small(8) as u32,
                name: LABELS[b.small(6) as usize].to_string(),
                parent: b.byte().is_multiple_of(2).then(|| b.small(5)),
                parent_iteration: b.opt(),
                thread: b.small(4),
                session: b.small(3),
                warmup: b.opt(),
                window: b.opt(),
            },
            2 => Event::Born {
                t_ns,
                tensor: b.small(32),
                site: b.small(8) as u32,
                frame: b.byte().is_multiple_of(2).then(|| b.small(5)),
                iteration: b.num(),
                bytes: b.num(),
                storage: b.small(16),
                shape: b
                    .byte()
                    .is_multiple_of(2)
                    .then(|| vec![b.num() as usize, b.small(4) as usize]),
                dtype: "f32".to_string(),
                device: DEVICES[b.small(4) as usize].to_string(),
                thread: b.small(4),
            },
            3 => Event::Dropped {
                t_ns,
                tensor: b.small(32),
            },
            4 | 5 => {
                let frame = b.small(5);
                let iteration = b.num();
                let mut sites = Vec::new();
                for _ in 0..b.small(4) {
                    let mut holders = Vec::new();
                    for _ in 0..b.small(3) {
                        let site = b.small(8) as u32;
                        let holder = match b.small(4) {
                            0 => HolderSpec::Store { site },
                            1 => HolderSpec::Graph { site },
                            2 => HolderSpec::View { site },
                            _ => HolderSpec::Unknown,
                        };
                        holders.push(HolderCount {
                            holder,
                            count: b.num(),
                        });
                    }
                    sites.push(SiteSweep {
                        site: b.small(8) as u32,
                        survivors: b.num(),
                        bytes: b.num(),
                        iterations: b.num(),
                        first_iteration: b.num(),
                        last_iteration: b.num(),
                        refcount: b.num(),
                        holders,
                        graph_tensors: b.num(),
                        graph_bytes: b.num(),
                        view_bytes: b.num(),
                        view_storage_bytes: b.num(),
                        role: None,
                        call_paths: Vec::new(),
                    });
                }
                Event::IterationEnd {
                    t_ns,
                    frame,
                    iteration,
                    duration_ns: b.num(),
                    live_tensors: b.num(),
                    live_bytes: b.num(),
                    sites,
                    roles: Vec::new(),
                }
            }
            6 => Event::LoopEnd {
                t_ns,
                frame: b.small(5),
                iterations: b.num(),
            },
            7 => Event::Memory {
                t_ns,
                device: DEVICES[b.small(4) as usize].to_string(),
                sample: MemorySample {
                    tracked: b.num(),
                    pool_used: b.opt(),
                    pool_reserved: b.opt(),
                    device_used: b.opt(),
                    device_total: b.opt(),
                    process_resident: b.opt(),
                },
            },
            _ => match b.byte() % 3 {
                // Sampled from here on: every later birth weighs more (any interval but 0,
                // which a reader refuses).
                2 => Event::Sampling {
                    interval: b.num().max(1),
                },
                0 => Event::Alias {
                    tensor: b.small(32),
                    site: b.small(8) as u32,
                },
                _ => Event::Stored {
                    t_ns,
                    tensor: b.small(32),
                    site: b.small(8) as u32,
                },
            },
        };
        events.push(event);
    }
    events
}
