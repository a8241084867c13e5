//! Fuzz target: receipt verification and receipt-log parsing and auditing (ADR-0021). Nothing
//! panics; a receipt is accepted only if its payload is one the fixture runtime key really
//! signed; a log is accepted only if every entry chains to the one before it and every receipt
//! in it is one of those signed payloads.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use strata_agentdef::TrustStore;
use strata_assembler::receipt::log::{audit_bytes, parse_entries, GENESIS};

struct Fixed {
    trust: TrustStore,
    signed: Vec<[u8; 32]>,
}

fn fixed() -> &'static Fixed {
    static F: OnceLock<Fixed> = OnceLock::new();
    F.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/strata-assembler/tests/fixtures/receipts");
        let trust = TrustStore::read(&dir.join("log_valid/trust.toml")).expect("fixture trust store");
        // Every receipt payload the fixture key signed: those in the valid log.
        let log = std::fs::read(dir.join("log_valid/receipts.log")).expect("fixture log");
        let audit = audit_bytes(&log, Some(&trust), None).expect("the valid log audits");
        let signed = audit
            .receipts
            .iter()
            .map(|r| Sha256::digest(r.payload()).into())
            .collect();
        Fixed { trust, signed }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixed();
    // As a receipt envelope.
    if let Ok(r) = strata_assembler::receipt::verify(data, &f.trust) {
        let d: [u8; 32] = Sha256::digest(r.payload()).into();
        assert!(f.signed.contains(&d), "a receipt the key never signed was accepted");
    }
    // As a log.
    if let Ok(entries) = parse_entries(data) {
        if let Ok(audit) = audit_bytes(data, Some(&f.trust), None) {
            assert_eq!(audit.entries.len(), entries.len());
            let mut prev = GENESIS.to_owned();
            for e in &audit.entries {
                assert_eq!(e.prev, prev, "an audited log whose chain does not link");
                prev = e.digest.clone();
            }
            assert_eq!(audit.head, prev);
            for r in &audit.receipts {
                let d: [u8; 32] = Sha256::digest(r.payload()).into();
                assert!(f.signed.contains(&d), "an audited log holds a forged receipt");
            }
        }
    }
});
