//! Validity over time: time travel only behind the named, logged policy, and agents that can be
//! checked again after loading. Verifies ADR-0017.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod common;

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use strata_agentdef::time::parse_rfc3339;
use strata_agentdef::{
    format_public_key, now_unix, Expiry, KeyPair, Loader, RollbackGuard, TrustStore,
};

/// Log lines captured from `tracing` while `f` runs.
fn logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let mut text = buf.0.lock().unwrap().clone();
    text.flush().unwrap();
    (out, String::from_utf8(text).unwrap())
}

fn trust_with_window(key: &KeyPair, nb: &str, na: &str) -> TrustStore {
    TrustStore::from_toml(&format!(
        "[[keys]]\nid = \"{}\"\nname = \"k\"\npublic_key = \"{}\"\nnot_before = \"{nb}\"\nnot_after = \"{na}\"\n",
        key.key_id(),
        format_public_key(&key.public())
    ))
    .unwrap()
}

fn signed(version: u64, nb: &str, na: &str, key: &KeyPair) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), common::SOUL).unwrap();
    let env = strata_agentdef::sign_definition(
        &common::definition(version, nb, na),
        Some(dir.path()),
        &[key],
    )
    .unwrap();
    (dir, env.to_json())
}

/// Verifies ADR-0017: an expired definition signed by an expired key is refused at the clock;
/// only `Expiry::TimeTravelDangerously` accepts it, it says so at `warn` on the load and on
/// every later check, and the agent itself still knows it is expired.
#[test]
fn time_travel_is_only_the_named_policy_and_it_is_loud() {
    let key = common::signer();
    let trust = trust_with_window(&key, "2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z");
    let (dir, env) = signed(1, "2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z", &key);
    let guard = RollbackGuard::in_memory();
    let e = Loader::new(&trust, &guard)
        .load_bytes(env.as_bytes(), Some(dir.path()))
        .unwrap_err();
    assert_eq!(e.cause(), "key_not_valid", "{e}");
    let (silent, quiet_logs) = logs(|| {
        Loader::new(&trust, &guard)
            .load_bytes(env.as_bytes(), Some(dir.path()))
            .map(|_| ())
    });
    assert!(silent.is_err());
    assert!(!quiet_logs.contains("time travel"), "{quiet_logs}");

    let then = parse_rfc3339("2020-06-01T00:00:00Z").unwrap();
    let (agent, load_logs) = logs(|| {
        Loader::new(&trust, &guard)
            .expiry(Expiry::TimeTravelDangerously(then))
            .load_bytes(env.as_bytes(), Some(dir.path()))
            .unwrap()
    });
    assert!(
        load_logs.contains("WARN") && load_logs.contains("--time-travel-dangerously"),
        "{load_logs}"
    );
    assert!(load_logs.contains("2020-06-01T00:00:00Z"), "{load_logs}");
    assert_eq!(agent.loaded_under(), Expiry::TimeTravelDangerously(then));
    // Strictly, at the clock, the agent is expired, and says why.
    let e = agent.check_valid_at(now_unix()).unwrap_err();
    assert_eq!(e.cause(), "expired", "{e}");
    agent.check_valid_at(then).unwrap();
    // Under its policy it passes, loudly, every time.
    let (ok, use_logs) = logs(|| agent.check_current());
    ok.unwrap();
    assert!(
        use_logs.contains("using an agent") && use_logs.contains("WARN"),
        "{use_logs}"
    );
}

/// Verifies ADR-0017: an agent loaded two seconds before its `not_after` is valid then and
/// refused by `check_valid_at` one second after it; `valid_until` names that instant.
#[test]
fn an_agent_loaded_just_before_expiry_is_refused_after_it() {
    let key = common::signer();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("k", &key.public())])).unwrap();
    let not_after = "2026-03-01T12:00:00Z";
    let na = parse_rfc3339(not_after).unwrap();
    let (dir, env) = signed(1, "2026-01-01T00:00:00Z", not_after, &key);
    let guard = RollbackGuard::in_memory();
    let agent = Loader::new(&trust, &guard)
        .expiry(Expiry::TimeTravelDangerously(na - 2))
        .load_bytes(env.as_bytes(), Some(dir.path()))
        .unwrap();
    assert_eq!(agent.valid_until(), Some(na));
    agent.check_valid_at(na - 2).unwrap();
    agent.check_valid_at(na).unwrap();
    let e = agent.check_valid_at(na + 1).unwrap_err();
    assert_eq!(e.cause(), "expired", "{e}");
    assert!(e.to_string().contains(not_after), "{e}");
    let e = agent
        .check_valid_at(parse_rfc3339("2025-12-31T23:59:59Z").unwrap())
        .unwrap_err();
    assert_eq!(e.cause(), "not_yet_valid");
}

/// Verifies ADR-0017: the agent's validity also ends when fewer than the threshold of its
/// signing keys remain within their windows.
#[test]
fn validity_ends_with_the_signing_keys() {
    let (a, b) = (common::signer(), common::second_signer());
    let trust = TrustStore::from_toml(&format!(
        "threshold = 2\n\
         [[keys]]\nid = \"{}\"\nname = \"a\"\npublic_key = \"{}\"\nnot_after = \"2026-05-01T00:00:00Z\"\n\
         [[keys]]\nid = \"{}\"\nname = \"b\"\npublic_key = \"{}\"\nnot_after = \"2026-09-01T00:00:00Z\"\n",
        a.key_id(),
        format_public_key(&a.public()),
        b.key_id(),
        format_public_key(&b.public()),
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), common::SOUL).unwrap();
    let env = strata_agentdef::sign_definition(
        &common::definition(1, "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
        Some(dir.path()),
        &[&a, &b],
    )
    .unwrap();
    let guard = RollbackGuard::in_memory();
    let t = parse_rfc3339("2026-04-01T00:00:00Z").unwrap();
    let agent = Loader::new(&trust, &guard)
        .expiry(Expiry::TimeTravelDangerously(t))
        .load_bytes(env.to_json().as_bytes(), Some(dir.path()))
        .unwrap();
    let a_end = parse_rfc3339("2026-05-01T00:00:00Z").unwrap();
    assert_eq!(agent.valid_until(), Some(a_end));
    agent.check_valid_at(a_end).unwrap();
    let e = agent.check_valid_at(a_end + 1).unwrap_err();
    assert_eq!(e.cause(), "key_not_valid", "{e}");
    assert!(e.to_string().contains(a.key_id().as_str()), "{e}");
}

/// Verifies ADR-0017: under `Enforce`, `check_current` checks the clock and logs nothing.
#[test]
fn enforce_checks_the_clock_quietly() {
    let key = common::signer();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("k", &key.public())])).unwrap();
    let (dir, env) = signed(1, "2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z", &key);
    let guard = RollbackGuard::in_memory();
    let (agent, l) = logs(|| {
        Loader::new(&trust, &guard)
            .load_bytes(env.as_bytes(), Some(dir.path()))
            .unwrap()
    });
    assert!(l.is_empty(), "{l}");
    let (r, l) = logs(|| agent.check_current());
    r.unwrap();
    assert!(l.is_empty(), "{l}");
    assert_eq!(agent.loaded_under(), Expiry::Enforce);
}

/// Verifies ADR-0017: a load for an audit of the past (a receipt's definition, given to no
/// model) that asks for `Expiry::IgnoreDangerously` accepts an expired definition without a
/// warning, since that is what the audit needs; the agent keeps the policy, and any use of it
/// warns as usual.
#[test]
fn an_audit_load_ignores_expiry_without_a_warning_but_a_use_still_warns() {
    let key = common::signer();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("k", &key.public())])).unwrap();
    let (dir, env) = signed(1, "2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z", &key);
    let guard = RollbackGuard::in_memory();
    let (agent, l) = logs(|| {
        Loader::new(&trust, &guard)
            .expiry(Expiry::IgnoreDangerously)
            .for_audit()
            .load_bytes(env.as_bytes(), Some(dir.path()))
            .unwrap()
    });
    assert!(l.is_empty(), "{l}");
    assert_eq!(agent.loaded_under(), Expiry::IgnoreDangerously);
    let (r, l) = logs(|| agent.check_current());
    r.unwrap();
    assert!(l.contains("WARN") && l.contains("expiry ignored"), "{l}");
}
