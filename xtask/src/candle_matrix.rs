//! `cargo xtask candle-matrix`: the library built and checked against each supported
//! candle-core release, and against a path copy of one used through `[patch.crates-io]`
//! (how forks and git revisions reach a user's graph).
//!
//! A release is checked in a copy of the workspace, `target/candle-matrix/<version>/ws`
//! (copied with timestamps kept, so an unchanged crate is not rebuilt), with its own
//! target directory beside it, so candle is compiled once per release and reused. The
//! copy's root manifest asks for that release as a user's crate does: candle-core and
//! candle-nn `=<version>` for the workspace's crates, tensor-lifetime with the feature of
//! its minor (`candle-0-8` ...). Its lockfile, `xtask/candle-matrix/<version>.lock`, is the
//! workspace's `Cargo.lock` re-resolved under that manifest (committed, remade with
//! `--update-locks`). In each: the library crates build, the tracker's tests pass
//! (`cargo test -p tensor-lifetime`: the layout self-test, storage bytes, the probe; the
//! doc examples, which name candle `candle_core`, with 0.11 only), and the four CPU
//! examples' checks pass (`tests/tests/examples/`: the leak found at the right site,
//! the clean examples clean).

// The same releases as a user's crate sees them (README's "Works with" lines); its own
// file, declared here so that `main.rs` reaches it as `candle_matrix::user_crates`.
#[path = "user_crates.rs"]
pub mod user_crates;

use crate::util::{self, run_cmd};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The releases checked: the newest patch of each supported minor (0.9.1 rather than
/// 0.9.2 because it is the last 0.9 with the older storage enums and cudarc 0.16).
pub const VERSIONS: &[&str] = &["0.8.4", "0.9.1", "0.10.2", "0.11.1"];

/// The release the `[patch.crates-io]` row copies.
const PATCHED: &str = "0.9.1";

/// The four CPU examples' checks: modules of the `examples` test binary (test filters).
const EXAMPLE_TESTS: &[&str] = &[
    "leaky_dataset::",
    "loss_accumulation::",
    "view_retention::",
    "clean_training::",
];

/// What the workspace copy needs (no `target/`, no docs).
const COPIED: &[&str] = &[
    "Cargo.toml",
    ".cargo",
    "crates",
    "examples",
    "tests",
    "xtask",
];

/// One row of the table.
struct Row {
    label: String,
    resolved: String,
    steps: Vec<(&'static str, Result<f64, String>)>,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut only: Vec<String> = Vec::new();
    let mut patch = true;
    let mut update_locks = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only" => only.push(util::flag_value("--only", &mut it)?),
            "--no-patch" => patch = false,
            "--update-locks" => update_locks = true,
            other => bail!("candle-matrix: unknown option `{other}`"),
        }
    }
    for v in &only {
        if !VERSIONS.contains(&v.as_str()) {
            bail!("candle-matrix: {v} is not one of {VERSIONS:?}");
        }
    }
    let versions: Vec<&str> = VERSIONS
        .iter()
        .copied()
        .filter(|v| only.is_empty() || only.iter().any(|o| o == v))
        .collect();
    let patch = patch && (only.is_empty() || only.iter().any(|o| o == PATCHED));
    let mut rows = Vec::new();
    for v in &versions {
        rows.push(check_release(v, update_locks)?);
    }
    if patch {
        rows.push(check_patched(PATCHED, update_locks)?);
    }
    let table = table(&rows);
    println!("{table}");
    if rows.iter().any(|r| r.steps.iter().any(|(_, s)| s.is_err())) {
        for r in &rows {
            for (step, s) in &r.steps {
                if let Err(e) = s {
                    eprintln!("error: {} / {step}: {e}", r.label);
                }
            }
        }
        bail!("candle-matrix: some checks failed");
    }
    Ok(())
}

fn matrix_dir() -> PathBuf {
    util::root().join("target/candle-matrix")
}

fn lock_path(version: &str) -> PathBuf {
    util::root().join(format!("xtask/candle-matrix/{version}.lock"))
}

/// Copies the workspace's sources into `ws` (timestamps kept), replacing older copies.
fn copy_workspace(ws: &Path) -> Result<()> {
    fs::create_dir_all(ws)?;
    let root = util::root();
    for item in COPIED {
        let dst = ws.join(item);
        if dst.is_dir() {
            fs::remove_dir_all(&dst)?;
        }
        let mut cp = Command::new("cp");
        cp.arg("-a").arg(root.join(item)).arg(ws);
        run_quiet(&mut cp)?;
    }
    Ok(())
}

/// The feature that selects a release's minor: `candle-0-9` for 0.9.1.
fn feature_of(version: &str) -> String {
    let minor = version.split('.').nth(1).unwrap_or("");
    format!("candle-0-{minor}")
}

/// Pins the copy's root manifest to `version` (see the module docs).
fn pin_manifest(ws: &Path, version: &str) -> Result<()> {
    let path = ws.join("Cargo.toml");
    let mut text = fs::read_to_string(&path)?;
    let tensor_lifetime =
        "tensor-lifetime = { path = \"crates/tensor-lifetime\", version = \"0.1.0\"";
    let pins = [
        ("candle-core = \"0.11\"", format!("candle-core = \"={version}\"")),
        ("candle-nn = \"0.11\"", format!("candle-nn = \"={version}\"")),
        (
            tensor_lifetime,
            format!(
                "{tensor_lifetime}, default-features = false, features = [\"macros\", \"tracking\", \"{}\"]",
                feature_of(version)
            ),
        ),
    ];
    for (from, to) in pins {
        if !text.contains(from) {
            bail!("{} has no `{from}` to pin", path.display());
        }
        text = text.replacen(from, &to, 1);
    }
    fs::write(&path, text)?;
    Ok(())
}

/// The release's lockfile, made from the workspace's if missing (or `update`): Cargo
/// re-resolves it under the pinned manifest, changing only what the pins require.
fn ensure_lock(version: &str, ws: &Path, update: bool) -> Result<()> {
    let lock = lock_path(version);
    if lock.exists() && !update {
        fs::copy(&lock, ws.join("Cargo.lock"))?;
        return Ok(());
    }
    eprintln!("making {}", lock.display());
    fs::create_dir_all(lock.parent().expect("a folder"))?;
    fs::copy(util::root().join("Cargo.lock"), ws.join("Cargo.lock"))?;
    let mut c = Command::new("cargo");
    c.args(["metadata", "--format-version", "1"])
        .current_dir(ws)
        .stdout(std::process::Stdio::null());
    run_cmd(&mut c)?;
    fs::copy(ws.join("Cargo.lock"), &lock)?;
    Ok(())
}

/// The candle-cores of `version`'s minor a lockfile holds (the workspace's lock holds one
/// per minor: every optional dependency of a member is resolved).
fn resolved_of_minor(lock: &str, version: &str) -> Vec<String> {
    let minor = |v: &str| v.rsplit_once('.').map(|(m, _)| m.to_string());
    candle_versions(lock)
        .into_iter()
        .filter(|v| minor(v) == minor(version))
        .collect()
}

/// Every candle-core version a lockfile holds.
fn candle_versions(lock: &str) -> Vec<String> {
    lock.split("[[package]]")
        .filter(|b| b.contains("\nname = \"candle-core\"\n"))
        .filter_map(|b| {
            b.lines()
                .find_map(|l| l.strip_prefix("version = \""))
                .map(|v| v.trim_end_matches('"').to_string())
        })
        .collect()
}

/// The workspace copy of a release, with its lockfile, ready to build in.
pub fn prepare_workspace(version: &str, update_locks: bool) -> Result<PathBuf> {
    if !VERSIONS.contains(&version) {
        bail!("candle-core {version} is not one of {VERSIONS:?}");
    }
    let ws = matrix_dir().join(version).join("ws");
    copy_workspace(&ws)?;
    pin_manifest(&ws, version)?;
    ensure_lock(version, &ws, update_locks)?;
    Ok(ws)
}

fn check_release(version: &str, update_locks: bool) -> Result<Row> {
    let dir = matrix_dir().join(version);
    let ws = prepare_workspace(version, update_locks)?;
    // Not `--locked`: a workspace member added since the lockfile was made is added to it
    // by Cargo's minimal re-resolution, which leaves candle where the lockfile has it
    // (the table's second column shows what it resolved).
    Ok(check(
        format!("{version} (crates.io)"),
        &ws,
        &dir.join("target"),
    ))
}

/// A path copy of a released candle-core, used through `[patch.crates-io]` (a fork or a
/// git revision reaches the graph the same way: another source for `candle-core`).
fn check_patched(version: &str, update_locks: bool) -> Result<Row> {
    let dir = matrix_dir().join(format!("patch-{version}"));
    let ws = dir.join("ws");
    copy_workspace(&ws)?;
    pin_manifest(&ws, version)?;
    ensure_lock(version, &ws, update_locks)?;
    let vendor = ws.join("vendor/candle-core");
    if !vendor.join("Cargo.toml").exists() {
        let src = registry_source("candle-core", version)?;
        fs::create_dir_all(ws.join("vendor"))?;
        run_quiet(Command::new("cp").arg("-a").arg(&src).arg(&vendor))?;
    }
    let manifest = ws.join("Cargo.toml");
    let mut text = fs::read_to_string(&manifest)?;
    text.push_str("\n[patch.crates-io]\ncandle-core = { path = \"vendor/candle-core\" }\n");
    fs::write(&manifest, text)?;
    // The patch changes candle-core's source: the lock is re-resolved (not --locked).
    // The target directory is the release's own: only candle-core and what depends on it
    // are rebuilt.
    let target = matrix_dir().join(version).join("target");
    Ok(check(
        format!("{version} (path copy, [patch.crates-io])"),
        &ws,
        &target,
    ))
}

/// The unpacked crates.io source of a package (fetched by the release's own check).
pub(crate) fn registry_source(name: &str, version: &str) -> Result<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let src = home.join("registry/src");
    for index in fs::read_dir(&src).with_context(|| format!("cannot read {}", src.display()))? {
        let candidate = index?.path().join(format!("{name}-{version}"));
        if candidate.join("Cargo.toml").exists() {
            return Ok(candidate);
        }
    }
    bail!(
        "{name} {version} is not unpacked under {}: run the {version} row first",
        src.display()
    )
}

fn check(label: String, ws: &Path, target: &Path) -> Row {
    let cargo = |args: &[&str]| -> Result<f64, String> {
        let mut c = Command::new("cargo");
        c.args(args)
            .current_dir(ws)
            .env("CARGO_TARGET_DIR", target)
            // The workspace's own lints are checked once, by `cargo clippy`.
            .env_remove("RUSTFLAGS");
        let start = Instant::now();
        run_cmd(&mut c).map_err(|e| e.to_string())?;
        Ok(start.elapsed().as_secs_f64())
    };
    let mut steps = Vec::new();
    steps.push((
        "build",
        cargo(&[
            "build",
            "--release",
            "-p",
            "tensor-lifetime",
            "-p",
            "tensor-lifetime-macros",
            "-p",
            "tensor-lifetime-report",
        ]),
    ));
    let version = label.split(' ').next().unwrap_or("");
    let feature = format!("macros,tracking,{}", feature_of(version));
    let mut tracker = vec!["test", "--release", "-p", "tensor-lifetime"];
    if feature_of(version) != "candle-0-11" {
        tracker.extend(["--lib", "--no-default-features", "--features", &feature]);
    }
    steps.push(("tracker tests", cargo(&tracker)));
    let mut examples = vec![
        "test",
        "--release",
        "-p",
        "tensor-lifetime-tests",
        "--test",
        "examples",
        "--",
    ];
    examples.extend(EXAMPLE_TESTS);
    steps.push(("CPU examples", cargo(&examples)));
    let resolved = fs::read_to_string(ws.join("Cargo.lock"))
        .map(|l| resolved_of_minor(&l, version).join(" + "))
        .unwrap_or_else(|_| "?".into());
    let expected = version;
    if resolved != expected {
        steps.push((
            "resolved",
            Err(format!(
                "candle-core resolved to {resolved}, not {expected}"
            )),
        ));
    }
    Row {
        label,
        resolved,
        steps,
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| candle-core | resolved in Cargo.lock (its minor) | build | tracker tests | CPU examples (4) |\n\
         |---|---|---|---|---|\n",
    );
    for r in rows {
        let wrong = r.steps.iter().any(|(n, s)| *n == "resolved" && s.is_err());
        let cells: Vec<String> = r
            .steps
            .iter()
            .filter(|(n, _)| *n != "resolved")
            .map(|(_, s)| match s {
                Ok(secs) => format!("ok ({secs:.0} s)"),
                Err(_) => "FAILED".to_string(),
            })
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            r.label,
            if wrong {
                format!("{} (WRONG)", r.resolved)
            } else {
                r.resolved.clone()
            },
            cells.join(" | ")
        ));
    }
    out
}

fn run_quiet(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{}`", util::show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", util::show(cmd));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_candle_versions_from_a_lock() {
        let lock = "version = 4\n\n[[package]]\nname = \"candle-core\"\nversion = \"0.8.4\"\n\
                    \n[[package]]\nname = \"candle-nn\"\nversion = \"0.8.4\"\n\
                    \n[[package]]\nname = \"candle-core\"\nversion = \"0.11.1\"\n";
        assert_eq!(candle_versions(lock), ["0.8.4", "0.11.1"]);
        assert_eq!(resolved_of_minor(lock, "0.8.1"), ["0.8.4"]);
        assert_eq!(feature_of("0.10.2"), "candle-0-10");
    }

    #[test]
    fn the_table_marks_failures() {
        let rows = [Row {
            label: "0.8.4 (crates.io)".into(),
            resolved: "0.8.4".into(),
            steps: vec![("build", Ok(61.2)), ("tracker tests", Err("x".into()))],
        }];
        let t = table(&rows);
        assert!(
            t.contains("| 0.8.4 (crates.io) | 0.8.4 | ok (61 s) | FAILED |"),
            "{t}"
        );
    }
}
