//! Checks, before candle compiles, that this build tracks the user's candle-core, and
//! finds which candle-core it resolved, for messages.
//!
//! # Why a check at build time
//!
//! Cargo keeps one candle-core per minor (0.x minors are semver-incompatible) and picks the
//! newest release for each requirement; it does not follow the user's. So the candle is
//! chosen by a feature, `candle-0-8` to `candle-0-11` (default): exactly one, else this
//! script fails the build with the line to write. A crate whose candle-core is another
//! one than this build's would compile and run but find nothing (its tensors are of a
//! type this crate cannot see), so the script fails the build then too, naming both
//! versions and the feature to select, before candle is compiled.
//!
//! # Which Cargo.lock
//!
//! Cargo tells a build script nothing about its dependencies' versions (only `links`
//! packages pass metadata, and candle-core has none), so this reads the `Cargo.lock` that
//! Cargo wrote before building: the first, going up, from the directory Cargo runs in
//! (its process's working directory, on Linux), else from the build directory (the
//! user's `target/`), else from this package's manifest (a path dependency or a workspace
//! member; skipped inside Cargo's registry and git caches). A lock counts only if it lists
//! this package at this version with a candle-core of the selected minor. The build is
//! failed on a mismatch only when the lock is the build's for sure: found from Cargo's
//! directory or the build directory, and listing for this package the selected candle
//! only. A dependency's lock lists the optional dependencies its build enables; a
//! workspace's lists every optional dependency of its members, whichever a build
//! enables, so in this package's own workspace (or one it is a member of) nothing is
//! failed here. Otherwise the first probe of a foreign tensor says it at run time.
//! `TENSOR_LIFETIME_CANDLE_CHECK=off` skips the check.

use std::path::{Path, PathBuf};

/// The features that select a candle-core, with their minor.
const CANDLES: &[(&str, &str)] = &[
    ("candle-0-8", "0.8"),
    ("candle-0-9", "0.9"),
    ("candle-0-10", "0.10"),
    ("candle-0-11", "0.11"),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TENSOR_LIFETIME_CANDLE_CHECK");
    // Another project sharing the target directory may build this very unit (the same
    // features and candle) with another lock: the shell's directory tells them apart.
    println!("cargo:rerun-if-env-changed=PWD");
    let selected: Vec<(&str, &str)> = CANDLES
        .iter()
        .copied()
        .filter(|(feature, _)| enabled(feature))
        .collect();
    let minor = match selected.as_slice() {
        [(_, minor)] => *minor,
        [] => return fail(&[no_candle_selected()]),
        several => return fail(&[several_candles_selected(several)]),
    };
    let ours = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let found = find_lock(&ours, minor);
    let (version, all) = match &found {
        Some(found) => {
            println!("cargo:rerun-if-changed={}", found.path.display());
            let version = found.candle.split_whitespace().next().unwrap_or("unknown");
            (version.to_string(), candle_versions(&found.lock).join(","))
        }
        None => ("unknown".to_string(), "unknown".to_string()),
    };
    let check = std::env::var("TENSOR_LIFETIME_CANDLE_CHECK").map_or(true, |v| v != "off");
    if let Some(found) = found.as_ref().filter(|f| f.sure && check) {
        let mismatches = mismatches(found);
        if !mismatches.is_empty() {
            return fail(&mismatches);
        }
    }
    println!("cargo:rustc-env=TENSOR_LIFETIME_CANDLE_VERSION={version}");
    println!("cargo:rustc-env=TENSOR_LIFETIME_CANDLE_VERSIONS_IN_GRAPH={all}");
    // The runtime message's advice: the feature of the other candle in the lock, when
    // there is one; with several, the feature of each (the compat module's default
    // sentence when there is none).
    let others: Vec<&str> = all
        .split(',')
        .filter(|v| *v != version && *v != "unknown")
        .collect();
    let fix = match others.as_slice() {
        [] => String::new(),
        [other] => fix_for(other, "your crate"),
        several => {
            let each: Vec<String> = several
                .iter()
                .map(|v| match CANDLES.iter().find(|(_, m)| same_minor(v, m)) {
                    Some((feature, _)) => format!("{v}: `{feature}`"),
                    None => format!("{v}: not supported"),
                })
                .collect();
            format!(
                "Select your crate's candle-core minor with its feature ({}): {}.",
                each.join(", "),
                dependency_line("candle-0-N")
            )
        }
    };
    println!("cargo:rustc-env=TENSOR_LIFETIME_CANDLE_FIX={fix}");
}

fn enabled(feature: &str) -> bool {
    let var = format!("CARGO_FEATURE_{}", feature.to_uppercase().replace('-', "_"));
    std::env::var_os(var).is_some()
}

/// Fails the build with these messages (one `error:` line each).
fn fail(messages: &[String]) {
    for m in messages {
        println!("cargo::error={m}");
    }
}

/// The dependency line that selects `feature`, keeping the other features enabled now.
fn dependency_line(feature: &str) -> String {
    let mut features: Vec<&str> = ["macros", "tracking", "cuda"]
        .into_iter()
        .filter(|f| enabled(f))
        .collect();
    features.push(feature);
    let list = features
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!("tensor-lifetime = {{ ..., default-features = false, features = [{list}] }}")
}

fn no_candle_selected() -> String {
    format!(
        "no candle-core selected: enable the feature of your candle-core's \
         minor, one of {}; for candle-core 0.9: {}",
        feature_names(),
        dependency_line("candle-0-9")
    )
}

fn several_candles_selected(several: &[(&str, &str)]) -> String {
    let names: Vec<&str> = several.iter().map(|(f, _)| *f).collect();
    format!(
        "the features {} each select a candle-core; keep only your \
         candle-core's minor (`candle-0-11` is a default feature), e.g. for candle-core {}: {}",
        names.join(", "),
        several[0].1,
        dependency_line(several[0].0)
    )
}

fn feature_names() -> String {
    CANDLES
        .iter()
        .map(|(f, _)| *f)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What to do when `who` uses candle-core `version` and this build another one: the line
/// that selects its minor, or why it cannot be.
fn fix_for(version: &str, who: &str) -> String {
    let version = version.split_whitespace().next().unwrap_or(version);
    match CANDLES.iter().find(|(_, minor)| same_minor(version, minor)) {
        Some((feature, _)) => format!(
            "Select {who}'s candle-core minor with the feature `{feature}`: {}.",
            dependency_line(feature)
        ),
        None => format!(
            "candle-core {version} is not supported: tensor-lifetime supports 0.8 to 0.11 \
             (features {}).",
            feature_names()
        ),
    }
}

fn same_minor(version: &str, minor: &str) -> bool {
    version.starts_with(minor) && version[minor.len()..].starts_with('.')
}

/// A `Cargo.lock` that lists this package, and what this build reads of it.
struct Found {
    path: PathBuf,
    lock: String,
    /// The candle-core this package depends on in the lock.
    candle: String,
    /// Whether the lock is certainly this build's (see the module docs).
    sure: bool,
}

fn find_lock(ours: &str, minor: &str) -> Option<Found> {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let out = std::env::var_os("OUT_DIR").map(PathBuf::from);
    let in_cache = |p: &Path| {
        let s = p.to_string_lossy();
        s.contains("/registry/src/") || s.contains("/git/checkouts/")
    };
    let starts = cargo_dir()
        .into_iter()
        .map(|d| (d, true))
        .chain(out.filter(|o| !in_cache(o)).map(|o| (o, true)))
        .chain(manifest.filter(|m| !in_cache(m)).map(|m| (m, false)));
    for (start, trusted) in starts {
        for dir in start.ancestors() {
            let path = dir.join("Cargo.lock");
            let Ok(lock) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Some(us) =
                packages(&lock).find(|p| p.name == "tensor-lifetime" && p.version == ours)
            else {
                continue;
            };
            let all = candle_versions(&lock);
            let candles: Vec<String> = us
                .dependencies
                .iter()
                .filter_map(|d| dependency_version(d, "candle-core", &all))
                .collect();
            let Some(candle) = candles.iter().find(|v| same_minor(v, minor)).cloned() else {
                continue;
            };
            let sure = trusted && candles.len() == 1;
            return Some(Found {
                path,
                lock,
                candle,
                sure,
            });
        }
    }
    None
}

/// The directory Cargo runs in: where the user's workspace is (Linux only: the parent
/// process's working directory; a build script is Cargo's child).
fn cargo_dir() -> Option<PathBuf> {
    if cfg!(target_os = "linux") {
        let parent = std::os::unix::process::parent_id();
        std::fs::read_link(format!("/proc/{parent}/cwd")).ok()
    } else {
        None
    }
}

/// One `[[package]]` of a lockfile: the fields this script reads.
struct Package<'a> {
    name: &'a str,
    version: &'a str,
    dependencies: Vec<&'a str>,
}

fn packages(lock: &str) -> impl Iterator<Item = Package<'_>> {
    lock.split("[[package]]").skip(1).map(|block| {
        let field = |key: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().strip_prefix("= "))
                .map(|v| v.trim().trim_matches('"'))
                .unwrap_or("")
        };
        let dependencies = block
            .split_once("dependencies = [")
            .map(|(_, rest)| rest.split(']').next().unwrap_or(""))
            .unwrap_or("")
            .split(',')
            .map(|d| d.trim().trim_matches('"'))
            .filter(|d| !d.is_empty())
            .collect();
        Package {
            name: field("name "),
            version: field("version "),
            dependencies,
        }
    })
}

fn candle_versions(lock: &str) -> Vec<String> {
    packages(lock)
        .filter(|p| p.name == "candle-core")
        .map(|p| p.version.to_string())
        .collect()
}

/// The version of a dependency entry on `name` (`"candle-core 0.8.4"`, or `"candle-core"`
/// when the lock holds one version of it: `all`'s only one), with its source when the lock
/// holds that version from several (`"0.9.1 (git+https://...)"`).
fn dependency_version(entry: &str, name: &str, all: &[String]) -> Option<String> {
    let rest = entry.strip_prefix(name)?;
    if rest.is_empty() {
        return all.first().cloned();
    }
    rest.strip_prefix(' ').map(str::to_string)
}

/// The packages that depend on this one and use another candle-core than this build's:
/// their own `candle-core`, or the one of a `candle-*` package they depend on
/// (`candle-nn`, `candle-transformers`).
fn mismatches(found: &Found) -> Vec<String> {
    let lock = &found.lock;
    let all = candle_versions(lock);
    let list: Vec<Package<'_>> = packages(lock).collect();
    let ours = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let depends_on_us = |p: &Package<'_>| {
        p.dependencies.iter().any(|d| {
            let mut w = d.split_whitespace();
            w.next() == Some("tensor-lifetime") && w.next().is_none_or(|v| v == ours)
        })
    };
    let candle_of = |p: &Package<'_>| -> Vec<String> {
        p.dependencies
            .iter()
            .filter_map(|d| dependency_version(d, "candle-core", &all))
            .collect()
    };
    let mut out = Vec::new();
    for user in list.iter().filter(|p| depends_on_us(p)) {
        let mut theirs = candle_of(user);
        for dep in &user.dependencies {
            let name = dep.split_whitespace().next().unwrap_or("");
            if name.starts_with("candle-") && name != "candle-core" {
                let version = dep.split_whitespace().nth(1);
                let via = list
                    .iter()
                    .find(|p| p.name == name && version.is_none_or(|v| v == p.version));
                theirs.extend(via.map(&candle_of).unwrap_or_default());
            }
        }
        let Some(other) = theirs.iter().find(|v| **v != found.candle) else {
            continue;
        };
        let minor_of = |v: &str| {
            let version = v.split_whitespace().next().unwrap_or(v);
            version.rsplit_once('.').map(|(m, _)| m.to_string())
        };
        if minor_of(other) == minor_of(&found.candle) {
            // The same release from two sources (a `git` or `path` dependency beside
            // crates.io): the feature is right, the source is not shared.
            out.push(format!(
                "`{}` uses candle-core {other} and tensor-lifetime candle-core \
                 {}: the same release from two sources, which Cargo keeps apart, so tensors \
                 of {other} could not be tracked. Give your candle through [patch.crates-io] \
                 (`candle-core = {{ git = ... }}` there, a version requirement in \
                 [dependencies]) so that both use it (README.md, \"Works with\")",
                user.name, found.candle
            ));
        } else {
            out.push(format!(
                "`{}` uses candle-core {other} but tensor-lifetime was \
                 resolved to candle-core {}: Cargo keeps both, and tensors of {other} could \
                 not be tracked. {} (README.md, \"Works with\")",
                user.name,
                found.candle,
                fix_for(other, &format!("`{}`", user.name))
            ));
        }
    }
    out
}
