//! The binary format against the JSON lines: the same events back, a cut-off tail read up
//! to its last whole record, corrupt frames and other versions reported.

use super::*;
use crate::event::{read_events, EventReader, MemorySample, ReadError, ReadOutcome, SiteInfo};
use crate::event::{Event, SiteNote, SiteSweep};
use crate::post_mortem::PostMortem;
use crate::roles::{CallFrame, Role, RoleBytes};

fn binary(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = BinaryWriter::new(&mut out);
        for e in events {
            w.write(e).unwrap();
        }
        w.flush().unwrap();
    }
    out
}

fn json_lines(events: &[Event]) -> String {
    let mut out = Vec::new();
    for e in events {
        e.write_line(&mut out).unwrap();
    }
    String::from_utf8(out).unwrap()
}

/// Every event read from `bytes`, with the outcome at the end.
fn read_all(bytes: &[u8]) -> (Vec<Event>, Option<ReadOutcome>, Option<ReadError>) {
    let mut events = Vec::new();
    for outcome in EventReader::new(bytes) {
        match outcome {
            Ok(ReadOutcome::Event { event, line }) => {
                assert_eq!(line, events.len() as u64 + 1, "events are numbered");
                events.push(event);
            }
            Ok(t @ ReadOutcome::Truncated { .. }) => return (events, Some(t), None),
            Err(e) => return (events, None, Some(e)),
        }
    }
    (events, None, None)
}

fn site(id: u32, kind: SiteKind, note: Option<SiteNote>) -> Event {
    Event::Site {
        id,
        info: SiteInfo {
            file: "src/train.rs".into(),
            line: 40 + id,
            column: 9,
            function: "train::run".into(),
            label: format!("x{id} \"é\""),
            kind,
            note,
            // The data flow of every other site (none on the rest).
            from: if id % 2 == 0 {
                vec!["model".into(), format!("x{id}")]
            } else {
                Vec::new()
            },
        },
    }
}

fn born(t_ns: u64, tensor: u64, iteration: u64, storage: u64, shape: Option<Vec<usize>>) -> Event {
    Event::Born {
        t_ns,
        tensor,
        site: 2,
        frame: Some(2),
        iteration,
        bytes: 64,
        storage,
        shape,
        dtype: "f32".into(),
        device: "cpu".into(),
        thread: 1,
    }
}

/// A run with every kind of event, optional fields present and absent, numbers at the
/// extremes and times that go backwards.
fn sample() -> Vec<Event> {
    let mut events = vec![
        Event::rank_header(
            42,
            1_796_203_200_000,
            Some(1),
            Some(4),
            Some("gpu-7".into()),
        ),
        site(1, SiteKind::Loop, None),
        site(
            2,
            SiteKind::Store,
            Some(SiteNote::Evicted {
                line: 51,
                call: "pop_front".into(),
            }),
        ),
        site(
            3,
            SiteKind::Loop,
            Some(SiteNote::Fills {
                holder: "heads".into(),
            }),
        ),
        site(4, SiteKind::Binding, None),
        site(5, SiteKind::Assignment, None),
        site(6, SiteKind::Explicit, None),
        Event::LoopStart {
            t_ns: 1_200,
            frame: 1,
            site: 1,
            name: "'epoch".into(),
            parent: None,
            parent_iteration: None,
            thread: 1,
            session: 0,
            warmup: None,
            window: None,
        },
        Event::LoopStart {
            t_ns: 1_300,
            frame: 2,
            site: 3,
            name: String::new(),
            parent: Some(1),
            parent_iteration: Some(0),
            thread: 2,
            session: 7,
            warmup: Some(3),
            window: Some(u64::MAX),
        },
        Event::CallPath {
            id: 1,
            frames: vec![
                CallFrame {
                    function: "run".into(),
                    file: "src/train.rs".into(),
                    line: 41,
                },
                CallFrame {
                    function: "Dataset::batch".into(),
                    file: "src/train.rs".into(),
                    line: 29,
                },
            ],
        },
    ];
    for i in 0..40u64 {
        events.push(born(
            9_000 + i * 700,
            1 + i,
            i / 4,
            0x7f00_dead_0000 + (i % 5) * 4096,
            Some(vec![16]),
        ));
        if i % 3 == 0 {
            events.push(Event::Dropped {
                t_ns: 9_000 + i * 700 + 10,
                tensor: i,
            });
        }
        if i % 7 == 0 {
            events.push(Event::Stored {
                t_ns: 9_000 + i * 700 + 20,
                tensor: 1 + i,
                site: 2,
            });
            events.push(Event::Alias {
                tensor: i / 2,
                site: 4,
            });
        }
    }
    // Births that change every field the previous one is compared with.
    events.push(Event::Born {
        t_ns: 5,
        tensor: u64::MAX,
        site: u32::MAX,
        frame: None,
        iteration: u64::MAX,
        bytes: u64::MAX,
        storage: 0,
        shape: None,
        dtype: "bf16".into(),
        device: "cuda:0".into(),
        thread: u64::MAX,
    });
    events.push(born(6, 0, 0, u64::MAX, Some(vec![])));
    events.push(born(7, 1, 0, 1, Some(vec![usize::MAX, 1, 4096])));
    events.push(Event::Born {
        t_ns: 8,
        tensor: 2,
        site: 2,
        frame: Some(0),
        iteration: 0,
        bytes: 0,
        storage: 1,
        shape: Some(vec![usize::MAX, 1, 4096]),
        dtype: "f32".into(),
        device: "cuda:0".into(),
        thread: 1,
    });
    events.push(Event::Sampling {
        interval: 512 * 1024,
    });
    let sweep = crate::event::line::tests::sweep;
    events.push(Event::IterationEnd {
        t_ns: 60_000,
        frame: 2,
        iteration: 0,
        duration_ns: 41_000,
        live_tensors: 5,
        live_bytes: 404_000,
        sites: vec![sweep(2, true), sweep(4, false)],
        roles: Role::ALL
            .iter()
            .enumerate()
            .map(|(i, role)| RoleBytes {
                role: *role,
                bytes: i as u64 * 1000,
                tensors: i as u64,
                temporary_bytes: if i % 2 == 0 { 0 } else { 12 },
                temporary_tensors: if i % 3 == 0 { 0 } else { 1 },
            })
            .collect(),
    });
    // Long enough that its frame's length takes two bytes.
    events.push(Event::IterationEnd {
        t_ns: 61_000,
        frame: 2,
        iteration: 1,
        duration_ns: 1_000,
        live_tensors: 0,
        live_bytes: 0,
        sites: (0..20).map(|i| sweep(i, i % 2 == 0)).collect(),
        roles: Vec::new(),
    });
    events.push(Event::Memory {
        t_ns: 62_000,
        device: "cuda:0".into(),
        sample: MemorySample {
            tracked: 1 << 30,
            pool_used: Some(2 << 30),
            pool_reserved: None,
            device_used: Some(3 << 30),
            device_total: Some(80 << 30),
            process_resident: None,
        },
    });
    events.push(Event::PostMortem {
        t_ns: 63_000,
        post_mortem: Box::new(PostMortem {
            reason: "out of memory: CUDA_ERROR_OUT_OF_MEMORY".into(),
            live_tensors: 3,
            live_bytes: 1 << 20,
            ..PostMortem::default()
        }),
    });
    events.push(Event::LoopEnd {
        t_ns: 64_000,
        frame: 2,
        iterations: 2,
    });
    events.push(Event::LoopEnd {
        t_ns: u64::MAX,
        frame: 1,
        iterations: 1,
    });
    events
}

#[test]
fn every_event_reads_back_as_its_json_line() {
    let events = sample();
    let bytes = binary(&events);
    assert_eq!(&bytes[..8], &MAGIC);
    assert_eq!(&bytes[8..10], &[MAJOR_VERSION, MINOR_VERSION]);
    let (read, end, err) = read_all(&bytes);
    assert!(end.is_none() && err.is_none(), "{end:?} {err:?}");
    assert_eq!(read, events);
    assert_eq!(json_lines(&read), json_lines(&events));
    // Smaller than the JSON lines by far.
    assert!(
        bytes.len() * 4 < json_lines(&events).len(),
        "{} bytes",
        bytes.len()
    );
}

#[test]
fn a_steps_events_take_a_few_bytes() {
    let mut w = BinaryWriter::new(Vec::new());
    w.write(&Event::header(1, 2)).unwrap();
    w.write(&born(1_000, 1, 0, 0x7f00_0000_0000, Some(vec![16])))
        .unwrap();
    let before = w.buffered();
    w.write(&born(1_900, 2, 1, 0x7f00_0000_0040, Some(vec![16])))
        .unwrap();
    let born_bytes = w.buffered() - before;
    w.write(&Event::Dropped {
        t_ns: 2_500,
        tensor: 1,
    })
    .unwrap();
    let dropped_bytes = w.buffered() - before - born_bytes;
    // length, tag, time, tensor, site, flags, iteration, bytes, storage.
    assert_eq!(born_bytes, 11, "{:?}", w.buffered());
    // length, tag, time (two bytes), tensor.
    assert_eq!(dropped_bytes, 5);
}

#[test]
fn a_cut_off_tail_reads_up_to_its_last_whole_record() {
    let events = sample();
    let bytes = binary(&events);
    // The end of each event's record.
    let mut ends = Vec::new();
    let mut reader = BinaryReader::new(&bytes[..]);
    while let Some(outcome) = reader.next() {
        assert!(matches!(outcome, Ok(ReadOutcome::Event { .. })));
        ends.push(reader.bytes_read() as usize);
    }
    assert_eq!(ends.len(), events.len());
    for cut in (bytes.len() - 64)..=bytes.len() {
        let (read, end, err) = read_all(&bytes[..cut]);
        assert!(err.is_none(), "cut at {cut}: {err:?}");
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(read, events[..whole], "cut at {cut}");
        if ends.contains(&cut) {
            assert!(end.is_none(), "cut at {cut}, a record's end: {end:?}");
        }
    }
    // And anywhere in the first records, the file header included.
    for cut in 1..200 {
        let (read, _, err) = read_all(&bytes[..cut]);
        assert!(err.is_none(), "cut at {cut}: {err:?}");
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(read, events[..whole], "cut at {cut}");
    }
    // `read_events` says where it stopped.
    let cut = ends[3] + 2;
    let t = read_events(&bytes[..cut], |_| {}).unwrap();
    assert_eq!(t.map(|t| (t.line, t.bytes)), Some((5, 2)));
}

#[test]
fn a_corrupt_frame_is_an_error_naming_its_offset() {
    let events = sample();
    let bytes = binary(&events);
    let mut reader = BinaryReader::new(&bytes[..]);
    reader.next();
    let second = reader.bytes_read() as usize;
    // A frame whose tag no version has.
    let mut bad = bytes.clone();
    bad[second + 1] = 0x7f;
    let (read, _, err) = read_all(&bad);
    assert_eq!(read.len(), 1);
    let err = err.expect("an error");
    assert!(
        matches!(err, ReadError::CorruptFrame { offset, event: 2, .. } if offset == second as u64),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "byte {second}: corrupt record (event 2 of the binary log): an unknown record tag 0x7f"
        )
    );
    // A length beyond any frame.
    let mut bad = bytes[..second].to_vec();
    bad.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x7f]);
    let (_, _, err) = read_all(&bad);
    assert!(err.unwrap().to_string().contains("a frame length of"));
    // A record with bytes left over, and one that ends early.
    for (frame, message) in [
        (&[4u8, tag::DROPPED, 0, 0, 0][..], "1 bytes left over"),
        (&[2, tag::DROPPED, 0][..], "the record ends early"),
        (&[3, tag::ALIAS, 0, 0x80][..], "the record ends early"),
        (&[2, tag::BORN, 0][..], "the record ends early"),
        (&[4, tag::STRING, 0xff, 0xfe, 0][..], "a string"),
    ] {
        let mut bad = bytes[..second].to_vec();
        bad.extend_from_slice(frame);
        let (_, _, err) = read_all(&bad);
        let err = err.unwrap_or_else(|| panic!("{frame:?}: no error"));
        assert!(err.to_string().contains(message), "{frame:?}: {err}");
    }
    // A string referred to before it is declared.
    let mut bad = bytes[..second].to_vec();
    bad.extend_from_slice(&[4, tag::LOOP_END, 0, 1, 1]);
    bad.extend_from_slice(&[5, tag::MEMORY, 0, 9, 0, 0]);
    let (read, _, err) = read_all(&bad);
    assert_eq!(read.len(), 2);
    assert!(err
        .unwrap()
        .to_string()
        .contains("string 9 is not declared"));
}

#[test]
fn other_versions_and_other_files() {
    let bytes = binary(&sample());
    let mut v2 = bytes.clone();
    v2[8] = 2;
    let (_, _, err) = read_all(&v2);
    let err = err.unwrap();
    assert!(matches!(
        err,
        ReadError::BinaryVersion {
            major: 2,
            minor: MINOR_VERSION
        }
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "binary event log format version 2.{MINOR_VERSION} is not supported (this build reads version 1.x)"
        )
    );
    // A log of an earlier minor version (1.0: no `sampling` record) reads as before.
    let exact: Vec<Event> = sample()
        .into_iter()
        .filter(|e| !matches!(e, Event::Sampling { .. }))
        .collect();
    let mut v1_0 = binary(&exact);
    v1_0[9] = 0;
    let (read, _, err) = read_all(&v1_0);
    assert!(err.is_none());
    assert_eq!(read, exact);
    // A sampling interval of 0 bytes says nothing: a corrupt record.
    let mut zero = binary(&[Event::header(1, 2)]);
    zero.extend_from_slice(&[2, tag::SAMPLING, 0]);
    let err = read_all(&zero).2.unwrap().to_string();
    assert!(err.contains("a sampling interval of 0 bytes"), "{err}");
    // A later minor version's record kind is skipped; in this version it is an error.
    let mut header = binary(&[Event::header(1, 2)]);
    header.extend_from_slice(&[3, 0x40, 1, 2]);
    header.extend_from_slice(&[3, tag::DROPPED, 2, 2]);
    let (read_now, _, err) = read_all(&header);
    assert_eq!(read_now.len(), 1);
    assert!(err.unwrap().to_string().contains("unknown record tag 0x40"));
    header[9] = MINOR_VERSION + 1;
    let (read_later, _, err) = read_all(&header);
    assert!(err.is_none());
    assert_eq!(read_later.len(), 2);
    // Not this format: a wrong magic, a first record that is not a header.
    let mut wrong = bytes.clone();
    wrong[3] = b'X';
    assert!(matches!(
        read_all(&wrong).2,
        Some(ReadError::NotALog { line: 1, .. })
    ));
    let mut no_header = MAGIC.to_vec();
    no_header.extend_from_slice(&[MAJOR_VERSION, MINOR_VERSION, 3, tag::DROPPED, 0, 0]);
    let err = read_all(&no_header).2.unwrap();
    assert!(
        err.to_string().contains("the first record is not a header"),
        "{err}"
    );
}

#[test]
fn deltas_round_trip_at_the_extremes() {
    for (now, before) in [
        (0, u64::MAX),
        (u64::MAX, 0),
        (5, 5),
        (1 << 63, 3),
        (3, 1 << 63),
    ] {
        assert_eq!(undo_zigzag_delta(zigzag_delta(now, before), before), now);
    }
    assert_eq!(zigzag_delta(10, 9), 2);
    assert_eq!(zigzag_delta(9, 10), 1);
}

#[test]
fn an_iteration_end_reads_back_at_any_length() {
    let sweep = crate::event::line::tests::sweep;
    let end = |sites: Vec<SiteSweep>| Event::IterationEnd {
        t_ns: 70_000,
        frame: 3,
        iteration: 9,
        duration_ns: 500,
        live_tensors: 4,
        live_bytes: 4_000,
        sites,
        roles: vec![RoleBytes {
            role: Role::Activation,
            bytes: u64::MAX,
            tensors: 4,
            temporary_bytes: 64,
            temporary_tensors: 2,
        }],
    };
    // Written into room made for its longest: no site, a length of one byte; three and
    // forty sites, two bytes (the record moved up by one).
    for n in [0, 3, 40] {
        let events = [
            Event::header(1, 2),
            end((0..n).map(|i| sweep(i, true)).collect()),
        ];
        let bytes = binary(&events);
        let frame = &bytes[binary(&events[..1]).len()..];
        let length_bytes = if n == 0 { 1 } else { 2 };
        assert_eq!(frame[length_bytes - 1] & 0x80, 0, "{n} sites");
        assert_eq!(frame[length_bytes], tag::ITERATION_END, "{n} sites");
        let (read, end, err) = read_all(&bytes);
        assert!(end.is_none() && err.is_none(), "{end:?} {err:?}");
        assert_eq!(read, events);
    }
}

#[test]
fn the_longest_summary_and_role_fit_the_room_made_for_them() {
    use super::encode::{role_bytes, site_sweep, site_sweep_max, ROLE_BYTES_MAX};
    use crate::event::{HolderCount, HolderSpec};
    let most = u64::MAX;
    let s = SiteSweep {
        site: u32::MAX,
        survivors: most,
        bytes: most,
        iterations: most,
        first_iteration: most,
        last_iteration: most,
        refcount: most,
        graph_tensors: most,
        graph_bytes: most,
        view_bytes: most,
        view_storage_bytes: most,
        role: Some(Role::OptimizerState),
        holders: [
            HolderSpec::Store { site: u32::MAX },
            HolderSpec::Graph { site: u32::MAX },
            HolderSpec::View { site: u32::MAX },
            HolderSpec::Unknown,
        ]
        .into_iter()
        .map(|holder| HolderCount {
            holder,
            count: most,
        })
        .collect(),
        call_paths: vec![u32::MAX; 4],
    };
    let mut buf = Vec::new();
    site_sweep(&mut buf, &s);
    assert!(buf.len() <= site_sweep_max(&s), "{} bytes", buf.len());
    buf.clear();
    let r = RoleBytes {
        role: Role::Gradient,
        bytes: most,
        tensors: most,
        temporary_bytes: most,
        temporary_tensors: most,
    };
    role_bytes(&mut buf, &r);
    assert_eq!(buf.len(), ROLE_BYTES_MAX);
}
