//! Many `strata serve` processes, one truth: two servers on one PostgreSQL database (a real
//! server the test starts on loopback) serve the same session, its turns alternating between
//! them as a load balancer would send them; a memory stored through one is found through the
//! other; both append the receipts of their turns to one chained receipt log in the database,
//! which `strata receipt audit --postgres` verifies; and the rollback state is shared, so once
//! one server has accepted version 2, a server started on version 1 is refused. Verifies
//! ADR-0022 and ADR-0021.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

#[path = "../../strata-memory/tests/pg_harness/mod.rs"]
mod pg_harness;
mod serve_harness;

use std::time::{Duration, Instant};

use serde_json::json;
use serve_harness::{sign_agent, Server};

#[test]
fn two_servers_on_one_database_serve_the_same_session() {
    let pg = pg_harness::shared();
    let params = pg.test_params();
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(dir.path(), 1, "");
    let entry = serve_harness::strata(
        dir.path(),
        &["keygen", "--out", "runtime.key", "--trust-entry", "runtime"],
    );
    std::fs::write(dir.path().join("runtime-trust.toml"), entry).unwrap();
    let key = dir.path().join("runtime.key");
    let key = key.to_str().unwrap();
    let receipts = ["--receipt-key", key, "--receipt-log-postgres"];
    // Without the table and without --init-receipt-log, a server does not start.
    let missing = Server::try_start(
        dir.path(),
        &agent,
        &trust,
        &[
            &["--postgres", &params, "--init-rollback-state"],
            &receipts[..],
        ]
        .concat(),
    );
    let err = missing.err().expect("no receipt log yet");
    assert!(err.contains("no receipt log"), "{err}");
    let a = Server::start_with(
        dir.path(),
        &agent,
        &trust,
        &[
            &[
                "--postgres",
                &params,
                "--init-rollback-state",
                "--init-receipt-log",
            ],
            &receipts[..],
        ]
        .concat(),
    );
    let b = Server::start_with(
        dir.path(),
        &agent,
        &trust,
        &[&["--postgres", &params], &receipts[..]].concat(),
    );
    assert_ne!(a.url, b.url);

    // One conversation, each step on the other server.
    let t1 = a.post(
        "/v1/sessions/shared-1/turns",
        &json!({"message": "What does notes.txt say?", "tools": [{"name": "file_read"}]}),
    );
    assert_eq!(t1.status, 200, "{:?}", t1.body);
    let r1 = b.post(
        "/v1/sessions/shared-1/replies",
        &json!({"tool_calls": [{"id": "call_9", "name": "file_read", "arguments": {"path": "notes.txt"}}]}),
    );
    assert_eq!(r1.status, 200, "{:?}", r1.body);
    let tr = a.post(
        "/v1/sessions/shared-1/tool-results",
        &json!({"call_id": "call_9", "output": "Deploys freeze on Fridays."}),
    );
    assert_eq!(tr.status, 200, "{:?}", tr.body);
    let t2 = b.post(
        "/v1/sessions/shared-1/turns",
        &json!({"tools": [{"name": "file_read"}]}),
    );
    assert_eq!(t2.status, 200, "{:?}", t2.body);
    let body = t2.body["request"].to_string();
    assert!(body.contains("\"tool_use_id\":\"call_9\""), "{body}");
    assert!(body.contains("Deploys freeze on Fridays."));
    assert!(body.contains("What does notes.txt say?"));
    let r2 = a.post(
        "/v1/sessions/shared-1/replies",
        &json!({"text": "They freeze on Fridays."}),
    );
    assert_eq!(r2.status, 200);
    let roles = |srv: &Server| -> Vec<String> {
        srv.get("/v1/sessions/shared-1").body["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["role"].as_str().unwrap().to_owned())
            .collect()
    };
    let expected = ["user", "tool_call", "tool_result", "assistant"];
    assert_eq!(roles(&a), expected);
    assert_eq!(roles(&b), expected);

    // Memory stored through one server is found through the other.
    let m = b.post(
        "/v1/memories",
        &json!({"content": "The staging database is rebuilt every Sunday night."}),
    );
    assert_eq!(m.status, 201, "{:?}", m.body);
    let found = a.post(
        "/v1/memories/search",
        &json!({"query": "staging database rebuilt"}),
    );
    assert_eq!(found.body["results"][0]["id"], m.body["id"]);

    // Both servers' receipts are in one chain in the database, every signature valid.
    assert_eq!(
        t1.body["receipt"]["payloadType"],
        "application/vnd.in-toto+json"
    );
    assert_eq!(
        t2.body["receipt"]["payloadType"],
        "application/vnd.in-toto+json"
    );
    let audit = serve_harness::strata(
        dir.path(),
        &[
            "receipt",
            "audit",
            "--postgres",
            &params,
            "--trust",
            "runtime-trust.toml",
        ],
    );
    assert!(audit.starts_with("OK 2 entries chained"), "{audit}");

    // Server A moves to version 2; the rollback state in PostgreSQL now refuses version 1 to
    // any server, including a fresh one.
    let dir2 = tempfile::tempdir().unwrap();
    for f in ["release.key", "trust.toml", "SOUL.md"] {
        std::fs::copy(dir.path().join(f), dir2.path().join(f)).unwrap();
    }
    let (agent2, _) = sign_agent(dir2.path(), 2, "");
    std::fs::copy(&agent2, &agent).unwrap();
    a.signal("HUP");
    let start = Instant::now();
    while a.get("/v1/agent").body["version"] != 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "no reload");
        std::thread::sleep(Duration::from_millis(100));
    }
    sign_agent(dir.path(), 1, "");
    let refused = Server::try_start(dir.path(), &agent, &trust, &["--postgres", &params]);
    let err = refused
        .err()
        .expect("a server on version 1 must be refused");
    assert!(err.contains("rollback"), "{err}");
}
