//! The judgement on the shapes of training code: what is a leak, what is retained, what
//! churns, at which site, with which holder and bytes. The cases that train run one at a
//! time ([`tensor_lifetime_tests::serial`]): tensors born on a loader thread with no loop
//! of its own belong to the process's primary loop, whichever test opened it. A case
//! that reads the whole process or sets the tracker's environment runs alone in a child
//! process ([`tensor_lifetime_tests::process::alone`]).

pub mod analysis_with_and_without_log;
pub mod corpus;
pub mod corpus_real_shapes;
pub mod decoding_churn;
pub mod logged_births;
pub mod memory_by_role;
pub mod memory_by_role_rollout;
pub mod nested_three_deep;
pub mod post_mortem;
pub mod real_shapes;
pub mod shape_churn;
pub mod single_epoch;
