//! What the events declared: sites, call paths, and the tensors born per site.
//!
//! The [`super::Analysis`] owns the [`Catalog`] and fills it from its input; the report,
//! the memory findings and the tracker (its post-mortem, its site totals) read it.

use crate::fast_hash::{HashMap, SiteMap};
use crate::model::{estimate_count, HolderKind, HolderRef, HolderSpec, SiteInfo, SiteRef};
use crate::roles::CallFrame;

/// Sites, call paths and births per site, by id (read-only outside the analysis).
#[derive(Debug, Default)]
pub struct Catalog {
    sites: HashMap<u32, SiteInfo>,
    /// Call paths by id ([`crate::Event::CallPath`]).
    call_paths: HashMap<u32, Vec<CallFrame>>,
    /// Tensors born per site, and their bytes.
    born: SiteMap<Births>,
    /// The draws of the sampled births' rounding ([`Catalog::born_sampled`]): a Weyl
    /// sequence, so the same log counts the same.
    draws: u64,
}

/// The tensors born at one site so far: how many, and their own bytes (a view's, not
/// its storage's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Births {
    pub tensors: u64,
    pub bytes: u64,
}

impl Catalog {
    /// Site info by id, once declared.
    pub fn site(&self, id: u32) -> Option<&SiteInfo> {
        self.sites.get(&id)
    }

    /// The site as reports show it (`<unknown>`, `site #id` when not declared).
    pub fn site_ref(&self, id: u32) -> SiteRef {
        match self.sites.get(&id) {
            Some(info) => SiteRef::from(info),
            None => SiteRef {
                file: "<unknown>".into(),
                line: 0,
                column: 0,
                function: String::new(),
                label: format!("site #{id}"),
            },
        }
    }

    /// The frames of call path `id`, outermost first (empty when not declared).
    pub fn call_path(&self, id: u32) -> &[CallFrame] {
        self.call_paths.get(&id).map_or(&[], |v| v.as_slice())
    }

    /// The holder as reports show it, its site named: `count` survivors held by `h`.
    pub fn holder_ref(&self, h: &HolderSpec, count: u64) -> HolderRef {
        let (kind, site) = match h {
            HolderSpec::Store { site } => (HolderKind::Store, Some(*site)),
            HolderSpec::Graph { site } => (HolderKind::Graph, Some(*site)),
            HolderSpec::View { site } => (HolderKind::View, Some(*site)),
            HolderSpec::Unknown => (HolderKind::Unknown, None),
        };
        let site = site.map(|s| self.site_ref(s));
        HolderRef {
            kind,
            file: site.as_ref().map(|s| s.file.clone()),
            line: site.as_ref().map(|s| s.line),
            label: site.map(|s| s.label),
            count,
        }
    }

    /// Tensors born at `site` so far.
    pub fn births(&self, site: u32) -> u64 {
        self.born.get(site).map_or(0, |b| b.tensors)
    }

    /// Every site that bore a tensor, with its births (in no particular order).
    pub fn births_by_site(&self) -> impl Iterator<Item = (u32, Births)> + '_ {
        self.born.iter().map(|(site, b)| (site, *b))
    }

    /// Sites that bore a tensor.
    pub fn sites_seen(&self) -> u64 {
        self.born.len() as u64
    }

    pub(super) fn declare_site(&mut self, id: u32, info: &SiteInfo) {
        self.sites.insert(id, info.clone());
    }

    pub(super) fn declare_call_path(&mut self, id: u32, frames: &[CallFrame]) {
        self.call_paths.insert(id, frames.to_vec());
    }

    #[inline]
    pub(super) fn born(&mut self, site: u32, bytes: u64) {
        let b = self.born.get_or_default(site);
        b.tensors += 1;
        b.bytes = b.bytes.saturating_add(bytes);
    }

    /// A sampled birth at `site` of `bytes` own bytes that stands for `weight` tensors
    /// ([`crate::model::sample_weight`]): the site's births are estimates from then on.
    /// The weight is rounded at random, up with the probability of its fraction (16.5:
    /// 16 or 17 alike), so the counts stay unbiased without keeping fractions per site:
    /// nothing is allocated beyond an exact birth's entry (in process, a sampled run's
    /// allocations are as few as its probes).
    pub(super) fn born_sampled(&mut self, site: u32, bytes: u64, weight: f64) {
        self.draws = self.draws.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let u = (self.draws >> 11) as f64 / (1u64 << 53) as f64;
        let whole = weight.floor();
        let tensors = estimate_count(whole) + u64::from(u < weight - whole);
        let b = self.born.get_or_default(site);
        b.tensors = b.tensors.saturating_add(tensors);
        b.bytes = b
            .bytes
            .saturating_add(estimate_count(weight * bytes as f64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_births_round_their_weights_without_bias() {
        let mut c = Catalog::default();
        c.born(1, 64);
        for _ in 0..10_000 {
            c.born_sampled(1, 64, 1.3);
        }
        let b = c.births_by_site().next().unwrap().1;
        // 1 exact birth and 10 000 of weight 1.3: 13 001 on average; each 1 or 2.
        assert!(
            (b.tensors as f64 - 13_001.0).abs() < 13_001.0 * 0.005,
            "{b:?}"
        );
        assert_eq!(b.bytes, 64 + 10_000 * 83);
        // The same births count the same.
        let mut again = Catalog::default();
        again.born(1, 64);
        for _ in 0..10_000 {
            again.born_sampled(1, 64, 1.3);
        }
        assert_eq!(again.births_by_site().next().unwrap().1, b);
    }
}
