//! The sampled mode: which tensors the tracker records when it records only a sample
//! (the weight each stands for is the report crate's `model::sample_weight`, which the
//! sweeps' estimates and the readers of a sampled log share).
//!
//! In exact mode (the default) every tensor a probe sees gets a record. In sampled mode
//! (`TENSOR_LIFETIME_SAMPLE=512KiB`, or [`set_sampling`]) a tensor of `s` own bytes is
//! recorded with probability `p(s) = 1 - exp(-s / interval)` and stands for `1 / p(s)`
//! tensors and `s / p(s)` bytes, so every count and byte figure derived from the samples
//! is an unbiased estimate. That is the law of Go's heap profile (`MemProfileRate`) and of
//! jemalloc's and tcmalloc's samplers: sample points fall on the stream of allocated bytes
//! as a Poisson process of mean gap `interval`, and an allocation is sampled when a point
//! falls in its bytes. They draw the gaps with a per-thread exponential countdown; here
//! the draw is a hash of the tensor's creation serial and the seed, compared with
//! `p(s)`: the same law (a Poisson process samples disjoint byte ranges independently,
//! each with probability `1 - exp(-length / interval)`; see `draw` for the hash), but one answer for every probe
//! of a tensor, since a tensor is probed at its binding, at each store and at each alias,
//! and a countdown would give it one chance per probe. Nor does it keep any per-thread
//! state: a probe that skips its tensor reads the gate word and the seed, hashes one
//! integer and multiplies the tensor's own bytes, inlined where the probe is. While every
//! record was made by this sample (no leak test ran, the interval and seed did not change
//! under a running tracker), a tensor the sample skips has none; after such a change the
//! gate word's low bit says so, and the probe also reads the tensor's weak count (a
//! record holds a weak handle).
//!
//! Leak tests ([`crate::check_leaks`], [`crate::assert_no_leaks`], `#[leak_test]`) are
//! exact whatever this says: a thread in a leak-test session records every tensor.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use tensor_lifetime_report::model::sample_probability;
use tensor_lifetime_report::size::parse_size;

/// How the tracker chooses the tensors it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sampling {
    /// Every tensor (the default).
    #[default]
    Exact,
    /// A sample: a tensor of `s` own bytes with probability `1 - exp(-s / interval)`;
    /// the mean interval in bytes between sampled bytes (at least 1).
    Interval(u64),
}

/// The interval the documentation recommends for a run that stays on: Go's
/// `MemProfileRate`. A leak of at least this many bytes per iteration is found within
/// the same number of iterations as in exact mode, give or take a few
/// (`docs/reliability.md`).
pub const DEFAULT_INTERVAL: u64 = 512 * 1024;

/// Why a sampling setting was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplingError {
    input: String,
    why: String,
}

impl fmt::Display for SamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid sampling {:?}: {} (expected `exact` or a byte interval such as `512KiB`, `2MiB`)",
            self.input, self.why
        )
    }
}

impl std::error::Error for SamplingError {}

impl FromStr for Sampling {
    type Err = SamplingError;

    /// `exact`, or a byte interval in the project's size syntax (`512KiB`, `2 MiB`,
    /// `65536`); an interval of 0 bytes is refused.
    fn from_str(s: &str) -> Result<Sampling, SamplingError> {
        let text = s.trim();
        if text.eq_ignore_ascii_case("exact") {
            return Ok(Sampling::Exact);
        }
        let refuse = |why: String| SamplingError {
            input: s.to_string(),
            why,
        };
        match parse_size(text) {
            Ok(0) => Err(refuse("an interval of 0 bytes samples nothing".to_string())),
            Ok(bytes) => Ok(Sampling::Interval(bytes)),
            Err(e) => Err(refuse(e.kind().reason().to_string())),
        }
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sampling::Exact => f.write_str("exact"),
            Sampling::Interval(bytes) => {
                write!(f, "{}", tensor_lifetime_report::size::format_bytes(*bytes))
            }
        }
    }
}

/// Not set yet: the tracker's configuration decides when it starts.
const UNSET: u64 = u64::MAX;

/// The interval in bytes (0: exact; [`UNSET`]: not decided yet).
static INTERVAL: AtomicU64 = AtomicU64::new(UNSET);
/// `u64::MAX / interval`: a tensor of `s` bytes is a candidate when its hash is below
/// `s * SCALE` (0: exact, nothing is skipped).
static SCALE: AtomicU64 = AtomicU64::new(0);
/// The tracker started ([`configure`]): records may exist from then on.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The seed is the program's (set by [`set_sample_seed`]): the configuration keeps it.
static SEED_SET: AtomicU64 = AtomicU64::new(0);
/// What every probe and iteration end reads, side by side (one address to find): the
/// gate ([`gate`]: [`SCALE`] while every record is the sample's, else 0),
/// what the creation serials' draws are shifted by (the seed, mixed; seed 0's at first)
/// and the quiet frame.
#[repr(C)]
struct Gate {
    scale: AtomicU64,
    seed: AtomicU64,
    /// The loop frame whose iteration ends may be quiet (0: none): the tracker's latest
    /// full iteration end's, in sampled mode ([`settle_quiet`]). Cleared by a recorded
    /// probe, the memory monitor turned on, and every write of the gate (a leak test
    /// starting, the sampling changed). An iteration end reads only this word to know it
    /// may be quiet; beside the gate, the loop has its address at hand.
    quiet: AtomicU64,
}

static GATE: Gate = Gate {
    scale: AtomicU64::new(0),
    seed: AtomicU64::new(0xe220_a839_7b1d_cdaf),
    quiet: AtomicU64::new(0),
};

/// The frame whose iteration ends may be quiet ([`Gate::quiet`]).
#[inline(always)]
pub(crate) fn quiet_frame() -> u64 {
    GATE.quiet.load(Ordering::Relaxed)
}

/// The next iteration end is a full one (a recorded probe, the memory monitor on, the
/// gate written).
#[inline(always)]
pub(crate) fn end_quiet() {
    GATE.quiet.store(0, Ordering::SeqCst);
}

/// After a full iteration end of `frame` in sampled mode: its next ends may be quiet,
/// unless `changed` says something happened since the end began, or the gate closed
/// (sequentially consistent with the gate's writes, which clear the frame after: one of
/// the two sees the other).
pub(crate) fn settle_quiet(frame: u64, changed: impl FnOnce() -> bool) {
    GATE.quiet.store(frame, Ordering::SeqCst);
    if changed() || SCALE.load(Ordering::SeqCst) == 0 || SESSIONS.load(Ordering::SeqCst) != 0 {
        end_quiet();
    }
}

/// Threads in a leak-test session now (written under [`GATE_STATE`]'s lock): while there
/// is none, the tracker asks no thread whether it runs one.
static SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// Whether any thread runs a leak test now.
#[inline(always)]
pub(crate) fn sessions_running() -> bool {
    SESSIONS.load(Ordering::Relaxed) != 0
}

/// What the gate is written from, under one lock with every write of [`GATE`], so that
/// the last write agrees with the scale, the sessions and the records.
static GATE_STATE: Mutex<GateState> = Mutex::new(GateState {
    sessions: 0,
    mixed: false,
});

struct GateState {
    /// Threads in a leak-test session ([`SESSIONS`] follows it).
    sessions: usize,
    /// Records made outside the sample in force may exist (sticky): a leak test ran (its
    /// thread records every tensor), or the interval or the seed changed after the
    /// tracker started.
    mixed: bool,
}

impl GateState {
    /// The gate at `scale` (see [`gate`]).
    fn gate(&self, scale: u64) -> u64 {
        if self.sessions > 0 || self.mixed {
            0
        } else {
            scale
        }
    }

    /// Writes the gate at the scale in force; the next iteration ends are full ones.
    fn write(&self) {
        GATE.scale.store(self.gate(scale()), Ordering::SeqCst);
        end_quiet();
    }

    /// The sample changes now: records of the one before may exist if the tracker runs.
    fn note_change(&mut self) {
        self.mixed |= STARTED.load(Ordering::Relaxed);
    }
}

/// The gate's state, locked (a panic under the lock left it whole).
fn gate_state() -> std::sync::MutexGuard<'static, GateState> {
    GATE_STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records every tensor ([`Sampling::Exact`]) or a sample of them from now on. A tensor
/// already recorded stays recorded; one already skipped is decided again at its next
/// probe with the new interval. Overrides `TENSOR_LIFETIME_SAMPLE` when called before
/// the first tracked tensor. Leak tests stay exact.
pub fn set_sampling(sampling: Sampling) {
    let interval = match sampling {
        Sampling::Exact => 0,
        Sampling::Interval(bytes) => bytes.max(1),
    };
    let mut state = gate_state();
    SCALE.store(0, Ordering::SeqCst);
    GATE.scale.store(0, Ordering::Relaxed);
    INTERVAL.store(interval, Ordering::Relaxed);
    if let Some(scale) = u64::MAX.checked_div(interval) {
        // At least 1 (an interval above 2^63 bytes samples as 2^63).
        SCALE.store(scale.max(1), Ordering::SeqCst);
    }
    state.note_change();
    state.write();
}

/// A thread entered (`+1`) or left (`-1`) a leak-test session: the gate is closed while
/// any thread is in one, and its records outlive it (see [`gate`]).
pub(crate) fn session_entered(change: isize) {
    let mut state = gate_state();
    state.sessions = state.sessions.saturating_add_signed(change);
    SESSIONS.store(state.sessions, Ordering::SeqCst);
    state.mixed = true;
    state.write();
}

/// The probes' gate: the sampled mode's scale while every record is the sample's, else 0:
/// while a leak test runs (its thread records every tensor), and for good once records
/// made outside the sample may exist (a leak test ran, or the sample changed while the
/// tracker ran). Every probe of a tensor reads it first: a tensor the sample leaves out
/// ([`skips`]) costs that test and no more, for it has no record. A closed gate sends
/// every probe to the full path, which asks its own thread whether it runs a leak test
/// and the tensor whether it has a record (its weak count).
#[inline(always)]
pub(crate) fn gate() -> u64 {
    GATE.scale.load(Ordering::Relaxed)
}

/// The sampling in force (exact until the tracker or [`set_sampling`] chose).
pub fn sampling() -> Sampling {
    match INTERVAL.load(Ordering::Relaxed) {
        0 | UNSET => Sampling::Exact,
        bytes => Sampling::Interval(bytes),
    }
}

/// Chooses which tensors a sampled run records: one seed, one sample (the same tensors of
/// the same program, serial for serial). Overrides `TENSOR_LIFETIME_SAMPLE_SEED`.
pub fn set_sample_seed(seed: u64) {
    let mut state = gate_state();
    GATE.seed.store(mix(seed), Ordering::Relaxed);
    SEED_SET.store(1, Ordering::Relaxed);
    state.note_change();
    state.write();
}

/// The configured sampling and seed, unless the program set them first; from then on the
/// tracker runs (a later change of the sample may leave records outside it).
pub(crate) fn configure(sampling: Sampling, seed: Option<u64>) {
    if INTERVAL.load(Ordering::Relaxed) == UNSET {
        set_sampling(sampling);
    }
    if let Some(seed) = seed {
        if SEED_SET.load(Ordering::Relaxed) == 0 {
            GATE.seed.store(mix(seed), Ordering::Relaxed);
        }
    }
    STARTED.store(true, Ordering::Relaxed);
}

/// Whether the tracker samples now.
#[inline]
pub(crate) fn sampled_mode() -> bool {
    scale() != 0
}

/// The sampled mode's scale (0: exact), for [`skips`].
#[inline(always)]
pub(crate) fn scale() -> u64 {
    SCALE.load(Ordering::Relaxed)
}

/// Whether sampling at `scale` (from [`scale`], not 0) leaves out the tensor of creation
/// serial `serial` and `bytes` own bytes. The same answer for every probe of one tensor
/// while the interval and seed stay.
#[inline(always)]
pub(crate) fn skips(scale: u64, serial: u64, bytes: u64) -> bool {
    let h = draw(serial, GATE.seed.load(Ordering::Relaxed));
    // `1 - exp(-x) <= x`: a hash at or above `x` of the range is out for sure; most are.
    match bytes.checked_mul(scale) {
        Some(bound) if h >= bound => true,
        _ => !below_probability(h, bytes),
    }
}

/// The exact test for the rare candidate: `h / 2^64 < 1 - exp(-bytes / interval)`.
#[cold]
#[inline(never)]
fn below_probability(h: u64, bytes: u64) -> bool {
    let u = (h as f64 + 0.5) / 18_446_744_073_709_551_616.0;
    u < probability(bytes)
}

/// The probability that a tensor of `bytes` own bytes is sampled (1 in exact mode).
pub(crate) fn probability(bytes: u64) -> f64 {
    probability_at(INTERVAL.load(Ordering::Relaxed), bytes)
}

/// [`probability`] at `interval` (0 or unset: exact).
fn probability_at(interval: u64, bytes: u64) -> f64 {
    if interval == UNSET {
        return 1.0;
    }
    sample_probability(interval, bytes)
}

/// The interval in force, if sampling (reports say it beside their estimates).
pub(crate) fn interval() -> Option<u64> {
    match INTERVAL.load(Ordering::Relaxed) {
        0 | UNSET => None,
        bytes => Some(bytes),
    }
}

/// The iterations within which the sampled mode reports, with probability at least
/// `confidence`, a site that keeps `leak_bytes` own bytes per iteration alive, at mean
/// interval `interval`, under the default judgement (warm-up 1 iteration, 3 growth
/// events): `warm-up + n`, where `n` is the least number of iterations whose kept
/// tensors include a sampled one in at least 3 of them with that probability. The kept
/// bytes of one iteration contain a sample with probability `q = 1 - exp(-L / interval)`
/// however they split into tensors (sample points fall on the bytes as a Poisson
/// process), and each such iteration is a growth event (a new highest count of sampled
/// survivors), so `n` is the least `n` with `P(Binomial(n, q) >= 3) >= confidence`. The
/// exact mode's figure is `warm-up + 3` (4). For `L` well below the interval, `n` is
/// about `8.4 x interval / L` at 0.99 (the Poisson tail), and the mean is `3 x interval /
/// L`: the "(warm-up + new highs) x max(1, interval / L)" with its constant.
pub fn detection_bound(leak_bytes: u64, interval: u64, confidence: f64) -> u64 {
    let judgement = tensor_lifetime_report::Judgement::default();
    let k = judgement.k.max(1);
    let q = probability_at(interval.max(1), leak_bytes);
    if q <= 0.0 {
        return u64::MAX;
    }
    // P(Binomial(n, q) >= k), for n = k, k + 1, ...: the terms of P(X < k) updated.
    let mut n = k;
    loop {
        let below: f64 = (0..k)
            .map(|j| binomial(n, j) * q.powi(j as i32) * (1.0 - q).powf((n - j) as f64))
            .sum();
        if 1.0 - below >= confidence || n > 1 << 40 {
            return judgement.warmup + n;
        }
        // Coarse steps far from the answer keep a tiny `q` affordable.
        n += (n / 64).max(1);
    }
}

/// `n choose j` as a float (small `j`).
fn binomial(n: u64, j: u64) -> f64 {
    (0..j).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// A tensor's draw, uniform in `[0, 2^64)` over seeds: the creation serial's Weyl
/// sequence (`serial` times the golden ratio, modulo `2^64`) shifted by the mixed seed.
/// Over seeds each tensor is sampled with probability `p` exactly (so the weights are
/// unbiased); within one run consecutive serials' draws are spread evenly over the unit
/// interval, which only lowers the estimates' variance. Two instructions.
#[inline(always)]
fn draw(serial: u64, mixed_seed: u64) -> u64 {
    serial
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(mixed_seed)
}

/// A 64-bit finalizer (splitmix64's): seeds 0, 1, 2 ... become unrelated offsets.
#[inline(always)]
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decision at `interval` without touching the process's setting.
    fn skips_at(interval: u64, seed: u64, serial: u64, bytes: u64) -> bool {
        let h = draw(serial, mix(seed));
        match bytes.checked_mul(u64::MAX / interval) {
            Some(bound) if h >= bound => true,
            _ => {
                let u = (h as f64 + 0.5) / 18_446_744_073_709_551_616.0;
                u >= probability_at(interval, bytes)
            }
        }
    }

    /// The gate is the scale while every record is the sample's, and closed (0) while a
    /// leak test runs and once records outside the sample may exist.
    #[test]
    fn the_gate_closes_when_records_outside_the_sample_may_exist() {
        let scale = u64::MAX / (512 * 1024);
        let pure = GateState {
            sessions: 0,
            mixed: false,
        };
        assert_eq!(pure.gate(scale), scale);
        assert_eq!(pure.gate(0), 0, "exact: no gate");
        for (sessions, mixed) in [(0, true), (1, false), (1, true)] {
            let state = GateState { sessions, mixed };
            assert_eq!(state.gate(scale), 0, "sessions {sessions}, mixed {mixed}");
        }
    }

    #[test]
    fn parses_exact_and_intervals_and_names_what_is_wrong() {
        assert_eq!("exact".parse::<Sampling>().unwrap(), Sampling::Exact);
        assert_eq!(" EXACT ".parse::<Sampling>().unwrap(), Sampling::Exact);
        assert_eq!(
            "512KiB".parse::<Sampling>().unwrap(),
            Sampling::Interval(512 * 1024)
        );
        assert_eq!(
            "2 MiB".parse::<Sampling>().unwrap(),
            Sampling::Interval(2 << 20)
        );
        assert_eq!(
            "4096".parse::<Sampling>().unwrap(),
            Sampling::Interval(4096)
        );
        let e = "often".parse::<Sampling>().unwrap_err().to_string();
        assert!(e.contains("\"often\"") && e.contains("512KiB"), "{e}");
        let e = "0".parse::<Sampling>().unwrap_err().to_string();
        assert!(e.contains("0 bytes"), "{e}");
        let e = "5 parsecs".parse::<Sampling>().unwrap_err().to_string();
        assert!(e.contains("unit"), "{e}");
        assert_eq!(Sampling::Interval(512 * 1024).to_string(), "512.0 KiB");
        assert_eq!(Sampling::Exact.to_string(), "exact");
    }

    #[test]
    fn the_probability_is_one_minus_exp_of_the_size_over_the_interval() {
        let interval = 1000;
        for bytes in [10u64, 100, 1000, 3000] {
            let n = 200_000u64;
            let kept = (0..n)
                .filter(|serial| !skips_at(interval, 7, *serial, bytes))
                .count() as f64;
            let p = probability_at(interval, bytes);
            assert!((p - (1.0 - (-(bytes as f64) / 1000.0).exp())).abs() < 1e-12);
            // Within 4 standard deviations of the binomial.
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (kept - n as f64 * p).abs() < 4.0 * sd + 1.0,
                "{bytes} B: kept {kept} of {n}, expected {}",
                n as f64 * p
            );
        }
    }

    #[test]
    fn weights_make_the_estimates_unbiased() {
        // Tensors of mixed sizes: the weighted sum of the sampled ones estimates the total.
        let interval = 4096;
        let sizes = [64u64, 1024, 4096, 100_000];
        let (mut total, mut estimate) = (0.0, 0.0);
        for serial in 0..400_000u64 {
            let bytes = sizes[(serial % 4) as usize];
            total += bytes as f64;
            if !skips_at(interval, 3, serial, bytes) {
                estimate += bytes as f64 / probability_at(interval, bytes);
            }
        }
        assert!(
            (estimate / total - 1.0).abs() < 0.03,
            "estimate {estimate} for {total}"
        );
        // A tensor far above the interval is always sampled and counts once.
        assert!((0..1000).all(|s| !skips_at(interval, 3, s, 1 << 30)));
        assert_eq!(probability_at(interval, 1 << 30), 1.0);
    }

    #[test]
    fn the_detection_bound_is_the_exact_one_for_large_leaks_and_grows_as_interval_over_l() {
        // Far above the interval: every kept tensor is sampled, as in exact mode.
        assert_eq!(detection_bound(1 << 30, 512 * 1024, 0.99), 4);
        // At the interval: q = 0.632, 10 iterations after the warm-up.
        assert_eq!(detection_bound(4096, 4096, 0.99), 11);
        // Well below: about 8.4 x interval / L (within the coarse steps' 2%).
        let b = detection_bound(512, 512 * 1024, 0.99) as f64;
        assert!((b / (8.41 * 1024.0) - 1.0).abs() < 0.03, "{b}");
        assert!(detection_bound(0, 4096, 0.99) == u64::MAX);
    }

    /// The bound holds: over many simulated runs, at least 99% find the leak within it.
    #[test]
    fn the_detection_bound_holds_in_simulation() {
        for (leak, interval) in [(4096u64, 4096u64), (1024, 4096), (100, 4096)] {
            let bound = detection_bound(leak, interval, 0.99);
            let runs = 2000u64;
            let mut found = 0;
            for run in 0..runs {
                // One tensor of `leak` bytes kept per iteration; growth events are the
                // iterations (after the warm-up's) whose tensor is sampled.
                let events = (0..bound - 1)
                    .filter(|i| !skips_at(interval, run, run * 1_000_003 + i, leak))
                    .count();
                found += u64::from(events >= 3);
            }
            assert!(
                found * 100 >= 99 * runs,
                "{leak}/{interval}: {found} of {runs}"
            );
        }
    }

    #[test]
    fn one_seed_one_sample_and_seeds_differ() {
        let pick = |seed| {
            (0..20_000u64)
                .filter(|s| !skips_at(1000, seed, *s, 50))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(1), pick(1));
        assert_ne!(pick(1), pick(2));
        // Exact at interval 0 or unset.
        assert_eq!(probability_at(0, 5), 1.0);
        assert_eq!(probability_at(UNSET, 5), 1.0);
    }
}
