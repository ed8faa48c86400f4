//! Downsampling of the timeline's streams: at most a fixed number of items kept, however
//! long the run, neighbours merged in pairs with their peaks kept (see [`super`]).

use super::{Mark, MemoryPoint, Point};

/// Anything the downsampler can fold two neighbours of into one.
pub(super) trait Merge: Sized {
    /// `self` came before `next`.
    fn merge(self, next: Self) -> Self;
}

impl Merge for Point {
    fn merge(self, next: Self) -> Self {
        let count = self.count + next.count;
        let mut keep = if next.live_bytes > self.live_bytes {
            next
        } else {
            self
        };
        keep.count = count;
        keep
    }
}

impl Merge for MemoryPoint {
    fn merge(self, next: Self) -> Self {
        let max = |a: Option<u64>, b: Option<u64>| a.max(b);
        MemoryPoint {
            t_ns: if next.pool_used > self.pool_used {
                next.t_ns
            } else {
                self.t_ns
            },
            tracked: self.tracked.max(next.tracked),
            pool_used: max(self.pool_used, next.pool_used),
            pool_reserved: max(self.pool_reserved, next.pool_reserved),
            count: self.count + next.count,
        }
    }
}

impl Merge for Mark {
    fn merge(self, next: Self) -> Self {
        next
    }
}

/// Keeps at most `cap` items of a stream by merging neighbours (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct Downsampler<T> {
    cap: usize,
    /// Stream items per kept item.
    stride: u64,
    kept: Vec<T>,
    pending: Option<T>,
    pending_n: u64,
}

impl<T: Merge> Downsampler<T> {
    pub(super) fn new(cap: usize) -> Self {
        Downsampler {
            cap: cap.max(2),
            stride: 1,
            kept: Vec::new(),
            pending: None,
            pending_n: 0,
        }
    }

    pub(super) fn push(&mut self, item: T) {
        self.pending = Some(match self.pending.take() {
            Some(p) => p.merge(item),
            None => item,
        });
        self.pending_n += 1;
        if self.pending_n < self.stride {
            return;
        }
        self.kept.extend(self.pending.take());
        self.pending_n = 0;
        if self.kept.len() >= self.cap {
            let old = std::mem::take(&mut self.kept);
            let mut it = old.into_iter();
            while let Some(a) = it.next() {
                self.kept.push(match it.next() {
                    Some(b) => a.merge(b),
                    None => a,
                });
            }
            self.stride *= 2;
        }
    }

    pub(super) fn finish(mut self) -> (Vec<T>, u64) {
        self.kept.extend(self.pending.take());
        (self.kept, self.stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampler_keeps_at_most_cap_and_every_item_is_counted() {
        let mut d = Downsampler::<MemoryPoint>::new(8);
        for i in 0..1000u64 {
            d.push(MemoryPoint {
                t_ns: i,
                tracked: i,
                pool_used: Some(i % 97),
                pool_reserved: None,
                count: 1,
            });
            assert!(d.kept.len() < 8);
        }
        let (kept, stride) = d.finish();
        assert!(kept.len() <= 8, "{}", kept.len());
        assert_eq!(kept.iter().map(|p| p.count).sum::<u64>(), 1000);
        // The stride doubles each time `cap` items are kept: 8 x 64 <= 1000 < 8 x 128.
        assert_eq!(stride, 128);
        // Peaks survive: the highest pool value of the whole stream is kept.
        assert_eq!(kept.iter().filter_map(|p| p.pool_used).max(), Some(96));
    }
}
