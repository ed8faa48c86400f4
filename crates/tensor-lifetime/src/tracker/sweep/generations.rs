//! Generations: what keeps an inner iteration end's cost bounded when many records are
//! alive (the rule is in [`super`]'s module docs).
//!
//! Above `TENSOR_LIFETIME_EXACT_MAX` (16) live records the registry keeps two tiers
//! ([`crate::tracker::registry`]). The *young* records (made since the latest sweep, every record
//! whose tensor had an autograd op, and those born in an iteration still running that
//! the walk may not turn old, [`running_iterations`]) are walked at every
//! sweep; a partial sweep walks one shard of the *old* ones, round robin. What the
//! summaries need of the old records is kept in running counts
//! ([`super::site_counts::Aggregates`]: per (frame, site) survivors, their iterations,
//! bytes, holders, roles and creating call paths; per role; per device in
//! [`Devices`]), added to when a record turns old and taken from when a
//! walk finds it dead. A full walk rebuilds all of it from the records.

use super::holders;
use super::site_counts::{Aggregates, PATHS};
use super::{Claim, Parts, Scratch, SweepResult, Sweeper, Visit, Walk};
use crate::tracker::frames::{born_running, running_iterations};
use crate::tracker::keep::{trim_map, trim_vec, FastMap};
use crate::tracker::registry::{Record, Registry, Tier};
use crate::tracker::roles;
use crate::tracker::tally::Devices;
use tensor_lifetime_report::event::{HolderSpec, SiteSweep};

/// The owner of a storage that more than one record uses, as of the latest full walk (or
/// found among the records turned old together since).
#[derive(Debug, Clone, Copy)]
pub(in crate::tracker) struct Owner {
    id: u64,
    site: u32,
}

/// What the generational mode keeps beside the registry's old records: their counts
/// and the owners of the storages they share.
#[derive(Default)]
pub(in crate::tracker) struct Generations {
    aggs: Aggregates,
    /// Storages of more than one record, by address: their owners.
    shared: FastMap<usize, Owner>,
}

impl Generations {
    /// `r`'s holder as its aggregate counts it (stores first; a view of a storage
    /// another record owns; else unknown).
    fn holder(&self, r: &Record) -> HolderSpec {
        holder_of(&self.shared, r)
    }

    /// Adds (`add` true) or takes (`false`) old record `r` from the aggregates: its
    /// (frame, site) survivors and the bytes it owns on its device.
    fn count(&mut self, devices: &mut Devices, r: &Record, add: bool, refcount: u64) {
        self.aggs.count_role(r.role, r.owned_bytes(), add);
        if r.owns {
            devices.old(r.device, r.storage_bytes, add);
        }
        if r.frame == 0 {
            return;
        }
        let holder = self.holder(r);
        let agg = self.aggs.site_mut(r.frame, r.site);
        if add {
            agg.add(r, holder, refcount);
        } else {
            agg.remove(r, holder);
        }
    }

    /// A store seen on old record `r`: its latest store site becomes `site`, and its
    /// aggregate's holders follow.
    fn store_on(&mut self, r: &mut Record, site: u32) {
        if r.store == site {
            return;
        }
        let from = self.holder(r);
        r.store = site;
        if r.frame != 0 {
            let to = HolderSpec::Store { site };
            self.aggs.site_mut(r.frame, r.site).move_holder(from, to);
        }
    }

    /// A hinted probe of old record `r`: its role may change ([`roles::upgrade`]), and
    /// the role aggregates follow.
    fn upgrade_role(&mut self, r: &mut Record, probe: u8) {
        let before = r.role;
        roles::upgrade(&mut r.role, probe);
        if r.role != before {
            self.aggs.count_role(before, r.owned_bytes(), false);
            self.aggs.count_role(r.role, r.owned_bytes(), true);
            let (frame, site, after) = (r.frame, r.site, r.role);
            if frame != 0 {
                self.aggs.site_mut(frame, site).move_role(before, after);
            }
        }
    }
}

impl Sweeper {
    /// Whether some records are old (the generational mode).
    pub(in crate::tracker) fn generational(&self) -> bool {
        self.gens.is_some()
    }

    /// A nested loop `frame` closed: the aggregates of its old survivors move to the
    /// enclosing frame's `iteration`, as its records do. False without old records.
    pub(in crate::tracker) fn reframe(&mut self, frame: u32, parent: u32, iteration: u32) {
        if let Some(gens) = self.gens.as_mut() {
            gens.aggs.reframe(frame, parent, iteration);
        }
    }

    /// A later probe (role byte `role`, a store at `site` when `store`) of old record
    /// `key` in `registry`: a hinted role may change its role, a store its holder, and
    /// the aggregates follow. Its first site and id; `None` when `key` is no old record.
    pub(in crate::tracker) fn probe_old(
        &mut self,
        registry: &mut Registry,
        (key, serial): (usize, u32),
        role: u8,
        store: Option<u32>,
    ) -> Option<(u32, u64)> {
        let gens = self.gens.as_mut()?;
        let (r, tier) = registry.get_mut(key, serial)?;
        debug_assert_eq!(tier, Tier::Old, "a young record is merged before");
        if role & roles::HINTED != 0 {
            gens.upgrade_role(r, role);
        }
        if let Some(site) = store {
            gens.store_on(r, site);
        }
        Some((r.site, r.id))
    }

    /// After an exact walk that built the claims table for every live record (more than
    /// `Sweeper::exact_max` of them), or after a full walk in generational mode: every record
    /// turns old but those with an autograd op and those born in a running iteration that
    /// `settled` does not let turn old ([`running_iterations`]), which are
    /// young again if they were old; the aggregates are rebuilt from the records. A full
    /// walk that found few records goes back to exact sweeps.
    pub(super) fn rebuild_generations(&mut self, settled: Option<u64>, p: &mut Parts) {
        let total = p.registry.len();
        // A full walk that finds half the threshold or fewer goes back to exact sweeps.
        if total <= self.exact_max / 2 {
            if self.gens.take().is_some() {
                p.registry.make_all_young();
            }
            return;
        }
        if self.gens.is_none() {
            p.registry.start_old_tier();
        }
        let gens = self.gens.get_or_insert_with(Generations::default);
        gens.aggs.clear();
        gens.shared.clear();
        for (storage, c) in self.claims.iter().filter(|(_, c)| c.shared) {
            gens.shared.insert(
                *storage,
                Owner {
                    id: c.owner,
                    site: c.owner_site,
                },
            );
        }
        p.devices.clear_old();
        let owns = |claims: &FastMap<usize, Claim>, r: &Record| {
            claims.get(&r.storage).is_none_or(|c| c.owner == r.id)
        };
        for (_, r) in p.registry.young_iter_mut() {
            r.owns = owns(&self.claims, r);
        }
        // Those with an autograd op stay young (their graphs are walked at every sweep),
        // and so do those born in a running iteration.
        let mut running = std::mem::take(&mut self.scratch.running);
        running_iterations(&p.frames, settled, &mut running);
        let mut stay = std::mem::take(&mut self.scratch.promote);
        p.registry.turn_old_unless(
            |r| r.has_graph || born_running(&running, r),
            |_| {},
            &mut stay,
        );
        if !running.is_empty() {
            p.registry
                .make_young_if(|r| born_running(&running, r), &mut stay);
        }
        self.scratch.running = running;
        self.scratch.promote = stay;
        trim_vec(&mut self.scratch.promote);
        for r in p.registry.old_iter_mut() {
            r.owns = owns(&self.claims, r);
            let refcount = r.weak.strong_count() as u64;
            gens.count(&mut p.devices, r, true, refcount);
        }
        p.registry.trim_young(true);
    }

    /// A partial sweep (generational mode, an inner iteration end of `frame`): the young
    /// records are walked (the dead removed, the rest but those with an autograd op
    /// turned old), then one shard of the old ones; the survivors of `frame` are summed
    /// up from the aggregates and the young records.
    pub(super) fn partial_sweep(
        &mut self,
        walk: Walk,
        frame: u64,
        t_ns: u64,
        log: bool,
        p: &mut Parts,
    ) -> SweepResult {
        let Sweeper { scratch, gens, .. } = self;
        let Parts {
            registry,
            devices,
            roles,
            frames,
            ..
        } = p;
        let gens = gens.as_mut().expect("generational mode");
        let Scratch {
            dead,
            survivors,
            promote,
            running,
            storages,
            owners,
            ..
        } = scratch;
        let mut visit = Visit::new(Some(frame), log, dead, survivors, roles);
        // Records of a loop other than this one and those enclosing it on this thread
        // (another thread's, most often): those born in its running iteration stay young.
        let mut foreign = false;
        registry.retain_young(|r| {
            foreign |= r.frame != frame as u32 && r.frame != 0;
            // Born and dead within the iteration: a temporary of its role.
            !visit.dead(r, r.weak.strong_count(), true)
        });
        // Those with an autograd op stay young (their graphs are walked at every sweep),
        // and those born in another thread's running iteration.
        if foreign {
            running_iterations(frames, walk.settled(), running);
        }
        let running = &*running;
        let stays = |r: &Record| r.has_graph || (foreign && born_running(running, r));
        // The young records that stay: walked, summarized exactly (into the devices'
        // count, which every walk leaves at zero).
        let mut turning = 0;
        for (key, r) in registry.young_iter_mut() {
            if !stays(r) {
                turning += 1;
                continue;
            }
            let refcount = r.weak.strong_count();
            r.owns = gens.shared.get(&r.storage).is_none_or(|o| o.id == r.id);
            visit.live(*key, r, refcount);
            if r.owns {
                visit.owns(devices, r);
            }
        }
        // Turned old: a storage shared with an older record turned old with it (or known
        // shared at the latest full walk) is that record's; otherwise the record owns it.
        if turning > 1 {
            let order = &mut *owners;
            order.clear();
            order.extend(
                registry
                    .young_iter_mut()
                    .filter(|(_, r)| !stays(r))
                    .map(|(_, r)| {
                        (
                            r.storage,
                            Owner {
                                id: r.id,
                                site: r.site,
                            },
                        )
                    }),
            );
            order.sort_unstable_by_key(|(_, o)| o.id);
            storages.clear();
            for (storage, owner) in order.iter() {
                match storages.get(storage) {
                    Some(first) if !gens.shared.contains_key(storage) => {
                        gens.shared.insert(*storage, *first);
                    }
                    Some(_) => {}
                    None => {
                        storages.insert(*storage, *owner);
                    }
                }
            }
            trim_map(storages);
            trim_vec(order);
        }
        registry.turn_old_unless(
            stays,
            |r| {
                r.owns = gens.shared.get(&r.storage).is_none_or(|o| o.id == r.id);
                let refcount = r.weak.strong_count() as u64;
                gens.count(devices, r, true, refcount);
            },
            promote,
        );
        trim_vec(promote);
        registry.trim_young(false);
        // One shard of the old records, round robin; less often while walks find none
        // dead.
        registry.walk_old_shard(&mut |r| {
            if visit.dead(r, r.weak.strong_count(), false) {
                gens.count(devices, r, false, 0);
                return false;
            }
            true
        });
        let dropped = visit.dropped;
        // The split by role: the young records walked above and the old ones' aggregates.
        roles.finish_sweep(Some(gens.aggs.roles()));
        let live_bytes = devices.finish_count(true);
        p.sink.drops(dropped, &mut self.scratch.dead, t_ns);
        let inputs = holders::GraphInputs {
            made_from: &p.made_from,
            registry: &p.registry,
        };
        holders::summarize_survivors(&mut self.scratch, None, inputs);
        p.made_from.prune(&p.registry, false);
        self.merge_aggregates(frame as u32);
        self.scratch.trim_sweep();
        SweepResult {
            live_tensors: p.registry.len() as u64,
            live_bytes,
        }
    }

    /// Adds the aggregates of `frame`'s old survivors to the summaries of its young ones
    /// (`scratch.sites`, from the sorted `scratch.survivors`).
    fn merge_aggregates(&mut self, frame: u32) {
        let Some(gens) = self.gens.as_ref() else {
            return;
        };
        let Some(aggs) = gens.aggs.frame(frame) else {
            return;
        };
        let Scratch {
            sites,
            survivors,
            holders,
            merged,
            ..
        } = &mut self.scratch;
        // `merged` holds the summaries of an earlier sweep: their slots are refilled, so
        // their holders keep their allocations.
        let mut used = 0;
        let (mut i, mut j) = (0, 0);
        while i < aggs.len() || j < sites.len() {
            let agg = aggs.get(i).filter(|a| a.1.survivors() > 0);
            if aggs.get(i).is_some_and(|a| a.1.survivors() == 0) {
                i += 1;
                continue;
            }
            let young = sites.get(j);
            let take_agg = match (agg, young) {
                (Some(a), Some(y)) => a.0 <= y.site,
                (Some(_), None) => true,
                _ => false,
            };
            let both = matches!((agg, young), (Some(a), Some(y)) if a.0 == y.site);
            if !take_agg {
                std::mem::swap(next_slot(merged, &mut used), &mut sites[j]);
                j += 1;
                continue;
            }
            let (site, a) = (agg.unwrap().0, &agg.unwrap().1);
            i += 1;
            let slot = next_slot(merged, &mut used);
            a.summary_into(site, slot);
            // The old survivors' role and call paths.
            a.origin_into(slot);
            holders.clear();
            holders.extend_from_slice(a.holders());
            if both {
                let y = std::mem::take(&mut sites[j]);
                j += 1;
                // Distinct iterations: the young survivors' that the old ones lack.
                let mut last = None;
                let mut extra = 0;
                for v in survivors.iter().filter(|v| v.site == site) {
                    if last != Some(v.iteration) {
                        last = Some(v.iteration);
                        if !a.has_iteration(v.iteration) {
                            extra += 1;
                        }
                    }
                }
                slot.survivors += y.survivors;
                slot.iterations += extra;
                slot.first_iteration = slot.first_iteration.min(y.first_iteration);
                slot.last_iteration = slot.last_iteration.max(y.last_iteration);
                slot.bytes += y.bytes;
                slot.view_bytes += y.view_bytes;
                slot.view_storage_bytes += y.view_storage_bytes;
                slot.refcount = slot.refcount.max(y.refcount);
                slot.graph_tensors = y.graph_tensors;
                slot.graph_bytes = y.graph_bytes;
                for h in &y.holders {
                    match holders.iter_mut().find(|(x, _)| *x == h.holder) {
                        Some((_, n)) => *n += h.count,
                        None => holders.push((h.holder, h.count)),
                    }
                }
                // Then the young survivors' paths.
                for p in y.call_paths.iter().take(PATHS).filter(|p| **p != 0) {
                    if slot.call_paths.len() < PATHS && !slot.call_paths.contains(p) {
                        slot.call_paths.push(*p);
                    }
                }
            }
            holders::finish_holders(slot, holders);
        }
        merged.truncate(used);
        std::mem::swap(sites, merged);
        trim_vec(merged);
    }
}

/// The next slot of `v` to fill (`used` of them are filled): an earlier summary, whose
/// holders and call paths keep their allocations, or a new one.
fn next_slot<'a>(v: &'a mut Vec<SiteSweep>, used: &mut usize) -> &'a mut SiteSweep {
    if *used == v.len() {
        v.push(SiteSweep::default());
    }
    *used += 1;
    &mut v[*used - 1]
}

/// `r`'s holder as its aggregate counts it: its latest store; else, when another record
/// owns its storage, a view of that record's; else unknown.
/// (The aggregates know no graph: a record with an autograd op stays young.)
fn holder_of(shared: &FastMap<usize, Owner>, r: &Record) -> HolderSpec {
    let view_of = (!r.owns).then(|| shared.get(&r.storage).map_or(0, |o| o.site));
    holders::holder(r.store, None, view_of)
}
