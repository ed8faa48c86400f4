//! The sampled mode against the reliability matrix, over 100 sampling seeds: every leak
//! found within the documented bound (`tensor_lifetime::sample::detection_bound`) in at
//! least 99 seeds, no clean row judged leaking in any seed, and the estimated bytes of a
//! leak after 20 iterations within 25% of the exact figure (median over the seeds).
//!
//! A leak through an autograd graph (L3, L17: a running loss) counts as found when it is
//! named at the graph's root or, when the latest root was not sampled, at the sites of
//! the tensors the graph keeps (reported as leaks there); its estimate is compared when
//! it is named at the root.
//!
//! Each run is judged in a session of its own whose tensors are sampled
//! (`check_leaks_sampled`; a leak test is always exact). The interval is 4 bytes, one
//! `f32`: at most the own bytes of every tensor the matrix's leaks keep per iteration, so
//! every row is a leak of at least the interval per iteration (a scalar running loss is
//! sampled with probability 0.63, a batch almost surely), and its bound is the one at
//! `L = interval`: the warm-up plus 10 iterations. The bound scales with interval / L,
//! so a test at 4 bytes stands for one at 512 KiB with leaks of 512 KiB per iteration.
//!
//! The process is the test's alone: the sampling is process-wide.

use super::*;
use tensor_lifetime::leak_test::check_leaks_sampled;
use tensor_lifetime::sample::detection_bound;
use tensor_lifetime::{set_sample_seed, set_sampling, LeakTestOptions, Sampling};

/// Seeds (`TL_SAMPLED_SEEDS` overrides it, to look at a row quickly).
fn seeds() -> u64 {
    std::env::var("TL_SAMPLED_SEEDS").map_or(100, |s| s.parse().expect("a number"))
}
const INTERVAL: u64 = 4;

/// Iterations after which the estimated bytes are compared with the exact ones.
const ESTIMATE_AFTER: usize = 20;

/// Runs `case` with `steps` iterations in a sampled session; returns its parameters, the
/// value its run returned and the outcome.
fn run_sampled(case: &Case, steps: usize) -> (Params, u64, LeakTestOutcome) {
    let p = Params {
        steps,
        ..params(case.key)
    };
    let (value, outcome) =
        check_leaks_sampled(LeakTestOptions::default(), || (case.run)(p)).expect("tracking is on");
    let value = value.expect("the case runs");
    (case.after)(&p, value);
    (p, value, outcome)
}

/// The leak finding of `want` in `outcome`, if it was found.
fn found<'a>(want: &Leak, outcome: &'a LeakTestOutcome) -> Option<&'a tensor_lifetime::Finding> {
    let (file, line) = (want.source.file, want.source.line(want.marker));
    outcome.report.findings.iter().find(|f| {
        f.site.file == file && f.site.line == line && f.site.label == want.label && f.is_leak()
    })
}

#[test]
fn sampled_mode_finds_every_leak_of_the_matrix_within_the_bound_in_99_of_100_seeds() {
    let test = tensor_lifetime_tests::process::test_name(
        module_path!(),
        "sampled_mode_finds_every_leak_of_the_matrix_within_the_bound_in_99_of_100_seeds",
    );
    if let Ok(row) = std::env::var("TL_SAMPLED_ROW") {
        // A child: one row, alone in its process.
        return judge_sampled(case(&row));
    }
    // Each row in a child process of its own: a session's loops stay in the judgement
    // for the process's life, and 3 300 of them in one would slow every report.
    let mut failed = Vec::new();
    for case in MATRIX.iter() {
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", &test, "--nocapture", "--test-threads", "1"])
            .env("TL_SAMPLED_ROW", case.name)
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in stdout.lines().filter(|l| l.starts_with(case.name)) {
            println!("{line}");
        }
        if !out.status.success() || !stdout.contains("test result: ok. 1 passed") {
            failed.push(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Runs `case` for every seed, sampled; panics naming what it missed.
fn judge_sampled(case: &Case) {
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = serial();
    #[allow(non_snake_case)]
    let SEEDS = seeds();
    set_sampling(Sampling::Interval(INTERVAL));
    let bound = detection_bound(INTERVAL, INTERVAL, 0.99) as usize;
    assert_eq!(bound, 11, "the warm-up and 10 iterations at L = interval");
    let mut problems = Vec::new();
    let mut summary = Vec::new();
    {
        let (mut hits, mut alarms, mut errors) = (0u64, 0u64, Vec::new());
        let started = std::time::Instant::now();
        for seed in 0..SEEDS {
            set_sample_seed(seed);
            let (p, value, outcome) = run_sampled(case, bound);
            match &case.verdict {
                Verdict::Leak(want) => {
                    let want_now = want(&p, value);
                    // A leak through an autograd graph (a running loss) is named at the
                    // graph's root site when the latest root is sampled; when it is not,
                    // the tensors the graph keeps are reported as leaks at their own sites:
                    // the leak is found, under other names.
                    let through_graph =
                        want_now.kind == FindingKind::GraphRetention && outcome.report.has_leaks();
                    if found(&want_now, &outcome).is_some() || through_graph {
                        hits += 1;
                    }
                    // The estimate after 20 iterations.
                    let (p, value, outcome) = run_sampled(case, ESTIMATE_AFTER);
                    let want = want(&p, value);
                    if let Some(f) = found(&want, &outcome) {
                        assert!(outcome.report.estimated, "{}", case.name);
                        errors.push((f.bytes as f64 / want.bytes as f64 - 1.0).abs());
                    } else if want.kind == FindingKind::GraphRetention && outcome.report.has_leaks()
                    {
                        // Named under the graph's kept tensors (above): no figure to compare.
                    } else {
                        errors.push(f64::INFINITY);
                        problems.push(format!(
                            "{} (seed {seed}): not found after {ESTIMATE_AFTER} iterations\n{}",
                            case.name, outcome.report
                        ));
                    }
                }
                Verdict::Clean => {
                    if outcome.report.has_leaks() {
                        alarms += 1;
                        problems.push(format!(
                            "{} (seed {seed}): a false alarm\n{}",
                            case.name, outcome.report
                        ));
                    }
                }
            }
        }
        summary.push(format!("{}: {:?}", case.name, started.elapsed()));
        if case.is_leaky() {
            errors.sort_by(f64::total_cmp);
            let median = errors[errors.len() / 2];
            summary.push(format!(
                "{}: found in {hits}/{SEEDS} seeds within {bound} iterations; \
                 median bytes error after {ESTIMATE_AFTER}: {:.1}%",
                case.name,
                median * 100.0
            ));
            if hits * 100 < 99 * SEEDS {
                problems.push(format!(
                    "{}: found in only {hits} of {SEEDS} seeds",
                    case.name
                ));
            }
            if median > 0.25 {
                problems.push(format!(
                    "{}: median error of the estimated bytes {:.1}% (at most 25%)",
                    case.name,
                    median * 100.0
                ));
            }
        } else {
            summary.push(format!("{}: {alarms}/{SEEDS} false alarms", case.name));
        }
    }
    set_sampling(Sampling::Exact);
    println!("{}", summary.join("\n"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `check_leaks`, `assert_no_leaks` and `#[leak_test]` (its function form) stay exact in a
/// process that samples: an interval no tensor of the loop reaches would sample nothing.
#[test]
fn leak_tests_are_exact_whatever_the_sampling() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "leak_tests_are_exact_whatever_the_sampling",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = serial();
    set_sampling(Sampling::Interval(1 << 40));
    let case = case("l1_dataset_cache");
    let p = params(case.key);
    let (value, outcome) = in_session(|| (case.run)(p));
    (case.after)(&p, value);
    let Verdict::Leak(want) = &case.verdict else {
        unreachable!("l1 leaks")
    };
    let want = want(&p, value);
    let f = found(&want, &outcome).unwrap_or_else(|| panic!("not found:\n{}", outcome.report));
    assert_eq!((f.survivors, f.bytes), (want.survivors, want.bytes));
    assert!(!outcome.report.estimated);
    let leaked =
        std::panic::catch_unwind(|| tensor_lifetime::assert_no_leaks(|| (case.run)(p).map(|_| ())));
    assert!(
        leaked.is_err(),
        "assert_no_leaks missed the leak while sampling"
    );
    // The same loop sampled at that interval keeps no record: nothing to find.
    let (_, _, sampled) = run_sampled(case, p.steps);
    assert!(!sampled.report.has_leaks(), "{}", sampled.report);
    // Once no leak test runs, the sample applies to every probe again; inside one, the
    // same tensor is recorded.
    let recorded = |label: &str| {
        tensor_lifetime::snapshot()
            .iter()
            .any(|l| l.site.label == label)
    };
    let after =
        candle_core::Tensor::zeros(64, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    tensor_lifetime::tag!(after, "after_the_leak_tests");
    assert!(!recorded("after_the_leak_tests"));
    tensor_lifetime::check_leaks(LeakTestOptions::default(), || {
        tensor_lifetime::tag!(after, "in_a_leak_test");
        assert!(recorded("in_a_leak_test"));
    })
    .unwrap();
    // The record made in the leak test outlives it, and the probes after it still follow
    // that tensor, though the sample leaves it out.
    tensor_lifetime::store!(after, "cache");
    let stored = tensor_lifetime::snapshot()
        .into_iter()
        .find(|l| l.site.label == "in_a_leak_test")
        .and_then(|l| l.store);
    assert!(stored.is_some(), "the store after the leak test was missed");
    set_sampling(Sampling::Exact);
}

/// The memory monitor samples at every iteration end of a sampled run once it is on, its
/// quiet ends too: turned on in the middle of a loop whose ends were quiet (a sampled
/// 4 MiB tensor alive, the loop's 64-byte ones left out), it samples each of the loop's
/// remaining ends.
#[test]
fn the_memory_monitor_counts_the_quiet_iteration_ends_of_a_sampled_run() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "the_memory_monitor_counts_the_quiet_iteration_ends_of_a_sampled_run",
    ) {
        return;
    }
    let log = std::env::temp_dir().join(format!("tl-monitor-{}.jsonl", std::process::id()));
    std::env::set_var("TENSOR_LIFETIME_LOG", &log);
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    std::env::remove_var("TENSOR_LIFETIME_MEMORY_EVERY");
    set_sampling(Sampling::Interval(64 * 1024));

    #[tensor_lifetime::track]
    fn run(steps: usize, monitor_from: usize) -> candle_core::Result<()> {
        let device = candle_core::Device::Cpu;
        let held = candle_core::Tensor::zeros(1 << 20, candle_core::DType::F32, &device)?;
        for step in 0..steps {
            if step == monitor_from {
                tensor_lifetime::set_memory_monitor(1);
            }
            let x = candle_core::Tensor::zeros(16, candle_core::DType::F32, &device)?;
            let y = (&x * 2.0)?;
            drop(y);
        }
        drop(held);
        Ok(())
    }
    run(40, 25).unwrap();
    tensor_lifetime::set_memory_monitor(0);
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let samples = text
        .lines()
        .filter(|l| l.contains("\"event\":\"memory\""))
        .count();
    assert_eq!(samples, 15, "one per iteration end from the 26th");
    set_sampling(Sampling::Exact);
}

/// A sampled run's loop summaries count every iteration, the quiet ones too (nothing is
/// sampled here: every iteration end but a loop's first is quiet).
#[test]
fn a_sampled_runs_loops_count_their_quiet_iterations() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_sampled_runs_loops_count_their_quiet_iterations",
    ) {
        return;
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    set_sampling(Sampling::Interval(1 << 40));

    #[tensor_lifetime::track]
    fn epochs(epochs: usize, steps: usize) -> candle_core::Result<()> {
        let device = candle_core::Device::Cpu;
        for _ in 0..epochs {
            for _ in 0..steps {
                let x = candle_core::Tensor::zeros(16, candle_core::DType::F32, &device)?;
                let y = (&x * 2.0)?;
                drop(y);
            }
        }
        Ok(())
    }
    epochs(3, 50).unwrap();
    let report = tensor_lifetime::report();
    let mut counts: Vec<(u64, u64)> = report
        .loops
        .iter()
        .map(|l| (l.runs, l.iterations))
        .collect();
    counts.sort();
    assert_eq!(counts, [(1, 3), (3, 150)], "{:?}", report.loops);
    set_sampling(Sampling::Exact);
}

/// A sampled run's live figures are estimates, as its findings are: the live tensors and
/// bytes of the report, `memory_allocated`, the post-mortem's sites, the pprof profile and
/// the births per site stand for every tensor, not only the sampled ones (median over 21
/// seeds within 10% of the exact figure; the sample alone holds about a fifth of them),
/// and say so. Its event log says it samples (a `sampling` event before the first birth),
/// so a report made from the log says its figures are estimates.
#[test]
fn a_sampled_runs_live_figures_are_estimates_and_its_log_says_so() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "a_sampled_runs_live_figures_are_estimates_and_its_log_says_so",
    ) {
        return;
    }
    let log = std::env::temp_dir().join(format!("tl-estimates-{}.tlog", std::process::id()));
    std::env::set_var("TENSOR_LIFETIME_LOG", &log);
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    // A 16-value `f32` (64 own bytes) is sampled with probability 1 - exp(-64 / 256),
    // 0.22: about 44 of the 200 kept.
    const INTERVAL: u64 = 256;
    const KEPT: u64 = 200;
    set_sampling(Sampling::Interval(INTERVAL));

    /// The figures of `KEPT` kept tensors: live tensors and bytes of the report,
    /// `memory_allocated`, the post-mortem's tensors of their site, the pprof profile's
    /// live tensors, the births at their site so far.
    #[tensor_lifetime::track]
    fn keep(iterations: u64, per: u64) -> candle_core::Result<[u64; 6]> {
        let device = candle_core::Device::Cpu;
        let mut kept = Vec::new();
        for _ in 0..iterations {
            for _ in 0..per {
                let kept_x = candle_core::Tensor::zeros(16, candle_core::DType::F32, &device)?;
                kept.push(kept_x);
            }
        }
        let report = tensor_lifetime::report();
        let allocated = tensor_lifetime::memory_allocated(&device).expect("the CPU has stats");
        let pm = tensor_lifetime::post_mortem();
        assert!(
            pm.estimated && pm.to_string().contains("estimated: "),
            "{pm}"
        );
        let at_site = pm.by_site.iter().find(|s| s.site.label == "kept_x");
        let profile = tensor_lifetime::pprof_profile();
        assert!(profile
            .comments
            .iter()
            .any(|c| c.starts_with("estimated: ")));
        let births = tensor_lifetime::site_totals()
            .into_iter()
            .find(|t| t.site.label == "kept_x")
            .map_or(0, |t| t.born);
        Ok([
            report.live_tensors,
            report.live_bytes,
            allocated,
            at_site.map_or(0, |s| s.tensors),
            profile.live.iter().map(|g| g.tensors).sum(),
            births,
        ])
    }
    let mut figures: [Vec<u64>; 6] = Default::default();
    let mut births_so_far = 0;
    for seed in 0..21 {
        set_sample_seed(seed);
        let mut run = keep(10, KEPT / 10).unwrap();
        // The births per site count every run's: this run's are the difference.
        (run[5], births_so_far) = (run[5] - births_so_far, run[5]);
        for (v, f) in figures.iter_mut().zip(run) {
            v.push(f);
        }
    }
    set_sampling(Sampling::Exact);
    let exact = [KEPT, KEPT * 64, KEPT * 64, KEPT, KEPT, KEPT];
    let names = [
        "live tensors",
        "live bytes",
        "memory_allocated",
        "post-mortem tensors",
        "pprof tensors",
        "births",
    ];
    for ((mut v, exact), name) in figures.into_iter().zip(exact).zip(names) {
        v.sort_unstable();
        let median = v[v.len() / 2] as f64;
        assert!(
            (median / exact as f64 - 1.0).abs() <= 0.10,
            "{name}: median {median}, exact {exact}: {v:?}"
        );
    }

    // The log (flushed by a report): one `sampling` event, before the first birth; the
    // report made from it says its figures are estimates at that interval.
    let _ = tensor_lifetime::report();
    use tensor_lifetime::report_model::event::{EventReader, ReadOutcome};
    use tensor_lifetime::report_model::{Analysis, Event};
    let file = std::io::BufReader::new(std::fs::File::open(&log).unwrap());
    let mut analysis = Analysis::default();
    let (mut sampling, mut births_before) = (Vec::new(), 0);
    for outcome in EventReader::new(file) {
        let ReadOutcome::Event { event, .. } = outcome.unwrap() else {
            panic!("the log is cut off")
        };
        match &event {
            Event::Sampling { interval } => sampling.push(*interval),
            Event::Born { .. } if sampling.is_empty() => births_before += 1,
            _ => {}
        }
        analysis.apply(&event);
    }
    let _ = std::fs::remove_file(&log);
    assert_eq!(sampling, [INTERVAL]);
    assert_eq!(births_before, 0, "births before the log said it samples");
    let report = analysis.report();
    assert!(report.estimated);
    assert_eq!(report.sample_interval, Some(INTERVAL));
}
