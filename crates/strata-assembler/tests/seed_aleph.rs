//! Aleph's section cache, through the session API (the "Aleph" seed: "section caching with
//! invalidation and stats"). One runtime serves many sessions, so resetting one session must
//! not cost the others their cached sections: the cache's keys name no session, and a session
//! reset leaves it as it is.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;

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

/// Aleph, "Cache invalidation triggers: Session reset": the reset session starts over, and
/// another session's next turn is still served its workspace sections from the cache.
#[test]
fn resetting_one_session_keeps_the_others_cached_sections() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("AGENTS.md"),
        "Deploy with the blue pipeline.",
    )
    .unwrap();
    let rt = runtime(dir.path());
    let cache = rt.registry().cache().unwrap().clone();
    let a = rt.session("a");
    let b = rt.session("b");
    a.prepare("First question of a.", &TurnOptions::default())
        .unwrap();
    b.prepare("First question of b.", &TurnOptions::default())
        .unwrap();
    let before = cache.stats();
    assert!(before.entries > 0, "{before:?}");

    assert!(a.reset().unwrap() > 0);
    let after_reset = cache.stats();
    assert_eq!(after_reset.entries, before.entries, "{after_reset:?}");
    assert_eq!(after_reset.invalidations, before.invalidations);

    let turn = b
        .prepare("Second question of b.", &TurnOptions::default())
        .unwrap();
    let after = cache.stats();
    // Only the memory search, cached by its query, is computed again for the new message.
    assert_eq!(after.misses, after_reset.misses + 1, "{after:?}");
    assert!(after.hits > after_reset.hits, "{after:?}");
    assert!(turn
        .body
        .to_string()
        .contains("Deploy with the blue pipeline."));
    // The reset session holds nothing of its old conversation.
    let fresh = a.prepare("A new start.", &TurnOptions::default()).unwrap();
    assert!(!fresh.body.to_string().contains("First question of a."));
}
