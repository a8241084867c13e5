//! Ivy's contributor defaults, through the session API (the "Ivy" seed: the contributor list of
//! its prompt builder). The runtime environment is sticky, as Ivy's `RuntimeEnvironmentContributor`
//! is: kept whatever else a tight budget drops. `PREFERENCES.md` in the workspace is read by
//! default, as Ivy's `PreferencesContributor` reads it.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;

use strata_assembler::assemble::SectionStatus;
use strata_assembler::prelude::*;

fn runtime(dir: &Path) -> Runtime {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .workspace(dir)
        .sqlite(dir.join("m.db"))
        .build()
        .unwrap()
}

/// Ivy, "PreferencesContributor — PREFERENCES.md content": the file is a section of the turn.
#[test]
fn preferences_md_is_read_by_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("PREFERENCES.md"),
        "Answer in metric units. Keep answers short.",
    )
    .unwrap();
    let rt = runtime(dir.path());
    let turn = rt
        .session("ivy")
        .prepare("How far is it?", &TurnOptions::default())
        .unwrap();
    let s = turn
        .report()
        .sections
        .iter()
        .find(|s| s.id.as_str() == "bootstrap/PREFERENCES.md")
        .unwrap();
    assert!(matches!(s.status, SectionStatus::Kept), "{:?}", s.status);
    assert!(turn.body.to_string().contains("Answer in metric units."));
}

/// Ivy, "RuntimeEnvironmentContributor — OS, shell ... (constraint, 94, sticky)": the environment
/// section is sticky and stays when a small window drops other context.
#[test]
fn the_runtime_environment_is_sticky() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "Notes. ".repeat(3000)).unwrap();
    let rt = runtime(dir.path());
    let opts = TurnOptions {
        context_window: Some(4_000),
        ..TurnOptions::default()
    };
    let turn = rt.session("ivy").prepare("Where am I?", &opts).unwrap();
    let r = turn.report();
    let env = r
        .sections
        .iter()
        .find(|s| s.id.as_str() == "environment")
        .unwrap();
    assert!(env.sticky, "{env:?}");
    assert!(
        matches!(env.status, SectionStatus::Kept),
        "{:?}",
        env.status
    );
    // Something else did not fit whole.
    assert!(
        r.sections
            .iter()
            .any(|s| !matches!(s.status, SectionStatus::Kept)),
        "{:?}",
        r.sections
    );
}
