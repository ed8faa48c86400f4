//! A per-site comparison of two runs' reports: which sites keep more tensors or bytes
//! alive in the new run than in the base run (a CI guard, like pytest-memray's
//! `--fail-on-increase`).
//!
//! Both sides are [`Report`]s made by [`crate::Analysis`], so the numbers compared are the
//! judgement's: per finding site, the survivors and the bytes they keep alive. A site is
//! keyed by file, line and label; a site whose line moved (an edit above it) is matched
//! by file, function and label when that pairing is unambiguous.
//!
//! A site **grew** when the new run keeps more survivors or more bytes there than the
//! base run (a site with no finding in a run counts as 0 there).

use crate::model::is_false;
use crate::report::{Finding, FindingKind, Report};
use crate::size::format_bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One side of a site's comparison: its finding in that run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    pub kind: FindingKind,
    /// The finding is a leak ([`Finding::is_leak`]).
    pub leak: bool,
    pub line: u32,
    pub survivors: u64,
    pub bytes: u64,
    pub bytes_per_iteration: u64,
}

impl From<&Finding> for Side {
    fn from(f: &Finding) -> Self {
        Side {
            kind: f.kind,
            leak: f.is_leak(),
            line: f.site.line,
            survivors: f.survivors,
            bytes: f.bytes,
            bytes_per_iteration: f.bytes_per_iteration,
        }
    }
}

/// How a site changed from the base run to the new run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// More survivors or bytes in the new run (including a site new to it).
    Grew,
    /// Fewer survivors and bytes, none more (including a site gone from the new run).
    Shrank,
    /// The same survivors and bytes.
    Same,
}

/// A site in either run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteDiff {
    pub file: String,
    /// The line in the new run (the base run's where the site is gone).
    pub line: u32,
    pub label: String,
    pub function: String,
    pub base: Option<Side>,
    pub new: Option<Side>,
    pub change: Change,
}

impl SiteDiff {
    fn survivors(side: &Option<Side>) -> u64 {
        side.as_ref().map_or(0, |s| s.survivors)
    }

    fn bytes(side: &Option<Side>) -> u64 {
        side.as_ref().map_or(0, |s| s.bytes)
    }

    /// `file:line`.
    pub fn location(&self) -> String {
        crate::model::location(&self.file, self.line)
    }

    /// The change in a word: `LEAK+` (grew into a leak), `GREW`, `GONE`, `shrank`, `same`.
    pub fn tag(&self) -> &'static str {
        match self.change {
            Change::Grew if self.new.as_ref().is_some_and(|n| n.leak) => "LEAK+",
            Change::Grew => "GREW",
            Change::Shrank if self.new.is_none() => "GONE",
            Change::Shrank => "shrank",
            Change::Same => "same",
        }
    }

    /// The finding's kind, `base -> new` when it changed (`-`: none in that run).
    pub fn kinds(&self) -> String {
        if kind_name(&self.base) == kind_name(&self.new) {
            kind_name(&self.new)
        } else {
            format!("{} -> {}", kind_name(&self.base), kind_name(&self.new))
        }
    }

    /// Survivors in the base run and the new one (0 where the site has no finding).
    pub fn survivors_before_after(&self) -> (u64, u64) {
        (Self::survivors(&self.base), Self::survivors(&self.new))
    }

    /// Bytes in the base run and the new one (0 where the site has no finding).
    pub fn bytes_before_after(&self) -> (u64, u64) {
        (Self::bytes(&self.base), Self::bytes(&self.new))
    }
}

/// Totals of one run, for the summary line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub findings: u64,
    pub leaks: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    /// The run's figures are estimates from the sampled mode ([`Report::estimated`]),
    /// one tensor per `sample_interval` bytes on average.
    #[serde(default, skip_serializing_if = "is_false")]
    pub estimated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_interval: Option<u64>,
}

impl Totals {
    /// What the summary says after a sampled run's figures (empty for an exact run).
    pub fn estimate_suffix(&self) -> String {
        if !self.estimated {
            return String::new();
        }
        match self.sample_interval {
            Some(i) => format!(
                " (estimated: sampled, one per {} on average)",
                format_bytes(i)
            ),
            None => " (estimated: sampled)".to_string(),
        }
    }
}

impl From<&Report> for Totals {
    fn from(r: &Report) -> Self {
        Totals {
            findings: r.findings.len() as u64,
            leaks: r.leaks().count() as u64,
            live_bytes: r.live_bytes,
            peak_live_bytes: r.peak_live_bytes,
            estimated: r.estimated,
            sample_interval: r.sample_interval,
        }
    }
}

/// The comparison of two reports. `Display` is the text table; serde the JSON shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    pub base: Totals,
    pub new: Totals,
    /// Grown sites first (leaks first among them), then shrunk, then unchanged.
    pub sites: Vec<SiteDiff>,
}

impl Diff {
    /// Compares `new` against `base`.
    pub fn new(base: &Report, new: &Report) -> Diff {
        type Key = (String, u32, String);
        let key = |f: &Finding| -> Key { (f.site.file.clone(), f.site.line, f.site.label.clone()) };
        let mut base_left: BTreeMap<Key, &Finding> =
            base.findings.iter().map(|f| (key(f), f)).collect();
        let mut pairs: Vec<(Option<&Finding>, Option<&Finding>)> = Vec::new();
        let mut new_left: Vec<&Finding> = Vec::new();
        for f in &new.findings {
            match base_left.remove(&key(f)) {
                Some(b) => pairs.push((Some(b), Some(f))),
                None => new_left.push(f),
            }
        }
        // Moved lines: pair what is left by (file, function, label) where that is unique.
        let loose = |f: &Finding| {
            (
                f.site.file.clone(),
                f.site.function.clone(),
                f.site.label.clone(),
            )
        };
        let mut base_by_loose: BTreeMap<_, Vec<Key>> = BTreeMap::new();
        for (k, f) in &base_left {
            base_by_loose.entry(loose(f)).or_default().push(k.clone());
        }
        let mut new_by_loose: BTreeMap<_, usize> = BTreeMap::new();
        for f in &new_left {
            *new_by_loose.entry(loose(f)).or_default() += 1;
        }
        for f in new_left {
            let l = loose(f);
            let candidates = base_by_loose.get(&l).map_or(0, Vec::len);
            if candidates == 1 && new_by_loose[&l] == 1 {
                let k = base_by_loose[&l][0].clone();
                pairs.push((base_left.remove(&k), Some(f)));
            } else {
                pairs.push((None, Some(f)));
            }
        }
        pairs.extend(base_left.into_values().map(|b| (Some(b), None)));

        let mut sites: Vec<SiteDiff> = pairs
            .into_iter()
            .map(|(b, n)| {
                let shown = n.or(b).expect("one side at least");
                let base = b.map(Side::from);
                let new = n.map(Side::from);
                let (bs, ns) = (SiteDiff::survivors(&base), SiteDiff::survivors(&new));
                let (bb, nb) = (SiteDiff::bytes(&base), SiteDiff::bytes(&new));
                let change = if ns > bs || nb > bb {
                    Change::Grew
                } else if ns < bs || nb < bb {
                    Change::Shrank
                } else {
                    Change::Same
                };
                SiteDiff {
                    file: shown.site.file.clone(),
                    line: shown.site.line,
                    label: shown.site.label.clone(),
                    function: shown.site.function.clone(),
                    base,
                    new,
                    change,
                }
            })
            .collect();
        sites.sort_by(|a, b| {
            let leak = |s: &SiteDiff| !s.new.as_ref().is_some_and(|n| n.leak);
            (a.change, leak(a), &a.file, a.line, &a.label).cmp(&(
                b.change,
                leak(b),
                &b.file,
                b.line,
                &b.label,
            ))
        });
        Diff {
            base: Totals::from(base),
            new: Totals::from(new),
            sites,
        }
    }

    /// Sites that grew.
    pub fn grown(&self) -> impl Iterator<Item = &SiteDiff> {
        self.sites.iter().filter(|s| s.change == Change::Grew)
    }

    /// Whether any site grew (the `--fail-on-increase` condition).
    pub fn grew(&self) -> bool {
        self.grown().next().is_some()
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a diff always serializes")
    }
}

fn kind_name(side: &Option<Side>) -> String {
    match side {
        None => "-".to_string(),
        Some(s) if s.leak && s.kind != FindingKind::Leak => format!("{} (leak)", s.kind.as_str()),
        Some(s) => s.kind.as_str().to_string(),
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let grown = self.grown().count();
        writeln!(
            f,
            "tensor-lifetime diff: {} compared, {} ({})",
            plural(self.sites.len(), "site", "sites"),
            match grown {
                0 => "none grew".to_string(),
                n => format!("{n} grew"),
            },
            if grown == 0 { "ok" } else { "INCREASE" },
        )?;
        for (name, t) in [("base", &self.base), ("new", &self.new)] {
            writeln!(
                f,
                "  {name:<4} {}, {}; peak live {}{}",
                plural(t.findings as usize, "finding", "findings"),
                plural(t.leaks as usize, "leak", "leaks"),
                format_bytes(t.peak_live_bytes),
                t.estimate_suffix()
            )?;
        }
        if self.sites.is_empty() {
            return Ok(());
        }
        let rows: Vec<[String; 6]> = self
            .sites
            .iter()
            .map(|s| {
                let tag = s.tag();
                let moved = match (&s.base, &s.new) {
                    (Some(b), Some(n)) if b.line != n.line => format!(" (was line {})", b.line),
                    _ => String::new(),
                };
                let kinds = s.kinds();
                [
                    tag.to_string(),
                    format!("{} `{}`{moved}", s.location(), s.label),
                    kinds,
                    format!(
                        "{} -> {}",
                        SiteDiff::survivors(&s.base),
                        SiteDiff::survivors(&s.new)
                    ),
                    format!(
                        "{} -> {}",
                        format_bytes(SiteDiff::bytes(&s.base)),
                        format_bytes(SiteDiff::bytes(&s.new))
                    ),
                    String::new(),
                ]
            })
            .collect();
        let header = [
            String::new(),
            "site".to_string(),
            "finding".to_string(),
            "survivors".to_string(),
            "bytes".to_string(),
            String::new(),
        ];
        let mut width = [0usize; 6];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            let line = format!(
                "{:<w0$}  {:<w1$}  {:<w2$}  {:>w3$}  {:>w4$}",
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                w0 = width[0],
                w1 = width[1],
                w2 = width[2],
                w3 = width[3],
                w4 = width[4],
            );
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
