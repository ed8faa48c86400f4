//! `cargo xtask gpu-build`: the GPU binaries, built here, ready to carry to the GPU host.
//!
//! 1. the toolkit (`cuda-toolkit`, installed if missing);
//! 2. the libraries with `--features cuda` in `target/cuda` (candle-kernels' PTX build is
//!    the long part: about 9 minutes on 2 cores the first time);
//! 3. the link stubs, from the undefined symbols of those rlibs;
//! 4. the binaries (examples and benches, see [`targets`]); a link error naming a CUDA
//!    symbol the rlibs did not show is learned and the link retried once;
//! 5. each binary stripped and gzip-compressed into `gpu-bin/` (git-ignored), beside
//!    `gpu-bin/run.sh`, which unpacks and runs one on the GPU host. Compressed, because a
//!    stripped binary with candle's kernels is ~48 MB and the device tool carries 64 MiB.
//!
//! `--candle VERSION` builds against another supported candle release: its toolkit
//! (`cuda-toolkit --candle`), its lockfile in the candle-matrix copy of the workspace, its
//! own target directory (`target/cuda-VERSION`); binaries are named `NAME-candle-VERSION`.

use crate::cuda_toolkit::{undefined_references, Toolkit};
use crate::util::{self, flag_value, run_cmd, show};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The package of the examples.
const EXAMPLES_PACKAGE: &str = "tensor-lifetime-examples";
/// Examples and benches whose file name starts with this are GPU targets by default.
const GPU_PREFIX: &str = "cuda_";
/// So are those whose text names this option (an example that runs on the CPU or, with
/// it, on the GPU: `decoding`, `server`).
const DEVICE_OPTION: &str = "--device cuda";
/// Most the device tool carries (its working-tree limit).
const CARRY_LIMIT: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Example,
    Bench,
}

impl Kind {
    fn flag(&self) -> &'static str {
        match self {
            Kind::Example => "--example",
            Kind::Bench => "--bench",
        }
    }
}

/// One binary to build: (package, kind, name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    package: String,
    kind: Kind,
    name: String,
}

/// The default targets: `examples/examples/cuda_*.rs`, and `benches/cuda_*.rs` of every
/// workspace package (top-level folders and `crates/*`), and the files there that name
/// `--device cuda` (an example that takes that option). Add one by dropping a file with
/// that prefix, or documenting the option in it; others by `--example NAME` / `--bench
/// NAME`.
fn targets(root: &Path) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    for name in prefixed_rs_files(&root.join("examples/examples")) {
        out.push(Target {
            package: EXAMPLES_PACKAGE.into(),
            kind: Kind::Example,
            name,
        });
    }
    let mut package_dirs: Vec<PathBuf> = Vec::new();
    for dir in [root.to_path_buf(), root.join("crates")] {
        if let Ok(entries) = fs::read_dir(&dir) {
            package_dirs.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        }
    }
    package_dirs.sort();
    for dir in package_dirs {
        let benches = prefixed_rs_files(&dir.join("benches"));
        if benches.is_empty() {
            continue;
        }
        let package = package_name(&dir.join("Cargo.toml"))?;
        for name in benches {
            out.push(Target {
                package: package.clone(),
                kind: Kind::Bench,
                name,
            });
        }
    }
    Ok(out)
}

fn prefixed_rs_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".rs").map(String::from))
                .filter(|n| {
                    n.starts_with(GPU_PREFIX)
                        || fs::read_to_string(dir.join(format!("{n}.rs")))
                            .is_ok_and(|text| text.contains(DEVICE_OPTION))
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `name = "..."` of a manifest's `[package]` table.
fn package_name(manifest: &Path) -> Result<String> {
    let text = fs::read_to_string(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let mut in_package = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("name") {
                let v = v.trim_start().trim_start_matches('=').trim();
                return Ok(v.trim_matches('"').to_string());
            }
        }
    }
    bail!("no [package] name in {}", manifest.display())
}

fn cargo(tk: &Toolkit, workspace: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace);
    for (k, v) in tk.env() {
        cmd.env(k, v);
    }
    if let Ok(jobs) = std::env::var("GPU_BUILD_JOBS") {
        cmd.env("CARGO_BUILD_JOBS", jobs);
    }
    cmd
}

/// Builds `targets` of one package; returns the executables (target name -> path) or the
/// linker's output on failure.
fn build_binaries(
    tk: &Toolkit,
    workspace: &Path,
    package: &str,
    targets: &[&Target],
) -> Result<Result<BTreeMap<String, PathBuf>, String>> {
    let mut cmd = cargo(tk, workspace);
    cmd.args(["build", "--release", "-p", package, "--features", "cuda"])
        .arg("--message-format=json-render-diagnostics");
    for t in targets {
        cmd.args([t.kind.flag(), &t.name]);
    }
    eprintln!("$ {}", show(&cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start cargo")?;
    // stderr (progress, rendered diagnostics) is echoed and kept for link errors.
    let stderr = child.stderr.take().expect("piped");
    let echo = std::thread::spawn(move || {
        let mut kept = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            kept.push_str(&line);
            kept.push('\n');
        }
        kept
    });
    let mut executables = BTreeMap::new();
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(exe), Some(name)) =
            (msg["executable"].as_str(), msg["target"]["name"].as_str())
        {
            executables.insert(name.to_string(), PathBuf::from(exe));
        }
    }
    let status = child.wait()?;
    let stderr = echo.join().unwrap_or_default();
    if status.success() {
        Ok(Ok(executables))
    } else {
        Ok(Err(stderr))
    }
}

const RUN_SH: &str = r#"#!/bin/sh
# Runs one GPU binary built by `cargo xtask gpu-build`, on the GPU host:
#   sh gpu-bin/run.sh NAME [ARGS...]
# Unpacks gpu-bin/NAME.gz into $TL_GPU_BIN (default /tmp/tl-gpu-bin), puts the CUDA
# libraries on LD_LIBRARY_PATH ($CUDA_LIB, default the CUDA 13.0 toolkit's), and links any
# library the binary still cannot find to another version found there.
set -e
here=$(cd "$(dirname "$0")" && pwd)
name=$1
[ -n "$name" ] || { echo "usage: sh gpu-bin/run.sh NAME [ARGS...]; NAME one of:" >&2; ls "$here" | sed -n 's/\.gz$//p' >&2; exit 2; }
shift
bin=${TL_GPU_BIN:-/tmp/tl-gpu-bin}
mkdir -p "$bin"
if [ ! -x "$bin/$name" ] || [ "$here/$name.gz" -nt "$bin/$name" ]; then
    gunzip -c "$here/$name.gz" > "$bin/$name"
    chmod +x "$bin/$name"
fi
: "${CUDA_LIB:=/usr/local/cuda-13.0/targets/x86_64-linux/lib}"
export LD_LIBRARY_PATH="$CUDA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for lib in $(ldd "$bin/$name" | awk '/not found/ {print $1}'); do
    found=$(ls "$CUDA_LIB/${lib%%.so*}".so.* /usr/local/cuda*/targets/x86_64-linux/lib/"${lib%%.so*}".so.* 2>/dev/null | head -n 1)
    if [ -n "$found" ]; then
        echo "run.sh: $lib not found, using $found" >&2
        ln -sf "$found" "$bin/$lib"
        export LD_LIBRARY_PATH="$bin:$LD_LIBRARY_PATH"
    else
        echo "run.sh: $lib not found" >&2
    fi
done
exec "$bin/$name" "$@"
"#;

pub fn run(args: &[String]) -> Result<()> {
    let root = util::root();
    let mut chosen: Vec<Target> = Vec::new();
    let mut all_examples = false;
    let mut candle: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--example" => chosen.push(Target {
                package: EXAMPLES_PACKAGE.into(),
                kind: Kind::Example,
                name: flag_value(a, &mut it)?,
            }),
            "--bench" => {
                let name = flag_value(a, &mut it)?;
                let Some(t) = targets(&root)?
                    .into_iter()
                    .find(|t| t.kind == Kind::Bench && t.name == name)
                else {
                    bail!("no bench `{name}` found in a benches/ folder")
                };
                chosen.push(t);
            }
            "--all-examples" => all_examples = true,
            "--candle" => candle = Some(flag_value(a, &mut it)?),
            other => bail!("gpu-build: unknown option `{other}`"),
        }
    }
    if chosen.is_empty() && !all_examples {
        chosen = targets(&root)?;
    }
    if all_examples {
        for name in fs::read_dir(root.join("examples/examples"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".rs").map(String::from))
        {
            chosen.push(Target {
                package: EXAMPLES_PACKAGE.into(),
                kind: Kind::Example,
                name,
            });
        }
    }
    chosen.sort();
    chosen.dedup();
    if chosen.is_empty() {
        bail!(
            "nothing to build: no examples/examples/{GPU_PREFIX}*.rs nor benches/{GPU_PREFIX}*.rs"
        );
    }

    let tk = Toolkit::new(candle.as_deref());
    tk.ensure_installed(false)?;
    // Another candle release builds in its own copy of the workspace, with its lockfile
    // (the candle-matrix copy), so the workspace's Cargo.lock is left alone.
    let workspace = match &candle {
        Some(v) => crate::candle_matrix::prepare_workspace(v, false)?,
        None => root.clone(),
    };
    // Binaries of another candle are named after it: NAME-candle-VERSION.
    let suffix = candle
        .as_ref()
        .map_or(String::new(), |v| format!("-candle-{v}"));

    // The libraries first: no executable is linked, so no stubs are needed yet.
    let mut packages: BTreeMap<&str, Vec<&Target>> = BTreeMap::new();
    for t in &chosen {
        packages.entry(t.package.as_str()).or_default().push(t);
    }
    for package in packages.keys() {
        run_cmd(cargo(&tk, &workspace).args([
            "build",
            "--release",
            "-p",
            package,
            "--features",
            "cuda",
            "--lib",
        ]))?;
    }
    let counts = tk.generate_stubs()?;
    eprintln!("link stubs (symbols per library): {counts:?}");

    let mut executables: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (package, targets) in &packages {
        let mut retried = false;
        loop {
            match build_binaries(&tk, &workspace, package, targets)? {
                Ok(exes) => {
                    executables.extend(exes);
                    break;
                }
                Err(output) => {
                    let missing = undefined_references(&output);
                    let new = tk.add_extra_symbols(&missing)?;
                    if retried || new == 0 {
                        bail!("the GPU build of {package} failed (see above)");
                    }
                    eprintln!("learned {new} CUDA symbols from the link errors; linking again");
                    tk.generate_stubs()?;
                    retried = true;
                }
            }
        }
    }

    let out_dir = root.join("gpu-bin");
    fs::create_dir_all(&out_dir)?;
    let mut total = 0;
    for t in &chosen {
        let exe = executables
            .get(&t.name)
            .with_context(|| format!("cargo reported no executable for `{}`", t.name))?;
        let stripped = out_dir.join(format!("{}{suffix}", t.name));
        run_cmd(Command::new("strip").arg("-o").arg(&stripped).arg(exe))?;
        run_cmd(Command::new("gzip").args(["-9", "-n", "-f"]).arg(&stripped))?;
        let gz = out_dir.join(format!("{}{suffix}.gz", t.name));
        let size = fs::metadata(&gz)?.len();
        total += size;
        println!(
            "{}  {:.1} MiB",
            gz.display(),
            size as f64 / (1 << 20) as f64
        );
    }
    fs::write(out_dir.join("run.sh"), RUN_SH)?;
    println!(
        "{}  (run on the GPU host: sh gpu-bin/run.sh NAME [ARGS...])",
        out_dir.join("run.sh").display()
    );
    println!(
        "gpu-bin: {:.1} MiB to carry",
        total as f64 / (1 << 20) as f64
    );
    if total > CARRY_LIMIT {
        eprintln!(
            "warning: gpu-bin/ is over the device tool's 64 MiB; build fewer targets \
             (--example NAME) per run"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_package_name() {
        let dir = std::env::temp_dir().join(format!("xtask-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let manifest = dir.join("Cargo.toml");
        fs::write(
            &manifest,
            "[workspace]\nname = \"no\"\n[package]\nversion = \"1\"\nname = \"benches-pkg\"\n",
        )
        .unwrap();
        assert_eq!(package_name(&manifest).unwrap(), "benches-pkg");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_the_gpu_examples_of_this_workspace() {
        let found = targets(&util::root()).unwrap();
        assert!(found.iter().all(|t| !t.package.is_empty()));
        let names: Vec<&str> = found.iter().map(|t| t.name.as_str()).collect();
        for name in ["cuda_training", "cuda_oom", "decoding", "server"] {
            assert!(names.contains(&name), "{name} missing: {names:?}");
        }
        assert!(
            !names.contains(&"leaky_dataset"),
            "a CPU-only example: {names:?}"
        );
    }
}
