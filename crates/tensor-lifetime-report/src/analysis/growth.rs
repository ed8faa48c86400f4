//! The leak rule, once: a series that keeps making growth events, the latest of them
//! recent, is growing.
//!
//! Every judge of growth keeps a [`Growth`] of its series and asks it: the survivor counts
//! of a site in a loop frame ([`super::Series`]), the untracked bytes of a device
//! (the memory findings). What a growth event is belongs to the series (a new
//! highest count; bytes at least a tolerance above the last growth event), and so does
//! the level the series must still be at (above the high before the latest growth event;
//! at least `k` tolerances above the baseline); when the series grew, and whether that is
//! growth now, is decided here, with the window as a parameter.
//!
//! # The rule
//!
//! A series is growing at step `now` when it has at least `k` growth events and the
//! latest is recent: `now - last < max(k, 2 x gap)`, where the gap between growth events
//! is their mean ([`Window::MeanGap`]: survivor counts, which move only when tensors are
//! kept) or the longest one ([`Window::LongestGap`]: memory samples, which move with the
//! size of the step being sampled, so a growth may resume only a few steps after a large
//! step was followed by a small one).
//!
//! # The rule on bytes
//!
//! A tensor replaced every iteration by a larger one (a KV cache grown by `Tensor::cat`
//! and never reset, a running concatenation of predictions) keeps its survivor count
//! flat while its bytes grow. A site's bytes at iteration ends make a *bytes growth
//! event* when they exceed every earlier value after the warm-up in an iteration whose
//! survivor count made no new high (that is the rule above). The site is growing in
//! bytes when the rule above holds on these events ([`Window::MeanGap`]), its bytes now
//! are above their high before the latest event, and the events are steady
//! ([`Growth::steady`]): at least one iteration in two since the first iteration judged
//! made one. A tensor whose size wanders (a batch of a random length kept until the
//! next one) makes new highs ever more rarely, and is not growing.

/// How long after its latest growth event a series still counts as growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Twice the mean gap between growth events (at least `k` steps).
    MeanGap,
    /// Twice the longest gap between growth events (at least `k` steps).
    LongestGap,
}

/// When a series grew: its growth events, summarized (bounded, whatever the length of
/// the run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Growth {
    events: u64,
    /// The steps of the first and the latest growth event.
    first: u64,
    last: u64,
    /// The longest gap between two consecutive growth events.
    longest_gap: u64,
}

impl Growth {
    /// A growth event at step `at`.
    #[inline]
    pub fn event(&mut self, at: u64) {
        if self.events == 0 {
            self.first = at;
        } else {
            self.longest_gap = self.longest_gap.max(at.saturating_sub(self.last));
        }
        self.events += 1;
        self.last = at;
    }

    /// Growth events so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Whether the growth events are steady: at least one in two of the steps from
    /// `since` to `now`, both included (the rule on bytes, in the module docs).
    pub fn steady(&self, now: u64, since: u64) -> bool {
        self.events.saturating_mul(2) > now.saturating_sub(since)
    }

    /// The rule (see the module docs): at least `k` growth events, the latest within
    /// `window` of `now`.
    pub fn holds(&self, now: u64, k: u64, window: Window) -> bool {
        if self.events < k.max(1) {
            return false;
        }
        // Saturating: a corrupt or hand-made log (iterations going backwards, near
        // u64::MAX) must not panic the reader (tests/judgement_regressions.rs).
        let gap = match window {
            Window::MeanGap => self.last.saturating_sub(self.first) / (self.events - 1).max(1),
            Window::LongestGap => self.longest_gap,
        };
        now.saturating_sub(self.last) < k.max(gap.saturating_mul(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(steps: &[u64]) -> Growth {
        let mut g = Growth::default();
        steps.iter().for_each(|s| g.event(*s));
        g
    }

    #[test]
    fn k_events_are_needed() {
        assert!(!at(&[1, 2]).holds(2, 3, Window::MeanGap));
        assert!(at(&[1, 2, 3]).holds(3, 3, Window::MeanGap));
        assert!(
            !Growth::default().holds(0, 0, Window::MeanGap),
            "k counts as 1 at least"
        );
    }

    #[test]
    fn the_window_is_twice_the_gap_at_least_k() {
        // Mean gap 4: growing for 8 steps after the latest event.
        let g = at(&[2, 6, 10]);
        assert!(g.holds(17, 3, Window::MeanGap));
        assert!(!g.holds(18, 3, Window::MeanGap));
        // Longest gap 6 (gaps 1 and 6): 12 steps.
        let g = at(&[2, 3, 9]);
        assert!(g.holds(20, 3, Window::LongestGap));
        assert!(!g.holds(21, 3, Window::LongestGap));
        assert!(
            !g.holds(17, 3, Window::MeanGap),
            "mean gap 3.5 -> 3: 6 steps"
        );
    }

    #[test]
    fn steady_growth_is_one_step_in_two_at_least() {
        // A cache grown every step after a warm-up of 1: steady.
        assert!(at(&[1, 2, 3, 4, 5]).steady(5, 1));
        // Every other step: steady still.
        assert!(at(&[2, 4, 6]).steady(6, 1));
        // New highs ever more rarely (sizes that wander): not steady.
        assert!(!at(&[1, 3, 9, 20]).steady(24, 1));
    }
}
