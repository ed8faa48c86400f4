//! The loop calls (part of the root: they hold the lock and call across the parts):
//! sessions, a loop's open, its iterations' starts and ends (the drain, the sweep, the
//! monitor, the judgement, the automatic report), its close; and the inputs the macro
//! saw a tensor computed from.

use super::frames::{FrameState, SessionJudgement};
use super::inputs::Input;
use super::probe::{in_session, set_iteration, set_iteration_later, OpenLoop, LOCAL};
use super::sink::Printed;
use super::sweep::{self, Parts, Walk};
use super::{monitor, State, Tracker};
use crate::phase_timing::{timed, HotPhase};
use crate::sample;
use crate::site::Site;
use crate::weak;
use candle_core::Tensor;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tensor_lifetime_report::event::Event;

/// Sampled mode: quiet iteration ends in a row while records are alive, after a full
/// end that saw something change (a sampled probe, a death); the span doubles at each
/// full end that saw nothing change, up to [`QUIET_SPAN_MAX`]: a death reaches the
/// judgement within that many iteration ends.
const QUIET_SPAN: u64 = 64;
/// The longest span of quiet iteration ends while records are alive.
const QUIET_SPAN_MAX: u64 = 1024;

/// The quiet ends granted after a full end, given the previous span and whether that full
/// end saw nothing change (see [`QUIET_SPAN`]).
fn quiet_span(previous: u64, unchanged: bool) -> u64 {
    if unchanged && previous >= QUIET_SPAN {
        (previous * 2).min(QUIET_SPAN_MAX)
    } else {
        QUIET_SPAN
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
                let mut stack = l.loops().borrow_mut();
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
        st.parts.frames.insert(
            frame,
            FrameState {
                parent,
                site,
                started: now,
                ended: 0,
                printed: Printed::default(),
            },
        );
        let name = if site.label.is_empty() {
            site.location()
        } else {
            site.label.to_string()
        };
        st.parts.sink.emit(Event::LoopStart {
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
    /// start stamp for the event log ([`Tracker::stamp`]).
    pub(crate) fn begin_iteration(&self, frame: u64, iteration: u64) -> u64 {
        timed(HotPhase::BeginIteration, || {
            set_iteration(frame, iteration);
            self.primary.set_iteration(frame, iteration);
            self.stamp()
        })
    }

    /// Ends iteration `iteration` of `frame` (started at `started_ns`): the sweep. Inlined
    /// into the loop: the exact mode reads one flag ([`sample::sampled_mode`]) and calls
    /// [`Tracker::end_iteration_now`]; a quiet end of the sampled mode returns here, with
    /// none of the full end's registers to save.
    #[inline]
    pub(crate) fn end_iteration(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
    ) {
        // Quiet ends only in sampled mode while no leak test runs: a frame is settled only
        // then ([`sample::settle_quiet`]).
        if self.quiet_end(frame, iteration) {
            self.primary.set_iteration(frame, iteration + 1);
            // Written when this thread's loops are next read (a recorded probe, a full end).
            return set_iteration_later(frame, iteration + 1);
        }
        self.end_iteration_now(frame, iteration, started_ns, outermost);
    }

    /// The iteration end that is not quiet: the sweep and the judgement, out of the loop's
    /// code.
    #[inline(never)]
    fn end_iteration_now(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
    ) {
        set_iteration(frame, iteration + 1);
        self.primary.set_iteration(frame, iteration + 1);
        let sampled = sample::sampled_mode() && !in_session();
        self.end_iteration_full(frame, iteration, started_ns, outermost, sampled);
    }

    /// Sampled mode: whether this iteration end of `frame` has nothing to do. No probe was
    /// recorded since the latest full end, that end was of the same frame, and it left no
    /// record alive, or left some and this iteration is within the quiet span it granted
    /// ([`quiet_span`]: a full end settles their deaths). Not while the memory monitor
    /// samples (it clears the quiet frame).
    #[inline]
    fn quiet_end(&self, frame: u64, iteration: u64) -> bool {
        // A recorded probe clears it ([`Tracker::note_sampled_probe`]).
        sample::quiet_frame() == frame && iteration < self.quiet_until.load(Ordering::Relaxed)
    }

    /// Sampled mode, after the full end of iteration `iteration` of `frame`, which began
    /// when `probes` probes had been recorded and left `live` records: the ends of that
    /// frame that may be quiet after it.
    fn settle_quiet(&self, (frame, iteration): (u64, u64), probes: u64, live: usize) {
        let live = live as u64;
        let same_live = self.quiet_live.swap(live, Ordering::Relaxed) == live;
        let unchanged = same_live && self.quiet_at.load(Ordering::Relaxed) == probes;
        let span = quiet_span(self.quiet_span.load(Ordering::Relaxed), unchanged);
        self.quiet_span.store(span, Ordering::Relaxed);
        let until = if live == 0 {
            u64::MAX
        } else {
            iteration.saturating_add(1 + span)
        };
        self.quiet_until.store(until, Ordering::Relaxed);
        self.quiet_at.store(probes, Ordering::Relaxed);
        // A probe recorded on another thread since `probes` was read cleared the quiet
        // frame before it is written, or counts after it: the next end of `frame` is then
        // a full one. (Sequentially consistent, with the probe's count and clear, so that
        // one of the two sees the other.) So does the memory monitor turned on since (it
        // clears the frame after), and the gate closed since.
        sample::settle_quiet(frame, || {
            self.sampled_probes.load(Ordering::SeqCst) != probes || monitor::on()
        });
    }

    /// The sweep and the judgement of [`Tracker::end_iteration`], with the sampled mode's
    /// steps when `sampled`: one copy, inlined into its one caller.
    #[inline(always)]
    fn end_iteration_full(
        &'static self,
        frame: u64,
        iteration: u64,
        started_ns: u64,
        outermost: bool,
        sampled: bool,
    ) {
        timed(HotPhase::EndIteration, || {
            // (An atomic load is not removed when unused: read only when it is used.)
            let probes = if sampled {
                self.sampled_probes.load(Ordering::Relaxed)
            } else {
                0
            };
            let mut st = self.state.lock();
            timed(HotPhase::Drain, || self.drain(&mut st));
            let (t_ns, duration_ns) = st.iteration_times(self.timed, started_ns);
            let sweep = timed(HotPhase::Sweep, || {
                st.sweep(Walk::End { frame, outermost }, t_ns, self.timed)
            });
            if let Some(f) = st.parts.frames.get_mut(&frame) {
                f.ended = f.ended.max(iteration + 1);
            }
            let Parts { devices, sink, .. } = &mut st.parts;
            monitor::tick(devices, sink, t_ns);
            st.parts.sink.declare_call_paths();
            let mut roles = st.parts.roles.iteration_end();
            timed(HotPhase::Analysis, || {
                let State { parts, sweeper, .. } = &mut *st;
                if sampled {
                    self.settle_quiet((frame, iteration), probes, parts.registry.len());
                    if let Some(sample) = sweep::Sample::at(sample::interval()) {
                        sweep::estimate_sites(sweeper.sites_mut(), sample);
                        sweep::estimate_temporaries(&mut roles, sample);
                    }
                }
                parts.sink.iteration_end(
                    (t_ns, duration_ns),
                    frame,
                    iteration,
                    (sweep.live_tensors, sweep.live_bytes),
                    sweeper.sites_mut(),
                    &mut roles,
                    outermost,
                );
                let next_record = st.next_record;
                st.parts.roles.put_back(roles, next_record);
            });
            st.sweeper.trim_sites();
            if outermost {
                st.auto_report(&self.config, frame, iteration, false);
            }
        });
    }

    /// Closes `frame` (every path out of the loop).
    pub(crate) fn close_loop(&'static self, frame: u64, iterations: u64) {
        let _ = LOCAL.try_with(|l| {
            let mut stack = l.loops().borrow_mut();
            if let Some(pos) = stack.iter().rposition(|open| open.frame == frame) {
                stack.truncate(pos);
            }
        });
        self.primary.close(frame);
        let mut st = self.state.lock();
        self.drain(&mut st);
        let parent = st.parts.frames.get(&frame).and_then(|f| f.parent);
        // Survivors of a nested loop now belong to the enclosing iteration.
        let (new_frame, new_iteration) = parent.unwrap_or((0, 0));
        for r in st.parts.registry.iter_mut() {
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
            .and_then(|(p, _)| st.parts.frames.get(&p))
            .and_then(|f| f.parent);
        if st.sweeper.generational() {
            match grandparent {
                None => st
                    .sweeper
                    .reframe(frame as u32, new_frame as u32, new_iteration as u32),
                Some((settled, _)) => {
                    let log = st.parts.sink.logs();
                    st.sweep(Walk::Close { settled }, t_ns, log);
                }
            }
        }
        st.parts.sink.emit(Event::LoopEnd {
            t_ns,
            frame,
            iterations,
        });
        st.parts.sink.flush_log();
        if parent.is_none() {
            st.auto_report(&self.config, frame, iterations, true);
        }
        st.parts.frames.remove(&frame);
    }

    /// Notes that `t`, about to be tagged ([`Tracker::probe_made`]: in sampled mode, only
    /// a sampled one), was computed from `inputs`: only for a tensor
    /// with an autograd op (the graph walk reaches no other), seen for the first time (no
    /// weak handle of ours yet), with a tensor among its inputs.
    #[inline]
    pub(crate) fn made_from(&'static self, t: &Tensor, inputs: &[Input]) {
        if !t.track_op() || t.is_variable() || weak::weak_count(t) != 0 {
            return;
        }
        self.state.lock().parts.made_from.note(Input::of(t), inputs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The span doubles while nothing changes, up to its bound, and falls back to
    /// `QUIET_SPAN` at the first change (a sampled probe, a death).
    #[test]
    fn the_quiet_span_doubles_while_nothing_changes() {
        let mut span = quiet_span(0, false);
        let mut spans = vec![span];
        for _ in 0..6 {
            span = quiet_span(span, true);
            spans.push(span);
        }
        assert_eq!(spans, [64, 128, 256, 512, 1024, 1024, 1024]);
        assert_eq!(quiet_span(span, false), QUIET_SPAN);
        // Never more than the bound a death's delay is documented with.
        assert!((0..64).all(|_| quiet_span(QUIET_SPAN_MAX, true) <= QUIET_SPAN_MAX));
    }
}
