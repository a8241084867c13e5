//! The session API on a real PostgreSQL server that the test starts: two operating-system
//! processes and a restarted runtime share one session's goals through the database, and
//! concurrent updates from both processes are all kept. Verifies ADR-0016.
#![cfg(feature = "postgres")]
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

#[path = "../../strata-memory/tests/pg_harness/mod.rs"]
mod pg_harness;

use std::path::Path;
use std::process::Command;

use strata_assembler::{agent::*, assemble::*, prelude::*, session::*};

/// Set in the second process: the connection string to use.
const CHILD_ENV: &str = "STRATA_TEST_PG_CHILD";
/// Checkpoints each process adds at the same time.
const EACH: usize = 15;

fn agent() -> VerifiedAgent {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo");
    let trust = TrustStore::read(&demo.join("trust.toml")).unwrap();
    Loader::new(&trust, &RollbackGuard::in_memory())
        .load_file(&demo.join("agent.signed.json"))
        .unwrap()
}

fn runtime(url: &str) -> Runtime {
    Runtime::builder(agent())
        .postgres(url)
        .provider(Provider::OpenAiChat, "m")
        .build()
        .unwrap()
}

fn context_text(t: &PreparedTurn) -> String {
    t.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Add `EACH` checkpoints named after `who`, each in its own update.
fn add_checkpoints(rt: &Runtime, who: &str) {
    let goals = rt.session("shared").goals().unwrap();
    let id = goals.active_goal().unwrap().id;
    for i in 0..EACH {
        goals
            .create_checkpoint(&id, &format!("{who} step {i}"))
            .unwrap();
    }
}

/// Verifies ADR-0016: this test runs twice, as two processes. The first starts PostgreSQL,
/// creates a goal, and starts the second (this same test binary, told by an environment
/// variable); the second sees the goal in its prompt, and both add checkpoints at the same
/// time. A restarted runtime then sees the goal with every checkpoint of both processes.
#[test]
fn goals_are_shared_by_processes_on_one_postgres() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        // The second process.
        let rt = runtime(&url);
        let t = rt
            .session("shared")
            .prepare("What is the goal?", &TurnOptions::default())
            .unwrap();
        assert!(context_text(&t).contains("Migrate billing to v2"));
        add_checkpoints(&rt, "child");
        return;
    }
    let server = pg_harness::shared();
    let url = server.test_params();
    {
        let rt = runtime(&url);
        rt.session("shared")
            .goals()
            .unwrap()
            .create_goal("Migrate billing to v2", GoalPriority::High)
            .unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "goals_are_shared_by_processes_on_one_postgres",
                "--nocapture",
            ])
            .env(CHILD_ENV, &url)
            .spawn()
            .unwrap();
        add_checkpoints(&rt, "parent");
        assert!(child.wait().unwrap().success(), "the second process failed");
    }
    // A restarted runtime sees what both processes wrote; nothing was lost to a race.
    let rt = runtime(&url);
    let goal = rt.session("shared").goals().unwrap().active_goal().unwrap();
    assert_eq!(goal.description, "Migrate billing to v2");
    for who in ["parent", "child"] {
        let n = goal
            .checkpoints
            .iter()
            .filter(|c| c.description.starts_with(who))
            .count();
        assert_eq!(n, EACH, "{who}: {:?}", goal.checkpoints);
    }
    // A marker in a reply is applied through the store as well.
    rt.session("shared")
        .record_reply(&Reply::text("[NEXT] Switch the invoices over"))
        .unwrap();
    let again = runtime(&url);
    let t = again
        .session("shared")
        .prepare("And now?", &TurnOptions::default())
        .unwrap();
    assert!(context_text(&t).contains("Switch the invoices over"));
}

/// Verifies ADR-0046: a runtime on PostgreSQL refuses a store created with another embedder,
/// naming both, and the store keeps its embedder and its memories.
#[test]
fn a_postgres_store_of_another_embedder_is_refused() {
    let server = pg_harness::shared();
    let url = server.test_params();
    let rt = runtime(&url);
    let id = rt
        .remember(strata_assembler::memory::NewMemory::new(
            rt.agent().agent_id(),
            "The cafeteria serves morning meals from 7 to 10.",
        ))
        .unwrap();
    drop(rt);
    let e = Runtime::builder(agent())
        .postgres(&url)
        .embedder(std::sync::Arc::new(strata_memory::HashEmbedder::new(32)))
        .build()
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            SessionError::Store(strata_memory::MemoryError::EmbedderMismatch { .. })
        ),
        "{e}"
    );
    assert!(
        msg.contains("`strata-hash-v1/256`") && msg.contains("`strata-hash-v1/32`"),
        "{msg}"
    );
    let rt = runtime(&url);
    assert_eq!(rt.embedder().name(), "strata-hash-v1/256");
    let hits = rt
        .memory()
        .search(
            "cafeteria meals",
            &strata_assembler::memory::SearchOptions::top(50),
        )
        .unwrap();
    assert!(hits.iter().any(|h| h.record.id == id));
}
