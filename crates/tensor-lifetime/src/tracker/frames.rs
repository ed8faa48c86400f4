//! Loop frames and leak-test sessions: opening a loop, its iterations' starts and ends
//! (the end is where the sweep and the analysis run), closing it, the running iteration
//! of each open frame (counted here, as its iteration ends are seen under the state
//! lock), and the primary loop that threads without a loop of their own (data loaders)
//! lend their tensors to.

use super::local::{in_session, set_iteration, OpenLoop, LOCAL};
use super::monitor::on as monitor_on;
use super::registry::Record;
use super::sink::PrintedFinding;
use super::sweep::{trim_vec, Walk};
use super::{FastMap, State, Tracker};
use crate::phase_timing::{timed, HotPhase};
use crate::sample;
use crate::site::Site;
use crate::weak;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tensor_lifetime_report::event::Event;

/// Sampled mode: quiet iteration ends in a row while records are alive (their deaths
/// reach the judgement within this many iteration ends).
const QUIET_SPAN: u64 = 64;

/// An open loop frame, as the global state knows it.
#[derive(Debug)]
pub(super) struct FrameState {
    /// The enclosing loop's frame and its iteration when this one opened.
    pub(super) parent: Option<(u64, u64)>,
    pub(super) site: &'static Site,
    pub(super) started: Instant,
    /// Its iterations that have ended: the index of the one running now (an iteration
    /// end of iteration `i` makes it at least `i + 1`).
    pub(super) ended: u64,
    /// The findings printed last (outermost frames): a report is printed when they
    /// change.
    pub(super) printed: Vec<PrintedFinding>,
}

/// A leak-test session's overrides of the leak rule.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SessionJudgement {
    pub(super) warmup: Option<u64>,
    pub(super) window: Option<u64>,
}

/// The primary loop: the first outermost loop opened, while it stays open. Tensors born
/// on threads with no loop of their own belong to its current iteration.
#[derive(Debug, Default)]
pub(super) struct PrimaryLoop {
    /// 0: none open.
    frame: AtomicU64,
    iteration: AtomicU64,
    session: AtomicU64,
    watermark: AtomicU64,
}

/// Where a probed tensor was born: its loop frame (0: outside any loop), iteration and
/// session.
#[derive(Debug, Clone, Copy)]
pub(super) struct Birth {
    pub(super) frame: u64,
    pub(super) iteration: u64,
    pub(super) session: u64,
}

impl Birth {
    pub(super) fn of(open: &OpenLoop, session: u64) -> Birth {
        Birth {
            frame: open.frame,
            iteration: open.iteration,
            session,
        }
    }

    pub(super) fn outside(session: u64) -> Birth {
        Birth {
            frame: 0,
            iteration: 0,
            session,
        }
    }
}

impl PrimaryLoop {
    /// The birth of a tensor (creation serial `serial`) probed on a thread with no open
    /// loop, in leak session `session` (0: none).
    #[inline]
    pub(super) fn birth(&self, serial: u64, session: u64) -> Birth {
        let frame = self.frame.load(Ordering::Acquire);
        let primary_session = self.session.load(Ordering::Relaxed);
        // A thread in a leak session of its own (a parallel leak test whose code runs no
        // loop) is not a loader of another session's loop: its tensors are not summarized
        // there (tests/tests/sessions/loopless.rs).
        if frame == 0
            || serial < self.watermark.load(Ordering::Relaxed)
            || (session != 0 && session != primary_session)
        {
            return Birth::outside(session);
        }
        Birth {
            frame,
            iteration: self.iteration.load(Ordering::Relaxed),
            session: if session == 0 {
                primary_session
            } else {
                session
            },
        }
    }

    /// Becomes `frame` if no primary loop is open.
    fn open(&self, frame: u64, session: u64, watermark: u64) {
        if self
            .frame
            .compare_exchange(0, frame, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.iteration.store(0, Ordering::Relaxed);
            self.session.store(session, Ordering::Relaxed);
            self.watermark.store(watermark, Ordering::Relaxed);
        }
    }

    #[inline]
    fn set_iteration(&self, frame: u64, iteration: u64) {
        if self.frame.load(Ordering::Relaxed) == frame {
            self.iteration.store(iteration, Ordering::Relaxed);
        }
    }

    fn close(&self, frame: u64) {
        if self
            .frame
            .compare_exchange(frame, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.iteration.store(0, Ordering::Relaxed);
            self.session.store(0, Ordering::Relaxed);
        }
    }
}

impl Tracker {
    pub(crate) fn new_session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// Warm-up and window overrides for the loops of a session.
    pub(crate) fn set_session_judgement(
        &self,
        session: u64,
        warmup: Option<u64>,
        window: Option<u64>,
    ) {
        if warmup.is_some() || window.is_some() {
            self.session_judgement
                .lock()
                .insert(session, SessionJudgement { warmup, window });
        }
    }

    /// Opens a loop frame on this thread: its id, and whether it is outermost there.
    pub(crate) fn open_loop(&'static self, site: &'static Site) -> (u64, bool) {
        let frame = self.next_frame.fetch_add(1, Ordering::Relaxed);
        let watermark = weak::serial_watermark();
        let (parent, session, thread) = LOCAL
            .try_with(|l| {
                let mut stack = l.stack.borrow_mut();
                let parent = stack.last().map(|open| (open.frame, open.iteration));
                stack.push(OpenLoop {
                    frame,
                    iteration: 0,
                    watermark,
                });
                (parent, l.session.get().session, l.thread)
            })
            .unwrap_or((None, 0, 0));
        if parent.is_none() {
            self.primary.open(frame, session, watermark);
        }
        let now = Instant::now();
        let t_ns = self.now_ns();
        let judgement = self
            .session_judgement
            .lock()
            .get(&session)
            .copied()
            .unwrap_or_default();
        let mut st = self.state.lock();
        let site_id = st.site_id(site);
        st.frames.insert(
            frame,
            FrameState {
                parent,
                site,
                started: now,
                ended: 0,
                printed: Vec::new(),
            },
        );
        let name = if site.label.is_empty() {
            site.location()
        } else {
            site.label.to_string()
        };
        st.sink.emit(Event::LoopStart {
            t_ns,
            frame,
            site: site_id,
            name,
            parent: parent.map(|p| p.0),
            parent_iteration: parent.map(|p| p.1),
            thread,
            session,
            warmup: judgement.warmup,
            window: judgement.window,
        });
        (frame, parent.is_none())
    }

    /// Marks the start of iteration `iteration` of `frame` on this thread; returns its
    /// start time for the event log ([`Tracker::stamp`]).
    pub(crate) fn begin_iteration(&self, frame: u64, iteration: u64) -> u64 {
        timed(HotPhase::BeginIteration, || {
            set_iteration(frame, iteration);
            self.primary.set_iteration(frame, iteration);
            self.stamp()
        })
    }

    /// Ends iteration `iteration` of `frame` (started at `started_ns`): the sweep.
    pub(crate) fn end_iteration(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
    ) {
        set_iteration(frame, iteration + 1);
        self.primary.set_iteration(frame, iteration + 1);
        let sampled = sample::sampled_mode() && !in_session();
        if sampled && self.quiet_end() {
            return;
        }
        self.end_iteration_full(frame, iteration, started_ns, outermost, sampled);
    }

    /// The sweep and the judgement of [`Tracker::end_iteration`]: out of line, so that a
    /// quiet end of the sampled mode pays for none of it.
    #[inline(never)]
    fn end_iteration_full(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
        sampled: bool,
    ) {
        timed(HotPhase::EndIteration, || {
            let probes = self.sampled_probes.load(Ordering::Relaxed);
            let mut st = self.state.lock();
            timed(HotPhase::Drain, || self.drain(&mut st));
            let t_ns = self.stamp();
            let sweep = timed(HotPhase::Sweep, || {
                st.sweep(Walk::End { frame, outermost }, t_ns, self.timed)
            });
            if let Some(f) = st.frames.get_mut(&frame) {
                f.ended = f.ended.max(iteration + 1);
            }
            let duration_ns = t_ns.saturating_sub(started_ns);
            self.monitor_tick(&mut st, t_ns);
            st.sink.declare_call_paths();
            let mut roles = st.roles.iteration_end();
            if sampled {
                self.settle_quiet(probes, st.registry.len());
            }
            timed(HotPhase::Analysis, || {
                let State { sink, scratch, .. } = &mut *st;
                if let (true, Some(interval)) = (sampled, sample::interval()) {
                    sample::scale_sites(&mut scratch.sites);
                    sink.sampled(interval);
                }
                sink.iteration_end(
                    (t_ns, duration_ns),
                    frame,
                    iteration,
                    &sweep,
                    &mut scratch.sites,
                    &mut roles,
                    outermost,
                );
                let next_record = st.next_record;
                st.roles.put_back(roles, next_record);
            });
            trim_vec(&mut st.scratch.sites);
            if outermost {
                st.auto_report(&self.config, frame, iteration, false);
            }
        });
    }

    /// Sampled mode: whether this iteration end has nothing to do. No probe was recorded
    /// since the latest full end, and that end left no record alive, or left some
    /// fewer than [`QUIET_SPAN`] ends ago (a full end settles their deaths). Not while
    /// the memory monitor samples.
    #[inline]
    fn quiet_end(&self) -> bool {
        if self.sampled_probes.load(Ordering::Relaxed) != self.quiet_at.load(Ordering::Relaxed)
            || monitor_on()
        {
            return false;
        }
        let left = self.quiet_left.load(Ordering::Relaxed);
        if left == 0 {
            return false;
        }
        self.quiet_left.store(left - 1, Ordering::Relaxed);
        true
    }

    /// Sampled mode, after a full iteration end that began when `probes` probes had been
    /// recorded and left `live` records: the ends that may be quiet after it.
    fn settle_quiet(&self, probes: u64, live: usize) {
        let left = if live == 0 { u64::MAX } else { QUIET_SPAN };
        self.quiet_left.store(left, Ordering::Relaxed);
        self.quiet_at.store(probes, Ordering::Relaxed);
    }

    /// Closes `frame` (every path out of the loop).
    pub(crate) fn close_loop(&'static self, frame: u64, iterations: u64) {
        let _ = LOCAL.try_with(|l| {
            let mut stack = l.stack.borrow_mut();
            if let Some(pos) = stack.iter().rposition(|open| open.frame == frame) {
                stack.truncate(pos);
            }
        });
        self.primary.close(frame);
        let mut st = self.state.lock();
        self.drain(&mut st);
        let parent = st.frames.get(&frame).and_then(|f| f.parent);
        // Survivors of a nested loop now belong to the enclosing iteration.
        let (new_frame, new_iteration) = parent.unwrap_or((0, 0));
        for r in st.registry.iter_mut() {
            if r.frame() == frame {
                r.frame = new_frame as u32;
                r.iteration = new_iteration as u32;
            }
        }
        let t_ns = self.now_ns();
        // The aggregates of the old records follow them to the enclosing frame. When that
        // frame is outermost its next iteration end walks every record, so they are
        // moved, not rebuilt; a frame nested deeper sweeps partially at its next end,
        // which must see the records exactly: a full walk rebuilds them, and leaves the
        // records of that frame's running iteration (the closed loop's survivors among
        // them) young for that end to walk.
        let grandparent = parent
            .and_then(|(p, _)| st.frames.get(&p))
            .and_then(|f| f.parent);
        if let Some(gens) = st.gens.as_mut() {
            match grandparent {
                None => gens.reframe(frame as u32, new_frame as u32, new_iteration as u32),
                Some((settled, _)) => {
                    let log = st.sink.logs();
                    st.sweep(Walk::Close { settled }, t_ns, log);
                }
            }
        }
        st.sink.emit(Event::LoopEnd {
            t_ns,
            frame,
            iterations,
        });
        st.sink.flush_log();
        if parent.is_none() {
            st.auto_report(&self.config, frame, iterations, true);
        }
        st.frames.remove(&frame);
    }
}

/// The running iterations whose records a walk leaves young, as (frame, iteration) into
/// `out`: those of every open frame but `settled` and the loops enclosing it on its
/// thread ([`Walk::settled`]: at an iteration end, the ending frame; at a close, the loop
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
pub(super) fn running_iterations(
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
pub(super) fn born_running(running: &[(u32, u32)], r: &Record) -> bool {
    running
        .iter()
        .any(|&(frame, iteration)| r.frame == frame && r.iteration >= iteration)
}

impl FrameState {
    /// `'epoch (file:line)`, or `at file:line` for a loop without a label.
    pub(super) fn label(&self) -> String {
        if self.site.label.is_empty() {
            format!("at {}", self.site.location())
        } else {
            format!("{} ({})", self.site.label, self.site.location())
        }
    }
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
                    printed: Vec::new(),
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
