//! Loop frames: a frame's series by site while it runs, and its verdicts when it ends
//! (confirmed, or waiting for the enclosing frame's iteration end; see the module docs of
//! [`super`]). [`Frames`] owns them all, and the loops' summaries.

use super::judgement::Judgement;
use super::series::{Series, SeriesBySite, SiteLookup};
use super::verdict::{classify, Verdict};
use crate::fast_hash::HashMap;
use crate::model::{SiteNote, SiteSweep};
use crate::report::LoopSummary;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The open frames, the verdicts of ended ones, and every loop's summary.
#[derive(Debug, Default)]
pub(super) struct Frames {
    /// The knobs, before a frame's own overrides (leak-test options).
    judgement: Judgement,
    open: HashMap<u64, Frame>,
    loops: BTreeMap<u32, LoopSummary>,
    /// Confirmed verdicts of ended frames, by (session, loop site, tensor site).
    confirmed: BTreeMap<(u64, u32, u32), Verdict<'static>>,
}

/// One run of a loop, open.
#[derive(Debug)]
struct Frame {
    site: u32,
    name: String,
    parent: Option<u64>,
    depth: u32,
    session: u64,
    judgement: Judgement,
    /// Its iterations ended (the latest iteration end's index plus one; at its close, its
    /// own count): added to the loop's summary when it closes, and by [`Frames::loops`]
    /// while it runs (no lookup of the summary at every iteration end).
    iterations: u64,
    series: SeriesBySite,
    /// Growing sites of nested frames that ended, waiting for this frame's iteration end.
    pending: Vec<(u32, Verdict<'static>)>,
    /// An outermost frame's nested growth that outlived a warm-up iteration's end:
    /// confirmed at its close if it never leaves the warm-up (see [`Frames::end`]).
    warmup_growth: Vec<(u32, Verdict<'static>)>,
    /// The local this frame's loop builds (`Ok(heads)`), when it is not nested in a loop
    /// that builds nothing (see the module docs of `analysis`).
    product: Option<String>,
}

impl Frame {
    /// The verdict of `series` in this frame at its latest iteration end, owning its parts
    /// (the frame ended and keeps it).
    fn verdict(&self, series: Series, running: bool) -> Verdict<'static> {
        self.verdict_of(Cow::Owned(series), running).into_owned()
    }

    /// The verdict of `series` (one of this frame's) as this frame stands, borrowing.
    fn lent_verdict<'a>(&'a self, series: &'a Series, running: bool) -> Verdict<'a> {
        self.verdict_of(Cow::Borrowed(series), running)
    }

    fn verdict_of<'a>(&'a self, series: Cow<'a, Series>, running: bool) -> Verdict<'a> {
        let iteration = self.iterations.saturating_sub(1);
        let by_count = series.growing(iteration, &self.judgement);
        let by_bytes = !by_count && series.growing_bytes(iteration, &self.judgement);
        Verdict {
            judgement: self.judgement,
            session: self.session,
            loop_site: self.site,
            loop_name: Cow::Borrowed(&self.name),
            depth: self.depth,
            iteration,
            running,
            growing: by_count || by_bytes,
            by_bytes,
            series,
            product: self.product.as_deref().map(Cow::Borrowed),
            single_epoch: false,
        }
    }
}

impl Frames {
    pub(super) fn new(judgement: Judgement) -> Self {
        Frames {
            judgement,
            ..Frames::default()
        }
    }

    /// The knobs in use.
    pub(super) fn judgement(&self) -> Judgement {
        self.judgement
    }

    /// The iterations of open frame `frame` that have ended.
    pub(super) fn iterations_ended(&self, frame: u64) -> Option<u64> {
        self.open.get(&frame).map(|f| f.iterations)
    }

    /// The name of open frame `frame`'s loop, as findings name it.
    pub(super) fn name(&self, frame: u64) -> Option<&str> {
        self.open.get(&frame).map(|f| f.name.as_str())
    }

    /// Every loop's summary, by loop site, its open frames' iterations included.
    pub(super) fn loops(&self) -> BTreeMap<u32, LoopSummary> {
        let mut loops = self.loops.clone();
        for frame in self.open.values() {
            if let Some(summary) = loops.get_mut(&frame.site) {
                summary.iterations += frame.iterations;
            }
        }
        loops
    }

    /// A frame opened: `note` is its loop site's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        frame: u64,
        site: u32,
        name: &str,
        parent: Option<u64>,
        session: u64,
        warmup: Option<u64>,
        window: Option<u64>,
        note: Option<&SiteNote>,
    ) {
        let judgement = Judgement {
            warmup: warmup.unwrap_or(self.judgement.warmup),
            k: window.unwrap_or(self.judgement.k),
            ..self.judgement
        };
        let depth = parent
            .and_then(|p| self.open.get(&p))
            .map_or(0, |p| p.depth + 1);
        // A construction loop is one outside any loop, or inside one.
        let product = match parent {
            None => match note {
                Some(SiteNote::Fills { holder }) => Some(holder.clone()),
                _ => None,
            },
            Some(p) => self.open.get(&p).and_then(|p| p.product.clone()),
        };
        self.open.insert(
            frame,
            Frame {
                site,
                name: name.to_string(),
                parent,
                depth,
                session,
                judgement,
                iterations: 0,
                series: SeriesBySite::default(),
                pending: Vec::new(),
                warmup_growth: Vec::new(),
                product,
            },
        );
        let summary = self.loops.entry(site).or_insert_with(|| LoopSummary {
            name: name.to_string(),
            site: None,
            runs: 0,
            iterations: 0,
            running: 0,
        });
        summary.runs += 1;
        summary.running += 1;
    }

    /// An iteration of `frame_id` ended; `sites` are its survivors by site.
    pub(super) fn iteration_end(&mut self, frame_id: u64, iteration: u64, sites: &[SiteSweep]) {
        let Some(frame) = self.open.get_mut(&frame_id) else {
            return;
        };
        let j = frame.judgement;
        frame.iterations = frame.iterations.max(iteration.saturating_add(1));
        let by_site = SiteLookup::new(sites);
        for s in sites {
            frame.series.start(iteration, s);
        }
        // This level's highs before this iteration (count and bytes), for the growth of
        // nested frames.
        let highs: Option<HashMap<u32, (u64, u64)>> = (!frame.pending.is_empty()).then(|| {
            frame
                .pending
                .iter()
                .map(|(site, _)| {
                    let high = frame
                        .series
                        .get(*site)
                        .map_or((0, 0), |s| (s.max, s.bytes_max));
                    (*site, high)
                })
                .collect()
        });
        for (site, series) in frame.series.0.iter_mut() {
            series.observe(iteration, by_site.get(*site), &j);
        }
        // Growth of nested frames that ended: confirmed if it makes a new high at this
        // level too. Growth released by this iteration's end (per-epoch accumulation), or
        // rebuilt to the same height each iteration (state that an inner loop over the
        // parameters replaces every step), is bounded: not confirmed, and an earlier
        // confirmation of it is withdrawn.
        if let Some(highs) = highs {
            for (site, mut verdict) in std::mem::take(&mut frame.pending) {
                let key = (verdict.session, verdict.loop_site, site);
                let (survivors, bytes) =
                    by_site.get(site).map_or((0, 0), |s| (s.survivors, s.bytes));
                let (count_high, bytes_high) = highs.get(&site).copied().unwrap_or_default();
                // Not in the warm-up iteration: state created once, lazily, in the first
                // iteration (optimizer buffers) makes its only high there. Growth in bytes
                // is confirmed by bytes, as long as something survives.
                let new_high = survivors > count_high
                    || (verdict.by_bytes && survivors > 0 && bytes > bytes_high);
                if iteration >= j.warmup && new_high {
                    verdict.running = false;
                    self.confirmed.insert(key, verdict);
                } else {
                    self.confirmed.remove(&key);
                    // Kept past the end of a warm-up iteration of an outermost loop: a
                    // leak if that loop never runs another iteration to tell.
                    if iteration < j.warmup && new_high && frame.parent.is_none() {
                        verdict.running = false;
                        verdict.single_epoch = true;
                        let loop_site = verdict.loop_site;
                        frame
                            .warmup_growth
                            .retain(|(s, v)| *s != site || v.loop_site != loop_site);
                        frame.warmup_growth.push((site, verdict));
                    }
                }
            }
        }
    }

    /// A frame closed after `iterations` iterations (more than its iteration ends said
    /// when some were quiet: the sampled mode's).
    pub(super) fn end(&mut self, frame_id: u64, iterations: u64) {
        let Some(mut frame) = self.open.remove(&frame_id) else {
            return;
        };
        frame.iterations = frame.iterations.max(iterations);
        if let Some(summary) = self.loops.get_mut(&frame.site) {
            summary.running = summary.running.saturating_sub(1);
            summary.iterations += frame.iterations;
        }
        let j = frame.judgement;
        // An outermost loop that ended within its warm-up (one epoch): the growth of its
        // nested loops that outlived that iteration is confirmed now, said to be seen in
        // a single epoch (a cache filled once looks the same).
        if frame.parent.is_none() && frame.iterations <= j.warmup {
            for (site, verdict) in std::mem::take(&mut frame.warmup_growth) {
                let key = (verdict.session, verdict.loop_site, site);
                self.confirmed.insert(key, verdict);
            }
        }
        let mut parent = frame.parent.and_then(|p| self.open.get_mut(&p));
        for (site, series) in std::mem::take(&mut frame.series.0) {
            let verdict = frame.verdict(series, false);
            let key = (frame.session, frame.site, site);
            if classify(&verdict, &j, None).is_none() {
                self.confirmed.remove(&key);
                continue;
            }
            match parent.as_deref_mut() {
                Some(p) if verdict.growing => p.pending.push((site, verdict)),
                _ => {
                    self.confirmed.insert(key, verdict);
                }
            }
        }
    }

    /// The verdicts of `session` (or all) by site: the open frames' first, then the
    /// confirmed ones.
    pub(super) fn verdicts(
        &self,
        session: Option<u64>,
    ) -> impl Iterator<Item = (u32, Verdict<'_>)> + '_ {
        let open = self
            .open
            .values()
            .filter(move |frame| session.is_none_or(|s| frame.session == s))
            .flat_map(|frame| {
                (frame.series.0.iter())
                    .map(|(site, series)| (*site, frame.lent_verdict(series, true)))
            });
        let confirmed = (self.confirmed.iter())
            .filter(move |((s, _, _), _)| session.is_none_or(|want| want == *s))
            .map(|((_, _, site), verdict)| (*site, verdict.lent()));
        open.chain(confirmed)
    }
}
