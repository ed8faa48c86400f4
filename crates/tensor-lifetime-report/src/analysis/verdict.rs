//! A verdict: the judgement of one site in one loop frame (its series and where it
//! stands), what bounds its growth, and the kind of finding it makes.

use super::judgement::Judgement;
use super::series::Series;
use crate::report::FindingKind;
use std::borrow::Cow;

/// The judgement of one site in one frame: its series and where it stands. Kept
/// (`Verdict<'static>`, owning its parts) for ended frames; lent, borrowing them from the
/// frames, to a report or to [`crate::Analysis::finding_keys`].
#[derive(Debug, Clone)]
pub(super) struct Verdict<'a> {
    pub(super) judgement: Judgement,
    pub(super) session: u64,
    pub(super) loop_site: u32,
    pub(super) loop_name: Cow<'a, str>,
    pub(super) depth: u32,
    pub(super) iteration: u64,
    pub(super) running: bool,
    pub(super) series: Cow<'a, Series>,
    pub(super) growing: bool,
    /// Growing by the rule on bytes, not by the count: its survivors are replaced by
    /// larger ones (a `growing_tensor`).
    pub(super) by_bytes: bool,
    /// The returned local the loop (or its outermost loop) builds, for a construction
    /// loop (see the module docs of `analysis`).
    pub(super) product: Option<Cow<'a, str>>,
    /// Confirmed at the close of an outermost loop that never left its warm-up (a run of
    /// a single epoch): no later iteration could tell a leak from state filled once.
    pub(super) single_epoch: bool,
}

impl Verdict<'_> {
    /// The same verdict owning its parts (those it borrowed are copied).
    pub(super) fn into_owned(self) -> Verdict<'static> {
        Verdict {
            loop_name: Cow::Owned(self.loop_name.into_owned()),
            series: Cow::Owned(self.series.into_owned()),
            product: self.product.map(|p| Cow::Owned(p.into_owned())),
            ..self
        }
    }

    /// The same verdict, borrowing its parts from this one.
    pub(super) fn lent(&self) -> Verdict<'_> {
        Verdict {
            loop_name: Cow::Borrowed(&self.loop_name),
            series: Cow::Borrowed(&self.series),
            product: self.product.as_deref().map(Cow::Borrowed),
            ..*self
        }
    }
}

/// Why a growing site is bounded (see the module docs of `analysis`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bound {
    /// Held by a store into a container the code trims at `line` with `call`.
    Evicted {
        holder: String,
        file: String,
        line: u32,
        call: String,
    },
    /// Built by a construction loop into `holder`, which its function returns.
    Product { holder: String },
}

impl Bound {
    pub(super) fn hint(&self) -> String {
        match self {
            Bound::Evicted {
                holder,
                file,
                line,
                call,
            } => format!(
                "bounded: `{holder}` is trimmed at {file}:{line} (`{call}`); it grows until it fills, then stays flat"
            ),
            Bound::Product { holder } => format!(
                "built by a construction loop into `{holder}`, which its function returns (model state, not a leak)"
            ),
        }
    }
}

pub(super) fn classify(
    v: &Verdict<'_>,
    j: &Judgement,
    bound: Option<&Bound>,
) -> Option<FindingKind> {
    let last = &v.series.last;
    if last.survivors == 0 {
        return None;
    }
    if last.graph_tensors > 0 {
        return Some(FindingKind::GraphRetention);
    }
    if last.view_bytes > 0 && last.view_storage_bytes >= j.view_ratio * last.view_bytes {
        return Some(FindingKind::ViewRetention);
    }
    if v.growing {
        return Some(match bound {
            Some(_) => FindingKind::Retained,
            None if v.by_bytes => FindingKind::GrowingTensor,
            None => FindingKind::Leak,
        });
    }
    if last.iterations == 1 && v.iteration.saturating_sub(last.last_iteration) >= j.k {
        return Some(FindingKind::Retained);
    }
    None
}
