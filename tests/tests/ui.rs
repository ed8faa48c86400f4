//! The compile errors users meet with `#[track]` and `#[leak_test]`, each pointing at the
//! offending tokens (`tests/ui/*.rs` with their `.stderr`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
}
