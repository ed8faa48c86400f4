//! `#[leak_test]` and its options, and the function form `assert_no_leaks`: a leaking
//! body fails with the report in the message, `allow`, `max_leaked_bytes`, `warmup` and
//! `window` change the verdict as documented. Each test is its own session.

use candle_core::{Device, Result, Tensor};
use std::sync::Mutex;

const SOURCE: &str = include_str!("leak_test_attr.rs");

/// Keeps one 1 KiB tensor per step in `into`.
#[tensor_lifetime::track]
fn keep_every_step(steps: usize, into: &Mutex<Vec<Tensor>>) -> Result<()> {
    for step in 0..steps {
        let kept = Tensor::full(step as f32, 256, &Device::Cpu)?; // leak_test_attr: kept
        into.lock().unwrap().push(kept);
    }
    Ok(())
}

/// Grows a local window for `steps` steps, then drops it.
#[tensor_lifetime::track]
fn grow_then_drop(steps: usize) -> Result<usize> {
    let mut window = Vec::new();
    for step in 0..steps {
        let recent = Tensor::full(step as f32, 16, &Device::Cpu)?;
        window.push(recent);
    }
    Ok(window.len())
}

static KEPT_A: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
static KEPT_B: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
static KEPT_C: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
static KEPT_D: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
static KEPT_E: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
static KEPT_F: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[tensor_lifetime::leak_test]
fn clean_body_passes() -> Result<()> {
    assert_eq!(grow_then_drop(2)?, 2);
    for step in 0..6 {
        let x = Tensor::full(step as f32, 64, &Device::Cpu)?;
        let _y = (x * 2.0)?;
    }
    Ok(())
}

#[tensor_lifetime::leak_test]
#[should_panic(expected = "leak test `leaking_body_fails` failed")]
fn leaking_body_fails() {
    keep_every_step(8, &KEPT_A).unwrap();
}

#[tensor_lifetime::leak_test(allow = ["kept"])]
fn allowed_label_passes() -> Result<()> {
    keep_every_step(8, &KEPT_B)
}

#[tensor_lifetime::leak_test(allow = ["instrumentation/leak_test_attr.rs"])]
fn allowed_file_suffix_passes() -> Result<()> {
    keep_every_step(8, &KEPT_C)
}

#[tensor_lifetime::leak_test(max_leaked_bytes = "64 KiB")]
fn leak_under_the_tolerance_passes() -> Result<()> {
    keep_every_step(8, &KEPT_D)
}

#[tensor_lifetime::leak_test(max_leaked_bytes = 1024)]
#[should_panic(expected = "(max_leaked_bytes 1.0 KiB)")]
fn leak_over_the_tolerance_fails() {
    keep_every_step(8, &KEPT_E).unwrap();
}

#[tensor_lifetime::leak_test]
#[should_panic(expected = "LEAK")]
fn growth_inside_the_test_is_a_leak_even_if_dropped_later() {
    grow_then_drop(8).unwrap();
}

#[tensor_lifetime::leak_test(window = 20)]
fn a_window_longer_than_the_growth_is_not_a_leak() -> Result<()> {
    assert_eq!(grow_then_drop(8)?, 8);
    Ok(())
}

#[tensor_lifetime::leak_test(warmup = 8)]
fn growth_during_warmup_is_not_a_leak() -> Result<()> {
    assert_eq!(grow_then_drop(8)?, 8);
    Ok(())
}

#[test]
fn the_function_form_fails_with_the_report() {
    let panic = std::panic::catch_unwind(|| {
        tensor_lifetime::assert_no_leaks(|| keep_every_step(8, &KEPT_F).unwrap())
    })
    .unwrap_err();
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    let site = format!(
        "tests/tests/instrumentation/leak_test_attr.rs:{}",
        tensor_lifetime_tests::line_of(SOURCE, "// leak_test_attr: kept")
    );
    assert!(message.contains(&site), "{message}");
    assert!(message.contains("`kept`"), "{message}");
    assert!(message.contains("stored into `into`"), "{message}");
    assert!(message.contains("KiB"), "{message}");
}

#[test]
fn the_function_form_returns_the_value_when_clean() {
    let n = tensor_lifetime::assert_no_leaks(|| grow_then_drop(2).unwrap());
    assert_eq!(n, 2);
}
