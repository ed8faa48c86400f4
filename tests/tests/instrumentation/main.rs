//! What `#[track]` and `#[leak_test]` do to the code they annotate: the same behaviour as
//! without them, the sites, loops and call paths their probes record, and the verdicts of
//! leak tests and their options. The tests that look at the tracker run in leak sessions
//! of their own, so they can run side by side; one that reads the whole process runs alone
//! in a child process ([`tensor_lifetime_tests::process::alone`]).

pub mod call_paths;
pub mod leak_test_attr;
pub mod track_semantics;
