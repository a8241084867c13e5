//! A session's goals and files over the service, against the real binary: reading the goals,
//! creating one, adding checkpoints, decisions (with a rationale) and artifacts (with a kind),
//! confirming or refusing a lock the model proposed, and recording files. A model's marker only
//! proposes a lock; only the caller's call locks (ADR-0011). Every change is atomic (a refused
//! one leaves the goals byte for byte as they were) and retry-safe: a repeat with the same key
//! answers the first answer and writes nothing, the key with another request is 422
//! (ADR-0031, ADR-0042). Verifies ADR-0011, ADR-0031 and ADR-0042.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod serve_harness;

use serde_json::{json, Value};
use serve_harness::{Resp, Server};

fn goals(srv: &Server, session: &str) -> Resp {
    let r = srv.get(&format!("/v1/sessions/{session}/goals"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r
}

fn decision(goal: &Value, id: u64) -> &Value {
    goal["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .unwrap()
}

#[test]
fn a_model_only_proposes_a_lock_and_the_caller_confirms_or_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let s = "/v1/sessions/g-1";
    assert_eq!(goals(&srv, "g-1").body["goals"], json!([]));
    let t = srv.post(
        &format!("{s}/turns"),
        &json!({"message": "Plan the login work."}),
    );
    assert_eq!(t.status, 200, "{:?}", t.body);
    let r = srv.post(
        &format!("{s}/replies"),
        &json!({"text": "[GOAL] Ship login\n[DECISION] Tokens: use JWT - LOCKED\n[DECISION] Storage: use SQLite - LOCKED"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let before = goals(&srv, "g-1").body;
    let goal = &before["goals"][0];
    for id in [1, 2] {
        assert_eq!(decision(goal, id)["lock_proposed"], true);
        assert_eq!(
            decision(goal, id)["locked"],
            false,
            "a marker alone never locks"
        );
    }
    assert_eq!(before["pending_locks"].as_array().unwrap().len(), 2);

    // Refusals change nothing: an unknown decision, an unknown goal, a decision never proposed.
    let unchanged = goals(&srv, "g-1").text;
    for (body, status, code) in [
        (json!({"decision": 9, "confirm": true}), 404, "not_found"),
        (
            json!({"goal": "goal-7", "decision": 1, "confirm": true}),
            404,
            "not_found",
        ),
        (
            json!({"decision": 1, "confirm": "yes"}),
            400,
            "invalid_request",
        ),
    ] {
        let r = srv.post(&format!("{s}/goals/locks"), &body);
        assert_eq!((r.status, r.code()), (status, code), "{body}: {:?}", r.body);
        assert_eq!(
            goals(&srv, "g-1").text,
            unchanged,
            "{body} changed the goals"
        );
    }

    let ok = srv.post(
        &format!("{s}/goals/locks"),
        &json!({"decision": 1, "confirm": true}),
    );
    assert_eq!(ok.status, 200, "{:?}", ok.body);
    assert_eq!(decision(&ok.body, 1)["locked"], true);
    let no = srv.post(
        &format!("{s}/goals/locks"),
        &json!({"decision": 2, "confirm": false}),
    );
    assert_eq!(no.status, 200, "{:?}", no.body);
    assert_eq!(decision(&no.body, 2)["locked"], false);
    assert_eq!(decision(&no.body, 2)["lock_proposed"], false);
    assert_eq!(goals(&srv, "g-1").body["pending_locks"], json!([]));

    // Locked is locked: neither the caller's second answer nor a later marker changes it; the
    // refused one stays open to change.
    let unchanged = goals(&srv, "g-1").text;
    for d in [1, 2] {
        let again = srv.post(
            &format!("{s}/goals/locks"),
            &json!({"decision": d, "confirm": true}),
        );
        assert_eq!((again.status, again.code()), (400, "invalid_request"));
        assert_eq!(goals(&srv, "g-1").text, unchanged);
    }
    let r = srv.post(
        &format!("{s}/replies"),
        &json!({"text": "[DECISION] Tokens: use cookies\n[DECISION] Storage: use PostgreSQL"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["goals"]["refused"].as_array().unwrap().len(), 1);
    let goal = goals(&srv, "g-1").body["goals"][0].clone();
    assert_eq!(decision(&goal, 1)["description"], "Tokens: use JWT");
    assert_eq!(decision(&goal, 2)["description"], "Storage: use PostgreSQL");
    let next = srv.post(&format!("{s}/turns"), &json!({"message": "Go on."}));
    let request = next.body["request"].to_string();
    let at = request.find("Current goal").unwrap_or(0);
    assert!(
        request.contains("&#91;locked] Tokens: use JWT"),
        "{}",
        &request[at..(at + 1500).min(request.len())]
    );
}

#[test]
fn every_goal_change_and_file_is_atomic_and_retry_safe() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let s = "/v1/sessions/g-2";
    // Without a goal, a change that needs one is refused and nothing is created.
    let none = srv.post(
        &format!("{s}/goals/checkpoints"),
        &json!({"description": "Write tests"}),
    );
    assert_eq!((none.status, none.code()), (400, "invalid_request"));
    assert_eq!(goals(&srv, "g-2").body["goals"], json!([]));

    let steps = [
        (
            "goals",
            json!({"description": "Ship v2", "priority": "high"}),
            json!({"description": "Ship v3"}),
        ),
        (
            "goals/checkpoints",
            json!({"description": "Write tests"}),
            json!({"description": "Write docs"}),
        ),
        (
            "goals/artifacts",
            json!({"path": "tests/login.rs", "action": "created", "kind": "test"}),
            json!({"path": "tests/login.rs", "action": "deleted", "kind": "test"}),
        ),
        (
            "goals/decisions",
            json!({"description": "Database: PostgreSQL", "rationale": "shared by every runtime"}),
            json!({"description": "Database: SQLite", "rationale": "simpler"}),
        ),
        (
            "files",
            json!({"path": "src/main.rs", "action": "modified"}),
            json!({"path": "src/lib.rs", "action": "read"}),
        ),
    ];
    for (i, (route, body, other)) in steps.iter().enumerate() {
        let key = format!("key-{i}");
        let path = format!("{s}/{route}");
        let first = srv.keyed("POST", &path, Some(body), &key);
        assert_eq!(first.status, 200, "{route}: {:?}", first.body);
        assert!(!first.replayed);
        let after = goals(&srv, "g-2").text;
        let again = srv.keyed("POST", &path, Some(body), &key);
        assert_eq!(again.status, 200, "{route}: {:?}", again.body);
        assert!(again.replayed, "{route}: a repeat is marked");
        assert_eq!(
            again.text, first.text,
            "{route}: a repeat gets the first answer"
        );
        assert_eq!(goals(&srv, "g-2").text, after, "{route}: a repeat wrote");
        let reused = srv.keyed("POST", &path, Some(other), &key);
        assert_eq!(
            (reused.status, reused.code()),
            (422, "idempotency_key_reused"),
            "{route}: {:?}",
            reused.body
        );
        assert_eq!(
            goals(&srv, "g-2").text,
            after,
            "{route}: a reused key wrote"
        );
    }
    // One key names one request whatever it was used for: a goal's key cannot prepare a turn.
    let turn = srv.keyed(
        "POST",
        &format!("{s}/turns"),
        Some(&json!({"message": "Hi"})),
        "key-0",
    );
    assert_eq!((turn.status, turn.code()), (422, "idempotency_key_reused"));
    let turn = srv.keyed(
        "POST",
        &format!("{s}/turns"),
        Some(&json!({"message": "Hi"})),
        "key-4",
    );
    assert_eq!((turn.status, turn.code()), (422, "idempotency_key_reused"));

    // And the reverse: a turn's key cannot change the goals or record a file.
    let turn = srv.keyed(
        "POST",
        &format!("{s}/turns"),
        Some(&json!({"message": "Hi"})),
        "turn-key",
    );
    assert_eq!(turn.status, 200, "{:?}", turn.body);
    let after = goals(&srv, "g-2").text;
    for (route, body) in [
        ("goals/checkpoints", json!({"description": "Other"})),
        ("files", json!({"path": "x.rs", "action": "read"})),
    ] {
        let r = srv.keyed("POST", &format!("{s}/{route}"), Some(&body), "turn-key");
        assert_eq!(
            (r.status, r.code()),
            (422, "idempotency_key_reused"),
            "{route}"
        );
    }
    assert_eq!(goals(&srv, "g-2").text, after);

    let goal = goals(&srv, "g-2").body["goals"][0].clone();
    assert_eq!(goal["priority"], "high");
    assert_eq!(goal["total"], 1);
    assert_eq!(
        goal["artifacts"],
        json!([{"kind": "test", "path": "tests/login.rs", "action": "created"}])
    );
    assert_eq!(goal["decisions"][0]["rationale"], "shared by every runtime");

    // Bad input is refused before anything is written.
    let movie = srv.post(
        &format!("{s}/goals/artifacts"),
        &json!({"path": "a.rs", "action": "created", "kind": "movie"}),
    );
    let library = strata_registry::parse_name::<strata_registry::ArtifactKind>("kind", "movie")
        .unwrap_err()
        .to_string();
    assert_eq!(movie.body["error"]["message"], library.as_str());
    let unchanged = goals(&srv, "g-2").text;
    for (route, body, status) in [
        (
            "goals/artifacts",
            json!({"path": "a.rs", "action": "created", "kind": "movie"}),
            400,
        ),
        (
            "goals/artifacts",
            json!({"path": "a.rs", "action": "eaten"}),
            400,
        ),
        (
            "goals/artifacts",
            json!({"path": " ", "action": "created"}),
            400,
        ),
        (
            "goals/checkpoints",
            json!({"goal": "goal-9", "description": "x"}),
            404,
        ),
        ("goals/checkpoints", json!({"description": ""}), 400),
        (
            "goals/decisions",
            json!({"description": "x", "extra": 1}),
            400,
        ),
        (
            "goals",
            json!({"description": "x", "priority": "urgent"}),
            400,
        ),
        ("files", json!({"path": "", "action": "read"}), 400),
        ("files", json!({"path": "a\u{7}b", "action": "read"}), 400),
        ("files", json!({"path": "a.rs", "action": "eaten"}), 400),
    ] {
        let r = srv.keyed("POST", &format!("{s}/{route}"), Some(&body), "bad-key");
        assert_eq!(r.status, status, "{route} {body}: {:?}", r.body);
        assert_eq!(
            goals(&srv, "g-2").text,
            unchanged,
            "{route} {body} changed the goals"
        );
    }
    // The refused requests left no record under their key: it is free for a good request.
    let ok = srv.keyed(
        "POST",
        &format!("{s}/goals/checkpoints"),
        Some(&json!({"description": "Release"})),
        "bad-key",
    );
    assert_eq!(ok.status, 200, "{:?}", ok.body);

    // The next turn shows what the caller set: the artifact with its kind, the rationale, and
    // the file the session touched.
    let turn = srv.post(&format!("{s}/turns"), &json!({"message": "Where are we?"}));
    assert_eq!(turn.status, 200, "{:?}", turn.body);
    let request = turn.body["request"].to_string();
    for want in [
        "Created (test): tests/login.rs",
        "because shared by every runtime",
        "src/main.rs",
    ] {
        let at = request.find("Current goal").unwrap_or(0);
        assert!(
            request.contains(want),
            "{want} missing from {}",
            &request[at..(at + 1500).min(request.len())]
        );
    }
}

/// `strata session goals` and `strata session file`: the same changes from the shell, the same
/// authority (a marker proposes, `goals lock --confirm` locks), and the same words for a bad
/// value as the library and the service.
#[test]
fn the_cli_reads_and_changes_goals_with_the_same_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = serve_harness::demo_agent();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("session")
            .arg("--agent")
            .arg(&agent)
            .arg("--trust")
            .arg(&trust)
            .args(["--id", "cli-goals", "--store"])
            .arg(dir.path().join("cli.db"))
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let out = run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let show = || -> Value { serde_json::from_str(&ok(&["goals", "show"])).unwrap() };
    ok(&["prepare", "Plan the login work.", "--model", "m"]);
    ok(&[
        "reply",
        "[GOAL] Ship login\n[DECISION] Tokens: use JWT - LOCKED",
    ]);
    let goals = show();
    assert_eq!(goals["goals"][0]["decisions"][0]["lock_proposed"], true);
    assert_eq!(goals["goals"][0]["decisions"][0]["locked"], false);
    assert_eq!(goals["pending_locks"][0]["decision"], 1);
    let locked: Value =
        serde_json::from_str(&ok(&["goals", "lock", "--decision", "1", "--confirm"])).unwrap();
    assert_eq!(locked["decisions"][0]["locked"], true);
    ok(&[
        "goals",
        "checkpoint",
        "Write tests",
        "--status",
        "in_progress",
    ]);
    ok(&[
        "goals",
        "decision",
        "Storage: SQLite",
        "--rationale",
        "one file",
    ]);
    ok(&[
        "goals",
        "artifact",
        "tests/login.rs",
        "--action",
        "created",
        "--kind",
        "test",
    ]);
    ok(&["file", "src/login.rs", "--action", "modified"]);
    let before = show();
    let goal = &before["goals"][0];
    assert_eq!(goal["checkpoints"][0]["status"], "in_progress");
    assert_eq!(goal["decisions"][1]["rationale"], "one file");
    assert_eq!(goal["artifacts"][0]["kind"], "test");

    // Refusals, each with the library's words, and nothing changed.
    let library = strata_registry::parse_name::<strata_registry::ArtifactKind>("kind", "movie")
        .unwrap_err()
        .to_string();
    let out = run(&[
        "goals", "artifact", "a.rs", "--action", "created", "--kind", "movie",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&library), "{stderr} lacks {library:?}");
    for args in [
        &["goals", "lock", "--decision", "1", "--refuse"][..],
        &["goals", "lock", "--decision", "2", "--confirm"],
        &["goals", "checkpoint", "x", "--goal", "goal-9"],
        &["goals", "decision", " "],
        &["file", "", "--action", "read"],
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert_eq!(show(), before, "{args:?} changed the goals");
    }
    let turn = ok(&["prepare", "Where are we?", "--model", "m"]);
    assert!(turn.contains("src/login.rs"), "{turn}");
    assert!(turn.contains("Created (test): tests/login.rs"), "{turn}");
}
