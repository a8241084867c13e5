//! Compile-fail tests: runtime code cannot name layers 1-2 or mutate built values.
//! Verifies I7 and ADR-0004. The expected compiler errors are kept in `compile_fail/*.stderr`.

#[test]
fn runtime_content_cannot_reach_identity_layers() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
