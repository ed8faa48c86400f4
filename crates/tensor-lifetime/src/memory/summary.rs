//! The text of [`super::memory_summary`]: a table in the spirit of PyTorch's
//! `memory_summary`, then one line for each gap (untracked, cached, outside the pool).

use super::MemoryStats;
use std::fmt::Write as _;
use tensor_lifetime_report::size::{format_bytes, format_signed};

fn cell(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), format_bytes)
}

fn signed(v: i64) -> String {
    let s = format_signed(v as f64);
    if v > 0 {
        format!("+{s}")
    } else {
        s
    }
}

/// Renders [`MemoryStats`] as [`super::memory_summary`] does.
pub(super) fn render(s: &MemoryStats) -> String {
    const RULE: &str =
        "|==========================================================================|";
    const LINE: &str =
        "|--------------------------------------------------------------------------|";
    let mut out = String::new();
    let title = match &s.name {
        Some(name) => format!("tensor-lifetime memory summary: {} ({name})", s.device),
        None => format!("tensor-lifetime memory summary: {}", s.device),
    };
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(out, "| {title:<72} |");
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(
        out,
        "| {:<32} | {:>11} | {:>11} | {:>10} |",
        "metric", "current", "peak", "limit"
    );
    let _ = writeln!(out, "{LINE}");
    let row =
        |out: &mut String, label: &str, cur: Option<u64>, peak: Option<u64>, limit: Option<u64>| {
            let _ = writeln!(
                out,
                "| {label:<32} | {:>11} | {:>11} | {:>10} |",
                cell(cur),
                cell(peak),
                cell(limit)
            );
        };
    let tracked_label = match (s.tracking, s.estimated) {
        (false, _) => "tracked tensors (tracking off)",
        (true, false) => "tracked tensors",
        (true, true) => "tracked tensors (estimated)",
    };
    row(
        &mut out,
        tracked_label,
        Some(s.tracked),
        Some(s.tracked_peak),
        None,
    );
    if s.pool_used.is_some() {
        row(&mut out, "pool used", s.pool_used, s.pool_used_peak, None);
        let threshold = s.release_threshold.filter(|t| *t != u64::MAX);
        row(
            &mut out,
            "pool reserved",
            s.pool_reserved,
            s.pool_reserved_peak,
            None,
        );
        if s.release_threshold == Some(u64::MAX) {
            let _ = writeln!(
                out,
                "| {:<32} | {:>11} | {:>11} | {:>10} |",
                "release threshold", "unlimited", "-", "-"
            );
        } else {
            row(&mut out, "release threshold", threshold, None, None);
        }
    }
    if s.device_used.is_some() {
        row(&mut out, "device used", s.device_used, None, s.device_total);
    }
    if s.process_resident.is_some() {
        row(&mut out, "process resident", s.process_resident, None, None);
    }
    let _ = writeln!(out, "{LINE}");
    let mut gap = |label: &str, formula: &str, v: String, why: &str| {
        let _ = writeln!(out, "  {label:<9} {formula:<24} {v:>11}  {why}");
    };
    if let Some(u) = s.untracked() {
        gap(
            "untracked",
            "= pool used - tracked",
            signed(u),
            "tensors not tagged, or frees still queued (synchronize first)",
        );
    }
    if let Some(c) = s.cached() {
        gap(
            "cached",
            "= reserved - pool used",
            format_bytes(c),
            "freed, kept by the pool for reuse; empty_cache() returns it",
        );
    }
    if let Some(o) = s.outside_pool() {
        gap(
            "outside",
            "= device used - reserved",
            signed(o),
            "CUDA context, kernels, cuBLAS/cuRAND workspaces, other processes",
        );
    }
    if let Some(r) = s.process_resident {
        gap(
            "untracked",
            "= resident - tracked",
            signed(r as i64 - s.tracked as i64),
            "the program, its libraries and every allocation not a tracked tensor",
        );
    }
    out
}
