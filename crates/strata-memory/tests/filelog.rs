//! The conformance suite, torn-record recovery and the crash test against the durable file
//! log. Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;

use std::sync::Arc;

use strata_memory::{FileLog, ManualClock, StoreOptions};

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> FileLog {
    FileLog::open_with(
        dir.path().join("working.log"),
        StoreOptions::default().with_clock(clock.clone()),
    )
    .unwrap()
}

/// Verifies ADR-0012: the file log conforms.
#[test]
fn working_memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::working_memory(&open(&dir, &clock), &clock);
}
