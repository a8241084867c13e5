//! The conformance suite against the in-memory adapter. Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;

use std::sync::Arc;

use strata_memory::{HashEmbedder, InMemoryStore, ManualClock, StoreOptions};

fn store(clock: &Arc<ManualClock>) -> InMemoryStore {
    InMemoryStore::with(
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_clock(clock.clone()),
    )
}

/// Verifies ADR-0012: in-memory working memory conforms.
#[test]
fn working_memory_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::working_memory(&store(&clock), &clock);
}

/// Verifies ADR-0012: in-memory long-term memory conforms.
#[test]
fn long_term_memory_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::long_term_memory(&store(&clock), &clock);
}

/// Verifies ADR-0012: in-memory shared context conforms.
#[test]
fn shared_context_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::shared_context(Arc::new(store(&clock)), &clock);
}
