//! Without an event log the tracker feeds its analysis directly (births, drops and
//! sweeps counted without building events); with a log it writes events and applies them.
//! Both must give the same report: this test runs one workload in two child processes,
//! without and with a log, and compares their reports, per-site totals and the report the
//! tracker writes itself (`TENSOR_LIFETIME_JSON`), also read in the middle of the run.

use candle_core::{DType, Device, Result, Tensor};
use std::process::Command;

/// The child's marker: run the workload and print what it saw.
const CHILD: &str = "TL_ANALYSIS_WITH_AND_WITHOUT_LOG_CHILD";

/// Outer iterations; each runs an inner loop of `INNER` iterations.
const OUTER: usize = 5;
const INNER: usize = 150;

/// A nested training-shaped loop: per inner iteration temporaries, a loop-carried
/// accumulator, a cache that keeps one tensor per inner iteration (a leak), views that pin
/// their tensors' storage, and a loss summed in the outer loop.
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
                // A reading of the analysis in the middle of the loop.
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
    let mut report = tensor_lifetime::report();
    // The forecast of running out reads the process's memory, which differs between runs.
    report.forecast = None;
    for f in &mut report.findings {
        f.forecast = None;
    }
    let totals: Vec<String> = tensor_lifetime::site_totals()
        .into_iter()
        .map(|t| {
            let s = t.site;
            format!("{}:{} {} {} {}", s.file, s.line, s.label, t.born, t.dropped)
        })
        .collect();
    format!("{}\n{}", report.to_json(), totals.join("\n"))
}

#[test]
fn analysis_with_and_without_log_agree() {
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
    let log = dir.join(format!("tl-analysis-log-{}.jsonl", std::process::id()));
    let json = dir.join(format!("tl-analysis-log-{}.json", std::process::id()));
    let run = |with_log: bool| -> String {
        let mut cmd = Command::new(&exe);
        // The report the tracker writes itself at each outermost iteration end (the
        // analysis's own counts, not a fresh sweep's).
        cmd.env("TENSOR_LIFETIME_JSON", &json);
        let name = tensor_lifetime_tests::process::test_name(
            module_path!(),
            "analysis_with_and_without_log_agree",
        );
        cmd.args(["--exact", &name, "--nocapture"])
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
        let mut written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        written.as_object_mut().unwrap().remove("forecast");
        for f in written["findings"].as_array_mut().unwrap() {
            f.as_object_mut().unwrap().remove("forecast");
        }
        parts.push(serde_json::to_string_pretty(&written).unwrap());
        parts.join("\n===\n")
    };
    let without = run(false);
    let with = run(true);
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&json);
    assert!(
        without.contains("\"findings\"") && without.contains("kept"),
        "the child printed no report: {without}"
    );
    assert_eq!(without, with);
}

#[test]
fn the_workload_leaks_where_it_should() -> Result<()> {
    // The comparison above is only as good as the workload: it must find the cache.
    if std::env::var_os(CHILD).is_some() {
        return Ok(());
    }
    std::env::set_var("TENSOR_LIFETIME_REPORT", "off");
    let _serial = tensor_lifetime_tests::serial();
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
