//! What one iteration end measured: the survivors of each site ([`SiteSweep`]) and a
//! device's memory ([`MemorySample`]).

use super::fields::is_zero;
use super::holder::HolderCount;
use super::roles::Role;
use serde::{Deserialize, Serialize};

/// What a sweep found about the survivors of one site within one loop frame.
#[derive(Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SiteSweep {
    pub site: u32,
    /// Live tensors born at this site in this frame (or loops nested in it).
    pub survivors: u64,
    /// Bytes of the storages these survivors keep alive, each storage counted once.
    pub bytes: u64,
    /// Distinct iterations of this frame in which the survivors were born.
    pub iterations: u64,
    /// Earliest and latest iteration of this frame that bore a survivor.
    pub first_iteration: u64,
    pub last_iteration: u64,
    /// Highest strong count among the survivors.
    pub refcount: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<HolderCount>,
    /// Largest autograd graph held by one survivor of this site: other tensors in it and
    /// their storage bytes (parameters excluded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_tensors: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_bytes: u64,
    /// For survivors that are small views of a larger storage: bytes of the views
    /// themselves and of the storages they pin.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub view_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub view_storage_bytes: u64,
    /// The role of most of the survivors (absent in logs written before roles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The call paths (ids of the log's `call_path` events) that created the survivors, the most
    /// frequent first (up to 4; absent in logs written before call paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_paths: Vec<u32>,
}

// By hand for `clone_from`, which reuses the holders' allocation: the analysis keeps the
// latest sweep of every series, at every iteration end.
impl Clone for SiteSweep {
    fn clone(&self) -> Self {
        let mut out = SiteSweep::default();
        out.clone_from(self);
        out
    }

    // Inlined always: the analysis calls it at every iteration end, once per site.
    #[inline(always)]
    fn clone_from(&mut self, source: &Self) {
        let SiteSweep {
            site,
            survivors,
            bytes,
            iterations,
            first_iteration,
            last_iteration,
            refcount,
            holders,
            graph_tensors,
            graph_bytes,
            view_bytes,
            view_storage_bytes,
            role,
            call_paths,
        } = source;
        copy_list(&mut self.holders, holders);
        copy_list(&mut self.call_paths, call_paths);
        (self.site, self.survivors, self.bytes) = (*site, *survivors, *bytes);
        (self.iterations, self.first_iteration) = (*iterations, *first_iteration);
        (self.last_iteration, self.refcount) = (*last_iteration, *refcount);
        (self.graph_tensors, self.graph_bytes) = (*graph_tensors, *graph_bytes);
        (self.view_bytes, self.view_storage_bytes) = (*view_bytes, *view_storage_bytes);
        self.role = *role;
    }
}

/// `dst` made equal to `src`, its allocation kept. A site's lists keep their length from
/// one iteration end to the next, mostly at 0 or 1 element: then a move or nothing, where
/// `Vec::clone_from` calls `memcpy`.
#[inline]
fn copy_list<T: Copy>(dst: &mut Vec<T>, src: &[T]) {
    match (dst.as_mut_slice(), src) {
        ([], []) => {}
        ([d], [s]) => *d = *s,
        _ => {
            dst.clear();
            dst.extend_from_slice(src);
        }
    }
}

/// A memory sample (from the periodic monitor or a `memory_summary`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemorySample {
    /// Live bytes of tracked tensors on this device.
    pub tracked: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_reserved: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_resident: Option<u64>,
}
