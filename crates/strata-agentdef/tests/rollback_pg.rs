//! The PostgreSQL rollback guard against a real server started on loopback (the harness of
//! the memory crate's tests). Verifies ADR-0017.
//!
//! Short runs by default; `STRATA_LONG_RUNS=1` multiplies the rounds.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod common;
#[path = "../../strata-memory/tests/pg_harness/mod.rs"]
mod pg_harness;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use strata_agentdef::{AgentDefError, Loader, RollbackGuard, TrustStore};

fn schema(prefix: &str) -> String {
    pg_harness::fresh_schema(&format!("rb_{prefix}"))
}

fn envelopes(versions: u64) -> (tempfile::TempDir, TrustStore, BTreeMap<u64, String>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("SOUL.md"), common::SOUL).unwrap();
    let s = common::signer();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("k", &s.public())])).unwrap();
    let envs = (1..=versions)
        .map(|v| {
            let def = common::definition(v, "2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z");
            let env = strata_agentdef::sign_definition(&def, Some(dir.path()), &[&s]).unwrap();
            (v, env.to_json())
        })
        .collect();
    (dir, trust, envs)
}

/// Verifies ADR-0017: the table must be created explicitly, once; then rollbacks and reused
/// versions are refused exactly as by the file guard, across separate connections.
#[test]
fn postgres_guard_is_initialised_explicitly_and_refuses_rollbacks() {
    let server = pg_harness::shared();
    let params = server.test_params();
    let s = schema("basic");
    let e = RollbackGuard::postgres(&params, &s).unwrap_err();
    assert_eq!(e.cause(), "rollback_state_missing", "{e}");
    let g = RollbackGuard::postgres_init(&params, &s).unwrap();
    assert_eq!(
        RollbackGuard::postgres_init(&params, &s)
            .unwrap_err()
            .cause(),
        "rollback_state"
    );
    let (dir, trust, envs) = envelopes(3);
    let load = |g: &RollbackGuard, v: u64| {
        Loader::new(&trust, g).load_bytes(envs[&v].as_bytes(), Some(dir.path()))
    };
    load(&g, 2).unwrap();
    load(&g, 2).unwrap();
    let other = RollbackGuard::postgres(&params, &s).unwrap();
    assert_eq!(load(&other, 1).unwrap_err().cause(), "rolled_back");
    load(&other, 3).unwrap();
    assert_eq!(load(&g, 2).unwrap_err().cause(), "rolled_back");
    assert_eq!(g.seen("ada").unwrap().unwrap().version, 3);
    // Same version, other content: refused.
    let mut c = postgres::Client::connect(&params, postgres::NoTls).unwrap();
    c.execute(
        &format!("UPDATE {s}.rollback_state SET payload_sha256 = repeat('0', 64)"),
        &[],
    )
    .unwrap();
    assert_eq!(load(&g, 3).unwrap_err().cause(), "version_reused");
    // The constraints refuse malformed rows.
    assert!(c
        .execute(
            &format!("UPDATE {s}.rollback_state SET payload_sha256 = 'x'"),
            &[]
        )
        .is_err());
    assert!(matches!(
        RollbackGuard::postgres(&params, "Bad-Name"),
        Err(AgentDefError::RollbackState { .. })
    ));
}

/// Verifies ADR-0017: threads, each with its own guard and connection, offering every version
/// in their own order: 0 rollbacks accepted, 0 spurious refusals, no lost version.
#[test]
fn postgres_guard_races_accept_no_rollback() {
    let server = pg_harness::shared();
    let params = server.test_params();
    let long = std::env::var_os("STRATA_LONG_RUNS").is_some();
    let (rounds, threads, versions) = if long { (500, 8, 6) } else { (50, 4, 4) };
    let rounds = std::env::var("STRATA_LONG_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rounds);
    let (dir, trust, envs) = envelopes(versions);
    let shared = Arc::new((dir, trust, envs));
    let (mut bad_accepts, mut spurious) = (0u64, 0u64);
    for round in 0..rounds {
        let s = schema("race");
        drop(RollbackGuard::postgres_init(&params, &s).unwrap());
        let done = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (shared, done, params, s) =
                    (shared.clone(), done.clone(), params.clone(), s.clone());
                std::thread::spawn(move || {
                    let (dir, trust, envs) = &*shared;
                    let g = RollbackGuard::postgres(&params, &s).unwrap();
                    let loader = Loader::new(trust, &g);
                    let mut order: Vec<u64> = (1..=versions).collect();
                    // Rotate and reverse by thread and round: every thread a different order.
                    order.rotate_left(((round + t) % versions) as usize);
                    if (round + t) % 2 == 1 {
                        order.reverse();
                    }
                    let (mut a, mut sp) = (0u64, 0u64);
                    for v in order {
                        let before = done.load(Ordering::SeqCst);
                        match loader.load_bytes(envs[&v].as_bytes(), Some(dir.path())) {
                            Ok(_) => {
                                if v < before {
                                    a += 1;
                                }
                                done.fetch_max(v, Ordering::SeqCst);
                            }
                            Err(AgentDefError::RolledBack { seen, .. }) if seen > v => {}
                            Err(e) => {
                                eprintln!("spurious: v{v}: {e}");
                                sp += 1;
                            }
                        }
                    }
                    (a, sp)
                })
            })
            .collect();
        for h in hs {
            let (a, sp) = h.join().unwrap();
            bad_accepts += a;
            spurious += sp;
        }
        let g = RollbackGuard::postgres(&params, &s).unwrap();
        assert_eq!(
            g.seen("ada").unwrap().unwrap().version,
            versions,
            "round {round}"
        );
    }
    eprintln!("{rounds} rounds: {bad_accepts} rollbacks accepted, {spurious} spurious refusals");
    assert_eq!(bad_accepts, 0);
    assert_eq!(spurious, 0);
}
