//! Who holds the survivors: per site, the summary of a sweep's survivors (counts,
//! bytes, refcounts, iterations) and their holders, as far as can be known: a store site
//! seen by the macro, another survivor's autograd graph, a view of a storage another
//! record owns, or unknown; and the role and call paths of the survivors.
//!
//! One rule chooses a record's holder ([`holder`]) for the findings (an exact walk's
//! summaries), for the counts of old records ([`super::site_counts`]) and for the
//! post-mortem ([`crate::tracker::post_mortem`]); one graph walk ([`graph_holders`]) finds the
//! records a graph holds, among a sweep's survivors or, for the post-mortem, among every
//! live record. So the findings, the JSON report and the post-mortem name the same holder
//! for the same tensors.

use super::{Claim, Scratch};
use crate::tracker::inputs::MadeFrom;
use crate::tracker::keep::FastMap;
use crate::tracker::probe::Observed;
use crate::tracker::registry::{Record, Registry};
use crate::tracker::roles;
use crate::weak;
use std::collections::hash_map::Entry;
use tensor_lifetime_report::event::{HolderCount, HolderSpec, SiteSweep};

/// Summarizes `scratch.survivors` by site into `scratch.sites`.
pub(in crate::tracker) fn summarize_survivors(
    scratch: &mut Scratch,
    // `None`: every live storage has a single record, which owns it.
    claims: Option<&FastMap<usize, Claim>>,
    inputs: GraphInputs<'_>,
) {
    let Scratch {
        survivors,
        holders,
        sites: out,
        merged,
        ..
    } = scratch;
    if survivors.is_empty() {
        // The summaries of the latest sweep go to `merged`, whose slots the next merge
        // with the aggregates refills (their allocations kept).
        std::mem::swap(out, merged);
        out.clear();
        return;
    }
    // Graphs (out of line): only survivors that had an op when tagged can hold a graph,
    // so a sweep without any pays nothing for them.
    let graphs = survivors.iter().any(|v| v.has_graph).then(|| {
        let roots = survivors
            .iter()
            .filter(|v| v.has_graph)
            .filter_map(|v| inputs.registry.young(v.key))
            .collect();
        let candidates = survivors.iter().map(|v| (v.key, v.id)).collect();
        graph_holders(roots, &candidates, inputs)
    });
    // Per site, in (site, iteration) order so distinct iterations are counted by
    // change.
    survivors.sort_unstable_by_key(|v| (v.site, v.iteration, v.id));
    holders.clear();
    let mut origin = Origin::new();
    let mut used = 0;
    let mut last_iteration = None;
    for r in survivors.iter() {
        let (site, iteration) = (r.site, r.iteration);
        if used == 0 || out[used - 1].site != site {
            if used > 0 {
                finish_holders(&mut out[used - 1], holders);
                origin.finish(&mut out[used - 1]);
            }
            let graph = graphs
                .as_ref()
                .and_then(|g| g.by_site.get(&site).copied())
                .unwrap_or_default();
            if used == out.len() {
                out.push(SiteSweep::default());
            }
            // A slot of an earlier sweep: its holders keep their allocation.
            let slot = &mut out[used];
            let kept = std::mem::take(&mut slot.holders);
            let paths = std::mem::take(&mut slot.call_paths);
            *slot = SiteSweep {
                site,
                first_iteration: u64::from(iteration),
                graph_tensors: graph.tensors,
                graph_bytes: graph.bytes,
                holders: kept,
                call_paths: paths,
                ..SiteSweep::default()
            };
            used += 1;
            last_iteration = None;
        }
        let a = &mut out[used - 1];
        origin.add(r.role, r.path);
        a.survivors += 1;
        if last_iteration != Some(iteration) {
            a.iterations += 1;
            last_iteration = Some(iteration);
        }
        a.last_iteration = u64::from(iteration);
        a.refcount = a.refcount.max(u64::from(r.refcount));
        let claim = claims.map(|c| c.get(&r.storage));
        let owns = claim.is_none_or(|c| c.is_some_and(|c| c.owner == r.id));
        if owns {
            a.bytes += r.storage_bytes;
            if r.storage_bytes > r.view_bytes {
                a.view_bytes += r.view_bytes;
                a.view_storage_bytes += r.storage_bytes;
            }
        }
        let held = graphs.as_ref().and_then(|g| g.held.get(&r.id)).copied();
        let view_of = (!owns).then(|| claim.flatten().map_or(0, |c| c.owner_site));
        let holder = holder(r.store, held, view_of);
        match holders.iter_mut().find(|(h, _)| *h == holder) {
            Some((_, n)) => *n += 1,
            None => holders.push((holder, 1)),
        }
    }
    if used > 0 {
        finish_holders(&mut out[used - 1], holders);
        origin.finish(&mut out[used - 1]);
    }
    out.truncate(used);
}

/// Who keeps a live record alive: the one rule behind the holders of the findings (an
/// exact walk's summaries), of the aggregates of old records and of the post-mortem, so
/// all three name the same holder for the same tensors.
///
/// `store` is the record's latest store site (0: none), `graph` the graph that holds it
/// (as a node, or as an input the macro saw a node computed from), `view_of` the site of
/// the record that owns its storage when it does not own it (0: not known).
///
/// A node of a graph is the graph's; an input of one (a batch) is held by the store that
/// also keeps it, if any: the container is what the code can let go of. Then a view of a
/// storage another record owns is that record's; else nothing seen holds it.
#[inline]
pub(in crate::tracker) fn holder(
    store: u32,
    graph: Option<Held>,
    view_of: Option<u32>,
) -> HolderSpec {
    match graph {
        Some(h) if !h.input => HolderSpec::Graph { site: h.root },
        _ if store != 0 => HolderSpec::Store { site: store },
        Some(h) => HolderSpec::Graph { site: h.root },
        None => match view_of {
            Some(site) => HolderSpec::View { site },
            None => HolderSpec::Unknown,
        },
    }
}

/// The roles and call paths of one site's survivors, counted (no allocation: up to
/// [`Origin::PATHS`] distinct paths are counted, later ones are not listed).
#[derive(Default)]
struct Origin {
    /// Survivors per role byte (its low bits), counted once a second role is seen.
    roles: [u32; 8],
    /// The first survivor's role byte (`NONE` before it), and whether another was seen.
    first: u8,
    mixed: bool,
    /// (path id, survivors) of the first paths seen; paths 0 (none) are not counted.
    paths: [(u32, u32); Origin::PATHS],
    used: usize,
}

impl Origin {
    const PATHS: usize = 4;
    const NONE: u8 = u8::MAX;

    fn new() -> Origin {
        Origin {
            first: Origin::NONE,
            ..Origin::default()
        }
    }

    #[inline]
    fn add(&mut self, role: u8, path: u32) {
        let role = role & roles::INDEX;
        if self.first == Origin::NONE {
            self.first = role;
        } else if role != self.first || self.mixed {
            if !self.mixed {
                // Counted from here: the first role's survivors so far.
                self.mixed = true;
                self.roles[usize::from(self.first) & 7] = 1;
            }
            self.roles[usize::from(role) & 7] += 1;
        }
        if path != 0 {
            let used = &mut self.paths[..self.used];
            match used.iter_mut().find(|(p, _)| *p == path) {
                Some((_, n)) => *n += 1,
                None if self.used < Origin::PATHS => {
                    self.paths[self.used] = (path, 1);
                    self.used += 1;
                }
                None => {}
            }
        }
    }

    /// Puts the site's role (that of most survivors) and its paths (most first) in its
    /// summary, and starts over.
    #[inline]
    fn finish(&mut self, site: &mut SiteSweep) {
        let role = if self.mixed {
            let best = majority(&self.roles);
            self.roles = [0; 8];
            best
        } else {
            self.first
        };
        put_origin(site, role, &mut self.paths[..self.used]);
        self.first = Origin::NONE;
        self.mixed = false;
        self.used = 0;
    }
}

/// The role index with the most survivors in `roles` (the lowest index on a tie).
pub(in crate::tracker) fn majority(roles: &[u32; 8]) -> u8 {
    let mut best = 0;
    for (i, n) in roles.iter().enumerate().skip(1) {
        if *n > roles[best] {
            best = i;
        }
    }
    best as u8
}

/// Puts role `role` (an index) and the call paths `paths` ((path, survivors), sorted
/// here, most survivors first) in `site`'s summary: what an exact walk's summary and the
/// aggregates of old records ([`super::site_counts`]) both say of a site's origin.
#[inline]
pub(in crate::tracker) fn put_origin(site: &mut SiteSweep, role: u8, paths: &mut [(u32, u32)]) {
    site.role = Some(roles::role(role));
    match (&*paths, site.call_paths.as_slice()) {
        // The common case: the path of the previous sweep of this slot.
        ([(p, _)], [q]) if p == q => {}
        _ => {
            if paths.len() > 1 {
                paths.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            }
            site.call_paths.clear();
            site.call_paths.extend(paths.iter().map(|p| p.0));
        }
    }
}

/// What a graph walk reads: the inputs the macro saw ([`crate::tracker::inputs`]) and the
/// registry, where the roots (young records) and the inputs (either tier) are found.
#[derive(Clone, Copy)]
pub(in crate::tracker) struct GraphInputs<'a> {
    pub(in crate::tracker) made_from: &'a MadeFrom,
    pub(in crate::tracker) registry: &'a Registry,
}

/// The autograd graphs among a set of records.
#[derive(Default)]
pub(in crate::tracker) struct Graphs {
    /// The graph holding each record held by one, by record id.
    pub(in crate::tracker) held: FastMap<u64, Held>,
    /// Per root site, the largest graph's size.
    by_site: FastMap<u32, GraphSize>,
}

/// Who holds a record held by a graph.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Held {
    /// The graph's root's site.
    root: u32,
    /// Only as an input the macro saw (no node of any graph walked).
    input: bool,
}

/// The tensors (other than the root) and bytes (each storage once) of a graph.
#[derive(Debug, Default, Clone, Copy)]
struct GraphSize {
    tensors: u64,
    bytes: u64,
}

/// Autograd graphs among the `candidates` (record ids by key): the newest of the `roots`
/// (candidates carrying a graph) is a root, and candidates in its graph are held by it:
/// its nodes, and the inputs the macro saw them computed from (`inputs`: a batch leads
/// to no variable, so it is no node). Returns the holder root's site of each held
/// candidate (by record id) and, per root site, the largest graph's tensors and bytes.
#[inline(never)]
pub(in crate::tracker) fn graph_holders(
    mut roots: Vec<&Record>,
    by_key: &FastMap<usize, u64>,
    inputs: GraphInputs<'_>,
) -> Graphs {
    let mut graphs = Graphs::default();
    roots.sort_unstable_by_key(|r| std::cmp::Reverse(r.id));
    for r in roots {
        let own_key = r.weak.key();
        if graphs.held.contains_key(&r.id) {
            continue;
        }
        let Some(t) = r.weak.upgrade() else { continue };
        let mut storages: FastMap<usize, ()> = FastMap::default();
        let mut tensors = 0u64;
        let mut bytes = 0u64;
        // Inputs already counted (several nodes may have the same one).
        let mut seen_inputs: Vec<usize> = Vec::new();
        for node in t.sorted_nodes() {
            if node.is_variable() {
                continue;
            }
            let key = weak::key(node);
            if key != own_key {
                tensors += 1;
                if let Some(held) = by_key.get(&key) {
                    let h = graphs.held.entry(*held).or_insert(Held {
                        root: r.site,
                        input: false,
                    });
                    h.input = false;
                }
            }
            let node_storage = Observed::of(node);
            if storages.insert(node_storage.storage, ()).is_none() {
                bytes += node_storage.storage_bytes;
            }
            if inputs.made_from.is_empty() {
                continue;
            }
            for input in inputs.made_from.of(key, weak::serial(node) as u32) {
                if seen_inputs.contains(&input.key) {
                    continue;
                }
                // A survivor of the ending loop (a batch made in it): held by this
                // graph. An input made before the loop (a dataset's) is the dataset's.
                let Some(held) = by_key.get(&input.key) else {
                    continue;
                };
                let Some(ir) = inputs.registry.get(input.key, input.serial) else {
                    continue;
                };
                seen_inputs.push(input.key);
                tensors += 1;
                graphs.held.entry(*held).or_insert(Held {
                    root: r.site,
                    input: true,
                });
                if storages.insert(ir.storage, ()).is_none() {
                    bytes += ir.storage_bytes;
                }
            }
        }
        if tensors > 0 {
            let g = graphs.by_site.entry(r.site).or_default();
            g.tensors = g.tensors.max(tensors);
            g.bytes = g.bytes.max(bytes);
        }
    }
    graphs
}

/// One live record as the queries of what is live now (the post-mortem, the pprof
/// profile) count it.
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Holding<'a> {
    pub(in crate::tracker) record: &'a Record,
    /// Whether it is its storage's oldest live record, whose bytes are counted.
    pub(in crate::tracker) owns: bool,
    /// Its holder by the findings' rule ([`holder`]): a store, a graph, or the record
    /// owning its storage.
    pub(in crate::tracker) holder: HolderSpec,
}

/// Every live record of `inputs.registry` in id order with its holding: the graphs of
/// every live record with an autograd op are walked (a cost only these queries pay), and
/// each storage's bytes belong to its oldest record.
pub(in crate::tracker) fn live_holdings(inputs: GraphInputs<'_>) -> Vec<Holding<'_>> {
    let mut records: Vec<&Record> = inputs.registry.iter().collect();
    records.sort_unstable_by_key(|r| r.id);
    let graphs = live_graphs(&records, inputs);
    let mut owner_site: FastMap<usize, u32> = FastMap::default();
    records
        .into_iter()
        .map(|record| {
            let (owns, owner) = match owner_site.entry(record.storage) {
                Entry::Occupied(o) => (false, *o.get()),
                Entry::Vacant(v) => (true, *v.insert(record.site)),
            };
            let graph = graphs
                .as_ref()
                .and_then(|g| g.held.get(&record.id))
                .copied();
            Holding {
                record,
                owns,
                holder: holder(record.store, graph, (!owns).then_some(owner)),
            }
        })
        .collect()
}

/// The graphs holding any of `records` (every live record): roots are those with an
/// autograd op, held are any of `records`; `None` when none has an op.
fn live_graphs(records: &[&Record], inputs: GraphInputs<'_>) -> Option<Graphs> {
    let roots: Vec<&Record> = records.iter().copied().filter(|r| r.has_graph).collect();
    if roots.is_empty() {
        return None;
    }
    let candidates = records.iter().map(|r| (r.weak.key(), r.id)).collect();
    Some(graph_holders(roots, &candidates, inputs))
}

/// Moves the counted holders into a site's summary: the 4 most frequent.
#[inline]
pub(in crate::tracker) fn finish_holders(
    site: &mut SiteSweep,
    holders: &mut Vec<(HolderSpec, u64)>,
) {
    if holders.len() > 1 {
        holders.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    site.holders.clear();
    for &(holder, count) in holders.iter().take(4) {
        site.holders.push(HolderCount { holder, count });
    }
    holders.clear();
}
