//! `cargo xtask doc-commands`: the commands that README.md and the guide in `docs/` tell a
//! user to type, run as a user runs them, from a fresh clone.
//!
//! A command block is a fenced block whose info string starts with `sh`. Every block is run
//! unless its info string says where else it runs, after `sh`:
//!
//! - `gpu-host`: on the machine with the GPU (the binaries that `cargo xtask gpu-build`
//!   carries there); not run here, listed as such;
//! - `slow`: runs for many minutes (benchmarks, the candle matrix); run with `--slow`;
//! - `ci`: the same command is a line of `.ci/run`, which CI runs: checked to be there.
//!
//! The blocks of one page run in order in one `bash -euo pipefail` session, so a page may
//! make a file in one block and read it in the next. The session runs in the repository's
//! root, as a user types them after cloning (CI's checkout is a fresh clone), with a
//! temporary `CARGO_INSTALL_ROOT` on `PATH` (a page's `cargo install` installs there, not
//! into the user's `~/.cargo`). The files and folders the commands leave that were not
//! there before (`git ls-files --others --directory`) are removed afterwards. A page
//! whose session fails fails the task, with its output.

use crate::util::{self, flag_value};
use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Where a block runs, from its info string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Here,
    Slow,
    GpuHost,
    Ci,
}

/// One fenced `sh` block of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    place: Place,
    text: String,
}

/// The pages whose commands are checked: README.md and the Markdown files directly in
/// `docs/` (the raw outputs under `docs/gpu-runs/` are records, not instructions).
fn pages(root: &Path) -> Result<Vec<PathBuf>> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    Ok(pages)
}

/// The `sh` blocks of a page, in order. An unknown word after `sh` is an error naming the
/// page and line, so a misspelt place does not silently skip a block.
fn blocks(page: &str, name: &str) -> Result<Vec<Block>> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Option<Place>, String)> = None;
    for (i, line) in page.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((start, place, text)) = open.as_mut() {
            if trimmed.starts_with("```") {
                if let Some(place) = *place {
                    out.push(Block {
                        line: *start,
                        place,
                        text: std::mem::take(text),
                    });
                }
                open = None;
            } else {
                text.push_str(line);
                text.push('\n');
            }
            continue;
        }
        let Some(info) = trimmed.strip_prefix("```") else {
            continue;
        };
        let mut words = info.split_whitespace();
        let place = match words.next() {
            Some("sh") => Some(match words.next() {
                None => Place::Here,
                Some("slow") => Place::Slow,
                Some("gpu-host") => Place::GpuHost,
                Some("ci") => Place::Ci,
                Some(other) => bail!(
                    "{name}:{}: unknown place `{other}` after ```sh (known: slow, gpu-host, ci)",
                    i + 1
                ),
            }),
            _ => None,
        };
        open = Some((i + 1, place, String::new()));
    }
    if let Some((start, _, _)) = open {
        bail!("{name}:{start}: a fenced block is not closed");
    }
    Ok(out)
}

/// The command lines of a block: without comments and blank lines, a trailing comment
/// cut off, continuation lines joined.
fn command_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let code = line.split(" #").next().unwrap_or_default().trim();
        if code.is_empty() || code.starts_with('#') {
            continue;
        }
        if let Some(head) = code.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(code);
        out.push(std::mem::take(&mut pending));
    }
    out
}

/// A `ci` block's commands that `.ci/run` does not hold, line for line.
fn missing_from_ci(block: &Block, ci: &str) -> Vec<String> {
    let ci_lines: Vec<String> = command_lines(ci);
    command_lines(&block.text)
        .into_iter()
        .filter(|c| !ci_lines.iter().any(|l| l == c))
        .collect()
}

pub fn run(args: &[String]) -> Result<()> {
    let mut slow = false;
    let mut only: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--slow" => slow = true,
            "--only" => only.push(flag_value("--only", &mut it)?),
            other => bail!("doc-commands: unknown option `{other}`"),
        }
    }
    let root = util::root();
    let ci = fs::read_to_string(root.join(".ci/run")).context("cannot read .ci/run")?;
    let work = std::env::temp_dir().join(format!(
        "tensor-lifetime-doc-commands-{}",
        std::process::id()
    ));
    let install = work.join("install");
    let path = format!(
        "{}:{}",
        install.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let before = untracked(&root)?;

    let mut problems = Vec::new();
    let mut rows = Vec::new();
    for page in pages(&root)? {
        let name = page
            .strip_prefix(&root)
            .unwrap_or(&page)
            .display()
            .to_string();
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let blocks = blocks(&fs::read_to_string(&page)?, &name)?;
        let mut script = String::from("set -euo pipefail\n");
        let mut count = [0usize; 4];
        for b in &blocks {
            count[b.place as usize] += 1;
            match b.place {
                Place::Here => script.push_str(&b.text),
                Place::Slow if slow => script.push_str(&b.text),
                Place::Ci => {
                    for c in missing_from_ci(b, &ci) {
                        problems.push(format!(
                            "{name}:{}: `{c}` is marked ci but .ci/run does not run it",
                            b.line
                        ));
                    }
                }
                Place::Slow | Place::GpuHost => {}
            }
        }
        let runs = count[Place::Here as usize] + if slow { count[Place::Slow as usize] } else { 0 };
        let mut result = String::from("-");
        if runs > 0 {
            let start = Instant::now();
            eprintln!("== {name}: {runs} block(s)");
            let out = Command::new("bash")
                .arg("-c")
                .arg(&script)
                .current_dir(&root)
                // `cargo install` builds in a temporary folder otherwise.
                .env("CARGO_TARGET_DIR", root.join("target"))
                .env("CARGO_INSTALL_ROOT", &install)
                .env("PATH", &path)
                .output()
                .with_context(|| format!("cannot run bash for {name}"))?;
            let secs = start.elapsed().as_secs_f64();
            if out.status.success() {
                result = format!("ok ({secs:.0} s)");
            } else {
                result = format!("FAILED ({secs:.0} s)");
                problems.push(format!(
                    "{name}: its commands failed ({}):\n{}\n{}",
                    out.status,
                    tail(&String::from_utf8_lossy(&out.stdout)),
                    tail(&String::from_utf8_lossy(&out.stderr))
                ));
            }
        }
        rows.push(format!(
            "| {name} | {} | {} | {} | {} | {result} |",
            count[Place::Here as usize],
            count[Place::Ci as usize],
            count[Place::Slow as usize],
            count[Place::GpuHost as usize]
        ));
    }
    println!(
        "| page | run here | in .ci/run | slow | GPU host | result |\n|---|---|---|---|---|---|"
    );
    for r in &rows {
        println!("{r}");
    }
    let _ = fs::remove_dir_all(&work);
    for left in untracked(&root)?.difference(&before) {
        let p = root.join(left);
        let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
    }
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("error: {p}");
        }
        bail!("doc-commands: {} problem(s)", problems.len());
    }
    Ok(())
}

/// The files and folders git does not track, folders as one entry (`target/`).
fn untracked(root: &Path) -> Result<BTreeSet<String>> {
    let out = Command::new("git")
        .args(["ls-files", "--others", "--directory"])
        .current_dir(root)
        .output()
        .context("cannot run git ls-files")?;
    if !out.status.success() {
        bail!(
            "git ls-files failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// The last lines of an output, enough to see why it failed.
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_read_with_their_place() {
        let page = "text\n```sh\ncargo run # a comment\n```\n```rust\nfn x() {}\n```\n```sh gpu-host\nsh gpu-bin/run.sh x\n```\n";
        let b = blocks(page, "p.md").unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].line, b[0].place), (2, Place::Here));
        assert_eq!(b[1].place, Place::GpuHost);
        assert_eq!(command_lines(&b[0].text), ["cargo run"]);
    }

    #[test]
    fn an_unknown_place_and_an_open_fence_are_errors() {
        let e = blocks("```sh gpu\nx\n```\n", "p.md")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.md:1: unknown place `gpu`"), "{e}");
        let e = blocks("a\n```sh\nx\n", "p.md").unwrap_err().to_string();
        assert!(e.contains("p.md:2: a fenced block is not closed"), "{e}");
    }

    #[test]
    fn continuation_lines_are_joined_and_ci_lines_checked() {
        let b = Block {
            line: 1,
            place: Place::Ci,
            text: "cargo test --workspace \\\n  --release\ncargo xtask layers\n".into(),
        };
        assert_eq!(
            command_lines(&b.text),
            ["cargo test --workspace --release", "cargo xtask layers"]
        );
        let ci = "set -e\ncargo test --workspace --release   # the README's\n";
        assert_eq!(missing_from_ci(&b, ci), ["cargo xtask layers"]);
    }
}
