//! Loop frames as the global state knows them ([`FrameState`]): each open loop's
//! enclosing loop, site and start, the running iteration of each (counted here, as its
//! iteration ends are seen under the state lock: [`running_iterations`]), what its
//! automatic report printed last; and the judgement overrides of leak-test sessions.
//! The tracker's root opens, ends and closes them.

use super::keep::FastMap;
use super::registry::Record;
use super::sink::Printed;
use crate::site::Site;
use std::time::Instant;

/// An open loop frame, as the global state knows it.
#[derive(Debug)]
pub(in crate::tracker) struct FrameState {
    /// The enclosing loop's frame and its iteration when this one opened.
    pub(in crate::tracker) parent: Option<(u64, u64)>,
    pub(in crate::tracker) site: &'static Site,
    pub(in crate::tracker) started: Instant,
    /// Its iterations that have ended: the index of the one running now (an iteration
    /// end of iteration `i` makes it at least `i + 1`).
    pub(in crate::tracker) ended: u64,
    /// What the automatic report printed last (outermost frames): a report is printed
    /// when it changes.
    pub(in crate::tracker) printed: Printed,
}

/// A leak-test session's overrides of the leak rule.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::tracker) struct SessionJudgement {
    pub(in crate::tracker) warmup: Option<u64>,
    pub(in crate::tracker) window: Option<u64>,
}

/// The running iterations whose records a walk leaves young, as (frame, iteration) into
/// `out`: those of every open frame but `settled` and the loops enclosing it on its
/// thread ([`super::sweep::Walk::settled`]: at an iteration end, the ending frame; at a close, the loop
/// enclosing the closed loop's enclosing loop; for a query, none).
///
/// A record turned old while its iteration runs may be a temporary of that iteration,
/// dead before its end: it would then count as a survivor until the round robin reached
/// it, by more or less depending on when other threads walked. Left young, it is walked
/// at its iteration's end. The loops enclosing an ending iteration are the exception:
/// their running iterations hold what the inner loop works on (a model, a dataset, an
/// episode's buffer), and walking that at every inner iteration end is the cost the
/// generations avoid. Their temporaries are settled at their own ends: an outermost
/// iteration end is exact, and an inner one walks the records a nested loop's close
/// left young (the closed loop's survivors and the rest of that running iteration).
/// Another thread's exact walk makes them young again too, so this thread's next inner
/// iteration end walks them once more: a cost no larger than that exact walk's.
///
/// Which iteration of a frame runs is [`FrameState::ended`], counted at its iteration
/// ends under the state lock: asking it costs the hot path nothing.
pub(in crate::tracker) fn running_iterations(
    frames: &FastMap<u64, FrameState>,
    settled: Option<u64>,
    out: &mut Vec<(u32, u32)>,
) {
    out.clear();
    out.extend(
        frames
            .iter()
            .map(|(&id, f)| (id as u32, f.ended.min(u64::from(u32::MAX)) as u32)),
    );
    let mut chain = settled;
    while let Some(c) = chain {
        out.retain(|e| e.0 != c as u32);
        chain = frames.get(&c).and_then(|f| f.parent).map(|p| p.0);
    }
}

/// Whether `r` was born in one of the `running` iterations ([`running_iterations`]).
#[inline]
pub(in crate::tracker) fn born_running(running: &[(u32, u32)], r: &Record) -> bool {
    running
        .iter()
        .any(|&(frame, iteration)| r.frame == frame && r.iteration >= iteration)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loops 1 ⊃ 2 on one thread, 3 ⊃ 4 on another; `ended` iterations of each.
    fn open(frames: &mut FastMap<u64, FrameState>, loops: [(u64, Option<u64>, u64); 4]) {
        let site = crate::site!("loop");
        for (frame, parent, ended) in loops {
            frames.insert(
                frame,
                FrameState {
                    parent: parent.map(|p| (p, 0)),
                    site,
                    started: Instant::now(),
                    ended,
                    printed: Printed::default(),
                },
            );
        }
    }

    fn running(frames: &FastMap<u64, FrameState>, settled: Option<u64>) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        running_iterations(frames, settled, &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn a_walk_leaves_young_the_running_iterations_but_those_it_settles() {
        let mut frames = FastMap::default();
        open(
            &mut frames,
            [(1, None, 0), (2, Some(1), 5), (3, None, 3), (4, Some(3), 1)],
        );
        // An iteration end of 2: its own and its enclosing loop's records may turn old;
        // the other thread's running iterations stay young.
        assert_eq!(running(&frames, Some(2)), [(3, 3), (4, 1)]);
        // The close of a loop nested in 2: 2's running iteration stays young for its end.
        assert_eq!(running(&frames, Some(1)), [(2, 5), (3, 3), (4, 1)]);
        // A query settles nothing.
        assert_eq!(running(&frames, None), [(1, 0), (2, 5), (3, 3), (4, 1)]);
    }
}
