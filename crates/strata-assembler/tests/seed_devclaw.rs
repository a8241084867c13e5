//! DevClaw's memory search cache, through the session API (the "DevClaw" seed: "TTL caches
//! refreshed in the background", memory search cached 30 seconds): a query's hits are kept, a
//! new query searches again, and a memory added through the runtime drops the kept hits.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;

use strata_assembler::memory::NewMemory;
use strata_assembler::prelude::*;

fn runtime(dir: &Path) -> Runtime {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
        .build()
        .unwrap()
}

#[test]
fn memory_search_hits_are_kept_per_query_until_a_memory_is_added() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let agent = rt.agent().agent_id().to_owned();
    rt.remember(NewMemory::new(
        &agent,
        "The cafeteria opens for breakfast at 7:30.",
    ))
    .unwrap();
    let s = rt.session("devclaw");
    let ask = |q: &str| {
        let t = s.prepare(q, &TurnOptions::default()).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t.body.to_string()
    };
    assert!(ask("When does the cafeteria open for breakfast?").contains("7:30"));
    // Written behind the runtime's back: the same query is answered from the kept hits.
    rt.memory()
        .put(NewMemory::new(
            &agent,
            "The cafeteria breakfast moved to 8:15 on Fridays.",
        ))
        .unwrap();
    let cached = ask("When does the cafeteria open for breakfast?");
    assert!(
        cached.contains("7:30") && !cached.contains("8:15"),
        "{cached}"
    );
    // Another query searches again.
    assert!(ask("Cafeteria breakfast on Fridays?").contains("8:15"));
    // A memory added through the runtime drops the kept hits.
    rt.remember(NewMemory::new(
        &agent,
        "The cafeteria serves breakfast until 10:00.",
    ))
    .unwrap();
    let fresh = ask("When does the cafeteria open for breakfast?");
    assert!(fresh.contains("8:15") && fresh.contains("10:00"), "{fresh}");
}
