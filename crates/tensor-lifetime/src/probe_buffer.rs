//! The per-thread probe buffers: rings with one producer, the thread that owns the ring,
//! and one consumer at a time, a drain holding the registry's lock.
//!
//! A probe is on the hot path of every tracked tensor. Appending to a ring costs the
//! producer no atomic read-modify-write: it reads the consumer's position, writes the
//! slot and publishes its own position with a release store (plain loads and stores on
//! x86-64). A mutex-guarded `Vec` costs two (lock and unlock) per probe.
//!
//! # Safety argument
//!
//! - Only the producer writes `tail` and the slots at and after it; it owns the ring's
//!   single [`Producer`], which is neither `Clone` nor `Sync`.
//! - Only a consumer writes `head` and reads (moves out) the slots before `tail`.
//!   Consumers run only inside [`Registry::drain_into`], holding the registry's lock:
//!   one at a time.
//! - A slot is written by the producer before its release store of `tail`, and read by a
//!   consumer after its acquire load of `tail`; a slot is moved out by a consumer before
//!   its release store of `head`, and reused by the producer after its acquire load of
//!   `head`.
//! - The slot array is replaced (grown or shrunk) only by the producer, holding the
//!   registry's lock, so no consumer reads it meanwhile. The producer reads the array's
//!   pointer without the lock: it is the only thread that changes it.

// why: the rings are single-producer buffers of uninitialized slots; each block says
// which side owns the slot it touches.
#![allow(unsafe_code)]

use parking_lot::Mutex;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Slots<T> = Box<[UnsafeCell<MaybeUninit<T>>]>;

/// One thread's ring of entries.
struct Ring<T> {
    /// A power-of-two number of slots; index `i` lives in slot `i & (len - 1)`.
    slots: UnsafeCell<Slots<T>>,
    /// The next index a consumer reads (indices count up and wrap at `usize::MAX`).
    head: AtomicUsize,
    /// The next index the producer writes.
    tail: AtomicUsize,
}

// SAFETY: entries move from the producer's thread to a consumer's (`T: Send`); all
// shared access follows the protocol of the module docs.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above; the ring owns its entries.
unsafe impl<T: Send> Send for Ring<T> {}

fn slots<T>(capacity: usize) -> Slots<T> {
    debug_assert!(capacity.is_power_of_two());
    (0..capacity)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect()
}

impl<T> Ring<T> {
    fn new(capacity: usize) -> Ring<T> {
        Ring {
            slots: UnsafeCell::new(slots(capacity)),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        let (head, tail) = (*self.head.get_mut(), *self.tail.get_mut());
        let slots = self.slots.get_mut();
        let mask = slots.len() - 1;
        let mut i = head;
        while i != tail {
            // SAFETY: the slots in `head..tail` hold entries nobody consumed.
            unsafe { slots[i & mask].get_mut().assume_init_drop() };
            i = i.wrapping_add(1);
        }
    }
}

/// The rings of all threads, drained together.
pub(crate) struct Registry<T> {
    rings: Mutex<Vec<Arc<Ring<T>>>>,
}

impl<T> std::fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("rings", &self.rings.lock().len())
            .finish()
    }
}

impl<T: Send> Registry<T> {
    /// Slots of a new ring.
    const INITIAL: usize = 256;
    /// A ring larger than this is shrunk back to [`Registry::INITIAL`] once empty.
    const KEEP: usize = 8192;

    pub(crate) const fn new() -> Registry<T> {
        Registry {
            rings: Mutex::new(Vec::new()),
        }
    }

    /// A new ring, drained from now on; also how many rings were registered before it.
    pub(crate) fn register(&self) -> (Producer<T>, usize) {
        let ring = Arc::new(Ring::new(Self::INITIAL));
        let mut rings = self.rings.lock();
        let before = rings.len();
        rings.push(ring.clone());
        (Producer::of(ring), before)
    }

    /// Hands every ring's entries to `f`, then drops them. The entries of one ring are
    /// read in place, in push order, as two slices (the ring may wrap). When several rings
    /// have entries, they are moved to `merged` ring after ring (each in push order) and
    /// ordered by `sort` first; `merged` is left empty. A ring whose producer is gone is
    /// dropped once empty.
    pub(crate) fn drain_with(
        &self,
        merged: &mut Vec<T>,
        sort: impl FnOnce(&mut [T]),
        f: impl FnOnce(&mut [T], &mut [T]),
    ) {
        let mut rings = self.rings.lock();
        let mut exited = false;
        let mut sources = 0;
        let mut only = None;
        for ring in rings.iter() {
            if ring.is_empty() {
                exited |= Arc::strong_count(ring) == 1;
            } else {
                sources += 1;
                only = Some(ring);
            }
        }
        match only {
            None => {}
            Some(ring) if sources == 1 => {
                // SAFETY: this lock makes us the only consumer (module docs).
                let mut taken = unsafe { Taken::of(ring) };
                let (a, b) = taken.slices();
                f(a, b);
            }
            Some(_) => {
                for ring in rings.iter() {
                    // SAFETY: as above.
                    let mut taken = unsafe { Taken::of(ring) };
                    let (a, b) = taken.slices();
                    merged.reserve(a.len() + b.len());
                    for v in [&*a, &*b] {
                        // SAFETY: the entries are moved out once: `taken` does not drop
                        // them.
                        unsafe {
                            let at = merged.len();
                            std::ptr::copy_nonoverlapping(
                                v.as_ptr(),
                                merged.as_mut_ptr().add(at),
                                v.len(),
                            );
                            merged.set_len(at + v.len());
                        }
                    }
                    taken.forget();
                }
                sort(merged);
                f(merged, &mut []);
                merged.clear();
            }
        }
        if exited {
            rings.retain(|r| Arc::strong_count(r) > 1 || !r.is_empty());
        }
    }
}

impl<T> Ring<T> {
    /// No entry between the consumers' position and the producer's (as of now).
    fn is_empty(&self) -> bool {
        // Only consumers write `head`, one at a time (the registry's lock orders them).
        self.head.load(Ordering::Relaxed) == self.tail.load(Ordering::Acquire)
    }
}

/// A consumer's hold on a ring's published entries: dropping it drops them and hands
/// their slots back to the producer (also when unwinding).
struct Taken<'a, T> {
    ring: &'a Ring<T>,
    head: usize,
    tail: usize,
    drop_entries: bool,
}

impl<'a, T> Taken<'a, T> {
    /// # Safety
    /// The caller is the ring's only consumer (it holds the registry's lock) until this
    /// is dropped.
    unsafe fn of(ring: &'a Ring<T>) -> Taken<'a, T> {
        Taken {
            ring,
            head: ring.head.load(Ordering::Relaxed),
            tail: ring.tail.load(Ordering::Acquire),
            drop_entries: true,
        }
    }

    /// Where the entries are: the array's first slot, the entries' first slot, and how
    /// many are before the array's end and after its start.
    fn parts(&self) -> (*mut T, usize, usize, usize) {
        // SAFETY: the producer replaces the array only holding the registry's lock, which
        // the consumer holds.
        let slots = unsafe { &*self.ring.slots.get() };
        let mask = slots.len() - 1;
        let n = self.tail.wrapping_sub(self.head);
        let start = self.head & mask;
        let first = n.min(slots.len() - start);
        // `UnsafeCell<MaybeUninit<T>>` has `T`'s layout, and its contents may be written
        // through a shared reference to the cell.
        (
            slots.as_ptr().cast::<T>().cast_mut(),
            start,
            first,
            n - first,
        )
    }

    /// The entries in push order: up to the end of the array, then from its start.
    fn slices(&mut self) -> (&mut [T], &mut [T]) {
        let (base, start, first, rest) = self.parts();
        // SAFETY: the slots of `head..tail` were published by the producer's release
        // store of `tail` (read by the acquire load in `of`), and stay the consumer's
        // until its store of `head`; the two ranges do not overlap.
        unsafe {
            (
                std::slice::from_raw_parts_mut(base.add(start), first),
                std::slice::from_raw_parts_mut(base, rest),
            )
        }
    }

    /// Hands the slots back without dropping the entries (they were moved out).
    fn forget(mut self) {
        self.drop_entries = false;
    }
}

impl<T> Drop for Taken<'_, T> {
    fn drop(&mut self) {
        if self.drop_entries {
            let (base, start, first, rest) = self.parts();
            // SAFETY: the entries are the consumer's and dropped once: their slots are
            // handed back right after.
            unsafe {
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(base.add(start), first));
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(base, rest));
            }
        }
        self.ring.head.store(self.tail, Ordering::Release);
    }
}

/// The pushing end of one ring: owned by one thread at a time.
pub(crate) struct Producer<T> {
    ring: Arc<Ring<T>>,
    /// Not `Sync`: two threads never push to one ring.
    _not_sync: PhantomData<Cell<()>>,
}

impl<T> std::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").finish_non_exhaustive()
    }
}

impl<T: Send> Producer<T> {
    fn of(ring: Arc<Ring<T>>) -> Producer<T> {
        Producer {
            ring,
            _not_sync: PhantomData,
        }
    }

    /// A ring no registry drains (no tracker to drain it).
    pub(crate) fn unregistered() -> Producer<T> {
        Producer::of(Arc::new(Ring::new(1)))
    }

    /// Appends `value`. `registry`: the one this ring is registered with. A full ring
    /// calls `drain` (which should drain the registry) and grows only if that made no
    /// room (a ring no registry drains), so a registered ring keeps its size.
    #[cfg(test)]
    pub(crate) fn push(&self, value: T, registry: &Registry<T>, drain: impl FnOnce()) {
        self.push_with(|| value, registry, drain);
    }

    /// [`Producer::push`] of the value `make` returns, made once the ring has room: made
    /// in its slot (a value made before a possible drain is copied there).
    #[inline]
    pub(crate) fn push_with(
        &self,
        make: impl FnOnce() -> T,
        registry: &Registry<T>,
        drain: impl FnOnce(),
    ) {
        let ring = &*self.ring;
        let tail = ring.tail.load(Ordering::Relaxed);
        let head = ring.head.load(Ordering::Acquire);
        // SAFETY: only this producer replaces the array (module docs); the reference is
        // not used after a resize.
        let mut slots = unsafe { &*ring.slots.get() };
        let used = tail.wrapping_sub(head);
        if used == slots.len() || (used == 0 && slots.len() > Registry::<T>::KEEP) {
            self.make_room(registry, drain, 1);
            // SAFETY: as above.
            slots = unsafe { &*ring.slots.get() };
        }
        // SAFETY: a slot at or after `tail` is the producer's (the ring is not full).
        unsafe { (*slots[tail & (slots.len() - 1)].get()).write(make()) };
        ring.tail.store(tail.wrapping_add(1), Ordering::Release);
    }

    /// A ring without room for `need` more entries: drained by `drain`, else grown. A
    /// large empty one: shrunk.
    #[cold]
    #[inline(never)]
    fn make_room(&self, registry: &Registry<T>, drain: impl FnOnce(), need: usize) {
        let ring = &*self.ring;
        if !ring.is_empty() {
            drain();
        }
        self.resize(registry, need);
    }

    /// Grows a ring without room for `need` more entries (to twice its slots, or more),
    /// or shrinks a large empty one; does nothing to any other.
    #[cold]
    #[inline(never)]
    fn resize(&self, registry: &Registry<T>, need: usize) {
        let ring = &*self.ring;
        // No consumer runs while this is held (an unregistered ring has none at all).
        let _rings = registry.rings.lock();
        let head = ring.head.load(Ordering::Acquire);
        let tail = ring.tail.load(Ordering::Relaxed);
        let used = tail.wrapping_sub(head);
        // SAFETY: the producer, holding the lock: no other reference to the array exists.
        let old = unsafe { &mut *ring.slots.get() };
        let capacity = if used + need > old.len() {
            (old.len() * 2).max((used + need).next_power_of_two())
        } else if used == 0 && old.len() > Registry::<T>::KEEP && need <= Registry::<T>::INITIAL {
            Registry::<T>::INITIAL
        } else {
            // A drain made room meanwhile.
            return;
        };
        let mut new = slots::<T>(capacity);
        let (old_mask, new_mask) = (old.len() - 1, capacity - 1);
        let mut i = head;
        while i != tail {
            // SAFETY: the entries in `head..tail` move to the new array, each once.
            let v = unsafe { old[i & old_mask].get_mut().assume_init_read() };
            new[i & new_mask].get_mut().write(v);
            i = i.wrapping_add(1);
        }
        // The old slots are `MaybeUninit`: dropping them drops no entry.
        *old = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Counts its drops, to show that no entry is lost or dropped twice.
    struct Counted(u64, Arc<AtomicU64>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Appends every entry to `out` (unsorted when several rings had entries); returns
    /// how many were taken.
    fn drain<T: Send, K>(registry: &Registry<T>, key: impl Fn(&T) -> K) -> Vec<K> {
        let mut out = Vec::new();
        let mut merged = Vec::new();
        registry.drain_with(
            &mut merged,
            |_| {},
            |a, b| {
                out.extend(a.iter().chain(b.iter()).map(&key));
            },
        );
        assert!(merged.is_empty());
        out
    }

    #[test]
    fn entries_come_out_in_push_order_across_growth_and_wrap() {
        let registry = Registry::new();
        let (p, before) = registry.register();
        assert_eq!(before, 0);
        let mut next = 0u64;
        let mut expect = 0u64;
        // Batches that wrap the ring, fill it, and grow it past several sizes.
        for batch in [3usize, 250, 256, 700, 1, 0, 5000, 17] {
            for _ in 0..batch {
                p.push(next, &registry, || {});
                next += 1;
            }
            let out = drain(&registry, |v| *v);
            assert_eq!(out.len(), batch);
            for v in &out {
                assert_eq!(*v, expect);
                expect += 1;
            }
        }
    }

    #[test]
    fn a_full_ring_is_drained_not_grown() {
        let registry = Registry::new();
        let (p, _) = registry.register();
        let out = std::cell::RefCell::new(Vec::new());
        let take = || out.borrow_mut().extend(drain(&registry, |v| *v));
        for i in 0..1000u64 {
            p.push(i, &registry, take);
        }
        take();
        assert_eq!(*out.borrow(), (0..1000).collect::<Vec<_>>());
        assert_eq!(
            unsafe { (&*p.ring.slots.get()).len() },
            Registry::<u64>::INITIAL
        );
    }

    #[test]
    fn a_large_empty_ring_shrinks_back() {
        let registry = Registry::new();
        let (p, _) = registry.register();
        for i in 0..(Registry::<u64>::KEEP * 2) {
            p.push(i as u64, &registry, || {});
        }
        let cap = |p: &Producer<u64>| unsafe { (&*p.ring.slots.get()).len() };
        assert!(cap(&p) > Registry::<u64>::KEEP);
        assert_eq!(drain(&registry, |v| *v).len(), Registry::<u64>::KEEP * 2);
        p.push(7, &registry, || {});
        assert_eq!(cap(&p), Registry::<u64>::INITIAL);
        assert_eq!(drain(&registry, |v| *v), [7]);
    }

    #[test]
    fn a_concurrent_drain_loses_and_repeats_nothing() {
        let registry = Arc::new(Registry::new());
        let drops = Arc::new(AtomicU64::new(0));
        const N: u64 = 200_000;
        let producers: Vec<_> = (0..2)
            .map(|t| {
                let (registry, drops) = (registry.clone(), drops.clone());
                std::thread::spawn(move || {
                    let (p, _) = registry.register();
                    for i in 0..N {
                        p.push(Counted(t * N + i, drops.clone()), &registry, || {});
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 2];
        let mut check = |ids: Vec<u64>| {
            for id in ids {
                let t = (id / N) as usize;
                assert_eq!(id % N, seen[t], "thread {t} out of order");
                seen[t] += 1;
            }
        };
        while producers.iter().any(|h| !h.is_finished()) {
            check(drain(&registry, |c| c.0));
        }
        for h in producers {
            h.join().unwrap();
        }
        check(drain(&registry, |c| c.0));
        assert_eq!(seen, [N, N]);
        assert_eq!(drops.load(Ordering::Relaxed), 2 * N);
        // Both producers are gone and their rings empty: the registry let them go.
        assert!(drain(&registry, |c| c.0).is_empty());
        assert!(registry.rings.lock().is_empty());
    }

    #[test]
    fn undrained_entries_drop_with_the_ring() {
        let drops = Arc::new(AtomicU64::new(0));
        let registry = Registry::new();
        {
            let (p, _) = registry.register();
            for i in 0..300 {
                p.push(Counted(i, drops.clone()), &registry, || {});
            }
        }
        drop(registry);
        assert_eq!(drops.load(Ordering::Relaxed), 300);
    }
}
