//! The logs of several ranks of one job merged into one report.
//!
//! Each rank's log is judged on its own, by its own [`crate::Analysis`], one log at a
//! time; what is kept of a rank is a [`RankLog`]: its report (bounded by its sites), its
//! header fields, and its live bytes at the ends of its outermost loop's iterations
//! (downsampled to [`SERIES_POINTS`]). So merging 64 logs holds 64 summaries, never two
//! logs' events.
//!
//! # The rules
//!
//! - **Findings with their ranks**: findings of the same kind at the same site (file,
//!   line, column, label) in the same loop are one merged finding, listed with the ranks
//!   it occurs on (`leak on ranks 1, 3 of 4`); its numbers are those of the rank where it
//!   keeps the most bytes.
//! - **A rank whose memory grows apart** ([`FindingKind::RankDivergence`]): a rank's
//!   growth is its live bytes at its last outermost iteration end (of the first outermost
//!   loop the log opens, by name) minus those at its second, divided by the iterations between (the first iteration is warm-up: weights,
//!   optimizer state). A rank with at least [`MIN_ITERATIONS`] outermost iteration ends
//!   diverges when its growth is at least [`MIN_GROWTH`] per iteration and more than
//!   [`FACTOR`] times the median growth of the other ranks (a flat median, 0 or less,
//!   makes any growth over [`MIN_GROWTH`] diverge). At least two ranks must be measured.

use crate::event::Event;
use crate::report::{Finding, FindingKind, Report, SiteRef};
use crate::size::format_bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Points of a rank's live-bytes series kept (neighbours merge in pairs, peaks kept).
pub const SERIES_POINTS: usize = 512;
/// Outermost iteration ends a rank needs before its growth is judged.
pub const MIN_ITERATIONS: u64 = 3;
/// The least growth per outermost iteration that counts as divergence.
pub const MIN_GROWTH: i64 = 1024;
/// How much faster than the other ranks' median a rank must grow.
pub const FACTOR: i64 = 4;

/// What one pass over a rank's log collects besides the judgement: the header fields and
/// the live bytes at the outermost iteration ends.
#[derive(Debug, Default)]
pub struct RankCollector {
    pid: u32,
    rank: Option<u32>,
    world_size: Option<u32>,
    host: Option<String>,
    /// Open outermost frames and their loop names.
    outer: BTreeMap<u64, String>,
    loop_name: String,
    series: Series,
    second: Option<u64>,
    last: u64,
}

/// Live bytes at outermost iteration ends, downsampled: `(iteration end index, bytes)`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Series {
    pub points: Vec<(u64, u64)>,
    /// Iteration ends seen in all.
    pub count: u64,
    stride: u64,
}

impl Series {
    fn push(&mut self, bytes: u64) {
        let index = self.count;
        self.count += 1;
        let stride = self.stride.max(1);
        if index % stride != 0 {
            if let Some(last) = self.points.last_mut() {
                if bytes > last.1 {
                    *last = (index, bytes);
                }
            }
            return;
        }
        self.points.push((index, bytes));
        if self.points.len() >= SERIES_POINTS {
            let merged: Vec<(u64, u64)> = self
                .points
                .chunks(2)
                .map(|p| *p.iter().max_by_key(|(_, b)| *b).expect("a chunk"))
                .collect();
            self.points = merged;
            self.stride = stride * 2;
        }
    }
}

impl RankCollector {
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Header {
                pid,
                rank,
                world_size,
                host,
                ..
            } => {
                self.pid = *pid;
                self.rank = *rank;
                self.world_size = *world_size;
                self.host.clone_from(host);
            }
            Event::LoopStart {
                frame,
                parent: None,
                name,
                ..
            } => {
                self.outer.insert(*frame, name.clone());
            }
            Event::LoopEnd { frame, .. } => {
                self.outer.remove(frame);
            }
            Event::IterationEnd {
                frame, live_bytes, ..
            } => {
                // The series follows the first outermost loop the log opens (the
                // training loop; a later evaluation loop is another scale).
                if let Some(name) = self.outer.get(frame) {
                    if self.loop_name.is_empty() {
                        self.loop_name = name.clone();
                    }
                    if *name != self.loop_name {
                        return;
                    }
                    if self.series.count == 1 {
                        self.second = Some(*live_bytes);
                    }
                    self.last = *live_bytes;
                    self.series.push(*live_bytes);
                }
            }
            _ => {}
        }
    }

    /// The summary of the rank, with its judgement. `name` names the log in messages.
    pub fn finish(self, name: String, report: Report) -> RankLog {
        let growth = match self.second {
            Some(second) if self.series.count >= MIN_ITERATIONS => {
                Some((self.last as i64 - second as i64) / (self.series.count as i64 - 2).max(1))
            }
            _ => None,
        };
        RankLog {
            name,
            rank: self.rank,
            world_size: self.world_size,
            host: self.host,
            pid: self.pid,
            loop_name: self.loop_name,
            growth,
            series: self.series,
            report,
        }
    }
}

/// What is kept of one rank's log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankLog {
    /// The log's file name.
    pub name: String,
    /// From the header; [`Merge::finish`] numbers logs without one by their order.
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub host: Option<String>,
    pub pid: u32,
    /// The outermost loop whose iteration ends the series samples.
    pub loop_name: String,
    /// Bytes per outermost iteration (see the module's rules); `None` with too few.
    pub growth: Option<i64>,
    pub series: Series,
    pub report: Report,
}

/// A finding and the ranks it occurs on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankedFinding {
    #[serde(flatten)]
    pub finding: Finding,
    pub ranks: Vec<u32>,
    /// The rank whose numbers the finding shows.
    pub from_rank: u32,
}

/// The merged report of several ranks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedReport {
    pub world_size: u32,
    pub findings: Vec<RankedFinding>,
    /// Per rank, in rank order (the reports' findings are the rank's own).
    pub ranks: Vec<RankLog>,
}

/// `1, 3`, or `0-15` for runs of three or more.
pub fn rank_list(ranks: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}-{}", ranks[i], ranks[j]));
        } else {
            parts.extend(ranks[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    parts.join(", ")
}

impl RankedFinding {
    /// `leak on ranks 1, 3 of 4`.
    pub fn where_text(&self, world_size: u32) -> String {
        let what = if self.finding.is_leak() {
            "leak".to_string()
        } else {
            self.finding.kind.as_str().replace('_', " ")
        };
        let ranks = if self.ranks.len() == 1 {
            "rank"
        } else {
            "ranks"
        };
        format!(
            "{what} on {ranks} {} of {world_size}",
            rank_list(&self.ranks)
        )
    }

    /// The text report's words for the finding, with its ranks after the first line.
    pub fn text(&self, world_size: u32) -> String {
        let text = self.finding.to_string();
        let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
        let from = if self.ranks.len() > 1 {
            format!(" (numbers from rank {})", self.from_rank)
        } else {
            String::new()
        };
        format!(
            "{first}\n         {}{from}\n{rest}",
            self.where_text(world_size)
        )
    }
}

/// Merges ranks one at a time.
#[derive(Debug, Default)]
pub struct Merge {
    ranks: Vec<RankLog>,
}

type Key = (FindingKind, String, u32, u32, String, String);

fn key(f: &Finding) -> Key {
    (
        f.kind,
        f.site.file.clone(),
        f.site.line,
        f.site.column,
        f.site.label.clone(),
        f.loop_name.clone(),
    )
}

impl Merge {
    pub fn add(&mut self, rank: RankLog) {
        self.ranks.push(rank);
    }

    /// The merged report; an error names two logs that claim the same rank.
    pub fn finish(mut self) -> Result<MergedReport, String> {
        // Logs without a rank in their header are numbered by their order.
        let all_ranked = self.ranks.iter().all(|r| r.rank.is_some());
        for (i, r) in self.ranks.iter_mut().enumerate() {
            if !all_ranked {
                r.rank = Some(i as u32);
            }
        }
        self.ranks.sort_by_key(|r| r.rank);
        for pair in self.ranks.windows(2) {
            if pair[0].rank == pair[1].rank {
                return Err(format!(
                    "{} and {} both claim rank {}",
                    pair[0].name,
                    pair[1].name,
                    pair[0].rank.unwrap_or(0)
                ));
            }
        }
        let world_size = self
            .ranks
            .iter()
            .filter_map(|r| r.world_size)
            .chain(self.ranks.iter().map(|r| r.rank.unwrap_or(0) + 1))
            .chain([self.ranks.len() as u32])
            .max()
            .unwrap_or(0);
        let mut merged: BTreeMap<Key, RankedFinding> = BTreeMap::new();
        for r in &self.ranks {
            let rank = r.rank.unwrap_or(0);
            for f in &r.report.findings {
                merged
                    .entry(key(f))
                    .and_modify(|m| {
                        m.ranks.push(rank);
                        if f.bytes > m.finding.bytes {
                            m.finding = f.clone();
                            m.from_rank = rank;
                        }
                    })
                    .or_insert_with(|| RankedFinding {
                        finding: f.clone(),
                        ranks: vec![rank],
                        from_rank: rank,
                    });
            }
        }
        let mut findings: Vec<RankedFinding> = merged.into_values().collect();
        findings.extend(divergences(&self.ranks, world_size));
        findings.sort_by(|a, b| {
            a.finding
                .cmp_seriousness(&b.finding)
                .then(a.ranks.cmp(&b.ranks))
        });
        Ok(MergedReport {
            world_size,
            findings,
            ranks: self.ranks,
        })
    }
}

fn median(mut values: Vec<i64>) -> i64 {
    values.sort_unstable();
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2
    }
}

/// The ranks whose memory grows apart from the others (the module's rules).
fn divergences(ranks: &[RankLog], world_size: u32) -> Vec<RankedFinding> {
    let measured: Vec<(u32, i64, &RankLog)> = ranks
        .iter()
        .filter_map(|r| Some((r.rank.unwrap_or(0), r.growth?, r)))
        .collect();
    if measured.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for &(rank, growth, r) in &measured {
        let others = median(
            measured
                .iter()
                .filter(|(o, ..)| *o != rank)
                .map(|(_, g, _)| *g)
                .collect(),
        );
        if growth < MIN_GROWTH || growth <= FACTOR * others.max(0) {
            continue;
        }
        let sign = if others < 0 { "-" } else { "+" };
        let hint = format!(
            "the other ranks' median is {sign}{} per iteration; {}",
            format_bytes(others.unsigned_abs()),
            FindingKind::RankDivergence.hint()
        );
        let iterations = r.series.count;
        out.push(RankedFinding {
            finding: Finding {
                growing: true,
                loop_name: r.loop_name.clone(),
                iteration: iterations.saturating_sub(1),
                iterations,
                first_iteration: 1,
                bytes: growth as u64 * iterations.saturating_sub(2),
                bytes_per_iteration: growth as u64,
                hint,
                ..Finding::at(
                    FindingKind::RankDivergence,
                    SiteRef {
                        label: format!("rank {rank} of {world_size}"),
                        ..SiteRef::default()
                    },
                )
            },
            ranks: vec![rank],
            from_rank: rank,
        });
    }
    out
}

impl MergedReport {
    pub fn leaks(&self) -> impl Iterator<Item = &RankedFinding> {
        self.findings.iter().filter(|f| f.finding.is_leak())
    }

    /// The findings as one [`Report`] (each merged finding once, with the numbers of the
    /// rank where it keeps the most), for `diff` and the HTML page; the live bytes are
    /// summed over the ranks, the peak is the largest rank's.
    pub fn combined(&self) -> Report {
        let mut loops = Vec::new();
        for r in &self.ranks {
            for l in &r.report.loops {
                if !loops
                    .iter()
                    .any(|k: &crate::report::LoopSummary| k.name == l.name)
                {
                    loops.push(l.clone());
                }
            }
        }
        Report {
            findings: self.findings.iter().map(|f| f.finding.clone()).collect(),
            loops,
            live_tensors: self.ranks.iter().map(|r| r.report.live_tensors).sum(),
            live_bytes: self.ranks.iter().map(|r| r.report.live_bytes).sum(),
            peak_live_bytes: self
                .ranks
                .iter()
                .map(|r| r.report.peak_live_bytes)
                .max()
                .unwrap_or(0),
            sites_seen: self
                .ranks
                .iter()
                .map(|r| r.report.sites_seen)
                .max()
                .unwrap_or(0),
            memory: BTreeMap::new(),
            memory_by_role: crate::roles::MemoryByRole::default(),
            post_mortem: None,
            estimated: self.estimated().is_some(),
            sample_interval: self.estimated().flatten(),
            forecast: None,
        }
    }

    /// Whether a rank's figures are estimates (the sampled mode), with the first such
    /// rank's interval.
    fn estimated(&self) -> Option<Option<u64>> {
        let r = self.ranks.iter().find(|r| r.report.estimated)?;
        Some(r.report.sample_interval)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a merged report always serializes")
    }
}

fn growth_text(g: Option<i64>) -> String {
    match g {
        Some(g) if g < 0 => format!("-{}", format_bytes(g.unsigned_abs())),
        Some(g) => format!("+{}", format_bytes(g as u64)),
        None => "-".to_string(),
    }
}

impl fmt::Display for MergedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leaks = self.leaks().count();
        writeln!(
            f,
            "{} ranks merged (world size {}): {} {}, {} {} ({})",
            self.ranks.len(),
            self.world_size,
            self.findings.len(),
            if self.findings.len() == 1 {
                "finding"
            } else {
                "findings"
            },
            leaks,
            if leaks == 1 { "leak" } else { "leaks" },
            if leaks == 0 { "clean" } else { "LEAKING" }
        )?;
        if let Some(interval) = self.estimated() {
            writeln!(f, "{}", crate::model::estimate_sentence(interval))?;
        }
        writeln!(
            f,
            "  rank  findings  leaks   live now       peak   growth/iteration  log"
        )?;
        for r in &self.ranks {
            writeln!(
                f,
                "  {:>4}  {:>8}  {:>5}  {:>9}  {:>9}  {:>17}  {}",
                r.rank.unwrap_or(0),
                r.report.findings.len(),
                r.report.leaks().count(),
                format_bytes(r.report.live_bytes),
                format_bytes(r.report.peak_live_bytes),
                growth_text(r.growth),
                r.name
            )?;
        }
        for finding in &self.findings {
            write!(f, "{}", finding.text(self.world_size))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
