//! The forecast of running out on the CPU, under a limit set by hand: the `prometheus`
//! example's leaky loop (2 MiB of features kept per step) runs with
//! `TENSOR_LIFETIME_MEMORY_LIMIT` 128 MiB above the process's resident memory at its
//! start. The first report with the leak (the JSON report) forecasts how many steps are
//! left until the resident memory crosses the limit; the loop measures the step where it
//! really does. The two agree within 20 %.

use std::time::Duration;
use tensor_lifetime_examples::prometheus::{run, Options};
use tensor_lifetime_tests::json_report_env;

/// Resident memory of this process (`VmRSS`).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[test]
fn the_forecast_predicts_the_step_that_crosses_a_memory_limit() {
    if !tensor_lifetime_tests::process::alone(
        module_path!(),
        "the_forecast_predicts_the_step_that_crosses_a_memory_limit",
    ) {
        return;
    }
    let json_path = json_report_env("forecast.json");
    let leak = 2 << 20;
    let limit = resident() + (128 << 20);
    std::env::set_var("TENSOR_LIFETIME_MEMORY_LIMIT", limit.to_string());
    let opts = Options {
        steps: 110,
        leak: true,
        leak_bytes: leak,
        step_pause: Duration::from_millis(2),
    };
    // (iteration of the forecast, the forecast) from the first report that has one.
    let mut forecast: Option<(u64, serde_json::Value)> = None;
    let mut crossed = None;
    run(&opts, |step| {
        if forecast.is_none() {
            let json: Option<serde_json::Value> = std::fs::read_to_string(&json_path)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok());
            if let Some(leak) = json.as_ref().and_then(|j| {
                j["findings"]
                    .as_array()?
                    .iter()
                    .find(|f| f["forecast"].is_object())
                    .cloned()
            }) {
                let iteration = leak["iteration"].as_u64().unwrap();
                forecast = Some((iteration, leak["forecast"].clone()));
            }
        }
        if crossed.is_none() && resident() >= limit {
            crossed = Some(step as u64);
        }
    })
    .unwrap();
    let (at, forecast) = forecast.expect("a report with a forecast");
    let crossed = crossed.expect("the loop crossed the limit");
    assert_eq!(forecast["device"], "cpu", "{forecast:#}");
    assert_eq!(
        forecast["source"], "TENSOR_LIFETIME_MEMORY_LIMIT",
        "{forecast:#}"
    );
    assert_eq!(
        forecast["growth_per_iteration"], leak as u64,
        "{forecast:#}"
    );
    assert!(
        forecast["seconds_left"].as_f64().unwrap() > 0.0,
        "{forecast:#}"
    );
    let predicted = forecast["iterations_left"].as_u64().unwrap() as f64;
    let actual = (crossed - at) as f64;
    assert!(
        (predicted - actual).abs() <= 0.2 * actual,
        "forecast at iteration {at}: {predicted} steps left; the limit was crossed at step \
         {crossed} ({actual} steps later)"
    );
    eprintln!(
        "forecast at iteration {at}: {predicted} steps left; crossed at step {crossed} ({actual} later)"
    );
    // The report says it too, in its text and at its top.
    let report = tensor_lifetime::report();
    assert!(report.forecast.is_some(), "{report}");
    let text = report.to_string();
    assert!(text.contains("runs out: cpu: "), "{text}");
}
