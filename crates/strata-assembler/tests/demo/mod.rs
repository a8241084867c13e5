//! The demo agent of `strata-cli/demo`, signed and trusted there, for tests that run a session
//! on a real definition.

use std::path::{Path, PathBuf};

use strata_assembler::prelude::*;

/// The folder of the demo agent.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo")
}

/// The demo agent, verified against its trust store.
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a broken demo")]
pub fn agent() -> VerifiedAgent {
    let trust = TrustStore::read(&dir().join("trust.toml")).unwrap();
    Loader::new(&trust, &RollbackGuard::in_memory())
        .load_file(&dir().join("agent.signed.json"))
        .unwrap()
}
