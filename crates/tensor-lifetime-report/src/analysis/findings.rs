//! From verdicts to findings: which growing sites are bounded (trimmed containers,
//! construction loops), the kind of each finding, the best verdict of each site, and the
//! order of the report.

use super::by_site::BySite;
use super::catalog::Catalog;
use super::verdict::{classify, Bound, Verdict};
use crate::model::{HolderRef, HolderSpec, SiteKind, SiteNote, SiteRef, SiteSweep};
use crate::report::{Finding, FindingKey, FindingKind};
use std::collections::BTreeMap;

/// The findings of `candidates` (verdicts by site), one per site, their sites and call
/// paths named by `catalog`; not sorted ([`sort_findings`]).
pub(super) fn findings<'v>(
    catalog: &Catalog,
    candidates: impl IntoIterator<Item = (u32, Verdict<'v>)>,
) -> Vec<Finding> {
    Assembly { catalog }.findings(candidates)
}

/// What names the sites and call paths of the findings.
struct Assembly<'a> {
    catalog: &'a Catalog,
}

/// The keys of the findings of `candidates` ([`FindingKey`]): [`findings`] without
/// assembling them.
pub(super) fn keys<'v>(
    catalog: &Catalog,
    candidates: impl IntoIterator<Item = (u32, Verdict<'v>)>,
) -> Vec<FindingKey> {
    let assembly = Assembly { catalog };
    let (best, _) = assembly.decide(candidates, None);
    best.into_iter()
        .map(|(site, (kind, verdict, _))| FindingKey::at_site(site, kind, verdict.growing))
        .collect()
}

impl Assembly<'_> {
    /// Which sites make findings, of what kind: the best verdict of each site, bounded
    /// by the graph where its root is, without the leaks folded into a graph retention
    /// (by root); and, into `paths` when given, every candidate's call paths by site.
    fn decide<'v>(
        &self,
        candidates: impl IntoIterator<Item = (u32, Verdict<'v>)>,
        paths: Option<&mut Paths>,
    ) -> (Best<'v>, Paths) {
        let mut best = self.best_verdicts(candidates, paths);
        bound_by_graph(&mut best);
        let held = fold_graph_held(&mut best);
        (best, held)
    }

    fn findings<'v>(
        &self,
        candidates: impl IntoIterator<Item = (u32, Verdict<'v>)>,
    ) -> Vec<Finding> {
        let mut paths = Paths::new();
        let (best, held) = self.decide(candidates, Some(&mut paths));
        best.into_iter()
            .map(|(site, (kind, verdict, bound))| {
                let held_sites = held
                    .get(&site)
                    .map(|v| v.iter().map(|s| self.catalog.site_ref(*s)).collect())
                    .unwrap_or_default();
                let mut f = self.finding(site, kind, &verdict, held_sites, bound.as_ref());
                // The paths of the site's other loops too: a helper called from two
                // loops is one finding with both paths.
                for id in paths.get(&site).into_iter().flatten() {
                    let path = self.catalog.call_path(*id);
                    if !path.is_empty()
                        && f.call_path != path
                        && !f.other_call_paths.iter().any(|p| p == path)
                    {
                        f.other_call_paths.push(path.to_vec());
                    }
                }
                f
            })
            .collect()
    }

    /// One verdict per site, with its kind and its bound: the most serious kind, then the
    /// outermost loop. Also, into `paths` when given, the call paths of every candidate of
    /// each site.
    fn best_verdicts<'v>(
        &self,
        candidates: impl IntoIterator<Item = (u32, Verdict<'v>)>,
        mut paths: Option<&mut Paths>,
    ) -> Best<'v> {
        let rank = |k: FindingKind, v: &Verdict<'_>| {
            (
                !(v.growing || k == FindingKind::Leak || k == FindingKind::GrowingTensor),
                k.severity_rank(),
                v.depth,
                !v.running,
            )
        };
        let mut best = Best::default();
        for (site, mut verdict) in candidates {
            if let Some(paths) = paths
                .as_deref_mut()
                .filter(|_| !verdict.series.last.call_paths.is_empty())
            {
                let known = paths.entry(site).or_default();
                for id in &verdict.series.last.call_paths {
                    if !known.contains(id) {
                        known.push(*id);
                    }
                }
            }
            let bound = self.bound(&verdict);
            let Some(kind) = classify(&verdict, &verdict.judgement, bound.as_ref()) else {
                continue;
            };
            // A bounded graph or view retention is not growing without end.
            if bound.is_some() && kind != FindingKind::Retained {
                verdict.growing = false;
            }
            let better = match best.get(site) {
                None => true,
                Some((k, v, _)) => rank(kind, &verdict) < rank(*k, v),
            };
            if better {
                best.insert(site, (kind, verdict, bound));
            }
        }
        best
    }

    /// Whether a verdict's survivors are bounded: their main holder is a store into a
    /// container the code trims, or they are a construction loop's product (and not held
    /// by a store into something else).
    fn bound(&self, v: &Verdict<'_>) -> Option<Bound> {
        let top = v.series.last.holders.first().map(|h| h.holder);
        let store = match top {
            Some(HolderSpec::Store { site }) => self.catalog.site(site),
            _ => None,
        };
        if let Some(info) = store {
            if let Some(SiteNote::Evicted { line, call }) = &info.note {
                return Some(Bound::Evicted {
                    holder: info.label.clone(),
                    file: info.file.clone(),
                    line: *line,
                    call: call.clone(),
                });
            }
        }
        let holder = v.product.as_ref()?;
        match store {
            Some(info) if info.label != *holder => None,
            _ => Some(Bound::Product {
                holder: holder.to_string(),
            }),
        }
    }

    /// A growing tensor born at an assignment (`cache = Tensor::cat(..)`) and seen held
    /// by nothing else is held by the place assigned: each new one replaces the previous
    /// one there.
    fn replaced_in(&self, site: u32, kind: FindingKind, holder: HolderSpec) -> HolderSpec {
        let assigned = self
            .catalog
            .site(site)
            .is_some_and(|s| s.kind == SiteKind::Assignment);
        match holder {
            HolderSpec::Unknown if kind == FindingKind::GrowingTensor && assigned => {
                HolderSpec::Store { site }
            }
            other => other,
        }
    }

    fn holder_ref(&self, h: &HolderSpec, count: u64) -> HolderRef {
        self.catalog.holder_ref(h, count)
    }

    fn finding(
        &self,
        site: u32,
        kind: FindingKind,
        v: &Verdict<'_>,
        held_sites: Vec<SiteRef>,
        bound: Option<&Bound>,
    ) -> Finding {
        let last = &v.series.last;
        let span = v.iteration.saturating_sub(v.series.first_iteration).max(1);
        let held = |s: &SiteSweep| match kind {
            FindingKind::GraphRetention => s.graph_bytes.max(s.bytes),
            FindingKind::ViewRetention => s.view_storage_bytes.max(s.bytes),
            _ => s.bytes,
        };
        let bytes = held(last);
        // What the tensors hold may be measured on the latest iteration's graph only (old
        // survivors' graphs are not walked again), so it grows at least as their own bytes.
        let growth = |measure: &dyn Fn(&SiteSweep) -> u64| {
            measure(last).saturating_sub(measure(&v.series.first)) / span
        };
        let bytes_per_iteration =
            if v.growing || kind == FindingKind::Leak || kind == FindingKind::GrowingTensor {
                growth(&held).max(growth(&|s: &SiteSweep| s.bytes))
            } else {
                0
            };
        Finding {
            kind,
            growing: v.growing,
            site: self.catalog.site_ref(site),
            loop_name: v.loop_name.to_string(),
            loop_site: Some(self.catalog.site_ref(v.loop_site)),
            iteration: v.iteration,
            survivors: last.survivors,
            iterations: last.iterations,
            first_iteration: last.first_iteration,
            bytes,
            bytes_per_iteration,
            refcount: last.refcount,
            holders: last
                .holders
                .iter()
                .map(|h| self.holder_ref(&self.replaced_in(site, kind, h.holder), h.count))
                .collect(),
            graph_tensors: last.graph_tensors,
            graph_bytes: last.graph_bytes,
            view_bytes: last.view_bytes,
            view_storage_bytes: last.view_storage_bytes,
            held_sites,
            role: last.role,
            call_path: last
                .call_paths
                .first()
                .map(|id| self.catalog.call_path(*id).to_vec())
                .unwrap_or_default(),
            other_call_paths: last
                .call_paths
                .iter()
                .skip(1)
                .map(|id| self.catalog.call_path(*id).to_vec())
                .filter(|p| !p.is_empty())
                .collect(),
            follows: None,
            hint: match (bound, v.single_epoch) {
                (Some(bound), _) => bound.hint(),
                (None, false) => kind.hint().to_string(),
                (None, true) => format!(
                    "{} (seen in a run whose outer loop ran once: state filled in a first \
                     epoch and reused later looks the same)",
                    kind.hint()
                ),
            },
            forecast: None,
        }
    }
}

/// The best verdict of each site, in site order: its finding's kind, the verdict, and
/// what bounds it (the automatic report decides at every outermost iteration end).
type Best<'a> = BySite<(FindingKind, Verdict<'a>, Option<Bound>)>;

/// Sites (or call paths) by site.
type Paths = BTreeMap<u32, Vec<u32>>;

/// Growth held by the graph of a bounded site is bounded with it (the inputs of a capped
/// optimizer history's differences).
fn bound_by_graph(best: &mut Best) {
    let bounded_roots: BTreeMap<u32, Bound> = best
        .iter()
        .filter_map(|(site, (_, _, b))| b.clone().map(|b| (site, b)))
        .collect();
    for (kind, verdict, bound) in best.values_mut() {
        if bound.is_some() {
            continue;
        }
        let top = verdict.series.last.holders.first().map(|h| h.holder);
        if let Some(HolderSpec::Graph { site: root }) = top {
            if let Some(b) = bounded_roots.get(&root) {
                *bound = Some(b.clone());
                if matches!(*kind, FindingKind::Leak | FindingKind::GrowingTensor) {
                    *kind = FindingKind::Retained;
                } else {
                    verdict.growing = false;
                }
            }
        }
    }
}

/// Leaks held only by the graph of a reported graph retention fold into it: they leave
/// `best`, and the result lists them by the graph's site.
fn fold_graph_held(best: &mut Best) -> Paths {
    let roots: Vec<u32> = best
        .iter()
        .filter(|(_, (k, _, _))| *k == FindingKind::GraphRetention)
        .map(|(s, _)| s)
        .collect();
    let mut held = Paths::new();
    best.retain(|site, (kind, verdict, _)| {
        if *kind == FindingKind::GraphRetention || verdict.series.last.holders.is_empty() {
            return true;
        }
        let root =
            verdict
                .series
                .last
                .holders
                .iter()
                .try_fold(None, |acc, h| match (&h.holder, acc) {
                    (HolderSpec::Graph { site: r }, None) if roots.contains(r) && *r != site => {
                        Ok(Some(*r))
                    }
                    (HolderSpec::Graph { site: r }, Some(prev)) if *r == prev => Ok(Some(prev)),
                    _ => Err(()),
                });
        match root {
            Ok(Some(r)) => {
                held.entry(r).or_default().push(site);
                false
            }
            _ => true,
        }
    });
    held
}

/// In the report's order ([`Finding::cmp_seriousness`]), then by place.
pub(super) fn sort_findings(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        a.cmp_seriousness(b)
            .then_with(|| (&a.site.file, a.site.line).cmp(&(&b.site.file, b.site.line)))
    });
}
