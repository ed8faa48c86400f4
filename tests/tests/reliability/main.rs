//! The reliability matrix: nineteen leaky and twenty-two clean training and serving loops
//! (`cases.rs`, `serving.rs`),
//! each judged in its own leak session (`check_leaks`), with the expected outcome
//! asserted: every leak found at its site (file, line, label), with its kind and its
//! bytes; no `leak` finding (and no tensor left alive) for the clean ones.
//! `matrix_of_leaks_and_clean_loops` prints the summary line
//! (`matrix (seed ...): 19/19 leaks found, 0/22 false alarms`).
//!
//! One table ([`MATRIX`]) says, per case, how to run it and what it must show; the matrix
//! runs every row, and the `leak_test_*` tests run a few rows under a real
//! `#[leak_test]` (the leaky ones fail it, the clean ones pass it).
//!
//! The cases take a lock so they run one at a time: tensors born on a loader thread with
//! no loop of its own belong to the process's primary loop, whichever test opened it.

pub mod cases;
mod sampled;
pub mod serving;

use candle_core::{Result, Storage, Tensor};
use cases::*;
use serving::*;
use std::collections::HashSet;
use tensor_lifetime::{FindingKind, LeakTestOutcome};
use tensor_lifetime_tests::fixtures::{CLASSES, FEATURES, FIXTURES, HIDDEN};
use tensor_lifetime_tests::{in_session, serial, Source};

/// One row of the matrix: a case, how to run it and what it must show.
struct Case {
    /// Its name, in the summary and in failures.
    name: &'static str,
    /// What the seed is mixed with to draw its parameters (`params`).
    key: &'static str,
    /// Runs the case; returns what the expectation or `after` needs (the bytes of the
    /// graph L3 and L17 return, how many messages L9's logger handled, C8's epochs).
    run: fn(Params) -> Result<u64>,
    /// Run after the session: checks the value `run` returned, releases what a global
    /// kept.
    after: fn(&Params, u64),
    verdict: Verdict,
}

impl Case {
    fn is_leaky(&self) -> bool {
        matches!(self.verdict, Verdict::Leak(_))
    }
}

/// What a case must show.
enum Verdict {
    /// The leak expected of the case's parameters and of the value its run returned.
    Leak(fn(&Params, u64) -> Leak),
    /// No leak finding, no tensor left alive, the leak test passes.
    Clean,
}

/// A leak case's expected finding.
struct Leak {
    /// The file of the creation site and the marker comment on its line.
    source: Source,
    marker: &'static str,
    label: &'static str,
    kind: FindingKind,
    survivors: u64,
    bytes: u64,
    /// The holder's label, when the tracker can see it (a store site).
    holder: Option<&'static str>,
    /// Tensors still alive after the test (a global, a cycle): the leak test also lists
    /// them as `ALIVE`.
    alive_after: u64,
}

impl Leak {
    /// A leak at `marker` of `cases.rs` with `label`, of kind `leak`, with `survivors`
    /// tensors of `bytes` in all, held by `holder`, none alive after the test.
    fn at(marker: &'static str, label: &'static str, survivors: u64, bytes: u64) -> Leak {
        Leak {
            source: CASES,
            marker,
            label,
            kind: FindingKind::Leak,
            survivors,
            bytes,
            holder: None,
            alive_after: 0,
        }
    }

    fn held_by(self, holder: &'static str) -> Leak {
        Leak {
            holder: Some(holder),
            ..self
        }
    }

    fn kind(self, kind: FindingKind) -> Leak {
        Leak { kind, ..self }
    }

    fn alive_after(self, alive_after: u64) -> Leak {
        Leak {
            alive_after,
            ..self
        }
    }
}

/// Nothing to do after the session.
fn nothing(_: &Params, _: u64) {}

/// Bytes of `n` activations of the hidden layer.
fn hidden_bytes(p: &Params, n: usize) -> u64 {
    (n * p.rows * HIDDEN * 4) as u64
}

/// Every case of the matrix. The keys are the ones the seed has always been mixed with,
/// so a seed draws the same parameters as before.
const MATRIX: &[Case] = &[
    Case {
        name: "l1_dataset_cache",
        key: "l1",
        run: |p| l1_dataset_cache(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            Leak::at(
                "// matrix: L1 cached batch",
                "x",
                steps,
                steps * batch_bytes(p),
            )
            .held_by("self.cache")
        }),
    },
    Case {
        name: "l2_memo_by_step",
        key: "l2",
        run: |p| l2_memo_by_step(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let bytes = hidden_bytes(p, p.steps);
            Leak::at(
                "// matrix: L2 memo features",
                "features",
                p.steps as u64,
                bytes,
            )
            .held_by("memo")
        }),
    },
    // The graph `total` holds at the end: every tensor in it but the parameters, each
    // storage once (what the finding's bytes are); measured before `total` drops. Each
    // step's `total` lives on in the next one's graph.
    Case {
        name: "l3_running_loss",
        key: "l3",
        run: |p| l3_running_loss(p).map(|t| graph_storage_bytes(&t)),
        after: nothing,
        verdict: Verdict::Leak(|p, graph_bytes| {
            Leak::at(
                "// matrix: L3 running total",
                "total",
                p.steps as u64,
                graph_bytes,
            )
            .kind(FindingKind::GraphRetention)
            .held_by("total")
        }),
    },
    // L3's graph, and each step's batch `x` that its first op holds (the targets `y` are
    // read through a view, which the graph holds instead of `y`).
    Case {
        name: "l17_running_loss_with_batches",
        key: "l17",
        run: |p| l17_running_loss_with_batches(p).map(|t| graph_storage_bytes(&t)),
        after: nothing,
        verdict: Verdict::Leak(|p, graph_bytes| {
            let steps = p.steps as u64;
            let bytes = graph_bytes + steps * batch_bytes(p);
            Leak::at("// matrix: L17 running total", "total", steps, bytes)
                .kind(FindingKind::GraphRetention)
                .held_by("total")
        }),
    },
    // The rows are tiny; the batches they pin are what the leak costs.
    Case {
        name: "l4_first_rows",
        key: "l4",
        run: |p| l4_first_rows(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            Leak::at(
                "// matrix: L4 first row",
                "row",
                steps,
                steps * batch_bytes(p),
            )
            .kind(FindingKind::ViewRetention)
            .held_by("first_rows")
        }),
    },
    // A global cache is caught twice: as a growing site of the loop, and as tensors
    // still alive after the test (the global outlives it).
    Case {
        name: "l5_global_cache",
        key: "l5",
        run: |p| l5_global_cache(p).map(|_| 0),
        after: |_, _| global_cache().clear(),
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            let bytes = hidden_bytes(p, p.steps);
            Leak::at("// matrix: L5 global embedding", "embedding", steps, bytes)
                .held_by("global_cache()")
                .alive_after(steps)
        }),
    },
    // Likewise the thread-local cache (the test's thread is still running).
    Case {
        name: "l6_thread_local_cache",
        key: "l6",
        run: |p| l6_thread_local_cache(p).map(|_| 0),
        after: |_, _| THREAD_CACHE.with(|c| c.borrow_mut().clear()),
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            let bytes = (p.steps * FEATURES * 4) as u64;
            Leak::at(
                "// matrix: L6 thread-local stats",
                "column_means",
                steps,
                bytes,
            )
            .held_by("cache")
            .alive_after(steps)
        }),
    },
    // The cycle is never freed: alive after the test too. Nothing the tracker saw
    // stored it (the node is not a tensor type), so the holder is unknown.
    Case {
        name: "l7_rc_cycle",
        key: "l7",
        run: |p| l7_rc_cycle(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            let bytes = hidden_bytes(p, p.steps);
            Leak::at("// matrix: L7 cycle state", "hidden", steps, bytes).alive_after(steps)
        }),
    },
    Case {
        name: "l8_closure_callbacks",
        key: "l8",
        run: |p| l8_closure_callbacks(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let bytes = (p.steps * FEATURES * 4) as u64;
            Leak::at(
                "// matrix: L8 captured scale",
                "scale",
                p.steps as u64,
                bytes,
            )
        }),
    },
    // The backlog is freed when the channel closes at the end of the function, so it is
    // caught as a loop leak only.
    Case {
        name: "l9_unbounded_channel",
        key: "l9",
        run: |p| l9_unbounded_channel(p).map(|handled| handled as u64),
        after: |p, handled| assert_eq!(handled, (p.steps / 3) as u64),
        verdict: Verdict::Leak(|p, _| {
            let backlog = l9_backlog(p.steps);
            let bytes = backlog * hidden_bytes(p, 1);
            Leak::at(
                "// matrix: L9 queued activations",
                "activations",
                backlog,
                bytes,
            )
        }),
    },
    Case {
        name: "l10_kept_gradients",
        key: "l10",
        run: |p| l10_kept_gradients(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let bytes = (p.steps * HIDDEN * FEATURES * 4) as u64;
            Leak::at(
                "// matrix: L10 kept gradient",
                "grads",
                p.steps as u64,
                bytes,
            )
            .held_by("history")
        }),
    },
    // 4 parameters per epoch.
    Case {
        name: "l11_epoch_snapshots",
        key: "l11",
        run: |p| l11_epoch_snapshots(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            Leak::at(
                "// matrix: L11 epoch snapshot",
                "snapshot",
                4 * steps,
                steps * PARAM_BYTES,
            )
            .held_by("snapshots")
        }),
    },
    Case {
        name: "l12_activation_log",
        key: "l12",
        run: |p| l12_activation_log(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let bytes = hidden_bytes(p, p.steps);
            Leak::at(
                "// matrix: L12 logged activations",
                "logged",
                p.steps as u64,
                bytes,
            )
            .held_by("log.buffer")
        }),
    },
    Case {
        name: "l13_struct_literal_store",
        key: "l13",
        run: |p| l13_struct_literal_store(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            let bytes = steps * batch_bytes(p);
            Leak::at(
                "// matrix: L13 literal state",
                "Transition.state",
                steps,
                bytes,
            )
            .held_by("kept")
        }),
    },
    // The site is the fixtures' (`keep_transitions`).
    Case {
        name: "l14_constructor_store",
        key: "l14",
        run: |p| l14_constructor_store(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let steps = p.steps as u64;
            Leak {
                source: FIXTURES,
                ..Leak::at(
                    "// fixtures: log state",
                    "state",
                    steps,
                    steps * batch_bytes(p),
                )
            }
            .held_by("self.kept")
        }),
    },
    Case {
        name: "l15_decoding_kept_caches",
        key: "l15",
        run: |p| decoding(p, true).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let kept = (p.steps * TOKENS) as u64;
            let bytes = kept * (FEATURES * 4) as u64;
            Leak::at("// matrix: L15 kv entry", "kv", kept, bytes).held_by("self.caches")
        }),
    },
    Case {
        name: "l16_async_server_kept_caches",
        key: "l16",
        run: |p| async_decoding(p, true).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|p, _| {
            let kept = (p.steps * TOKENS) as u64;
            let bytes = kept * (FEATURES * 4) as u64;
            Leak::at("// matrix: L16 async kv entry", "kv", kept, bytes).held_by("self.caches")
        }),
    },
    // One cache for every request, replaced by a larger one at every token: one
    // survivor, 300 positions after 25 requests of 12 tokens.
    Case {
        name: "l18_kv_cache_never_reset",
        key: "l18",
        run: |p| l18_kv_cache_never_reset(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Leak(|_, _| {
            let bytes = (REQUESTS * REQUEST_TOKENS) as u64 * POSITION_BYTES;
            Leak {
                source: SERVING,
                ..Leak::at("// matrix: L18 kv cache", "cache", 1, bytes)
            }
            .kind(FindingKind::GrowingTensor)
            .held_by("cache")
        }),
    },
    // Every epoch's predictions concatenated onto one tensor never reset.
    Case {
        name: "l19_running_concatenation_never_reset",
        key: "l19",
        run: |p| running_concatenation(p, false).map(|rows| rows as u64),
        after: |p, rows| assert_eq!(rows, (p.steps * EPOCH_STEPS * p.rows) as u64),
        verdict: Verdict::Leak(|_, rows| {
            let bytes = rows * (CLASSES * 4) as u64;
            Leak {
                source: SERVING,
                ..Leak::at("// matrix: L19 all preds", "all_preds", 1, bytes)
            }
            .kind(FindingKind::GrowingTensor)
            .held_by("all_preds")
        }),
    },
    Case {
        name: "c1_lazy_optimizer_state",
        key: "c1",
        run: |p| c1_lazy_optimizer_state(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c2_best_checkpoint",
        key: "c2",
        run: |p| c2_best_checkpoint(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c3_loss_ema",
        key: "c3",
        run: |p| c3_loss_ema(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c4_recent_losses",
        key: "c4",
        run: |p| c4_recent_losses(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c5_prefetch_queue",
        key: "c5",
        run: |p| c5_prefetch_queue(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c6_gradient_accumulation",
        key: "c6",
        run: |p| c6_gradient_accumulation(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c7_detached_metrics",
        key: "c7",
        run: |p| c7_detached_metrics(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    // Two improving epochs, then three without improvement: it stops early.
    Case {
        name: "c8_early_stopping",
        key: "c8",
        run: |p| c8_early_stopping(p).map(|epochs| epochs as u64),
        after: |p, epochs| assert!(epochs < 3 * p.steps as u64, "early stopping never stopped"),
        verdict: Verdict::Clean,
    },
    Case {
        name: "c9_construction_4",
        key: "c9_construction_4",
        run: |p| c_construction(p, 4).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c10_construction_32",
        key: "c10_construction_32",
        run: |p| c_construction(p, 32).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c11_construction_80",
        key: "c11_construction_80",
        run: |p| c_construction(p, 80).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c12_replay_below_capacity",
        key: "c12",
        run: |p| c_replay(p, 100_000, 40 * p.steps).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c13_replay_above_capacity",
        key: "c13",
        run: |p| c_replay(p, 8, 40 * p.steps).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c14_optimizer_history",
        key: "c14",
        run: |p| c_optimizer_history(p, 100).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c15_decoding_per_request_cache",
        key: "c15",
        run: |p| decoding(p, false).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c16_async_server_per_request_cache",
        key: "c16",
        run: |p| async_decoding(p, false).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c17_preallocated_cache",
        key: "c17",
        run: |p| c17_preallocated_cache(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c18_per_request_cache",
        key: "c18",
        run: |p| c18_per_request_cache(p).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c19_running_concatenation_reset_per_epoch",
        key: "c19",
        run: |p| running_concatenation(p, true).map(|rows| rows as u64),
        after: |p, rows| assert_eq!(rows, (EPOCH_STEPS * p.rows) as u64),
        verdict: Verdict::Clean,
    },
    Case {
        name: "c20_builder_built_model",
        key: "c20",
        run: |p| serve_built_model(p, Build::Builder, 4).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c21_collected_model",
        key: "c21",
        run: |p| serve_built_model(p, Build::Collected, 4).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
    Case {
        name: "c22_model_loaded_into_a_map",
        key: "c22",
        run: |p| serve_built_model(p, Build::Map, 4).map(|_| 0),
        after: nothing,
        verdict: Verdict::Clean,
    },
];

/// The row of the table named `name`.
fn case(name: &str) -> &'static Case {
    MATRIX
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case `{name}` in the matrix"))
}

/// Runs `case` in its own session (the caller holds the lock); returns what differed from
/// its verdict (empty: as expected).
fn judge(case: &Case) -> Vec<String> {
    let p = params(case.key);
    let (value, outcome) = in_session(|| (case.run)(p));
    (case.after)(&p, value);
    match case.verdict {
        Verdict::Leak(want) => check_leak(case.name, &want(&p, value), &outcome),
        Verdict::Clean => check_clean(case.name, &outcome),
    }
}

/// Checks `outcome` against `want`; returns the differences (empty: found as expected).
fn check_leak(name: &str, want: &Leak, outcome: &LeakTestOutcome) -> Vec<String> {
    let mut errors = Vec::new();
    let (file, line) = (want.source.file, want.source.line(want.marker));
    let Some(f) = outcome
        .report
        .findings
        .iter()
        .find(|f| f.site.file == file && f.site.line == line && f.site.label == want.label)
    else {
        return vec![format!(
            "no finding at {file}:{line} `{}`:\n{}",
            want.label, outcome.report
        )];
    };
    let mut expect = |what: &str, ok: bool, got: String| {
        if !ok {
            errors.push(format!("{what}: got {got}"));
        }
    };
    expect("a leak", f.is_leak(), format!("{:?}", f.kind));
    expect("kind", f.kind == want.kind, format!("{:?}", f.kind));
    expect(
        "survivors",
        f.survivors == want.survivors,
        f.survivors.to_string(),
    );
    expect("bytes", f.bytes == want.bytes, f.bytes.to_string());
    expect(
        "growth per iteration",
        f.bytes_per_iteration > 0,
        f.bytes_per_iteration.to_string(),
    );
    if let Some(holder) = want.holder {
        expect(
            "holder",
            f.holders.iter().any(|h| h.label.as_deref() == Some(holder)),
            format!("{:?}", f.holders),
        );
    }
    expect("the leak test fails", outcome.failed(), "passed".into());
    let message = outcome.message(name);
    expect(
        "the failure names the site",
        message.contains(&format!("{file}:{line}")),
        message.clone(),
    );
    let alive = outcome.alive.iter().filter(|t| t.site.line == line).count() as u64;
    expect(
        "alive after the test",
        alive == want.alive_after && outcome.alive.len() as u64 == want.alive_after,
        format!("{} ({} in all)", alive, outcome.alive.len()),
    );
    // One leak, one finding that is a leak: nothing else in the loop is blamed.
    let others: Vec<String> = outcome
        .report
        .leaks()
        .filter(|o| o.site.line != line)
        .map(|o| format!("{} `{}`", o.site.location(), o.site.label))
        .collect();
    expect("no other leak", others.is_empty(), others.join(", "));
    errors
}

/// What is wrong with a clean case's outcome (empty: clean).
fn check_clean(name: &str, outcome: &LeakTestOutcome) -> Vec<String> {
    let mut errors = Vec::new();
    if outcome.report.has_leaks() || !outcome.alive.is_empty() || outcome.failed() {
        errors.push(outcome.message(name));
    }
    errors
}

/// Storage bytes of the tensors in `t`'s autograd graph (itself included, parameters
/// excluded), each storage once.
fn graph_storage_bytes(t: &Tensor) -> u64 {
    let mut seen = HashSet::new();
    let mut bytes = 0;
    for node in t.sorted_nodes() {
        if node.is_variable() {
            continue;
        }
        let (storage, _) = node.storage_and_layout();
        if seen.insert(&*storage as *const Storage as usize) {
            bytes += match &*storage {
                Storage::Cpu(candle_core::CpuStorage::F32(v)) => v.len() as u64 * 4,
                Storage::Cpu(candle_core::CpuStorage::U32(v)) => v.len() as u64 * 4,
                Storage::Cpu(candle_core::CpuStorage::I64(v)) => v.len() as u64 * 8,
                other => panic!("unexpected storage {:?}", other.dtype()),
            };
        }
    }
    bytes
}

#[test]
fn matrix_of_leaks_and_clean_loops() {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = serial();
    let results: Vec<(&Case, Vec<String>)> = MATRIX.iter().map(|c| (c, judge(c))).collect();
    let leaks = results.iter().filter(|(c, _)| c.is_leaky()).count();
    let clean = results.len() - leaks;
    let found = results
        .iter()
        .filter(|(c, e)| c.is_leaky() && e.is_empty())
        .count();
    let false_alarms = results
        .iter()
        .filter(|(c, e)| !c.is_leaky() && !e.is_empty())
        .count();
    let summary = format!(
        "matrix (seed {:#x}): {found}/{leaks} leaks found, {false_alarms}/{clean} false alarms",
        matrix_seed(),
    );
    println!("{summary}");
    let mut problems = String::new();
    for (case, errors) in &results {
        for e in errors {
            problems.push_str(&format!("{}: {e}\n", case.name));
        }
    }
    assert!(leaks >= 16 && clean >= 16);
    assert!(problems.is_empty(), "{summary}\n{problems}");
}

// ---------------------------------------------------------------------------------------
// Rows of the table under a real `#[leak_test]`.

/// The body of a leak test running case `name` of the table, one test at a time.
fn leak_test_body(name: &str) -> Result<()> {
    let _serial = serial();
    let case = case(name);
    (case.run)(params(case.key)).map(drop)
}

#[tensor_lifetime::leak_test]
#[should_panic(expected = "LEAK     tests/tests/reliability/cases.rs:")]
fn leak_test_fails_on_a_dataset_cache() {
    leak_test_body("l1_dataset_cache").unwrap();
}

#[tensor_lifetime::leak_test]
#[should_panic(expected = "LEAK     tests/tests/reliability/cases.rs:")]
fn leak_test_fails_on_a_running_loss() {
    leak_test_body("l3_running_loss").unwrap();
}

#[tensor_lifetime::leak_test]
#[should_panic(expected = "ALIVE    tests/tests/reliability/cases.rs:")]
fn leak_test_fails_on_an_rc_cycle() {
    leak_test_body("l7_rc_cycle").unwrap();
}

#[tensor_lifetime::leak_test]
#[should_panic(expected = "LEAK     tests/tests/reliability/serving.rs:")]
fn leak_test_fails_on_a_kv_cache_never_reset() {
    leak_test_body("l18_kv_cache_never_reset").unwrap();
}

#[tensor_lifetime::leak_test]
fn leak_test_passes_a_builder_built_model() -> Result<()> {
    leak_test_body("c20_builder_built_model")
}

#[tensor_lifetime::leak_test]
fn leak_test_passes_lazy_optimizer_state() -> Result<()> {
    leak_test_body("c1_lazy_optimizer_state")
}

#[tensor_lifetime::leak_test]
fn leak_test_passes_a_prefetch_queue() -> Result<()> {
    leak_test_body("c5_prefetch_queue")
}

#[tensor_lifetime::leak_test]
fn leak_test_passes_gradient_accumulation() -> Result<()> {
    leak_test_body("c6_gradient_accumulation")
}
