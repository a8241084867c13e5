//! Any single-bit change anywhere in a signed envelope is rejected. Verifies ADR-0010 and I5.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod common;

use proptest::prelude::*;
use strata_agentdef::{Loader, RollbackGuard, TrustStore};

fn setup() -> (Vec<u8>, TrustStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), common::SOUL).unwrap();
    let s = common::signer();
    let env =
        strata_agentdef::sign_definition(&common::valid_definition(), Some(dir.path()), &[&s])
            .unwrap();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("k", &s.public())])).unwrap();
    (env.to_json().into_bytes(), trust, dir)
}

#[test]
fn the_unmodified_envelope_verifies() {
    let (bytes, trust, dir) = setup();
    let guard = RollbackGuard::in_memory();
    Loader::new(&trust, &guard)
        .expiry(strata_agentdef::Expiry::TimeTravelDangerously(
            common::CHECK_TIME,
        ))
        .load_bytes(&bytes, Some(dir.path()))
        .unwrap();
}

proptest! {
    // 96 cases by default (each signs and verifies); PROPTEST_CASES raises it for thorough runs.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    /// Verifies I5 (ADR-0010): flip one bit at any position; the loader must refuse.
    #[test]
    fn any_single_bit_flip_is_rejected(pos in any::<proptest::sample::Index>(), bit in 0u8..8) {
        let (mut bytes, trust, dir) = setup();
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let guard = RollbackGuard::in_memory();
        let r = Loader::new(&trust, &guard).expiry(strata_agentdef::Expiry::TimeTravelDangerously(common::CHECK_TIME)).load_bytes(&bytes, Some(dir.path()));
        prop_assert!(r.is_err(), "bit {} of byte {} flipped and still verified", bit, i);
    }
}
