//! Compile-fail tests: runtime code cannot name layers 1-2 or mutate built values (I7,
//! ADR-0004), and cannot make up the resume points of the tokenizer's shortcuts (ADR-0040). The
//! expected compiler errors are kept in `compile_fail/**/*.stderr`.

/// Verifies I7 and ADR-0004.
#[test]
fn runtime_content_cannot_reach_identity_layers() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}

/// Verifies ADR-0040: a resume point has no constructor outside the tokenizer's walk, and no
/// tokenizer outside strata-core can implement the resumable walks.
#[test]
fn resume_points_cannot_be_made_up() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/tokenizer/*.rs");
}
