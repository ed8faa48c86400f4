//! `cargo test` runs the tests of a binary on parallel threads of one process: each
//! `#[leak_test]` must judge only the tensors born in its own session.
//!
//! The proof: eight leak tests (`session_*`) train the same small loop; in proof mode
//! (`TL_PARALLEL_SESSIONS_PROOF` set) one of them keeps a tensor per step in a global,
//! and all eight wait for each other at a barrier in the middle of their loops, so their
//! sessions certainly overlap. The driver test re-runs this very binary in proof mode with
//! eight test threads and checks the outcome of each test from the harness's output: the
//! leaking one fails with the report in its message, the seven others pass.
//!
//! Outside proof mode (a normal `cargo test`) no test leaks and none waits, so all pass.

use candle_core::{Device, Result, Tensor};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Barrier, LazyLock, Mutex};
use std::time::{Duration, Instant};

const PROOF_ENV: &str = "TL_PARALLEL_SESSIONS_PROOF";
const SESSIONS: usize = 8;
const SOURCE: &str = include_str!("parallel_sessions.rs");

fn proof_mode() -> bool {
    std::env::var_os(PROOF_ENV).is_some()
}

static BARRIER: LazyLock<Barrier> = LazyLock::new(|| Barrier::new(SESSIONS));

/// In proof mode, returns only once all eight session tests are inside their loops.
fn rendezvous() {
    if proof_mode() {
        BARRIER.wait();
    }
}

static KEPT: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[tensor_lifetime::track]
fn train(steps: usize, leak: bool) -> Result<f32> {
    let mut total = 0.0f32;
    'step: for step in 0..steps {
        if step == steps / 2 {
            rendezvous();
        }
        let x = Tensor::full(step as f32, (32, 32), &Device::Cpu)?;
        let product = (x.matmul(&x)? * 0.5)?; // parallel: product
        total += product.mean_all()?.to_scalar::<f32>()?;
        if !leak {
            continue 'step;
        }
        KEPT.lock().unwrap().push(product); // parallel: kept
    }
    Ok(total)
}

#[tensor_lifetime::leak_test]
fn session_1() -> Result<()> {
    train(10, false).map(drop)
}

#[tensor_lifetime::leak_test]
fn session_2() -> Result<()> {
    train(11, false).map(drop)
}

#[tensor_lifetime::leak_test]
fn session_3() -> Result<()> {
    train(12, false).map(drop)
}

#[tensor_lifetime::leak_test]
fn session_4() -> Result<()> {
    train(13, false).map(drop)
}

#[tensor_lifetime::leak_test]
fn session_5() -> Result<()> {
    train(14, false).map(drop)
}

#[tensor_lifetime::leak_test]
fn session_6() -> Result<()> {
    train(15, false).map(drop)
}

#[tensor_lifetime::leak_test]
fn session_7() -> Result<()> {
    let total = train(16, false)?;
    assert!(total > 0.0);
    Ok(())
}

#[tensor_lifetime::leak_test]
fn session_leaky() -> Result<()> {
    train(12, proof_mode()).map(drop)
}

#[test]
fn each_leak_test_judges_only_its_own_tensors() {
    if proof_mode() {
        return;
    }
    let out_path = std::env::temp_dir().join(format!(
        "tensor-lifetime-parallel-sessions-{}.txt",
        std::process::id()
    ));
    let out = std::fs::File::create(&out_path).unwrap();
    // The harness's names of the session tests: `parallel_sessions::session_*`.
    let name = |test: &str| tensor_lifetime_tests::process::test_name(module_path!(), test);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([&name("session_"), "--test-threads", &SESSIONS.to_string()])
        .env(PROOF_ENV, "1")
        .env("TENSOR_LIFETIME_REPORT", "off")
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the proof run did not finish: were the eight tests not run at once?");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut output = String::new();
    std::fs::File::open(&out_path)
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    let _ = std::fs::remove_file(&out_path);

    assert!(
        !status.success(),
        "one test leaks, so the run fails:\n{output}"
    );
    let outcome = |test: &str| -> &str {
        let test = name(test);
        let line = output
            .lines()
            .find(|l| l.starts_with(&format!("test {test} ... ")))
            .unwrap_or_else(|| panic!("no outcome for {test}:\n{output}"));
        line.rsplit(' ').next().unwrap()
    };
    for n in 1..SESSIONS {
        assert_eq!(outcome(&format!("session_{n}")), "ok", "{output}");
    }
    assert_eq!(outcome("session_leaky"), "FAILED", "{output}");
    assert!(
        output.contains("test result: FAILED. 7 passed; 1 failed"),
        "{output}"
    );

    // The failure message is the leak report: site, label, bytes and holder.
    let failure = output
        .split(&format!("---- {} stdout ----", name("session_leaky")))
        .nth(1)
        .unwrap_or_else(|| panic!("no failure message:\n{output}"));
    assert!(
        failure.contains("leak test `session_leaky` failed"),
        "{failure}"
    );
    let site = format!(
        "tests/tests/sessions/parallel_sessions.rs:{}",
        tensor_lifetime_tests::line_of(SOURCE, "// parallel: product")
    );
    let store = format!(
        "tests/tests/sessions/parallel_sessions.rs:{}",
        tensor_lifetime_tests::line_of(SOURCE, "// parallel: kept")
    );
    assert!(failure.contains(&site), "{failure}");
    // The panic message starts with the leaking site as `file:line:col: `, the form that
    // editors and CI logs turn into a link.
    let first = failure
        .lines()
        .find(|l| l.contains("leak test `session_leaky` failed"))
        .unwrap();
    let (at, _) = first
        .split_once(": leak test")
        .unwrap_or_else(|| panic!("no site before the message: {first}"));
    let at = at.rsplit("panicked at ").next().unwrap();
    let at = at.rsplit(":\n").next().unwrap().trim();
    let (file_line, col) = at.rsplit_once(':').unwrap();
    assert_eq!(file_line, site, "{first}");
    assert!(col.parse::<u32>().is_ok_and(|c| c > 0), "{first}");
    assert!(failure.contains("`product`"), "{failure}");
    assert!(
        failure.contains(&format!("stored into `KEPT` at {store}")),
        "{failure}"
    );
    assert!(failure.contains("KiB"), "{failure}");
    // No other session's tensors appear in it.
    assert!(!failure.contains("session_1"), "{failure}");
}
