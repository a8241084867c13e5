//! Compile-fail tests: code that forges or mutates a verified identity does not compile.
//! Verifies I7 and ADR-0004. The expected compiler errors are kept in `compile_fail/*.stderr`.

#[test]
fn forging_or_mutating_a_verified_agent_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
