//! tensor-lifetime: a tensor lifetime analyzer for [candle](https://github.com/huggingface/candle).
//!
//! It tags every tensor that annotated code creates with its creation site, follows its
//! refcount and its drop, and tells you, at the end of each epoch and in your tests,
//! which tensors outlive the training iteration that made them, who holds them and how
//! much memory that costs.
//!
//! ```
//! # fn main() -> candle_core::Result<()> {
//! use candle_core::{DType, Device, Tensor};
//!
//! let mut cache = Vec::new();
//! let steps = tensor_lifetime::loop_scope!("'steps");
//! for _ in 0..6 {
//!     let _it = steps.iteration();
//!     let x = Tensor::ones((64, 64), DType::F32, &Device::Cpu)?;
//!     tensor_lifetime::tag!(x);
//!     tensor_lifetime::store!(x, "cache");
//!     cache.push(x); // kept across iterations: a leak
//! }
//! drop(steps);
//! let report = tensor_lifetime::report();
//! assert!(report.has_leaks());
//! assert_eq!(report.findings[0].site.label, "x");
//! # Ok(()) }
//! ```
//!
//! With the `macros` feature (default), `#[tensor_lifetime::track]` inserts these probes
//! into a function for you and `#[tensor_lifetime::leak_test]` fails a test that leaks.
//!
//! # Environment
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `TENSOR_LIFETIME` | `on` (default), `off` | `off` disables tracking at run time |
//! | `TENSOR_LIFETIME_REPORT` | `stderr` (default), `off` | automatic reports at the end of each epoch with findings and of the outermost loop |
//! | `TENSOR_LIFETIME_JSON` | path | the latest report as JSON, rewritten at each report |
//! | `TENSOR_LIFETIME_LOG` | path | the event log (`docs/event-log.md`): binary, JSON lines for `*.jsonl` / `*.json`; flushed at each iteration end |
//! | `TENSOR_LIFETIME_MEMORY_EVERY` | iterations, `0`/`off` | the memory monitor's period ([`set_memory_monitor`]) |
//! | `TENSOR_LIFETIME_SAMPLE` | `exact` (default), a byte interval (`512KiB`) | record a sample of the tensors; reports say their figures are estimates ([`set_sampling`], [`sample`]) |
//! | `TENSOR_LIFETIME_SAMPLE_SEED` | a number | which tensors a sampled run records ([`set_sample_seed`]) |
//! | `TENSOR_LIFETIME_MEMORY_LIMIT` | a size (`2GiB`) | the memory the forecast of running out takes for every device, instead of the cgroup limit or `MemAvailable` (CPU) and the driver's free memory (CUDA) |
//!
//! # Features
//!
//! - `macros` (default): `#[track]` and `#[leak_test]`.
//! - `tracking` (default): the runtime. Without it every probe is a no-op and `#[track]`
//!   expands to the item unchanged.
//! - `candle-0-11` (default), `candle-0-10`, `candle-0-9`, `candle-0-8`: the candle-core
//!   minor your crate uses, exactly one. Cargo keeps one candle-core per minor and picks
//!   the newest for each requirement, so the feature asks for yours and Cargo shares it;
//!   with another candle your tensors would be of a type this crate cannot see. For a
//!   minor other than 0.11: `default-features = false, features = ["macros", "tracking",
//!   "candle-0-9"]`. A build that selects none, several, or another minor than your
//!   crate's candle-core fails with the line to write (`docs/candle-versions.md`).
//! - `cuda`: the selected candle's CUDA backend and GPU memory statistics.
//! - `metrics`: the tracker's figures (live bytes by device and role, leaks, the largest
//!   leak's growth, the forecast of running out, the CUDA pool) set on the `metrics`
//!   facade at each outermost iteration end, for any recorder the program installs
//!   (`metrics-exporter-prometheus`; `docs/metrics.md`).
//!
//! # Modules
//!
//! - [`call_path`]: the per-thread stack of `#[track]`ed functions (call paths).
//! - `oom` (private): out-of-memory errors returned by tracked functions (post-mortem).
//! - [`site`](mod@site): static source locations ([`Site`], [`site!`]).
//! - `weak` (private): weak handles to candle tensors, the audited layout assumption.
//! - `compat` (private): what depends on candle-core's version.
//! - `device` (private): device names, what a device says of its memory and what it has
//!   left (the forecast of running out).
//! - `tracker` (private): the registry, loop frames and sweeps (`docs/architecture.md`).
//! - [`scope`]: loop scopes and iterations as RAII guards.
//! - `probe` (private): tagging values of any type (reached through [`tag!`],
//!   [`store!`] and the macros).
//! - [`sample`]: the sampled mode (which tensors are recorded, what each stands for).
//! - [`leak_test`](mod@leak_test): sessions, [`assert_no_leaks`], [`check_leaks`].
//! - [`memory`]: memory statistics per device ([`memory_stats`], [`memory_summary`],
//!   [`empty_cache`], [`set_release_threshold`]) and the periodic memory monitor.

#![deny(unsafe_code)]
// docs.rs (`--cfg docsrs`, a nightly rustdoc) marks each item with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The selected candle-core, named `candle_core` in the whole crate (an `extern crate` at
// the root joins the extern prelude). 0.11 is the dependency named `candle-core` itself.
// None or several selected: the build script has already failed with the line to write.
#[cfg(feature = "candle-0-10")]
extern crate candle_core_0_10 as candle_core;
#[cfg(feature = "candle-0-8")]
extern crate candle_core_0_8 as candle_core;
#[cfg(feature = "candle-0-9")]
extern crate candle_core_0_9 as candle_core;

pub mod call_path;
mod compat;
mod config;
mod device;
mod error;
pub mod leak_test;
pub mod memory;
mod oom;
mod phase_timing;
mod probe;
mod probe_buffer;
pub mod sample;
pub mod scope;
pub mod site;
mod tracker;
mod weak;

pub use error::{Error, Result};
pub use leak_test::{assert_no_leaks, check_leaks, LeakTestOptions, LeakTestOutcome};
pub use memory::{
    empty_cache, max_memory_allocated, max_memory_reserved, memory_allocated, memory_reserved,
    memory_stats, memory_summary, record_memory_sample, reset_peak, set_memory_monitor,
    set_release_threshold, MemoryStats,
};
pub use sample::{sampling, set_sample_seed, set_sampling, Sampling};
pub use scope::{in_task, AsyncLoopScope, InTask, Iteration, LoopScope};
pub use site::{Site, SiteKind};
pub use tensor_lifetime_report::{self as report_model, Finding, FindingKind, Report};
pub use tensor_lifetime_report::{CallFrame, MemoryByRole, PostMortem, Role, RoleSplit};
pub use tracker::{LiveTensor, SiteTotals};

#[cfg(feature = "macros")]
pub use tensor_lifetime_macros::{leak_test, track};

/// Starts the tracker now; returns why it cannot run, if it cannot.
///
/// Probes start it lazily, so calling this is optional: it lets a program fail early
/// (or log) when tracking is unavailable.
pub fn init() -> Result<()> {
    if tracker::active().is_some() {
        return Ok(());
    }
    Err(match tracker::failure() {
        Some(why) => Error::TrackerUnavailable(why),
        None => Error::TrackingDisabled,
    })
}

/// Whether tensors are being tracked.
pub fn enabled() -> bool {
    tracker::active().is_some()
}

/// The report now: findings of every loop, live tensors and bytes.
///
/// An empty report when tracking is off.
pub fn report() -> Report {
    match tracker::active() {
        Some(t) => t.report(None),
        None => tensor_lifetime_report::Analysis::default().report(),
    }
}

/// What is live now: bytes by creation site, role and holder, the largest tensors, the
/// sites that grew most, and what each device says of its memory (pool used and
/// reserved, device free: CUDA only). Written automatically, once per process, when a
/// tracked function returns candle's CUDA out-of-memory error (see `oom.rs`).
///
/// An empty post-mortem when tracking is off.
pub fn post_mortem() -> PostMortem {
    match tracker::active() {
        Some(t) => t.post_mortem("requested"),
        None => PostMortem::default(),
    }
}

/// What is live now as a pprof profile: bytes and tensors by creation site (the leaf of
/// each stack, under the `#[track]`ed functions that created them), role, device and
/// holder, and the tensors born per site over the run
/// ([`report_model::pprof`](tensor_lifetime_report::pprof) says what is in it).
/// An empty profile when tracking is off.
pub fn pprof_profile() -> report_model::pprof::LiveProfile {
    match tracker::active() {
        Some(t) => t.live_profile(),
        None => report_model::pprof::LiveProfile::default(),
    }
}

/// Writes [`pprof_profile`] to `path` as the gzipped protocol buffer that
/// `go tool pprof -top <path>` (or `-http=:`), Grafana Pyroscope and speedscope read.
///
/// ```no_run
/// tensor_lifetime::write_pprof("live.pb.gz")?;
/// # Ok::<(), tensor_lifetime::Error>(())
/// ```
pub fn write_pprof(path: impl AsRef<std::path::Path>) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, pprof_profile().encode()).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Gives the tensors in `value` the role `role` (see [`Role`]): an optimizer's state kept
/// outside tracked methods (even in `Var`s, which would be parameters), a batch made by
/// untracked code. A tensor first seen here has its creation site here (labeled
/// `mark_role`; [`tag!`] with a role gives a label); one already tracked takes the role.
#[track_caller]
pub fn mark_role<T: ?Sized>(value: &T, role: Role) {
    probe::mark(value, site::caller_site("mark_role"), role);
}

/// The tracked tensors alive now, oldest first.
pub fn snapshot() -> Vec<LiveTensor> {
    tracker::active().map_or_else(Vec::new, |t| t.live(None))
}

/// Per creation site, in source order: tensors born and dropped so far.
pub fn site_totals() -> Vec<SiteTotals> {
    tracker::active().map_or_else(Vec::new, |t| t.site_totals())
}

/// Tags the tensors in a value with the site where this is written.
///
/// `tag!(x)` labels the site `x`; `tag!(expr, "label")` gives the label;
/// `tag!(expr, "label", Role::OptimizerState)` gives its tensors a role too (as
/// [`mark_role`] does).
#[macro_export]
macro_rules! tag {
    ($value:ident) => {
        $crate::__private::tag(&$value, $crate::site!(@kind $crate::SiteKind::Explicit, ::core::stringify!($value)))
    };
    ($value:expr, $label:expr) => {
        $crate::__private::tag(&$value, $crate::site!(@kind $crate::SiteKind::Explicit, $label))
    };
    ($value:expr, $label:expr, $role:expr) => {
        $crate::__private::mark(&$value, $crate::site!(@kind $crate::SiteKind::Explicit, $label), $role)
    };
}

/// Records that the tensors in a value are stored into a container named by the label
/// (`store!(t, "self.cache")`): the store becomes the holder shown in reports.
#[macro_export]
macro_rules! store {
    ($value:expr, $receiver:expr) => {
        $crate::__private::store(&$value, $crate::site!(store $receiver))
    };
}

/// Opens a [`LoopScope`] here, named by the label (`loop_scope!("'epoch")`).
#[macro_export]
macro_rules! loop_scope {
    ($label:expr) => {
        $crate::LoopScope::enter($crate::site!(loop $label))
    };
    () => {
        $crate::LoopScope::enter($crate::site!(loop ""))
    };
}

/// Opens an [`AsyncLoopScope`] here, for a loop that `.await`s, inside a future wrapped
/// by [`in_task`] (`async_loop_scope!("'requests")`).
#[macro_export]
macro_rules! async_loop_scope {
    ($label:expr) => {
        $crate::AsyncLoopScope::enter($crate::site!(loop $label))
    };
    () => {
        $crate::AsyncLoopScope::enter($crate::site!(loop ""))
    };
}

/// What `#[track]` and `#[leak_test]` expand to. Not public API: no stability promise.
#[doc(hidden)]
pub mod __private {
    pub use crate::call_path::{enter, CallGuard, FnSite};
    pub use crate::leak_test::LeakTestOptions;
    pub use crate::oom::Checked;
    /// Diagnostic phase timings (the `phase-timing` feature; empty without it).
    pub use crate::phase_timing::summary as phase_timing_summary;
    pub use crate::probe::{input, mark, store, tag, tag_made};
    pub use crate::scope::{in_task, AsyncLoopScope, Iteration, LoopScope};
    pub use crate::site::{Site, SiteKind};
    pub use crate::tracker::Input;
    /// `#[leak_test(max_leaked_bytes = "1 MiB")]` evaluates it in a constant.
    pub use tensor_lifetime_report::size::parse_size_const;
    pub use tensor_lifetime_report::Role;

    /// What `#[leak_test]` expands to: runs the body, panics with the report on a leak.
    #[track_caller]
    pub fn run_leak_test<R>(name: &str, options: LeakTestOptions, f: impl FnOnce() -> R) -> R {
        crate::leak_test::run_leak_test(name, options, f)
    }

    /// Opens a loop scope at `site`.
    #[inline]
    pub fn enter_loop(site: &'static Site) -> LoopScope {
        LoopScope::enter(site)
    }

    /// Opens the scope of a loop that `.await`s (inside a future wrapped by `in_task`).
    pub fn enter_async_loop(site: &'static Site) -> AsyncLoopScope {
        AsyncLoopScope::enter(site)
    }

    /// `place = tagged(value, SITE)`: tags `value` on its way into an assigned place and
    /// returns it. Taking and returning the value keeps the assignment's evaluation order
    /// and temporaries (the place is not named twice); `T` is inferred from `value`, so no
    /// inference constraint is added.
    #[inline]
    pub fn tagged<T>(value: T, site: &'static Site) -> T {
        tag(&value, site);
        value
    }

    /// [`tagged`] for a value the macro saw computed from `inputs` (read before the value,
    /// which may move them): `h = tagged_made([input(&h)], layer.forward(&h)?, SITE)`.
    #[inline]
    pub fn tagged_made<T, const N: usize>(inputs: [Input; N], value: T, site: &'static Site) -> T {
        tag_made(&value, site, &inputs);
        value
    }

    /// `recv.push(stored(value, SITE))`, `self.field = stored(value, SITE)`: records the
    /// store and returns the value, so the call keeps its argument's evaluation order,
    /// temporaries and two-phase borrows.
    #[inline]
    pub fn stored<T>(value: T, site: &'static Site) -> T {
        store(&value, site);
        value
    }
}
