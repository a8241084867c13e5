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

/// Verifies ADR-0031: in-memory batches are all or nothing, with their operation records.
#[test]
fn batches_conform() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::batches(&store(&clock), &clock);
}

/// In-memory entries keep their metadata object byte for byte; a bad one refuses its batch.
#[test]
fn entry_meta_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::entry_meta(&store(&clock), &clock);
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

/// Verifies ADR-0006 and ADR-0012: the agent-facing shared-context handle is a distinct type
/// that cannot write, while the platform's store can.
#[test]
fn shared_context_reader_cannot_write() {
    use std::marker::PhantomData;
    use strata_memory::{SharedContextReader, SharedContextWriter};

    // An inherent constant applies only when the bound holds; otherwise the blanket trait's
    // constant is used. So `IS_WRITER` tells at compile time whether a type is a writer.
    trait NotAWriter {
        const IS_WRITER: bool = false;
    }
    struct Probe<T>(PhantomData<T>);
    impl<T> NotAWriter for Probe<T> {}
    impl<T: SharedContextWriter> Probe<T> {
        const IS_WRITER: bool = true;
    }

    // Checked while compiling: if the reader ever became a writer, this test would not build.
    const { assert!(Probe::<InMemoryStore>::IS_WRITER) };
    const { assert!(Probe::<strata_memory::SqliteStore>::IS_WRITER) };
    const { assert!(!Probe::<SharedContextReader>::IS_WRITER) };
}

/// Verifies ADR-0016: in-memory session state conforms.
#[test]
fn session_state_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::session_state(&store(&clock), &clock);
}

#[test]
fn a_clear_removes_the_named_state_in_its_transaction() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::clear_with_state(&store(&clock));
}
