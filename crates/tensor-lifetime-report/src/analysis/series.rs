//! The survivor counts of one site in one loop frame, summarized ([`Series`]), the series
//! of a frame by site, and an iteration end's sweeps looked up by site.

use super::by_site::BySite;
use super::growth::{Growth, Window};
use super::judgement::Judgement;
use crate::fast_hash::HashMap;
use crate::model::SiteSweep;

/// Survivor counts of one site in one loop frame, summarized.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Highest count so far (the count at the latest sweep is `last.survivors`).
    pub(super) max: u64,
    /// The growth events: iterations after the warm-up whose count made a new high.
    growth: Growth,
    /// The highest count before the latest growth event.
    plateau: u64,
    /// The same for the bytes (now: `last.bytes`), whose growth events are those of
    /// iterations whose count made no new high (the rule on bytes, [`super::growth`]).
    pub(super) bytes_max: u64,
    bytes_growth: Growth,
    bytes_plateau: u64,
    /// The first sweep seen, to compute bytes per iteration.
    pub(super) first: SiteSweep,
    pub(super) first_iteration: u64,
    /// The latest sweep of this site in this frame (none at the latest iteration end:
    /// no survivors, no holders, graph or views; the rest as it was).
    pub(super) last: SiteSweep,
}

impl Series {
    /// A series whose first sweep is `first`, at `iteration`.
    pub(super) fn starting(iteration: u64, first: &SiteSweep) -> Series {
        Series {
            first_iteration: iteration,
            first: first.clone(),
            ..Series::default()
        }
    }

    pub(super) fn observe(&mut self, iteration: u64, sweep: Option<&SiteSweep>, j: &Judgement) {
        let count = sweep.map_or(0, |s| s.survivors);
        let bytes = sweep.map_or(0, |s| s.bytes);
        let judged = iteration >= j.warmup;
        let count_high = count > self.max;
        if count_high {
            if judged {
                self.growth.event(iteration);
                self.plateau = self.max;
            }
            self.max = count;
        }
        if bytes > self.bytes_max {
            if judged && !count_high && count > 0 {
                self.bytes_growth.event(iteration);
                self.bytes_plateau = self.bytes_max;
            }
            self.bytes_max = bytes;
        }
        match sweep {
            // `clone_from`: the holders' allocation is reused at every iteration end.
            Some(s) => self.last.clone_from(s),
            None => {
                self.last.survivors = 0;
                self.last.bytes = 0;
                self.last.holders.clear();
                self.last.graph_tensors = 0;
                self.last.graph_bytes = 0;
                self.last.view_bytes = 0;
                self.last.view_storage_bytes = 0;
            }
        }
    }

    /// The leak rule (see the module docs of [`super`] and [`super::growth`]) at
    /// `iteration`.
    pub fn growing(&self, iteration: u64, j: &Judgement) -> bool {
        // A count back at or under the level it had before the latest growth event is
        // not growing: a bounded queue that filled late and is draining.
        self.last.survivors > self.plateau && self.growth.holds(iteration, j.k, Window::MeanGap)
    }

    /// The rule on bytes (see the module docs of [`super::growth`]) at `iteration`: the
    /// survivors are replaced by larger ones, iteration after iteration.
    pub fn growing_bytes(&self, iteration: u64, j: &Judgement) -> bool {
        let since = j.warmup.max(self.first_iteration);
        self.last.bytes > self.bytes_plateau
            && self.bytes_growth.holds(iteration, j.k, Window::MeanGap)
            && self.bytes_growth.steady(iteration, since)
    }
}

/// The series of one frame, sorted by site: an iteration end walks them all, and finds or
/// adds a handful by binary search (no hashing on the per-iteration path).
/// A frame's series by site.
pub(super) type SeriesBySite = BySite<Series>;

impl SeriesBySite {
    /// Adds a series for the site of `first`, starting there at `iteration`, if it has
    /// none. Inlined, a search; the rare insertion is out of line.
    #[inline]
    pub(super) fn start(&mut self, iteration: u64, first: &SiteSweep) {
        if let Err(i) = self.find(first.site) {
            self.insert_new(i, iteration, first);
        }
    }

    #[cold]
    #[inline(never)]
    fn insert_new(&mut self, i: usize, iteration: u64, first: &SiteSweep) {
        let series = Series::starting(iteration, first);
        self.0.insert(i, (first.site, series));
    }
}

/// An iteration end's summaries by site. The tracker writes them sorted by site (looked
/// up by binary search, nothing built); a log written otherwise gets a map.
pub(super) enum SiteLookup<'a> {
    Sorted(&'a [SiteSweep]),
    Map(HashMap<u32, &'a SiteSweep>),
}

impl<'a> SiteLookup<'a> {
    pub(super) fn new(sites: &'a [SiteSweep]) -> Self {
        if sites.is_sorted_by_key(|s| s.site) {
            SiteLookup::Sorted(sites)
        } else {
            SiteLookup::Map(sites.iter().map(|s| (s.site, s)).collect())
        }
    }

    pub(super) fn get(&self, site: u32) -> Option<&'a SiteSweep> {
        match self {
            SiteLookup::Sorted(sites) => sites
                .binary_search_by_key(&site, |s| s.site)
                .ok()
                .map(|i| &sites[i]),
            SiteLookup::Map(map) => map.get(&site).copied(),
        }
    }
}
