//! The plain data every layer above shares: sites, holders, an iteration end's sweep of
//! one site, memory samples, a tensor's own size, the sampled mode's weights, roles and
//! call paths, and the post-mortem, what a device has left and the forecast of running out.
//!
//! Nothing here reads events or judges: the events (`event`) carry these values, the
//! analysis reads them and the report shows them. Each type's JSON shape is fixed here
//! (the event log's and the report's fields, `docs/event-log.md`).

mod dtype;
mod fields;
mod forecast;
mod holder;
pub mod post_mortem;
pub mod roles;
mod sampling;
mod site;
mod sweep;

pub use dtype::{dtype_size, own_bytes, own_bytes_sized};
pub use forecast::{DeviceRoom, Forecast, GROWTH_FROM_DEVICE, GROWTH_FROM_LEAKS};
pub use holder::{HolderCount, HolderKind, HolderRef, HolderSpec};
pub use sampling::{
    born_weight, estimate_count, estimate_sentence, sample_probability, sample_weight,
};
pub use site::{location, SiteInfo, SiteKind, SiteNote, SiteRef};
pub use sweep::{MemorySample, SiteSweep};

pub(crate) use fields::{is_false, is_zero};
