//! The [`Report`]: findings with their sites, holders and sizes; its JSON shape (serde)
//! and its text rendering (`Display`).

use crate::model::{is_false, Forecast, MemorySample};
pub use crate::model::{HolderKind, HolderRef, SiteRef};
use crate::post_mortem::PostMortem;
use crate::roles::{format_call_path, CallFrame, MemoryByRole, Role};
use crate::size::format_bytes;
use crate::size::group_digits as group;
use serde::{Deserialize, Serialize};
use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;
use std::fmt;

/// What kind of retention a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Survivors of a site keep growing with the iterations.
    Leak,
    /// A survivor's autograd graph holds other tensors.
    GraphRetention,
    /// Small views keep much larger storages alive.
    ViewRetention,
    /// Survivors born in one iteration only, kept since (information).
    Retained,
    /// A site's survivors keep their count but grow in bytes: each iteration replaces
    /// them by larger ones (a cache grown by `Tensor::cat` and never reset). A leak.
    GrowingTensor,
    /// A device's memory in use grows with the iterations beyond the tracked tensors
    /// (`memory_findings`): memory held by code that is not annotated.
    UntrackedGrowth,
    /// A site keeps making tensors of new sizes (dynamic shapes), which fragments a
    /// caching pool (`memory_findings`).
    ShapeChurn,
    /// One rank's live bytes grow apart from the other ranks' of the same job
    /// (`ranks`): judged only when several ranks' logs are merged.
    RankDivergence,
}

impl FindingKind {
    /// Whether a finding of this kind is a leak: always for a leak or a growing tensor, for
    /// a graph or view retention when it keeps `growing`.
    pub fn is_leak(self, growing: bool) -> bool {
        matches!(self, FindingKind::Leak | FindingKind::GrowingTensor)
            || (growing
                && matches!(
                    self,
                    FindingKind::GraphRetention | FindingKind::ViewRetention
                ))
    }

    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Leak => "leak",
            FindingKind::GraphRetention => "graph_retention",
            FindingKind::ViewRetention => "view_retention",
            FindingKind::Retained => "retained",
            FindingKind::GrowingTensor => "growing_tensor",
            FindingKind::UntrackedGrowth => "untracked_growth",
            FindingKind::ShapeChurn => "shape_churn",
            FindingKind::RankDivergence => "rank_divergence",
        }
    }

    /// Lower is more serious.
    pub fn severity_rank(self) -> u8 {
        match self {
            FindingKind::GraphRetention => 0,
            FindingKind::ViewRetention => 1,
            FindingKind::Leak => 2,
            FindingKind::GrowingTensor => 3,
            FindingKind::UntrackedGrowth => 4,
            FindingKind::ShapeChurn => 5,
            FindingKind::RankDivergence => 6,
            FindingKind::Retained => 7,
        }
    }

    /// What to do about it.
    pub fn hint(self) -> &'static str {
        match self {
            FindingKind::Leak => {
                "drop these tensors when done, or bound the container that keeps them"
            }
            FindingKind::GraphRetention => {
                "call .detach() on values kept across iterations (or take .to_scalar())"
            }
            FindingKind::ViewRetention => {
                "keep a .copy() of the view so the large storage can be freed"
            }
            FindingKind::Retained => "state created once and kept; expected for optimizer state",
            FindingKind::GrowingTensor => {
                "the tensor kept here is replaced by a larger one every iteration (concatenated onto): reset it when the request or epoch ends, or preallocate it and bound its length"
            }
            FindingKind::UntrackedGrowth => {
                "annotate the code that allocates (#[track]) to find the site, or look for tensors kept by code outside tracked functions"
            }
            FindingKind::ShapeChurn => {
                "pad or bucket the shapes (e.g. sequence lengths to multiples of 64) so the pool can reuse its blocks"
            }
            FindingKind::RankDivergence => {
                "look at this rank's own findings: code that runs on one rank only (logging, checkpoints, a rank-dependent branch) keeps tensors"
            }
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The leak rule holds: survivors keep growing.
    pub growing: bool,
    /// The creation site of the survivors.
    pub site: SiteRef,
    /// The loop that judged it.
    #[serde(rename = "loop")]
    pub loop_name: String,
    pub loop_site: Option<SiteRef>,
    /// The loop's iteration at judgement (0-based).
    pub iteration: u64,
    /// Survivors alive now.
    pub survivors: u64,
    /// Distinct iterations that bore them.
    pub iterations: u64,
    pub first_iteration: u64,
    /// Bytes kept alive (storages counted once; the graph or pinned storages for those kinds).
    pub bytes: u64,
    pub bytes_per_iteration: u64,
    /// Highest strong count among the survivors.
    pub refcount: u64,
    pub holders: Vec<HolderRef>,
    #[serde(default)]
    pub graph_tensors: u64,
    #[serde(default)]
    pub graph_bytes: u64,
    #[serde(default)]
    pub view_bytes: u64,
    #[serde(default)]
    pub view_storage_bytes: u64,
    /// Other sites whose survivors are held only by this finding's graph.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_sites: Vec<SiteRef>,
    /// The role of (most of) its tensors; absent for the memory findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The `#[track]`ed functions on the stack when its tensors were created, outermost
    /// first (the path of most of them; empty when none was tracked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_path: Vec<CallFrame>,
    /// Other call paths that created some of its tensors (a helper called from two
    /// places in one loop).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_call_paths: Vec<Vec<CallFrame>>,
    /// For a shape churn that follows another in its loop's data flow: the site where
    /// the dynamic shape starts, whose finding the text report shows for both (this one
    /// is in the JSON report only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows: Option<SiteRef>,
    pub hint: String,
    /// A leak's forecast: when its growth uses up the device's free memory (in process,
    /// once the tracker has read the device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
}

/// A finding's identity among the reports of one run: where it is, its kind and whether
/// it is a leak; the rest of it (counts, bytes, holders) changes from report to report.
/// [`Analysis::finding_keys`](crate::Analysis::finding_keys) gives those of a report
/// without building it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FindingKey {
    place: FindingPlace,
    kind: FindingKind,
    leak: bool,
}

/// Where a finding is: the site of a tensor finding (its id in the run), or the file and
/// line of any other (a device's untracked growth names the device).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum FindingPlace {
    Site(u32),
    At(String, u32),
}

impl FindingKey {
    /// The key of a finding of `kind` at site `site` (its id in the run's catalog).
    pub(crate) fn at_site(site: u32, kind: FindingKind, growing: bool) -> FindingKey {
        FindingKey {
            place: FindingPlace::Site(site),
            kind,
            leak: kind.is_leak(growing),
        }
    }

    /// Whether the finding is a leak ([`Finding::is_leak`]).
    pub fn is_leak(&self) -> bool {
        self.leak
    }

    /// The finding's kind.
    pub fn kind(&self) -> FindingKind {
        self.kind
    }
}

impl Finding {
    /// A finding of `kind` at `site` with every count zero and no holders: the base
    /// that judgements fill in (`Finding { bytes, hint, ..Finding::at(kind, site) }`).
    pub fn at(kind: FindingKind, site: SiteRef) -> Finding {
        Finding {
            kind,
            growing: false,
            site,
            loop_name: String::new(),
            loop_site: None,
            iteration: 0,
            survivors: 0,
            iterations: 0,
            first_iteration: 0,
            bytes: 0,
            bytes_per_iteration: 0,
            refcount: 0,
            holders: Vec::new(),
            graph_tensors: 0,
            graph_bytes: 0,
            view_bytes: 0,
            view_storage_bytes: 0,
            held_sites: Vec::new(),
            role: None,
            call_path: Vec::new(),
            other_call_paths: Vec::new(),
            follows: None,
            hint: kind.hint().to_string(),
            forecast: None,
        }
    }

    /// The order of reports: leaks first, then by severity ([`FindingKind::severity_rank`]),
    /// the most bytes first.
    pub fn cmp_seriousness(&self, other: &Finding) -> Ordering {
        let key = |f: &Finding| (!f.is_leak(), f.kind.severity_rank(), Reverse(f.bytes));
        key(self).cmp(&key(other))
    }

    /// A leak, or a graph or view retention that keeps growing.
    pub fn is_leak(&self) -> bool {
        self.kind.is_leak(self.growing)
    }

    /// The key of a finding that names no site of the run's catalog (untracked growth,
    /// shape churn): its place by file and line. A tensor finding's key is its site's
    /// ([`FindingKey::at_site`], as [`Analysis::finding_keys`](crate::Analysis::finding_keys)
    /// gives it), so this is not public: two keys of one finding would disagree.
    pub(crate) fn key(&self) -> FindingKey {
        FindingKey {
            place: FindingPlace::At(self.site.file.clone(), self.site.line),
            kind: self.kind,
            leak: self.is_leak(),
        }
    }
}

/// A loop as the report summarizes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopSummary {
    pub name: String,
    pub site: Option<SiteRef>,
    /// How many times the loop ran (frames opened) and iterations in all.
    pub runs: u64,
    pub iterations: u64,
    /// Frames of this loop open now.
    pub running: u64,
}

/// What the analysis concluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub loops: Vec<LoopSummary>,
    pub live_tensors: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    pub sites_seen: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub memory: BTreeMap<String, MemorySample>,
    /// Live bytes by role, now and at the peak (`roles.rs`).
    #[serde(default, skip_serializing_if = "MemoryByRole::is_empty")]
    pub memory_by_role: MemoryByRole,
    /// What was live when a tracked function returned an out-of-memory error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_mortem: Option<Box<PostMortem>>,
    /// The figures are estimates from a sample of the tensors (the tracker's sampled
    /// mode): counts and bytes scaled by the inverse of each sample's probability.
    #[serde(default, skip_serializing_if = "is_false")]
    pub estimated: bool,
    /// The sampled mode's mean interval in bytes between samples (with `estimated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_interval: Option<u64>,
    /// When the leaks of the loop with the largest one use up the device's free memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<Forecast>,
}

impl Report {
    /// Findings that are leaks ([`Finding::is_leak`]).
    pub fn leaks(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.is_leak())
    }

    /// Whether any finding is a leak.
    pub fn has_leaks(&self) -> bool {
        self.leaks().next().is_some()
    }

    /// Marks the figures as estimates from a sample taken every `interval` bytes on
    /// average (the tracker's sampled mode).
    pub fn mark_estimated(&mut self, interval: u64) {
        self.estimated = true;
        self.sample_interval = Some(interval);
    }

    /// The sentence that says the figures are estimates, when they are
    /// ([`crate::model::estimate_sentence`]).
    pub fn estimate_note(&self) -> Option<String> {
        self.estimated
            .then(|| crate::model::estimate_sentence(self.sample_interval))
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", group(n), if n == 1 { one } else { many })
}

impl Finding {
    /// The tag that starts the finding's text: `LEAK` for every leak, else its kind.
    pub fn tag(&self) -> &'static str {
        if self.is_leak() {
            return "LEAK";
        }
        match self.kind {
            FindingKind::Retained => "RETAINED",
            FindingKind::GraphRetention => "GRAPH",
            FindingKind::ViewRetention => "VIEW",
            FindingKind::Leak | FindingKind::GrowingTensor => "LEAK",
            FindingKind::UntrackedGrowth => "UNTRACKED",
            FindingKind::ShapeChurn => "CHURN",
            FindingKind::RankDivergence => "RANK",
        }
    }

    /// The text of the memory findings (memory_findings.rs), which carry their numbers in
    /// the hint; `None` for the others.
    fn fmt_memory(&self, f: &mut fmt::Formatter<'_>, pad: &str) -> Option<fmt::Result> {
        let tag = self.tag();
        let head = match self.kind {
            FindingKind::UntrackedGrowth => writeln!(
                f,
                "{tag:<8} {}  {}: +{} per iteration in loop {}",
                self.site.file,
                self.site.label,
                format_bytes(self.bytes_per_iteration),
                self.loop_name
            ),
            FindingKind::ShapeChurn => writeln!(
                f,
                "{tag:<8} {}  `{}` makes tensors of new sizes in loop {}, up to {}",
                self.site.location(),
                self.site.label,
                self.loop_name,
                format_bytes(self.bytes)
            ),
            FindingKind::RankDivergence => {
                return Some(
                    writeln!(
                        f,
                        "{tag:<8} {}: live bytes grow +{} per iteration of loop {} ({}), apart from the other ranks",
                        self.site.label,
                        format_bytes(self.bytes_per_iteration),
                        self.loop_name,
                        plural(self.iterations, "iteration", "iterations"),
                    )
                    .and_then(|()| writeln!(f, "{pad}hint: {}", self.hint)),
                )
            }
            _ => return None,
        };
        Some(head.and_then(|()| writeln!(f, "{pad}{}", self.hint)))
    }

    /// The line of the survivors: how many, born when, alive where, how many bytes.
    fn fmt_survivors(&self, f: &mut fmt::Formatter<'_>, pad: &str) -> fmt::Result {
        let born = if self.iterations == 1 {
            format!("born in iteration {}", self.first_iteration)
        } else {
            format!(
                "born in {}",
                plural(self.iterations, "iteration", "iterations")
            )
        };
        write!(
            f,
            "{pad}{} {born} still alive in loop {} (iteration {}), {}",
            plural(self.survivors, "tensor", "tensors"),
            self.loop_name,
            self.iteration,
            format_bytes(self.bytes)
        )?;
        if self.bytes_per_iteration > 0 {
            write!(
                f,
                ", +{} per iteration",
                format_bytes(self.bytes_per_iteration)
            )?;
        }
        writeln!(f, ", refcount {}", self.refcount)
    }

    /// `role: activation; created in train → Dataset::batch` (what is known of both).
    fn fmt_origin(&self, f: &mut fmt::Formatter<'_>, pad: &str) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(role) = self.role {
            parts.push(format!("role: {role}"));
        }
        if !self.call_path.is_empty() {
            let mut created = format!("created in {}", format_call_path(&self.call_path));
            for other in &self.other_call_paths {
                created.push_str(&format!(" and in {}", format_call_path(other)));
            }
            parts.push(created);
        }
        if parts.is_empty() {
            return Ok(());
        }
        writeln!(f, "{pad}{}", parts.join("; "))
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pad = " ".repeat(9);
        if let Some(done) = self.fmt_memory(f, &pad) {
            return done;
        }
        let loc = self.site.location();
        write!(f, "{:<9}{loc}  `{}`", self.tag(), self.site.label)?;
        // The first store is named on the first line; the other holders below.
        let stores: Vec<&HolderRef> = self
            .holders
            .iter()
            .filter(|h| h.kind == HolderKind::Store)
            .collect();
        if let Some(store) = stores.first() {
            write!(f, " ({store})")?;
        }
        writeln!(f)?;
        match self.kind {
            FindingKind::GraphRetention => writeln!(
                f,
                "{pad}carries an autograd graph: {} other tensors, {} held",
                group(self.graph_tensors),
                format_bytes(self.graph_bytes)
            )?,
            FindingKind::ViewRetention => writeln!(
                f,
                "{pad}{} of views pin {} of storage",
                format_bytes(self.view_bytes),
                format_bytes(self.view_storage_bytes)
            )?,
            _ => {}
        }
        self.fmt_survivors(f, &pad)?;
        for h in self
            .holders
            .iter()
            .filter(|h| h.kind != HolderKind::Store || stores.len() > 1)
        {
            writeln!(f, "{pad}{} ({})", h, plural(h.count, "tensor", "tensors"))?;
        }
        if !self.held_sites.is_empty() {
            let held: Vec<String> = self
                .held_sites
                .iter()
                .map(|s| format!("`{}` {}", s.label, s.location()))
                .collect();
            writeln!(f, "{pad}the graph also holds: {}", held.join(", "))?;
        }
        self.fmt_origin(f, &pad)?;
        if let Some(forecast) = &self.forecast {
            writeln!(f, "{pad}runs out: {forecast}")?;
        }
        writeln!(f, "{pad}hint: {}", self.hint)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let leaks = self.leaks().count() as u64;
        // A shape churn that follows another in its loop is in the JSON report only.
        let shown = || self.findings.iter().filter(|f| f.follows.is_none());
        writeln!(
            f,
            "{}, {} ({}); live now: {}, {} (peak {})",
            plural(shown().count() as u64, "finding", "findings"),
            plural(leaks, "leak", "leaks"),
            if leaks == 0 { "clean" } else { "LEAKING" },
            plural(self.live_tensors, "tensor", "tensors"),
            format_bytes(self.live_bytes),
            format_bytes(self.peak_live_bytes),
        )?;
        if let Some(note) = self.estimate_note() {
            writeln!(f, "{note}")?;
        }
        if !self.memory_by_role.is_empty() {
            writeln!(f, "memory {}", self.memory_by_role)?;
        }
        if let Some(forecast) = &self.forecast {
            writeln!(f, "runs out: {forecast}")?;
        }
        for finding in shown() {
            write!(f, "{finding}")?;
        }
        if let Some(pm) = &self.post_mortem {
            write!(f, "{pm}")?;
        }
        Ok(())
    }
}
