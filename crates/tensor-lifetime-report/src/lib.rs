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
//! - [`memory_findings`]: untracked growth and shape churn, judged from memory samples
//!   and birth sizes.
//! - [`size`]: byte sizes, formatted (`1.2 MiB`) and parsed (`"1 MiB"`).

pub mod analysis;
pub mod event;
pub mod memory_findings;
pub mod report;
pub mod size;

pub use analysis::{Analysis, Judgement};
pub use event::{Event, ReadError, SiteKind};
pub use memory_findings::{MemoryFindings, MemoryJudgement};
pub use report::{Finding, FindingKind, Report};
