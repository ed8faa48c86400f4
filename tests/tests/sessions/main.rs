//! Leak sessions side by side: `cargo test` runs the tests of a binary on parallel
//! threads of one process, and each leak test must judge only the tensors born in its own
//! session, whether its code runs a loop or not.

pub mod loopless;
pub mod parallel_sessions;
