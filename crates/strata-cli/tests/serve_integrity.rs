//! The path a conversation takes through the real `strata serve` (ADR-0031, ADR-0030,
//! ADR-0033): a refused turn stores nothing, a keyed repeat stores once and answers the same
//! bytes, the user's long message is sent cut with both ends, slow senders hold no concurrency
//! slot, a store that is down is `503 store_unavailable` with `Retry-After`, session ids cannot
//! read as path steps, and the model is the operator's choice.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]
#![allow(
    clippy::print_stderr,
    reason = "a skipped SDK check says so in the test output"
)]

mod serve_harness;

#[path = "../../strata-memory/tests/pg_harness/mod.rs"]
mod pg_harness;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_harness::{Server, TOKEN};

fn read_call() -> Value {
    json!({"text": "", "tool_calls": [{"id": "call_1", "name": "file_read", "arguments": {"path": "notes.txt"}}]})
}

fn turns(srv: &Server, id: &str) -> Vec<Value> {
    let r = srv.get(&format!("/v1/sessions/{id}"));
    if r.status == 404 {
        return Vec::new();
    }
    r.body["turns"].as_array().unwrap().clone()
}

/// Verifies ADR-0031: a turn refused while a tool call waits for its result stores nothing; once
/// the result is recorded the next turn goes out. A refused reply stores nothing either.
#[test]
fn a_refused_turn_leaves_the_session_usable() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let t = srv.post(
        "/v1/sessions/s/turns",
        &json!({"message": "read notes.txt"}),
    );
    assert_eq!(t.status, 200, "{:?}", t.body);
    assert_eq!(srv.post("/v1/sessions/s/replies", &read_call()).status, 200);
    let held = turns(&srv, "s");
    let refused = srv.post("/v1/sessions/s/turns", &json!({"message": "and now?"}));
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    // A reply whose second call repeats the first one's id is refused whole.
    let bad = srv.post(
        "/v1/sessions/s/replies",
        &json!({"text": "more", "tool_calls": [
            {"id": "call_2", "name": "file_read", "arguments": {"path": "a"}},
            {"id": "call_1", "name": "file_read", "arguments": {"path": "b"}}]}),
    );
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(turns(&srv, "s"), held, "a refusal stored something");
    let r = srv.post(
        "/v1/sessions/s/tool-results",
        &json!({"call_id": "call_1", "output": "notes"}),
    );
    assert_eq!(r.status, 200);
    let t = srv.post("/v1/sessions/s/turns", &json!({"message": "and now?"}));
    assert_eq!(t.status, 200, "{:?}", t.body);
    assert_eq!(turns(&srv, "s").len(), held.len() + 2);
}

/// Verifies ADR-0031: every mutating endpoint repeated with the same `Idempotency-Key` stores
/// once and answers the same bytes, marked as a repeat; the key with another body is 422
/// `idempotency_key_reused` and stores nothing.
#[test]
fn keyed_repeats_store_once_and_answer_identically() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let steps: Vec<(&str, &str, Option<Value>)> = vec![
        (
            "POST",
            "/v1/sessions/k/turns",
            Some(json!({"message": "read notes.txt"})),
        ),
        ("POST", "/v1/sessions/k/replies", Some(read_call())),
        (
            "POST",
            "/v1/sessions/k/tool-results",
            Some(json!({"call_id": "call_1", "output": "notes"})),
        ),
        ("POST", "/v1/sessions/k/reset", None),
        (
            "POST",
            "/v1/sessions/k/turns",
            Some(json!({"message": "hello again"})),
        ),
        ("DELETE", "/v1/sessions/k", None),
    ];
    for (i, (method, path, body)) in steps.iter().enumerate() {
        let key = format!("step-{i}");
        let first = srv.keyed(method, path, body.as_ref(), &key);
        assert_eq!(first.status, 200, "{method} {path}: {:?}", first.body);
        assert!(!first.replayed);
        let after_first = turns(&srv, "k");
        let again = srv.keyed(method, path, body.as_ref(), &key);
        assert_eq!(again.status, 200, "{method} {path}: {:?}", again.body);
        assert!(again.replayed, "{method} {path} ran again");
        assert_eq!(
            again.text, first.text,
            "{method} {path} answered differently"
        );
        assert_eq!(
            turns(&srv, "k"),
            after_first,
            "{method} {path} stored twice"
        );
        if let Some(b) = body {
            let mut other = b.clone();
            other["extra_field_for_a_different_body"] = json!(true);
            let reused = srv.keyed(
                method,
                path,
                Some(&json!({"message": "something else"})),
                &key,
            );
            if *path == "/v1/sessions/k/turns" {
                assert_eq!(reused.status, 422, "{:?}", reused.body);
                assert_eq!(reused.code(), "idempotency_key_reused");
            } else {
                assert!(matches!(reused.status, 400 | 422), "{:?}", reused.body);
            }
            assert_eq!(turns(&srv, "k"), after_first);
        }
    }
    // A key that is not printable ASCII is refused before anything runs.
    let bad = srv.keyed(
        "POST",
        "/v1/sessions/k2/turns",
        Some(&json!({"message": "hi"})),
        "",
    );
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert!(turns(&srv, "k2").is_empty());
}

/// Verifies ADR-0030 through the service: a message about twice the window's prompt budget is
/// sent cut, its first and last lines in the last user message, and stored whole.
#[test]
fn a_message_twice_the_budget_is_sent_with_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let mut message = String::from("FIRST LINE of the paste\n");
    for i in 0..900 {
        message.push_str(&format!(
            "{i:04} worker finished batch {} in {} ms\n",
            i * 3,
            i % 97
        ));
    }
    message.push_str("QUESTION: which batch was slowest?");
    let t = srv.post(
        "/v1/sessions/long/turns",
        &json!({"message": message, "context_window": 8192}),
    );
    assert_eq!(t.status, 200, "{:?}", t.body);
    let report = &t.body["report"];
    assert!(report["used_tokens"].as_u64().unwrap() <= report["prompt_budget"].as_u64().unwrap());
    let messages = t.body["request"]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    let text = match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(b) => b.last().unwrap()["text"].as_str().unwrap().to_owned(),
        other => panic!("{other}"),
    };
    assert!(text.starts_with("FIRST LINE"), "{text:.60}");
    assert!(text.ends_with("QUESTION: which batch was slowest?"));
    assert!(text.len() < message.len());
    let cut = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["role"] == "user")
        .unwrap();
    assert_eq!(cut["status"], "cut", "{cut}");
    assert_eq!(turns(&srv, "long")[0]["content"], message.as_str());
}

/// Verifies ADR-0033: 64 clients sending a body one byte at a time hold connections but no
/// concurrency slot; ordinary turns keep being served meanwhile (bounded: a few seconds).
#[test]
fn slow_senders_do_not_starve_turns() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(
        dir.path(),
        &["--concurrency", "4", "--read-timeout-secs", "3"],
    );
    let addr = srv.url.trim_start_matches("http://").to_owned();
    let mut slow = Vec::new();
    for i in 0..64 {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /v1/sessions/slow-{i}/turns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{{"
        )
        .unwrap();
        slow.push(s);
    }
    let started = Instant::now();
    let mut served = 0;
    let mut i = 0;
    let mut trickled = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        // One byte a connection every 100 ms: about 20 of the 199 the bodies still owe.
        if trickled.elapsed() >= Duration::from_millis(100) {
            for s in &mut slow {
                let _ = s.write_all(b" ");
            }
            trickled = Instant::now();
        }
        let r = srv.post(
            &format!("/v1/sessions/fast-{i}/turns"),
            &json!({"message": "are you there?"}),
        );
        assert_eq!(r.status, 200, "turn {i}: {:?}", r.body);
        served += 1;
        i += 1;
    }
    assert!(served >= 3, "only {served} turns served");
    // The slow senders are answered 408 once their read timeout passes.
    let mut s = slow.pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
}

/// Verifies ADR-0033: session ids that could read as path steps are refused.
#[test]
fn session_ids_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    for id in ["..", ".hidden", "a..b", "-x"] {
        let r = srv.post(
            &format!("/v1/sessions/{id}/turns"),
            &json!({"message": "hi"}),
        );
        assert_eq!(r.status, 400, "{id}: {:?}", r.body);
        assert_eq!(r.code(), "invalid_request");
    }
    let ok = srv.post("/v1/sessions/a.b-c_d:1/turns", &json!({"message": "hi"}));
    assert_eq!(ok.status, 200, "{:?}", ok.body);
}

/// Verifies ADR-0033: the model is the operator's choice; without `--model` (or STRATA_MODEL)
/// the service does not start, and says why.
#[test]
fn serve_needs_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = serve_harness::demo_agent();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
        .arg(&agent)
        .arg("--trust")
        .arg(&trust)
        .current_dir(dir.path())
        .env_remove("STRATA_MODEL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--model is required"), "{err}");
    assert!(
        !dir.path().join(".strata").exists(),
        "it wrote files before refusing"
    );
}

/// Verifies ADR-0031 and ADR-0033 on PostgreSQL: while the server is down every turn is
/// `503 store_unavailable` with `Retry-After` and nothing is half-written; once it is back, the
/// next turn is served.
#[test]
fn a_postgres_restart_is_503_with_retry_after() {
    let pg = pg_harness::PgServer::start();
    let url = pg.test_params();
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--postgres", &url, "--init-rollback-state"]);
    let t = srv.post("/v1/sessions/pg/turns", &json!({"message": "first"}));
    assert_eq!(t.status, 200, "{:?}", t.body);
    pg.stop();
    let down = srv.post("/v1/sessions/pg/turns", &json!({"message": "second"}));
    assert_eq!(down.status, 503, "{:?}", down.body);
    assert_eq!(down.code(), "store_unavailable");
    assert_eq!(down.retry_after.as_deref(), Some("1"));
    pg.restart();
    let mut back = srv.post("/v1/sessions/pg/turns", &json!({"message": "third"}));
    // The first request after the restart may meet the dropped connection once.
    if back.status == 503 {
        back = srv.post("/v1/sessions/pg/turns", &json!({"message": "third"}));
    }
    assert_eq!(back.status, 200, "{:?}", back.body);
    let held: Vec<String> = turns(&srv, "pg")
        .iter()
        .map(|t| t["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(held, vec!["first", "third"]);
}

/// Check `bodies` (provider, body) with the official SDKs' request types, item by item
/// (`tests/sdk/check_requests.py`).
fn sdk_check(bodies: &[(&str, &Value)]) {
    if std::env::var_os("STRATA_SKIP_SDK_TESTS").is_some() {
        eprintln!("SDK check skipped: STRATA_SKIP_SDK_TESTS is set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("bodies.jsonl");
    let mut lines = String::new();
    for (p, body) in bodies {
        let wire = serde_json::to_string(body).unwrap();
        lines.push_str(&json!({"provider": p, "body": body, "wire": wire}).to_string());
        lines.push('\n');
    }
    std::fs::write(&corpus, lines).unwrap();
    let python = std::env::var("STRATA_SDK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(serve_harness::root().join("crates/strata-cli/tests/sdk/check_requests.py"))
        .arg(&corpus)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\n(install the pinned SDKs: pip install -r crates/strata-cli/tests/sdk/requirements.txt, or set STRATA_SDK_PYTHON)",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Verifies ADR-0031: the tools a turn offers stay the session's until a turn names others;
/// continuing after a tool result without repeating `tools` gives an Anthropic body that defines
/// the tool its tool_use block names (checked with the Anthropic SDK's types); refused tools come
/// back typed in every turn response.
#[test]
fn tools_persist_and_a_body_defines_the_tools_it_calls() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--provider", "anthropic"]);
    let tools = json!([{"name": "file_read"}, {"name": "file_raed", "description": "typo"}]);
    let t1 = srv.post(
        "/v1/sessions/t/turns",
        &json!({"message": "read notes.txt", "tools": tools}),
    );
    assert_eq!(t1.status, 200, "{:?}", t1.body);
    assert_eq!(t1.body["request"]["tools"][0]["name"], "file_read");
    let refused = t1.body["refused_tools"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["name"], "file_raed");
    assert!(refused[0]["reason"].as_str().unwrap().contains("allowlist"));
    assert_eq!(srv.post("/v1/sessions/t/replies", &read_call()).status, 200);
    let r = srv.post(
        "/v1/sessions/t/tool-results",
        &json!({"call_id": "call_1", "output": "the notes"}),
    );
    assert_eq!(r.status, 200);
    // Continue without `tools`: the body holds tool_use and tool_result, and defines file_read.
    let t2 = srv.post("/v1/sessions/t/turns", &json!({}));
    assert_eq!(t2.status, 200, "{:?}", t2.body);
    let body = &t2.body["request"];
    let text = body.to_string();
    assert!(
        text.contains("\"tool_use\"") && text.contains("\"tool_result\""),
        "{text}"
    );
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["file_read"]);
    // A later turn that names no tools keeps them; one that names none of them still defines
    // the tool the history calls.
    let t3 = srv.post("/v1/sessions/t/turns", &json!({"message": "thanks"}));
    assert_eq!(t3.status, 200, "{:?}", t3.body);
    assert_eq!(t3.body["request"]["tools"][0]["name"], "file_read");
    let t4 = srv.post(
        "/v1/sessions/t/turns",
        &json!({"message": "no tools now", "tools": []}),
    );
    assert_eq!(t4.status, 200, "{:?}", t4.body);
    assert_eq!(t4.body["request"]["tools"][0]["name"], "file_read");
    sdk_check(&[
        ("anthropic", &t2.body["request"]),
        ("anthropic", &t3.body["request"]),
        ("anthropic", &t4.body["request"]),
    ]);
}

/// Verifies ADR-0043 through the service: a reply's `reasoning` comes back first and unchanged
/// in the next request of its tool loop (checked with the Anthropic SDK's types); another
/// provider's blocks, a block the provider does not define and a block holding the wire format
/// are refused and store nothing.
#[test]
fn reasoning_round_trips_through_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--provider", "anthropic"]);
    let t1 = srv.post(
        "/v1/sessions/r/turns",
        &json!({"message": "read notes.txt", "tools": [{"name": "file_read"}]}),
    );
    assert_eq!(t1.status, 200, "{:?}", t1.body);
    let held = turns(&srv, "r");
    let thinking =
        json!({"type": "thinking", "thinking": "Read it first.", "signature": "EqQBCkYIBxgC"});
    for (bad, why) in [
        (
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
            "only openai-responses",
        ),
        (
            json!({"type": "thinking", "thinking": "x", "signature": "s", "cache_control": {}}),
            "not a provider's reasoning block",
        ),
        (
            json!({"type": "thinking", "thinking": "<strata:omitted/>", "signature": "s"}),
            "wire format",
        ),
    ] {
        let mut reply = read_call();
        reply["reasoning"] = json!([bad]);
        let r = srv.post("/v1/sessions/r/replies", &reply);
        assert_eq!(r.status, 400, "{:?}", r.body);
        assert!(r.body.to_string().contains(why), "{:?}", r.body);
    }
    assert_eq!(turns(&srv, "r"), held, "a refused reply stored something");
    let mut reply = read_call();
    reply["reasoning"] = json!([thinking]);
    assert_eq!(srv.post("/v1/sessions/r/replies", &reply).status, 200);
    let r = srv.post(
        "/v1/sessions/r/tool-results",
        &json!({"call_id": "call_1", "output": "the notes"}),
    );
    assert_eq!(r.status, 200);
    let t2 = srv.post("/v1/sessions/r/turns", &json!({}));
    assert_eq!(t2.status, 200, "{:?}", t2.body);
    let body = &t2.body["request"];
    let assistant = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["content"][0], thinking, "{body}");
    assert_eq!(assistant["content"][1]["type"], "tool_use", "{body}");
    sdk_check(&[("anthropic", body)]);
}
