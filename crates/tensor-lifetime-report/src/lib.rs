//! The event model, the leak analysis and the renderers of tensor-lifetime.
//!
//! This crate knows nothing about candle. The runtime tracker (crate `tensor-lifetime`)
//! turns what it sees into [`Event`]s and feeds them to an [`Analysis`]; the CLI reads the
//! same events back from a log (binary or JSON lines) and feeds them to the same
//! [`Analysis`]. The
//! judgement of what is a leak therefore lives once, here, and an in-process report and a
//! report from a saved log always agree.
//!
//! The modules are layered one way; each uses only those above it in this list:
//!
//! - [`size`], `fast_hash`: byte sizes, formatted (`1.2 MiB`) and parsed (`"1 MiB"`);
//!   hash maps keyed by small integers.
//! - [`model`]: the plain data: sites, holders, an iteration end's sweep of a site,
//!   memory samples, [`roles`] (the role of each tensor, the split of memory by role,
//!   call paths) and the [`post_mortem`] (what was live at one moment).
//! - [`event`]: the events, the log's two formats (JSON lines and [`event::binary`], both
//!   versioned, see `docs/event-log.md`), their writers and a streaming reader of either
//!   that tolerates a cut-off tail.
//! - [`report`]: the [`Report`] value, its findings, its JSON shape and its text.
//! - [`analysis`]: every judge, as a state machine over one input path
//!   ([`analysis::Input`]): the per-loop, per-site judgement (leak, retained, graph and
//!   view retention), the leak rule once ([`analysis::growth`]), the
//!   [`memory_findings`] (untracked growth and shape churn) and the [`ranks`] merged (a
//!   rank whose memory grows apart from the others).
//! - [`timeline`]: a streaming, downsampling aggregator of live memory over time.
//! - The renderers: [`html`] (the self-contained HTML report), [`trace`] (a Chrome
//!   Trace Event file for ui.perfetto.dev and chrome://tracing), [`diff`] (a per-site
//!   comparison of two reports, a CI guard against new leaks), [`sarif`] and [`github`]
//!   (findings as SARIF 2.1.0 and as GitHub Actions annotations), [`markdown`] (a report
//!   or a diff as a Markdown table for CI summaries), [`pprof`] (the live tensors as a
//!   pprof profile, from the tracker or replayed from a log).
//!
//! The renderers take events through the same [`event::EventReader`] and the judgement
//! through the same [`Analysis`]; none of them judges leaks itself.

#![deny(unsafe_code)]

pub mod analysis;
pub mod diff;
pub mod event;
#[doc(hidden)]
pub mod fast_hash;
pub mod github;
pub mod html;
pub mod markdown;
pub mod model;
pub mod pprof;
pub mod report;
pub mod sarif;
pub mod size;
pub mod timeline;
pub mod trace;

pub use analysis::{memory_findings, ranks, Analysis, Judgement};
pub use diff::Diff;
pub use event::{Event, ReadError, SiteKind};
pub use memory_findings::{MemoryFindings, MemoryJudgement};
pub use model::{post_mortem, roles};
pub use post_mortem::PostMortem;
pub use report::{Finding, FindingKey, FindingKind, Report};
pub use roles::{CallFrame, MemoryByRole, Role, RoleBytes, RoleHistory, RoleSplit};
pub use timeline::{Timeline, TimelineBuilder};
