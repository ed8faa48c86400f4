//! What the events declared: sites, call paths, and the tensors born per site.
//!
//! The [`super::Analysis`] owns the [`Catalog`] and fills it from its input; the report,
//! the memory findings and the tracker (its post-mortem, its site totals) read it.

use crate::fast_hash::{HashMap, SiteMap};
use crate::model::{SiteInfo, SiteRef};
use crate::roles::CallFrame;

/// Sites, call paths and births per site, by id (read-only outside the analysis).
#[derive(Debug, Default)]
pub struct Catalog {
    sites: HashMap<u32, SiteInfo>,
    /// Call paths by id ([`crate::Event::CallPath`]).
    call_paths: HashMap<u32, Vec<CallFrame>>,
    /// Tensors born per site.
    born: SiteMap<u64>,
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

    /// Tensors born at `site` so far.
    pub fn births(&self, site: u32) -> u64 {
        self.born.get(site).copied().unwrap_or(0)
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
    pub(super) fn born(&mut self, site: u32) {
        *self.born.get_or_default(site) += 1;
    }
}
