//! `cargo xtask layers`: the module layering of each crate, and the page naming every
//! source file, checked against docs/architecture.md.
//!
//! For each crate under `crates/` the module tree and the uses between modules are read
//! from the sources (`modules`), the allowed uses from the page's `## Layers` section
//! (`table`), and every use is judged (`check`): a use the table does not allow, a cycle
//! between rooms, a row naming no module and a module in no room all fail, each with the
//! file and line to change. Then `files` checks that the page names every source file.
//! Every problem is printed, not only the first.

mod check;
mod files;
mod modules;
mod table;
#[cfg(test)]
mod tests;

use anyhow::{bail, Result};
use check::Rooms;
use std::path::Path;

/// `cargo xtask layers [--graph]`.
pub fn run(args: &[String]) -> Result<()> {
    let root = crate::util::root();
    match args {
        [] => {
            let problems = check(&root)?;
            if problems.is_empty() {
                println!(
                    "layers: every use between rooms is allowed, no cycles; \
                     docs/architecture.md names every source file"
                );
                return Ok(());
            }
            for p in &problems {
                eprintln!("{p}\n");
            }
            bail!("layers: {} problem(s)", problems.len())
        }
        [flag] if flag == "--graph" => {
            print!("{}", graph(&root)?);
            Ok(())
        }
        _ => bail!("usage: cargo xtask layers [--graph]"),
    }
}

/// The folders under `crates/`, relative to `root`, sorted.
fn crate_folders(root: &Path) -> Result<Vec<String>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(root.join("crates"))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            dirs.push(format!("crates/{}", entry.file_name().to_string_lossy()));
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// The crates whose module trees are read: those with a `src/lib.rs`.
fn crate_dirs(root: &Path) -> Result<Vec<String>> {
    let mut dirs = crate_folders(root)?;
    dirs.retain(|d| root.join(d).join("src/lib.rs").is_file());
    Ok(dirs)
}

fn page(root: &Path) -> Result<String> {
    let path = root.join("docs/architecture.md");
    std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
}

/// Every problem of the workspace at `root`, as messages (empty: it passes).
pub fn check(root: &Path) -> Result<Vec<String>> {
    let page = page(root)?;
    let layers = table::Layers::parse(&page)?;
    let dirs = crate_dirs(root)?;
    let mut problems = Vec::new();
    for t in &layers.tables {
        if !dirs.contains(&t.dir) {
            problems.push(format!(
                "docs/architecture.md:{}: `{}` is no crate with a src/lib.rs (a stale table)",
                t.line, t.dir
            ));
        }
    }
    for dir in &dirs {
        let tree = modules::read_crate(root, dir)?;
        problems.extend(check::check_crate(&tree, layers.table(dir)));
    }
    let unnamed = files::unnamed(root, &page)?;
    if !unnamed.is_empty() {
        let mut s = String::from(
            "docs/architecture.md names no source file of these \
             (see its Layers section for how a tree names a file):",
        );
        for f in unnamed {
            s.push_str("\n    ");
            s.push_str(&f);
        }
        problems.push(s);
    }
    Ok(problems)
}

/// Per crate, a table of the uses between rooms (every module its own room where the
/// page has no table): the code's layering, to write or review the page's tables.
fn graph(root: &Path) -> Result<String> {
    let layers = table::Layers::parse(&page(root)?).unwrap_or_default();
    let mut out = String::new();
    for dir in crate_dirs(root)? {
        let tree = modules::read_crate(root, &dir)?;
        let rooms = match layers.table(&dir) {
            Some(t) => Rooms::from_table(t),
            None => Rooms::every_module(&tree),
        };
        out.push_str(&format!("### `{dir}`\n\n| room | uses |\n|---|---|\n"));
        let graph = rooms.graph(&tree);
        for a in rooms.names() {
            let list: Vec<String> = graph
                .get(&a)
                .into_iter()
                .flat_map(|uses| uses.keys().map(|b| format!("`{b}`")))
                .collect();
            let list = if list.is_empty() {
                "—".to_string()
            } else {
                list.join(", ")
            };
            out.push_str(&format!("| `{a}` | {list} |\n"));
        }
        out.push('\n');
    }
    Ok(out)
}
