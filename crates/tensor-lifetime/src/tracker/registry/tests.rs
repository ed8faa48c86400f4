//! The registry's rules on real (CPU) tensors, without a tracker: a record is found,
//! iterated and retained in either tier, moves between them, and survives shard splits.

use super::old::SHARD_MAX;
use super::{Record, Registry, Tier};
use crate::device::DeviceId;
use crate::weak::{self, WeakTensor};
use candle_core::{DType, Device, Tensor};

/// A record of `t` with id `id` (its key is the tensor's).
pub(in crate::tracker) fn record(t: &Tensor, id: u64) -> (usize, Record) {
    let weak = WeakTensor::new(t);
    let key = weak.key();
    let r = Record {
        weak,
        id,
        storage: key,
        storage_bytes: 16,
        view_bytes: 16,
        frame: 1,
        iteration: id as u32,
        session: 0,
        site: 1,
        store: 0,
        device: DeviceId::CPU,
        has_graph: false,
        serial: weak::serial(t) as u32,
        owns: true,
        role: 0,
        path: 0,
    };
    (key, r)
}

fn tensors(n: usize) -> Vec<Tensor> {
    (0..n)
        .map(|_| Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap())
        .collect()
}

fn registry_of(ts: &[Tensor]) -> Registry {
    let mut reg = Registry::default();
    for (i, t) in ts.iter().enumerate() {
        let (key, r) = record(t, i as u64 + 1);
        reg.insert(key, r);
    }
    reg
}

/// A registry of `ts`, every record old.
fn all_old(ts: &[Tensor]) -> Registry {
    let mut reg = registry_of(ts);
    reg.start_old_tier();
    reg.turn_old_unless(|_| false, |_| {}, &mut Vec::new());
    reg
}

fn ids(reg: &Registry) -> Vec<u64> {
    let mut ids: Vec<u64> = reg.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn a_record_turned_old_is_still_found_iterated_and_retained() {
    let ts = tensors(6);
    let mut reg = registry_of(&ts);
    reg.start_old_tier();
    let mut buf = Vec::new();
    // Even ids stay young.
    reg.turn_old_unless(|r| r.id % 2 == 0, |_| {}, &mut buf);
    assert!(buf.is_empty());
    assert_eq!((reg.len(), reg.old_len()), (6, 3));
    assert_eq!(ids(&reg), [1, 2, 3, 4, 5, 6]);
    for (i, t) in ts.iter().enumerate() {
        let (key, serial) = (weak::key(t), weak::serial(t) as u32);
        let id = i as u64 + 1;
        assert_eq!(reg.get(key, serial).map(|r| r.id), Some(id));
        let tier = if id % 2 == 0 { Tier::Young } else { Tier::Old };
        let (r, found) = reg.get_mut(key, serial).expect("found");
        assert_eq!((r.id, found), (id, tier));
        r.store = 7;
        // The young lookup finds only young records; the old one only old ones.
        assert_eq!(reg.young(key).is_some(), tier == Tier::Young);

        // Another serial is another tensor that had the address.
        assert!(reg.get(key, serial.wrapping_add(1)).is_none());
    }
    assert!(reg.iter().all(|r| r.store == 7));
    // A full walk removes records in both tiers.
    reg.retain(&mut |_, r| r.id > 2);
    assert_eq!(ids(&reg), [3, 4, 5, 6]);
    assert_eq!(reg.old_len(), 2);
    // Young again.
    reg.make_young_if(|r| r.id == 3, &mut buf);
    assert_eq!(reg.old_len(), 1);
    assert!(reg.young(weak::key(&ts[2])).is_some());
    reg.make_all_young();
    assert_eq!((reg.len(), reg.old_len()), (4, 0));
    assert_eq!(ids(&reg), [3, 4, 5, 6]);
}

#[test]
fn shard_splits_keep_every_record() {
    let n = 5 * SHARD_MAX;
    let ts = tensors(n);
    let mut reg = all_old(&ts);
    assert_eq!(reg.old_len(), n);
    assert!(reg.old_shards() >= 4, "{} shards", reg.old_shards());
    assert_eq!(ids(&reg), (1..=n as u64).collect::<Vec<_>>());
    for t in &ts {
        assert!(reg.get(weak::key(t), weak::serial(t) as u32).is_some());
    }
    // The next old tier starts with as many shards.
    let shards = reg.old_shards();
    reg.make_all_young();
    reg.start_old_tier();
    assert_eq!(reg.old_shards(), shards);
}

#[test]
fn the_round_robin_walks_every_shard() {
    let n = 4 * SHARD_MAX;
    let ts = tensors(n);
    let mut reg = all_old(&ts);
    let shards = reg.old_shards();
    // Every record reported dead: each walk finds some, so one shard is walked per call.
    for _ in 0..shards {
        reg.walk_old_shard(&mut |_| false);
    }
    assert_eq!((reg.len(), reg.old_len()), (0, 0));
    drop(ts);
}

/// Young records are found by key whether few (a scan) or many (the index), after
/// records were added, replaced, removed and taken out.
#[test]
fn young_records_are_found_by_key_few_or_many() {
    let ts = tensors(40);
    let found = |reg: &Registry, ts: &[Tensor], want: &dyn Fn(u64) -> bool| {
        for (i, t) in ts.iter().enumerate() {
            let id = i as u64 + 1;
            let r = reg.young(weak::key(t)).map(|r| r.id);
            assert_eq!(r, want(id).then_some(id), "record {id}");
        }
    };
    let mut reg = Registry::default();
    for (n, t) in ts.iter().enumerate() {
        let (key, r) = record(t, n as u64 + 1);
        reg.insert(key, r);
        found(&reg, &ts, &|id| id <= n as u64 + 1);
    }
    assert_eq!(reg.len(), 40);
    // Removals move records: each is still found, down to a few.
    reg.retain(&mut |_, r| r.id % 3 != 0);
    found(&reg, &ts, &|id| id % 3 != 0);
    reg.retain(&mut |_, r| r.id <= 10);
    found(&reg, &ts, &|id| id % 3 != 0 && id <= 10);
    let (key, r) = record(&ts[2], 3);
    reg.insert(key, r);
    found(&reg, &ts, &|id| id <= 10 && (id % 3 != 0 || id == 3));
    assert_eq!(reg.drain_young().count(), 8);
    found(&reg, &ts, &|_| false);
}
