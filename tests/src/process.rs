//! A test that needs the process to itself: the tracker reads its configuration
//! (`TENSOR_LIFETIME_*`) once per process, and some tests check what only a process with
//! no other test in it shows (the live tensors of the whole process, the per-site totals,
//! the heap). Such a test runs again in a child process of its own test binary, alone,
//! instead of needing a test binary of its own: the binaries are few, so few link candle.
//!
//! ```text
//! #[test]
//! fn reads_the_whole_process() {
//!     if !tensor_lifetime_tests::process::alone(module_path!(), "reads_the_whole_process") {
//!         return;
//!     }
//!     // The body: here the only test of its process.
//! }
//! ```

use std::process::Command;

/// Set in the child: the name of the test it runs alone.
const ALONE: &str = "TL_TEST_ALONE";

/// The harness's name of test `test` written in module `module` (its `module_path!()`,
/// whose first segment is the test binary's crate name, which the harness leaves out).
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{test}"),
        None => test.to_string(),
    }
}

/// Whether this process is the one in which test `test` (of module `module`) runs alone.
/// If it is not, runs the test so (this test binary again, that test only, one thread),
/// passes on what it printed and panics if it failed; the caller then returns. The child
/// inherits the environment.
pub fn alone(module: &str, test: &str) -> bool {
    let name = test_name(module, test);
    if std::env::var_os(ALONE).is_some_and(|v| v == name.as_str()) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", &name, "--nocapture", "--test-threads", "1"])
        .env(ALONE, &name)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "`{name}` failed in its own process ({})",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "`{name}` did not run in its own process"
    );
    false
}
