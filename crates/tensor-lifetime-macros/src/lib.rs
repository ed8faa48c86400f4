//! `#[track]` and `#[leak_test]` (in progress).
