//! The conformance suite and the fault tests against the SQLite adapter. Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;

use std::sync::Arc;

use strata_memory::{HashEmbedder, ManualClock, SqliteStore, StoreOptions};

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> SqliteStore {
    SqliteStore::open_with(
        dir.path().join("memory.db"),
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_clock(clock.clone()),
    )
    .unwrap()
}

/// Verifies ADR-0012: SQLite working memory conforms.
#[test]
fn working_memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::working_memory(&open(&dir, &clock), &clock);
}

/// Verifies ADR-0012: SQLite long-term memory conforms.
#[test]
fn long_term_memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::long_term_memory(&open(&dir, &clock), &clock);
}

/// Verifies ADR-0012: SQLite shared context conforms.
#[test]
fn shared_context_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::shared_context(Arc::new(open(&dir, &clock)), &clock);
}
