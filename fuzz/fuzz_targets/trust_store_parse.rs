//! Fuzz target: the trust store parser (ADR-0010). Never panics; an accepted store has a usable
//! threshold and only keys whose ids match their public keys.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(store) = strata_agentdef::TrustStore::from_toml(text) {
        assert!(store.threshold() >= 1);
        for k in store.keys() {
            assert_eq!(k.id, strata_agentdef::KeyId::of(&k.key));
        }
    }
});
