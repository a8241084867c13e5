//! Trust store validation, normalisation and pinning. Verifies ADR-0017.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod common;

use strata_agentdef::{format_public_key, Expiry, KeyPair, Loader, RollbackGuard, TrustStore};

fn store(revoked_id: &str) -> String {
    let (a, b) = (common::signer(), common::second_signer());
    format!(
        "threshold = 1\n\n[[keys]]\nid = \"{}\"\nname = \"a\"\npublic_key = \"{}\"\n\
         not_before = \"2026-01-01T00:00:00Z\"\nnot_after = \"2027-01-01T00:00:00Z\"\n\n\
         [[keys]]\nid = \"{}\"\nname = \"b\"\npublic_key = \"{}\"\n\n\
         [[revoked]]\nid = \"{revoked_id}\"\nreason = \"laptop lost\"\n",
        a.key_id(),
        format_public_key(&a.public()),
        b.key_id(),
        format_public_key(&b.public()),
    )
}

fn load_signed_by(key: &KeyPair, trust: &TrustStore) -> Result<(), strata_agentdef::AgentDefError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), common::SOUL).unwrap();
    let env =
        strata_agentdef::sign_definition(&common::valid_definition(), Some(dir.path()), &[key])
            .unwrap();
    let guard = RollbackGuard::in_memory();
    Loader::new(trust, &guard)
        .expiry(Expiry::TimeTravelDangerously(common::CHECK_TIME))
        .load_bytes(env.to_json().as_bytes(), Some(dir.path()))
        .map(|_| ())
}

/// Verifies ADR-0017: a revocation written in upper case or with a `sha256:` prefix revokes
/// the key (it used to revoke nothing); one with whitespace, or matching no listed key, makes
/// the store invalid instead of being silently ignored.
#[test]
fn revocations_are_normalised_or_refused_never_ignored() {
    let a = common::signer();
    let id = a.key_id().to_string();
    for form in [
        id.clone(),
        id.to_ascii_uppercase(),
        format!("sha256:{id}"),
        format!("SHA256:{}", id.to_ascii_uppercase()),
    ] {
        let trust = TrustStore::from_toml(&store(&form)).unwrap();
        assert_eq!(trust.revoked(&id), Some("laptop lost"), "{form}");
        let e = load_signed_by(&a, &trust).unwrap_err();
        assert_eq!(e.cause(), "revoked_key", "{form}: {e}");
        // The other key still works.
        load_signed_by(&common::second_signer(), &trust).unwrap();
    }
    for form in [
        format!("{id} "),
        format!(" {id}"),
        format!("{id}\\t"),
        id[..60].to_owned(),
        format!("sha512:{id}"),
        common::stranger().key_id().to_string(),
    ] {
        let e = TrustStore::from_toml(&store(&form)).unwrap_err();
        assert_eq!(e.cause(), "invalid_trust_store", "{form:?} was accepted");
    }
}

/// Verifies ADR-0017: every one-bit flip inside a revoked id either makes the store invalid or
/// leaves the key revoked; none silently drops the revocation (it used to, 22 times in 1,000).
#[test]
fn no_bit_flip_in_a_revoked_id_drops_the_revocation() {
    let a = common::signer();
    let id = a.key_id().to_string();
    let text = store(&id);
    let at = text.rfind(&id).unwrap();
    let (mut refused, mut still_revoked) = (0, 0);
    for i in at..at + id.len() {
        for bit in 0..8 {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 1 << bit;
            let Ok(t) = String::from_utf8(bytes) else {
                refused += 1;
                continue;
            };
            match TrustStore::from_toml(&t) {
                Err(_) => refused += 1,
                Ok(trust) => {
                    assert!(
                        trust.revoked(&id).is_some(),
                        "flip of bit {bit} at byte {i} dropped the revocation"
                    );
                    still_revoked += 1;
                }
            }
        }
    }
    assert_eq!(refused + still_revoked, 64 * 8);
    // Upper-casing a hex letter is the only harmless flip.
    assert!(still_revoked > 0 && refused > still_revoked);
}

/// Verifies ADR-0017: a validity date before 1970 (a flipped `2026` reads `0026`) and an empty
/// window are refused.
#[test]
fn implausible_key_windows_are_refused() {
    let good = store(&common::signer().key_id().to_string());
    for bad in [
        good.replacen("2026-01-01", "0026-01-01", 1),
        good.replacen("2027-01-01", "1969-12-31", 1),
        good.replacen("2027-01-01", "2025-01-01", 1),
    ] {
        assert_ne!(bad, good);
        let e = TrustStore::from_toml(&bad).unwrap_err();
        assert_eq!(e.cause(), "invalid_trust_store", "{e}");
    }
}

/// Verifies ADR-0017: a pinned store is refused after any single-bit change, and its digest is
/// the SHA-256 of the file's bytes (checked against an independent computation).
#[test]
fn a_pinned_store_refuses_every_bit_flip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trust.toml");
    let text = store(&common::signer().key_id().to_string());
    std::fs::write(&path, &text).unwrap();
    let pin = format!("sha256:{}", common::sha256_hex(text.as_bytes()));
    let trust = TrustStore::read_pinned(&path, &pin).unwrap();
    assert_eq!(trust.digest(), pin);
    assert_eq!(TrustStore::read(&path).unwrap().digest(), pin);
    let mut trials = 0;
    for i in 0..text.len() {
        for bit in [0, 3, 5] {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 1 << bit;
            std::fs::write(&path, &bytes).unwrap();
            let e = TrustStore::read_pinned(&path, &pin).unwrap_err();
            assert!(
                matches!(
                    e,
                    strata_agentdef::AgentDefError::TrustStoreNotPinned { .. }
                ),
                "byte {i} bit {bit}: {e}"
            );
            trials += 1;
        }
    }
    assert_eq!(trials, text.len() * 3);
    assert_eq!(
        TrustStore::read_pinned(&path, "sha256:abc")
            .unwrap_err()
            .cause(),
        "invalid_trust_store"
    );
}

/// Verifies ADR-0017 and I5: an envelope names its keys only by the canonical id; an upper-case
/// or padded id (one flipped bit, a changed file) is an unknown key, while the canonical one
/// verifies. Trust stores, written by people, are the ones normalised.
#[test]
fn envelope_key_ids_must_be_canonical() {
    let b = common::second_signer();
    let trust = TrustStore::from_toml(&store(&common::signer().key_id().to_string())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), common::SOUL).unwrap();
    let env =
        strata_agentdef::sign_definition(&common::valid_definition(), Some(dir.path()), &[&b])
            .unwrap();
    let json = env.to_json();
    let id = b.key_id().to_string();
    let guard = RollbackGuard::in_memory();
    let loader =
        Loader::new(&trust, &guard).expiry(Expiry::TimeTravelDangerously(common::CHECK_TIME));
    loader
        .load_bytes(json.as_bytes(), Some(dir.path()))
        .unwrap();
    let upper = json.replace(&id, &id.to_ascii_uppercase());
    assert_ne!(upper, json);
    let e = loader
        .load_bytes(upper.as_bytes(), Some(dir.path()))
        .unwrap_err();
    assert_eq!(e.cause(), "unknown_key", "{e}");
    let spaced = json.replace(&id, &format!("{id} "));
    let e = loader
        .load_bytes(spaced.as_bytes(), Some(dir.path()))
        .unwrap_err();
    assert_eq!(e.cause(), "unknown_key", "{e}");
}

/// An empty trust store (the example agent's `trust.toml` before a key is appended) is refused
/// with a message that says how to add a key, not with the threshold arithmetic it used to show
/// ("threshold 1 is more than the 0 usable keys").
#[test]
fn an_empty_store_says_how_to_add_a_key() {
    for text in ["", "threshold = 1\n", "threshold = 2\n"] {
        let err = TrustStore::from_toml(text).unwrap_err().to_string();
        assert!(err.contains("lists no keys"), "{err}");
        assert!(err.contains("strata keygen"), "{err}");
        assert!(!err.contains("usable"), "{err}");
    }
}
