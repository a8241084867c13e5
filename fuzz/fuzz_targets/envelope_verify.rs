//! Fuzz target: envelope parsing and verification. Verifies I5 (ADR-0010): no input is
//! accepted unless its payload is one that the trusted key really signed; nothing panics.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use strata_agentdef::{Envelope, Expiry, Loader, RollbackGuard, TrustStore};

struct Fixed {
    trust: TrustStore,
    base: PathBuf,
    signed: Vec<[u8; 32]>,
}

fn fixed() -> &'static Fixed {
    static F: OnceLock<Fixed> = OnceLock::new();
    F.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/strata-agentdef/tests/fixtures");
        let trust = TrustStore::read(&dir.join("valid/trust.toml")).expect("fixture trust store");
        // Every payload the fixture key ever signed among the fixtures.
        let mut signed = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("fixtures") {
            let p = entry.expect("entry").path().join("envelope.json");
            if let Ok(bytes) = std::fs::read(&p) {
                if let Ok(env) = Envelope::parse(&bytes) {
                    signed.push(Sha256::digest(&env.payload).into());
                }
            }
        }
        Fixed { trust, base: dir.join("valid"), signed }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixed();
    let guard = RollbackGuard::in_memory();
    let loader = Loader::new(&f.trust, &guard).expiry(Expiry::TimeTravelDangerously(1_780_272_000));
    if let Ok(agent) = loader.load_bytes(data, Some(&f.base)) {
        let env = Envelope::parse(data).expect("accepted input must parse");
        let digest: [u8; 32] = Sha256::digest(&env.payload).into();
        assert!(f.signed.contains(&digest), "accepted a payload the trusted key never signed");
        assert!(agent.identity_text().starts_with("<strata:section layer=\"1\""));
    }
});
