//! The examples' checks: each example run as its users would, its report read (the JSON
//! report the tracker writes, or the value the example returns) and its leak, or its
//! absence, asserted at the example's own lines. The tracker's JSON report is set before
//! it starts and its counts are the whole process's: each test runs alone in a child
//! process of this binary ([`tensor_lifetime_tests::process::alone`]).

mod clean_training;
mod cuda_oom;
mod cuda_training_clean;
mod cuda_training_leaky;
mod leaky_dataset;
mod loss_accumulation;
mod view_retention;
