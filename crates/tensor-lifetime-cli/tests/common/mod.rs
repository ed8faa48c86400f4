//! Shared by the CLI tests: synthetic logs (no runtime needed) and running the binary.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tensor_lifetime_test_support::synth::{self, SynthLoop};

pub const BIN: &str = env!("CARGO_BIN_EXE_tensor-lifetime");

/// A temporary folder holding `clean.jsonl` (4 epochs x 12 batches, no leak) and
/// `leaky.jsonl` (the same loop with a dataset cache that is never cleared).
pub struct Logs {
    pub dir: tempfile::TempDir,
}

impl Logs {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        write_log(&dir.path().join("clean.jsonl"), &SynthLoop::clean(4, 12));
        write_log(&dir.path().join("leaky.jsonl"), &SynthLoop::leaky(4, 12));
        Logs { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `text` as `name` in the folder.
    pub fn write(&self, name: &str, text: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write a test file");
        p
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read a test file")
    }

    /// Runs the binary in the folder (so messages name files relative to it).
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("run tensor-lifetime")
    }
}

pub fn write_log(path: &Path, cfg: &SynthLoop) -> u64 {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create log"));
    let n = synth::write_log(cfg, &mut out).expect("write log");
    std::io::Write::flush(&mut out).expect("flush log");
    n
}

/// Exit code, stdout and stderr as one text, for snapshots.
pub fn transcript(out: &Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status
            .code()
            .map_or("signal".to_string(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Debian's headless Chromium, which the test set-up installs.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Set to `1` to fail, not skip, the tests that need Chromium when it is missing (`.ci/run`
/// sets it; so does `CI=true`).
pub const REQUIRE_CHROMIUM: &str = "TENSOR_LIFETIME_REQUIRE_CHROMIUM";

/// Whether `test` can render in Chromium. Without Chromium the test is skipped, and says
/// so on standard error (past the test harness's capture), so that `cargo test` passes on
/// a machine with a Rust toolchain only; with [`REQUIRE_CHROMIUM`]`=1` or `CI=true` it
/// fails instead.
pub fn chromium_available(test: &str) -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    let set = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    assert!(
        !set(REQUIRE_CHROMIUM, "1") && !set("CI", "true"),
        "{}",
        missing()
    );
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: chromium not installed; set {REQUIRE_CHROMIUM}=1 to require it"
    );
    false
}

pub fn chromium() -> &'static str {
    assert!(Path::new(CHROMIUM).exists(), "{}", missing());
    CHROMIUM
}

fn missing() -> String {
    format!(
        "{CHROMIUM} is missing: this test needs Debian's headless Chromium. Run the test \
         set-up (CI does): `apt-get update && apt-get install -y chromium`"
    )
}

/// Runs headless Chromium on `page` with `extra` arguments; returns its standard output.
pub fn run_chromium(page: &Path, profile: &Path, extra: &[String]) -> Vec<u8> {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).map(|_| v)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("chromium did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().expect("reader thread").expect("read stdout")
}

/// Writes `ranks` logs of the synthetic loop (4 epochs x 12 batches) as
/// `dir/rank-N.jsonl`, their headers naming rank N of `ranks`; the ranks in `leaking` keep
/// the dataset cache that is never cleared.
pub fn write_rank_logs(dir: &Path, ranks: u32, leaking: &[u32]) {
    std::fs::create_dir_all(dir).expect("create the logs' folder");
    for rank in 0..ranks {
        let cfg = if leaking.contains(&rank) {
            SynthLoop::leaky(4, 12)
        } else {
            SynthLoop::clean(4, 12)
        };
        let path = dir.join(format!("rank-{rank}.jsonl"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create log"));
        synth::write_rank_log(&cfg, rank, ranks, &mut out).expect("write log");
        std::io::Write::flush(&mut out).expect("flush log");
    }
}
