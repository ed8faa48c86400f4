//! What the events declared: sites, call paths, and the tensors born per site.
//!
//! The [`super::Analysis`] owns the [`Catalog`] and fills it from its input; the report,
//! the memory findings and the tracker (its post-mortem, its site totals) read it.

use crate::fast_hash::{HashMap, SiteMap};
use crate::model::{HolderKind, HolderRef, HolderSpec, SiteInfo, SiteRef};
use crate::roles::CallFrame;

/// Sites, call paths and births per site, by id (read-only outside the analysis).
#[derive(Debug, Default)]
pub struct Catalog {
    sites: HashMap<u32, SiteInfo>,
    /// Call paths by id ([`crate::Event::CallPath`]).
    call_paths: HashMap<u32, Vec<CallFrame>>,
    /// Tensors born per site, and their bytes.
    born: SiteMap<Births>,
    /// The sampled mode's births per site as the sums of their weights (tensors, bytes),
    /// of which `born` holds the rounded values: kept for the sites born at since the log
    /// said it samples.
    estimates: SiteMap<(f64, f64)>,
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
    pub(super) fn born_sampled(&mut self, site: u32, bytes: u64, weight: f64) {
        let b = self.born.get_or_default(site);
        let e = self.estimates.get_or_default(site);
        if *e == (0.0, 0.0) {
            *e = (b.tensors as f64, b.bytes as f64);
        }
        e.0 += weight;
        e.1 += weight * bytes as f64;
        // `as` saturates: a corrupt log's sizes stay finite numbers.
        (b.tensors, b.bytes) = (e.0.round() as u64, e.1.round() as u64);
    }
}
