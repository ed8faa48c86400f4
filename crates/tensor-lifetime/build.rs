//! Finds which candle-core this build resolved, for messages only (the error that names
//! both candles when the user's is another one; see `src/compat.rs`). Behaviour never
//! depends on it: every candle difference is absorbed at compile time without cfgs.
//!
//! Cargo tells a build script nothing about its dependencies' versions (only `links`
//! packages pass metadata, and candle-core has none), so this reads the `Cargo.lock` that
//! Cargo wrote before building: the first one above this package's manifest (a path
//! dependency or workspace member; skipped inside Cargo's registry and git caches, whose
//! packages are not the user's workspace), else the first above the build directory (the
//! user's `target/`). A lock counts only if it lists this package at this version. When
//! none is found the version reads "unknown".

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let ours = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let (version, all) = match find_lock(&ours) {
        Some((path, lock)) => {
            println!("cargo:rerun-if-changed={}", path.display());
            let all = candle_versions(&lock);
            let version = our_candle(&lock, &ours, &all).unwrap_or_else(|| "unknown".into());
            (version, all.join(","))
        }
        None => ("unknown".to_string(), "unknown".to_string()),
    };
    println!("cargo:rustc-env=TENSOR_LIFETIME_CANDLE_VERSION={version}");
    println!("cargo:rustc-env=TENSOR_LIFETIME_CANDLE_VERSIONS_IN_GRAPH={all}");
}

fn find_lock(ours: &str) -> Option<(PathBuf, String)> {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let out = std::env::var_os("OUT_DIR").map(PathBuf::from);
    let in_cache = |p: &Path| {
        let s = p.to_string_lossy();
        s.contains("/registry/src/") || s.contains("/git/checkouts/")
    };
    let starts = manifest
        .filter(|m| !in_cache(m))
        .into_iter()
        .chain(out.filter(|o| !in_cache(o)));
    for start in starts {
        for dir in start.ancestors() {
            let path = dir.join("Cargo.lock");
            if let Ok(lock) = std::fs::read_to_string(&path) {
                if packages(&lock).any(|p| p.name == "tensor-lifetime" && p.version == ours) {
                    return Some((path, lock));
                }
            }
        }
    }
    None
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

/// The candle-core this package depends on: its dependency entry names the version when
/// the lock holds several (`"candle-core 0.8.4"`), else the lock's only one.
fn our_candle(lock: &str, ours: &str, all: &[String]) -> Option<String> {
    let us = packages(lock).find(|p| p.name == "tensor-lifetime" && p.version == ours)?;
    let dep = us
        .dependencies
        .iter()
        .find(|d| *d == &"candle-core" || d.starts_with("candle-core "))?;
    match dep.split_whitespace().nth(1) {
        Some(v) => Some(v.to_string()),
        None => all.first().cloned(),
    }
}
