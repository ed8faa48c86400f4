//! `cargo xtask user-crates`: a user's crate, outside the workspace, built and run
//! against each supported candle-core the way a user sets it up: its own `Cargo.toml`
//! pinning its candle, tensor-lifetime by path with the line README's "Works with" gives
//! for that candle's minor (read from README.md, so the README is what is tested), and no
//! lockfile: Cargo resolves it fresh, as on a user's first build.
//!
//! The crate (`xtask/user-crates/app`) has three mistakes and a clean loop; each mistake's
//! line is marked `// expect: KIND label`, and the run's JSON report must hold exactly
//! those findings. The same crate without the README's step must fail to build with the
//! error that names both candles and the line to write, and, with the build check turned
//! off, say so at the first probe. Every case shares one target directory, so candle and
//! the other dependencies compile once per release; the crates live outside the
//! repository (Cargo refuses a package inside another workspace's folder).

use super::registry_source;
use crate::util::{self, show};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// What a case writes for tensor-lifetime in its `Cargo.toml`.
#[derive(Clone, Copy)]
enum Step {
    /// README's line for the minor.
    Readme,
    /// `tensor-lifetime = { path = ... }`: the step skipped.
    Skipped,
    /// The minor's feature added without turning the default one off.
    FeatureOnly,
}

/// What a case must show.
#[derive(Clone, Copy)]
enum Expect {
    /// Runs and reports exactly the marked findings.
    Findings,
    /// Fails to build with an error containing each of these.
    BuildError(&'static [&'static str]),
    /// Runs with `TENSOR_LIFETIME_CANDLE_CHECK=off`, reports nothing, and says each of
    /// these on stderr.
    RunError(&'static [&'static str]),
}

struct Case {
    name: &'static str,
    /// The requirement written for candle-core and candle-nn.
    candle: &'static str,
    /// README's row (the candle's minor).
    minor: &'static str,
    step: Step,
    /// candle-core through `[patch.crates-io]`: a path copy of this release.
    patch: Option<&'static str>,
    expect: Expect,
}

/// The first foreign value probed may be a tensor or a container of them (`Vec<Tensor>`).
const FOREIGN: &str = "of another candle-core was probed, so its tensors are not tracked";

/// In build order: the releases first, so the cases without the step find everything
/// compiled.
const CASES: &[Case] = &[
    Case::readme("0.11.1", "=0.11.1", "0.11"),
    Case::readme("0.8.4", "=0.8.4", "0.8"),
    Case::readme("0.9.1", "=0.9.1", "0.9"),
    Case::readme("0.10.2", "=0.10.2", "0.10"),
    Case::readme("caret-0.9", "0.9", "0.9"),
    Case {
        patch: Some("0.9.1"),
        ..Case::readme("patch-0.9.1", "=0.9.1", "0.9")
    },
    Case::skipped("0.8.4", "=0.8.4", &[
        "`app` uses candle-core 0.8.4 but tensor-lifetime was resolved to candle-core 0.11.1",
        r#"default-features = false, features = ["macros", "tracking", "candle-0-8"]"#,
    ]),
    Case::skipped("0.9.1", "=0.9.1", &[
        "`app` uses candle-core 0.9.1 but tensor-lifetime was resolved to candle-core 0.11.1",
        r#"default-features = false, features = ["macros", "tracking", "candle-0-9"]"#,
    ]),
    Case::skipped("0.10.2", "=0.10.2", &[
        "`app` uses candle-core 0.10.2 but tensor-lifetime was resolved to candle-core 0.11.1",
        r#"default-features = false, features = ["macros", "tracking", "candle-0-10"]"#,
    ]),
    Case {
        patch: Some("0.9.1"),
        ..Case::skipped("patch-0.9.1", "=0.9.1", &[
            "`app` uses candle-core 0.9.1 but tensor-lifetime was resolved to candle-core 0.11.1",
            r#"features = ["macros", "tracking", "candle-0-9"]"#,
        ])
    },
    Case {
        name: "no-step-0.9.1-check-off",
        expect: Expect::RunError(&[
            FOREIGN,
            "tensor-lifetime was built with candle-core 0.11.1",
            r#"default-features = false, features = ["macros", "tracking", "candle-0-9"]"#,
        ]),
        ..Case::skipped("0.9.1", "=0.9.1", &[])
    },
    Case {
        name: "feature-only-0.9.1",
        step: Step::FeatureOnly,
        expect: Expect::BuildError(&[
            "the features candle-0-9, candle-0-11 each select a candle-core",
            r#"default-features = false, features = ["macros", "tracking", "candle-0-9"]"#,
        ]),
        ..Case::readme("0.9.1", "=0.9.1", "0.9")
    },
];

impl Case {
    const fn readme(name: &'static str, candle: &'static str, minor: &'static str) -> Case {
        Case {
            name,
            candle,
            minor,
            step: Step::Readme,
            patch: None,
            expect: Expect::Findings,
        }
    }

    const fn skipped(
        name: &'static str,
        candle: &'static str,
        errors: &'static [&'static str],
    ) -> Case {
        Case {
            name,
            candle,
            minor: "",
            step: Step::Skipped,
            patch: None,
            expect: Expect::BuildError(errors),
        }
    }

    fn dir_name(&self) -> String {
        match self.step {
            Step::Skipped if !self.name.starts_with("no-step") => format!("no-step-{}", self.name),
            _ => self.name.to_string(),
        }
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let mut only: Vec<String> = Vec::new();
    let mut dir = std::env::temp_dir().join("tensor-lifetime-user-crates");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only" => only.push(util::flag_value("--only", &mut it)?),
            "--dir" => dir = PathBuf::from(util::flag_value("--dir", &mut it)?),
            other => bail!("user-crates: unknown option `{other}`"),
        }
    }
    if dir.starts_with(util::root()) {
        bail!("user-crates: {} is inside the workspace", dir.display());
    }
    let readme = fs::read_to_string(util::root().join("README.md"))?;
    let source = fs::read_to_string(app_dir().join("src/main.rs"))?;
    let expected = expected_findings(&source);
    let target = dir.join("target");
    let start = Instant::now();
    let mut rows = Vec::new();
    for case in CASES {
        let name = case.dir_name();
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let case_start = Instant::now();
        let result = check(case, &dir.join(&name), &target, &readme, &expected);
        rows.push((name, result, case_start.elapsed().as_secs_f64()));
    }
    println!("| case | result | wall |\n|---|---|---|");
    for (name, result, secs) in &rows {
        let cell = match result {
            Ok(what) => format!("ok: {what}"),
            Err(_) => "FAILED".into(),
        };
        println!("| {name} | {cell} | {secs:.0} s |");
    }
    println!("total: {:.0} s", start.elapsed().as_secs_f64());
    let failed: Vec<_> = rows.iter().filter(|(_, r, _)| r.is_err()).collect();
    for (name, result, _) in &failed {
        if let Err(e) = result {
            eprintln!("error: {name}: {e:#}");
        }
    }
    if !failed.is_empty() {
        bail!(
            "user-crates: {} of {} cases failed",
            failed.len(),
            rows.len()
        );
    }
    Ok(())
}

fn app_dir() -> PathBuf {
    util::root().join("xtask/user-crates/app")
}

/// A finding the crate's source marks: `// expect: KIND label field=value...`.
#[derive(Debug, PartialEq)]
struct Expected {
    kind: String,
    line: u64,
    label: String,
    /// Numeric fields of the JSON finding (`bytes=1024`).
    fields: Vec<(String, u64)>,
}

fn expected_findings(source: &str) -> Vec<Expected> {
    let mut out = Vec::new();
    for (i, line) in source.lines().enumerate() {
        if let Some((_, mark)) = line.split_once("// expect: ") {
            let mut words = mark.split_whitespace();
            if let (Some(kind), Some(label)) = (words.next(), words.next()) {
                let fields = words
                    .filter_map(|w| w.split_once('='))
                    .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                    .collect();
                out.push(Expected {
                    kind: kind.to_string(),
                    line: i as u64 + 1,
                    label: label.to_string(),
                    fields,
                });
            }
        }
    }
    out
}

/// Whether the report's findings are exactly the expected ones, fields included.
fn compare(found: &[serde_json::Value], expected: &[Expected]) -> Result<()> {
    let key = |f: &serde_json::Value| {
        let kind = match f["kind"].as_str().unwrap_or("") {
            "leak" => "LEAK",
            "graph_retention" => "GRAPH",
            "view_retention" => "VIEW",
            "retained" => "RETAINED",
            other => other,
        };
        let label = f["site"]["label"].as_str().unwrap_or("");
        (
            kind.to_string(),
            f["site"]["line"].as_u64().unwrap_or(0),
            label.to_string(),
        )
    };
    let mut got: Vec<_> = found.iter().map(key).collect();
    let mut want: Vec<_> = expected
        .iter()
        .map(|e| (e.kind.clone(), e.line, e.label.clone()))
        .collect();
    got.sort();
    want.sort();
    if got != want {
        bail!("findings {got:?}, expected {want:?}");
    }
    for e in expected {
        let f = found
            .iter()
            .find(|f| key(f) == (e.kind.clone(), e.line, e.label.clone()))
            .expect("compared above");
        for (field, value) in &e.fields {
            if f[field].as_u64() != Some(*value) {
                bail!(
                    "{} `{}`: {field} is {}, expected {value}",
                    e.kind,
                    e.label,
                    f[field]
                );
            }
        }
    }
    Ok(())
}

/// README's dependency line for a candle minor (the "Works with" table's row), with the
/// path pointing at this checkout.
fn readme_line(readme: &str, minor: &str) -> Result<String> {
    let section = readme
        .split("\n## Works with")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .context("README.md has no \"Works with\" section")?;
    let row = section
        .lines()
        .find(|l| l.starts_with(&format!("| {minor} ")))
        .with_context(|| format!("README.md's \"Works with\" has no row for {minor}"))?;
    let line = row
        .split('`')
        .find(|s| s.starts_with("tensor-lifetime = "))
        .with_context(|| format!("README.md's row for {minor} has no `tensor-lifetime = ...`"))?;
    Ok(with_path(line))
}

/// A `tensor-lifetime = { path = "...", ... }` line with the path of this checkout.
fn with_path(line: &str) -> String {
    let path = util::root().join("crates/tensor-lifetime");
    let ours = format!("path = \"{}\"", path.display());
    match line.split_once("path = \"") {
        Some((head, rest)) => {
            let tail = rest.split_once('"').map_or("", |(_, t)| t);
            format!("{head}{ours}{tail}")
        }
        None => line.to_string(),
    }
}

fn manifest(case: &Case, readme: &str) -> Result<String> {
    let tensor_lifetime = match case.step {
        Step::Readme => readme_line(readme, case.minor)?,
        Step::Skipped => with_path("tensor-lifetime = { path = \"\" }"),
        Step::FeatureOnly => with_path(&format!(
            "tensor-lifetime = {{ path = \"\", features = [\"candle-0-{}\"] }}",
            case.minor.trim_start_matches("0.")
        )),
    };
    let mut text = format!(
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ncandle-core = \"{c}\"\ncandle-nn = \"{c}\"\n{tensor_lifetime}\n",
        c = case.candle
    );
    if case.patch.is_some() {
        text.push_str("\n[patch.crates-io]\ncandle-core = { path = \"vendor/candle-core\" }\n");
    }
    Ok(text)
}

/// Writes the case's crate afresh (no lockfile), builds and runs it, and checks what it
/// must show; says what it saw.
fn check(
    case: &Case,
    dir: &Path,
    target: &Path,
    readme: &str,
    expected: &[Expected],
) -> Result<String> {
    fs::create_dir_all(dir.join("src"))?;
    fs::copy(app_dir().join("src/main.rs"), dir.join("src/main.rs"))?;
    let _ = fs::remove_file(dir.join("Cargo.lock"));
    let manifest = manifest(case, readme)?;
    fs::write(dir.join("Cargo.toml"), &manifest)?;
    if let Some(version) = case.patch {
        let vendor = dir.join("vendor/candle-core");
        if !vendor.join("Cargo.toml").exists() {
            fs::create_dir_all(dir.join("vendor"))?;
            let src = registry_source("candle-core", version)?;
            let status = Command::new("cp")
                .arg("-a")
                .arg(&src)
                .arg(&vendor)
                .status()?;
            if !status.success() {
                bail!("cannot copy {}", src.display());
            }
        }
    }
    let dependencies = manifest
        .split("[dependencies]\n")
        .nth(1)
        .unwrap_or_default();
    eprintln!("== {}\n{}", case.dir_name(), dependencies.trim_end());
    let json = dir.join("report.json");
    let _ = fs::remove_file(&json);
    let mut cargo = Command::new("cargo");
    cargo
        .args(["run", "--release", "--quiet"])
        .current_dir(dir)
        // As a shell sets it: tensor-lifetime's build script reruns for another crate.
        .env("PWD", dir)
        .env("CARGO_TARGET_DIR", target)
        .env("TENSOR_LIFETIME_JSON", &json)
        .env_remove("RUSTFLAGS");
    for (key, _) in std::env::vars() {
        if key.starts_with("TENSOR_LIFETIME") && key != "TENSOR_LIFETIME_JSON" {
            cargo.env_remove(key);
        }
    }
    if matches!(case.expect, Expect::RunError(_)) {
        cargo.env("TENSOR_LIFETIME_CANDLE_CHECK", "off");
    }
    let out = cargo
        .output()
        .with_context(|| format!("cannot start `{}`", show(&cargo)))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match case.expect {
        Expect::Findings => {
            ran(&out, &stderr)?;
            let resolved = resolved(dir, case)?;
            let found = findings(&json)?;
            compare(&found, expected).map_err(|e| anyhow::anyhow!("{e}\n{stderr}"))?;
            Ok(format!(
                "{} findings at the marked lines, candle-core {resolved}",
                found.len()
            ))
        }
        Expect::BuildError(errors) => {
            if out.status.success() {
                bail!("built and ran; expected a build error\n{stderr}");
            }
            contains_all(&stderr, errors)?;
            let line = stderr
                .lines()
                .find(|l| l.contains(errors[0]))
                .unwrap_or_default();
            Ok(format!("build error: {}", line.trim()))
        }
        Expect::RunError(errors) => {
            ran(&out, &stderr)?;
            contains_all(&stderr, errors)?;
            let found = findings(&json)?;
            if !found.is_empty() {
                bail!("a foreign candle's tensors were tracked: {found:#?}");
            }
            Ok("ran, 0 findings, the error at the first probe".into())
        }
    }
}

fn ran(out: &Output, stderr: &str) -> Result<()> {
    if !out.status.success() {
        bail!("`cargo run --release` failed ({})\n{stderr}", out.status);
    }
    Ok(())
}

fn contains_all(stderr: &str, needles: &[&str]) -> Result<()> {
    for n in needles {
        if !stderr.contains(n) {
            bail!("the output does not say {n:?}\n{stderr}");
        }
    }
    Ok(())
}

/// The candle-core the crate's lock resolved: one, of the case's minor, from the patch's
/// path when there is one.
fn resolved(dir: &Path, case: &Case) -> Result<String> {
    let lock = fs::read_to_string(dir.join("Cargo.lock"))?;
    let candles: Vec<&str> = lock
        .split("[[package]]")
        .filter(|b| b.contains("\nname = \"candle-core\"\n"))
        .collect();
    let [block] = candles.as_slice() else {
        bail!("Cargo.lock holds {} candle-cores", candles.len());
    };
    let version = block
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .map(|v| v.trim_end_matches('"'))
        .unwrap_or("?");
    if !version.starts_with(&format!("{}.", case.minor)) {
        bail!(
            "candle-core {version} resolved, not a {} release",
            case.minor
        );
    }
    let from_registry = block.contains("\nsource = ");
    match (case.patch, from_registry) {
        (Some(_), true) => bail!("candle-core {version} came from crates.io, not the patch"),
        (Some(_), false) => Ok(format!("{version} (path, [patch.crates-io])")),
        (None, _) => Ok(version.to_string()),
    }
}

/// The findings of the run's JSON report.
fn findings(json: &Path) -> Result<Vec<serde_json::Value>> {
    let text = fs::read_to_string(json)
        .with_context(|| format!("no JSON report at {}", json.display()))?;
    let report: serde_json::Value = serde_json::from_str(&text)?;
    Ok(report["findings"]
        .as_array()
        .context("no findings array")?
        .clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marked_lines_are_the_expected_findings() {
        let src = "fn f() {\n    let x = g(); // expect: LEAK x bytes=64\n}\n";
        let want = Expected {
            kind: "LEAK".into(),
            line: 2,
            label: "x".into(),
            fields: vec![("bytes".into(), 64)],
        };
        assert_eq!(expected_findings(src), [want]);
    }

    #[test]
    fn readme_gives_a_line_for_every_minor() {
        let readme = fs::read_to_string(util::root().join("README.md")).unwrap();
        for minor in ["0.8", "0.9", "0.10", "0.11"] {
            let line = readme_line(&readme, minor).unwrap();
            assert!(line.contains("crates/tensor-lifetime\""), "{line}");
            if minor != "0.11" {
                let feature = format!("\"candle-0-{}\"", &minor[2..]);
                assert!(line.contains(&feature), "{line}");
                assert!(line.contains("default-features = false"), "{line}");
            }
        }
    }
}
