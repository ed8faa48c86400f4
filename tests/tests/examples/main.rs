//! The examples' checks: each example run as its users would, its report read (the JSON
//! report the tracker writes, or the value the example returns) and its leak, or its
//! absence, asserted at the example's own lines. The tracker's JSON report is set before
//! it starts and its counts are the whole process's: each test runs alone in a child
//! process of this binary ([`tensor_lifetime_tests::process::alone`]).

pub mod clean_training;
pub mod cuda_oom;
pub mod cuda_training_clean;
pub mod cuda_training_leaky;
pub mod decoding;
pub mod forecast;
pub mod leaky_dataset;
pub mod loss_accumulation;
pub mod server;
pub mod view_retention;
