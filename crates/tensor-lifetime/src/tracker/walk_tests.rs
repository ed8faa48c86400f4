//! The walk's rules on a plain [`State`] with real (CPU) tensors, no tracker: a dead
//! record is removed and counted, a shared storage counts once for its oldest record (and
//! distinct storages need no claims table, even when their bits collide), the
//! survivors of the ending frame (and only they) are summarized, and a partial walk of
//! old records says what an exact one says.

use super::registry::tests::record;
use super::sweep::{Sweeper, Walk};
use super::State;
use candle_core::{DType, Device, Tensor};
use tensor_lifetime_report::event::{HolderSpec, SiteSweep};

/// Bytes of each test record's storage.
const BYTES: u64 = 16;

fn tensor() -> Tensor {
    Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap()
}

/// Adds a record of `t` born at `site` in `iteration` of `frame` (its storage `storage`
/// when given, else its own), as a drain would; returns its id.
fn add(
    st: &mut State,
    t: &Tensor,
    site: u32,
    frame: u32,
    iteration: u32,
    storage: Option<usize>,
) -> u64 {
    let id = st.next_record;
    st.next_record += 1;
    let (key, mut r) = record(t, id);
    (r.site, r.frame, r.iteration) = (site, frame, iteration);
    if let Some(s) = storage {
        r.storage = s;
    }
    st.parts
        .sink
        .born_alive(site, Some(u64::from(frame)), u64::from(iteration), BYTES);
    st.parts.registry.insert(key, r);
    id
}

fn end(frame: u64) -> Walk {
    Walk::End {
        frame,
        outermost: false,
    }
}

fn summary(st: &State, site: u32) -> &SiteSweep {
    st.sweeper
        .sites()
        .iter()
        .find(|s| s.site == site)
        .unwrap_or_else(|| panic!("no summary of site {site}: {:?}", st.sweeper.sites()))
}

#[test]
fn a_dead_record_is_removed_and_counted() {
    let mut st = State::new(None, 16);
    let ts: Vec<Tensor> = (0..3).map(|_| tensor()).collect();
    for t in &ts {
        add(&mut st, t, 1, 1, 0, None);
    }
    let mut ts = ts;
    ts.remove(1);
    let res = st.sweep(Walk::Query, 0, false);
    assert_eq!((res.live_tensors, res.live_bytes), (2, 2 * BYTES));
    assert_eq!(st.parts.registry.len(), 2);
    // The drop is counted in the judgement's live tensors.
    assert_eq!(st.parts.sink.report().live_tensors, 2);
}

#[test]
fn a_shared_storage_counts_once_for_its_oldest_record() {
    // A few records (the bitmap of storages), then many (the claims table).
    for pairs in [2usize, 40] {
        let mut st = State::new(None, usize::MAX);
        let ts: Vec<Tensor> = (0..2 * pairs).map(|_| tensor()).collect();
        for (i, pair) in ts.chunks(2).enumerate() {
            // The older of each pair at site 1, its view at site 2, one storage.
            let storage = 0x1000 + 64 * i;
            add(&mut st, &pair[0], 1, 1, i as u32, Some(storage));
            add(&mut st, &pair[1], 2, 1, i as u32, Some(storage));
        }
        let res = st.sweep(end(1), 0, false);
        assert_eq!(res.live_tensors, 2 * pairs as u64);
        assert_eq!(res.live_bytes, pairs as u64 * BYTES, "{pairs} pairs");
        assert_eq!(summary(&st, 1).bytes, pairs as u64 * BYTES);
        let view = summary(&st, 2);
        assert_eq!(view.bytes, 0);
        assert_eq!(view.holders[0].holder, HolderSpec::View { site: 1 });
        assert_eq!(view.holders[0].count, pairs as u64);
    }
}

#[test]
fn distinct_storages_whose_bits_collide_need_no_claims_table() {
    let mut st = State::new(None, usize::MAX);
    let ts: Vec<Tensor> = (0..2).map(|_| tensor()).collect();
    let storage = 0x1000;
    let other = Sweeper::colliding_storage(storage);
    add(&mut st, &ts[0], 1, 1, 0, Some(storage));
    add(&mut st, &ts[1], 1, 1, 0, Some(other));
    let res = st.sweep(end(1), 0, false);
    // Each owns its storage: both counted, no view, and the false alarm of the bitmap
    // built no claims table.
    assert_eq!((res.live_tensors, res.live_bytes), (2, 2 * BYTES));
    let s = summary(&st, 1);
    assert_eq!(s.bytes, 2 * BYTES);
    assert_eq!(s.holders[0].holder, HolderSpec::Unknown);
    assert!(!st.sweeper.claims_built());
}

#[test]
fn the_survivors_of_the_ending_frame_are_summarized_and_no_others() {
    let mut st = State::new(None, 16);
    let ts: Vec<Tensor> = (0..5).map(|_| tensor()).collect();
    // Frame 1: site 1 in iterations 0, 1, 1; frame 2: site 2; outside any loop: site 3.
    add(&mut st, &ts[0], 1, 1, 0, None);
    add(&mut st, &ts[1], 1, 1, 1, None);
    add(&mut st, &ts[2], 1, 1, 1, None);
    add(&mut st, &ts[3], 2, 2, 0, None);
    add(&mut st, &ts[4], 3, 0, 0, None);
    st.sweep(end(1), 0, false);
    let sites: Vec<u32> = st.sweeper.sites().iter().map(|s| s.site).collect();
    assert_eq!(sites, [1]);
    let s = summary(&st, 1);
    assert_eq!((s.survivors, s.iterations, s.bytes), (3, 2, 3 * BYTES));
    assert_eq!((s.first_iteration, s.last_iteration), (0, 1));
    assert_eq!(s.holders[0].holder, HolderSpec::Unknown);
    // A query summarizes no frame.
    st.sweep(Walk::Query, 0, false);
    assert!(st.sweeper.sites().is_empty());
}

#[test]
fn a_partial_walk_of_old_records_says_what_an_exact_walk_says() {
    // Two live records at most walk exactly; above, the records turn old.
    let mut st = State::new(None, 2);
    let mut ts: Vec<Tensor> = (0..6).map(|_| tensor()).collect();
    for (i, t) in ts.iter().enumerate() {
        add(&mut st, t, 1, 1, i as u32, None);
    }
    st.sweep(Walk::Query, 0, false);
    assert!(st.sweeper.generational());
    assert_eq!(st.parts.registry.old_len(), 6);
    // One dies; a young record of the frame is made.
    ts.remove(0);
    let young = tensor();
    add(&mut st, &young, 1, 1, 6, None);
    let partial = st.sweep(end(1), 0, false);
    let s = summary(&st, 1);
    let partial_summary = (s.survivors, s.iterations, s.bytes, s.first_iteration);
    // The exact walk of the same records.
    let exact = st.sweep(
        Walk::End {
            frame: 1,
            outermost: true,
        },
        0,
        false,
    );
    let s = summary(&st, 1);
    let exact_summary = (s.survivors, s.iterations, s.bytes, s.first_iteration);
    assert_eq!(exact_summary, (6, 6, 6 * BYTES, 1));
    assert_eq!(partial_summary, exact_summary);
    assert_eq!(
        (partial.live_tensors, partial.live_bytes),
        (exact.live_tensors, exact.live_bytes)
    );
}
