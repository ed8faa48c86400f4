//! The second check: docs/architecture.md names every source file.
//!
//! A file under `crates/*/src`, `examples/src`, `tests/src` or `xtask/src` is named when
//! the page writes its full path (`crates/tensor-lifetime/src/weak.rs`) anywhere, or when
//! a tree names it. A tree is a fenced code block's run of lines that starts with a line
//! whose first word is the crate's `src/` folder (`crates/tensor-lifetime/src/`); each
//! later line is inside the folder of the nearest line above it that is indented less
//! and starts with a folder (`tracker/`), or in `src/`. On a line, every word that looks
//! like a file (`sweep.rs`, `event/line.rs`, `report.css`) is a path from that folder; a
//! line that starts with a folder names the folder's `mod.rs` and puts the rest of its
//! words inside it (`html/  mod.rs (layout), chart.rs (SVG)`). So a description may
//! mention its siblings (`lib.rs  the command line; main.rs is thin`) and continue on
//! lines indented further.

use anyhow::Result;
use std::collections::BTreeSet;
use std::path::Path;

/// The folders whose files the page names.
pub fn source_dirs(root: &Path) -> Result<Vec<String>> {
    let mut dirs: Vec<String> = super::crate_folders(root)?
        .into_iter()
        .map(|c| format!("{c}/src"))
        .filter(|src| root.join(src).is_dir())
        .collect();
    for d in ["examples/src", "tests/src", "xtask/src"] {
        if root.join(d).is_dir() {
            dirs.push(d.to_string());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// The source files (relative to `root`) that `page` does not name, sorted.
pub fn unnamed(root: &Path, page: &str) -> Result<Vec<String>> {
    let dirs = source_dirs(root)?;
    let mut files = BTreeSet::new();
    for d in &dirs {
        walk(root, d, &mut files)?;
    }
    let named = named(page, &dirs);
    Ok(files.into_iter().filter(|f| !named.contains(f)).collect())
}

fn walk(root: &Path, rel: &str, out: &mut BTreeSet<String>) -> Result<()> {
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let path = format!("{rel}/{}", entry.file_name().to_string_lossy());
        if entry.file_type()?.is_dir() {
            walk(root, &path, out)?;
        } else {
            out.insert(path);
        }
    }
    Ok(())
}

/// Every path (from the workspace root) the page names, by the rule in the module docs.
fn named(page: &str, dirs: &[String]) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut in_fence = false;
    // The tree's `src/` folder and the folders open above the current line (indent, path).
    let mut tree: Option<(String, Vec<(usize, String)>)> = None;
    for line in page.lines() {
        let words = words(line);
        named.extend(words.iter().map(|w| w.to_string()));
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            tree = None;
            continue;
        }
        if !in_fence {
            continue;
        }
        let Some(first) = words.first() else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        if let Some(src) = dirs
            .iter()
            .find(|d| first.trim_end_matches('/') == d.as_str())
        {
            tree = Some((src.clone(), vec![(indent, String::new())]));
            continue;
        }
        let Some((src, open)) = tree.as_mut() else {
            continue;
        };
        while open.len() > 1 && open.last().unwrap().0 >= indent {
            open.pop();
        }
        let mut folder = open.last().unwrap().1.clone();
        let mut rest = &words[..];
        if first.ends_with('/') && line.trim_start().starts_with(first) {
            folder.push_str(first);
            named.insert(format!("{src}/{folder}mod.rs"));
            open.push((indent, folder.clone()));
            rest = &words[1..];
        }
        for w in rest.iter().filter(|w| is_file(w)) {
            named.insert(format!("{src}/{folder}{w}"));
        }
    }
    named
}

/// The words of a line that may be paths: runs of letters, digits and `_ . / -`, without
/// a final `.` (the end of a sentence).
fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// `name.ext` (possibly after folders), not a folder.
fn is_file(word: &str) -> bool {
    let name = word.rsplit('/').next().unwrap_or(word);
    name.split_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && !ext.is_empty())
}
