//! Shape churn in a tracked loop: batches of a new number of rows each step, and views of
//! a new length into one fixed buffer. Both sites churn, judged on the tensors' own sizes
//! (a view's, not its storage's), with or without an event log: this test runs the loop
//! in two child processes, without and with a log, and requires the same findings (with
//! a log the hint also names example shapes).

use candle_core::{DType, Device, Result, Tensor};
use std::process::Command;

/// The child's marker: run the loop and print the churn findings.
const CHILD: &str = "TL_SHAPE_CHURN_CHILD";

/// Columns of every tensor: a row is 2 KiB of f32.
const COLS: usize = 512;

/// Rows of step `i`: 13 sizes from 64 to 256 rows (128 KiB to 512 KiB), a new one in most
/// steps.
fn rows(i: usize) -> usize {
    64 + 16 * ((i * 7) % 13)
}

#[tensor_lifetime::track]
fn churning_loop(device: &Device) -> Result<f32> {
    let buffer = Tensor::zeros((1024, COLS), DType::F32, device)?;
    let mut total = 0f32;
    'steps: for i in 0..20 {
        let batch = Tensor::ones((rows(i), COLS), DType::F32, device)?;
        let window = buffer.narrow(0, 0, rows(i))?;
        let both = (&batch + &window)?;
        total += both.sum_all()?.to_scalar::<f32>()?;
        if i == 100 {
            break 'steps;
        }
    }
    Ok(total)
}

/// The churn findings of the report, one line each: site label, iterations and the
/// hint (the sizes seen).
fn churn_findings() -> Vec<String> {
    tensor_lifetime::report()
        .findings
        .iter()
        .filter(|f| f.kind == tensor_lifetime::FindingKind::ShapeChurn)
        .map(|f| format!("{} {} {}", f.site.label, f.iterations, f.hint))
        .collect()
}

#[test]
fn dynamic_batches_and_views_churn_with_and_without_a_log() {
    if std::env::var_os(CHILD).is_some() {
        churning_loop(&Device::Cpu).unwrap();
        println!("<<<{}>>>", churn_findings().join("\n"));
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let log = std::env::temp_dir().join(format!("tl-shape-churn-{}.jsonl", std::process::id()));
    let run = |with_log: bool| -> Vec<String> {
        let mut cmd = Command::new(&exe);
        let name = tensor_lifetime_tests::process::test_name(
            module_path!(),
            "dynamic_batches_and_views_churn_with_and_without_a_log",
        );
        cmd.args(["--exact", &name])
            .args(["--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .env("TENSOR_LIFETIME_REPORT", "off")
            .env_remove("TENSOR_LIFETIME_LOG");
        if with_log {
            cmd.env("TENSOR_LIFETIME_LOG", &log);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child (log: {with_log}) failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let start = text.find("<<<").expect("the child's findings") + 3;
        let end = text[start..].find(">>>").unwrap() + start;
        text[start..end].lines().map(str::to_string).collect()
    };
    let without = run(false);
    let with = run(true);
    let _ = std::fs::remove_file(&log);

    // Both sites churn: the batch and the view, 13 sizes of 128-512 KiB each. The view's
    // storage (the 2 MiB buffer) never changes size; its own size does.
    for label in ["batch", "window"] {
        let line = without
            .iter()
            .find(|l| l.starts_with(&format!("{label} ")))
            .unwrap_or_else(|| panic!("no churn at `{label}`: {without:?}"));
        assert!(
            line.contains("13 distinct sizes from 128.0 KiB to 512.0 KiB in 20 iterations"),
            "{line}"
        );
    }
    // With a log the births carry their shapes, and the hint names the first new ones;
    // without one the probes keep no shapes. Otherwise the findings are the same.
    let unshaped: Vec<String> = with
        .iter()
        .map(|l| {
            let (before, rest) = l.split_once(" (e.g. [").expect("shapes in the hint");
            let (_, after) = rest.split_once("])").unwrap();
            format!("{before}{after}")
        })
        .collect();
    assert!(
        with[0].contains("(e.g. [64, 512] ... [160, 512])"),
        "{}",
        with[0]
    );
    assert_eq!(
        without, unshaped,
        "the analysis with and without an event log"
    );
}
