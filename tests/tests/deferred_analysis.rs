//! The analysis of a nested loop's iteration ends, and of births, is applied in batches
//! when no event log is written (the tracker's `Deferred`), and at once with a log. Both
//! must give the same report: this test runs one workload in two child processes, without
//! and with a log, and compares their reports and per-site totals, also read in the middle
//! of the run.

use candle_core::{DType, Device, Result, Tensor};
use std::process::Command;

/// The child's marker: run the workload and print what it saw.
const CHILD: &str = "TL_DEFERRED_ANALYSIS_CHILD";

/// Outer iterations; each runs an inner loop of `INNER` iterations.
const OUTER: usize = 5;
const INNER: usize = 150;

/// A nested training-shaped loop: per inner iteration temporaries, a loop-carried
/// accumulator, a cache that keeps one tensor per inner iteration (a leak: more than the
/// 1024 survivors a batch of deferred iteration ends holds), views of a batch, and a
/// loss summed with its graph in the outer loop.
#[tensor_lifetime::track]
fn workload(device: &Device, mid: &mut Vec<String>) -> Result<()> {
    let mut cache: Vec<Tensor> = Vec::new();
    let mut total = Tensor::zeros((), DType::F32, device)?;
    'epoch: for epoch in 0..OUTER {
        let mut acc = Tensor::zeros((8, 8), DType::F32, device)?;
        'batch: for step in 0..INNER {
            let a = Tensor::ones((8, 8), DType::F32, device)?;
            let b = (&a * (step as f64))?;
            let c = b.tanh()?;
            acc = (acc + &c)?;
            if step % 3 == 0 {
                let row = c.narrow(0, 0, 1)?;
                cache.push(row);
            }
            let kept = a.affine(1.0, epoch as f64)?;
            cache.push(kept);
            if step == INNER / 2 {
                // A reading of the analysis while iteration ends are pending.
                mid.push(summary());
                continue 'batch;
            }
        }
        let var = candle_core::Var::from_tensor(&acc)?;
        let loss = var.as_tensor().sqr()?.sum_all()?;
        total = (total + loss)?;
        if epoch == 10 {
            break 'epoch;
        }
    }
    drop(total);
    Ok(())
}

/// The report as JSON and the per-site totals, one text.
fn summary() -> String {
    let report = tensor_lifetime::report();
    let totals: Vec<String> = tensor_lifetime::site_totals()
        .into_iter()
        .map(|(s, born, dropped)| format!("{}:{} {} {born} {dropped}", s.file, s.line, s.label))
        .collect();
    format!("{}\n{}", report.to_json(), totals.join("\n"))
}

#[test]
fn deferred_and_immediate_analysis_agree() {
    if std::env::var_os(CHILD).is_some() {
        let mut mid = Vec::new();
        workload(&Device::Cpu, &mut mid).unwrap();
        let end = summary();
        println!("<<<{}>>>", mid.join("\n---\n"));
        println!("<<<{end}>>>");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let dir = std::env::temp_dir();
    let log = dir.join(format!("tl-deferred-{}.jsonl", std::process::id()));
    let json = dir.join(format!("tl-deferred-{}.json", std::process::id()));
    let run = |with_log: bool| -> String {
        let mut cmd = Command::new(&exe);
        // The report the tracker writes itself at each outermost iteration end (the
        // analysis's own counts, not a fresh sweep's).
        cmd.env("TENSOR_LIFETIME_JSON", &json);
        cmd.args([
            "--exact",
            "deferred_and_immediate_analysis_agree",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("TENSOR_LIFETIME_REPORT", "off")
        .env_remove("TENSOR_LIFETIME_LOG")
        .env_remove("TENSOR_LIFETIME_MEMORY_EVERY");
        if with_log {
            cmd.env("TENSOR_LIFETIME_LOG", &log);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "child failed: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        // The child's two summaries, between markers (the harness prints around them).
        let mut parts: Vec<String> = text
            .split("<<<")
            .skip(1)
            .map(|s| s.split(">>>").next().unwrap_or("").to_string())
            .collect();
        parts.push(std::fs::read_to_string(&json).unwrap());
        parts.join("\n===\n")
    };
    let deferred = run(false);
    let immediate = run(true);
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&json);
    assert!(
        deferred.contains("\"findings\"") && deferred.contains("kept"),
        "the child printed no report: {deferred}"
    );
    assert_eq!(deferred, immediate);
}

#[test]
fn the_workload_leaks_where_it_should() -> Result<()> {
    // The comparison above is only as good as the workload: it must find the cache.
    if std::env::var_os(CHILD).is_some() {
        return Ok(());
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let mut mid = Vec::new();
    let (_, outcome) =
        tensor_lifetime::check_leaks(tensor_lifetime::LeakTestOptions::default(), || {
            workload(&Device::Cpu, &mut mid)
        })
        .expect("tracking is on");
    let leaks: Vec<String> = outcome
        .report
        .leaks()
        .map(|f| f.site.label.clone())
        .collect();
    assert!(leaks.iter().any(|l| l == "kept"), "{leaks:?}");
    Ok(())
}
