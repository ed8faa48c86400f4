//! The event model, the leak analysis and the renderers of tensor-lifetime.
//!
//! This crate knows nothing about candle. The runtime tracker (crate `tensor-lifetime`)
//! turns what it sees into [`Event`]s and feeds them to an [`Analysis`]; the CLI reads the
//! same events back from a JSON-lines log and feeds them to the same [`Analysis`]. The
//! judgement of what is a leak therefore lives once, here, and an in-process report and a
//! report from a saved log always agree.
//!
//! - [`event`]: the events, the log format (versioned, see `docs/event-log.md`), a
//!   streaming reader that tolerates a cut-off last line.
//! - [`analysis`]: the per-loop, per-site judgement (leak, retained, graph and view
//!   retention) as a state machine over events.
//! - [`report`]: the [`Report`] value, its JSON shape and its text rendering.
//! - [`roles`]: the role of each tensor (parameter, gradient, optimizer state,
//!   activation, input, other, temporary), the split of memory by role, call paths.
//! - [`post_mortem`]: what was live at one moment (an out-of-memory error).
//! - [`memory_findings`]: untracked growth and shape churn, judged from memory samples
//!   and birth sizes.
//! - [`size`]: byte sizes, formatted (`1.2 MiB`) and parsed (`"1 MiB"`).
//! - [`timeline`]: a streaming, downsampling aggregator of live memory over time.
//! - [`html`]: the self-contained HTML report (timeline, findings, per-site detail).
//! - [`trace`]: a Chrome Trace Event file for ui.perfetto.dev and chrome://tracing.
//! - [`diff`]: a per-site comparison of two reports (a CI guard against new leaks).
//! - [`ranks`]: the logs of several ranks of one job merged: findings with their ranks,
//!   a rank whose memory grows apart from the others.
//! - [`sarif`], [`github`]: findings as SARIF 2.1.0 and as GitHub Actions annotations.
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
pub mod model;
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
pub use report::{Finding, FindingKind, Report};
pub use roles::{CallFrame, MemoryByRole, Role, RoleBytes, RoleHistory, RoleSplit};
pub use timeline::{Timeline, TimelineBuilder};
