//! `strata serve` with a live MCP server (ADR-0041), end to end: the glossary server of
//! `crates/strata-mcp/tests/servers/glossary.py` (official Python SDK, `$STRATA_MCP_PYTHON`)
//! over Streamable HTTP, pinned with `strata mcp pin`, signed, served; then stopped, and
//! restarted with a changed tool. Without the server the test says so and passes, unless
//! `STRATA_REQUIRE_MCP=1` (set by `.ci/run`).
#![allow(
    clippy::unwrap_used,
    reason = "the shared serve harness fails loudly on unexpected errors"
)]

mod serve_harness;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_harness::{sign_agent, strata, Resp, Server, TOKEN};

#[allow(clippy::print_stderr, reason = "a skipped test says why")]
fn python() -> Option<String> {
    match std::env::var("STRATA_MCP_PYTHON") {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var_os("STRATA_REQUIRE_MCP").is_none_or(|v| v != "1"),
                "STRATA_REQUIRE_MCP=1 but $STRATA_MCP_PYTHON is not set (.ci/run installs it)"
            );
            eprintln!("skipped: $STRATA_MCP_PYTHON is not set (see .ci/run)");
            None
        }
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../strata-mcp/tests/servers/glossary.py")
}

fn glossary(python: &str, port: u16, drift: &str) -> Child {
    let child = Command::new(python)
        .arg(script())
        .args(["--http", &port.to_string()])
        .env("STRATA_GLOSSARY_DRIFT", drift)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts the glossary server");
    // Ready when it accepts connections.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the glossary server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn stop(mut child: Child) {
    child.kill().expect("kill");
    child.wait().expect("wait");
}

fn tool_names(turn: &Resp) -> Vec<String> {
    turn.body["request"]["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Prepare turns on fresh sessions until `done` holds for one (at most 30 s).
fn turn_until(srv: &Server, what: &str, done: impl Fn(&Resp) -> bool) -> Resp {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    loop {
        n += 1;
        let t = srv.post(
            &format!("/v1/sessions/wait-{n}/turns"),
            &json!({"message": "What is a glossary?"}),
        );
        assert_eq!(t.status, 200, "{:?}", t.body);
        if done(&t) {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: last turn {}", t.text);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn pin_and_sign(dir: &Path, python: &str, url: &str) -> (PathBuf, PathBuf) {
    let (_, trust) = sign_agent(dir, 1, "");
    let _ = python;
    strata(
        dir,
        &[
            "mcp",
            "pin",
            "--server",
            "glossary",
            "--out",
            "agent.toml",
            "--except",
            "add_tool",
            "--url",
            url,
        ],
    );
    strata(
        dir,
        &[
            "sign",
            "agent.toml",
            "--key",
            "release.key",
            "--out",
            "agent.signed.json",
        ],
    );
    (dir.join("agent.signed.json"), trust)
}

/// Verifies ADR-0041: a served turn offers a pinned live server's tools with their signed
/// descriptions and its prompt as data; a stopped server's tools and prompt are omitted (the
/// turn still prepared) and come back with it; a server that changed a pinned tool's
/// description has that tool refused with `definition_changed`, none of its new words in the
/// request; and a tool call run through the service records exactly one result on retries.
#[test]
fn a_live_server_is_pinned_served_dropped_restored_and_caught_changing() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let server = glossary(&python, port, "");
    let (agent, trust) = pin_and_sign(d, &python, &url);
    let srv = Server::start_with(
        d,
        &agent,
        &trust,
        &[
            "--mcp-url",
            &format!("glossary={url}"),
            "--mcp-relist-secs",
            "1",
        ],
    );

    // Offered with the signed words; the prompt is a layer-3 section; add_tool is not pinned.
    let t1 = srv.post(
        "/v1/sessions/s-1/turns",
        &json!({"message": "Shout hello."}),
    );
    assert_eq!(t1.status, 200, "{:?}", t1.body);
    let names = tool_names(&t1);
    assert!(
        names.contains(&"lookup".to_owned()) && names.contains(&"shout".to_owned()),
        "{names:?}"
    );
    let body = t1.body["request"].to_string();
    assert!(
        body.contains("Look up a term in the team glossary."),
        "{body}"
    );
    assert!(
        body.contains("Glossary answers quote the glossary entry verbatim."),
        "{body}"
    );
    let refused = &t1.body["refused_tools"];
    assert_eq!(refused.as_array().map(Vec::len), Some(1), "{refused}");
    assert_eq!(refused[0]["name"], "add_tool");
    assert_eq!(refused[0]["cause"], "not_allowlisted");

    // Run the model's call of `shout` through the service: one result, also on a retry.
    let r = srv.post(
        "/v1/sessions/s-1/replies",
        &json!({"text": "", "tool_calls": [{"id": "call-1", "name": "shout", "arguments": {"text": "hello"}}]}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let run = srv.keyed(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-1/run",
        None,
        "run-1",
    );
    assert_eq!(run.status, 200, "{:?}", run.body);
    assert_eq!(run.body["output"], "HELLO");
    assert_eq!(run.body["is_error"], false);
    let again = srv.keyed(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-1/run",
        None,
        "run-1",
    );
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert!(again.replayed);
    assert_eq!(again.body, run.body);
    let unkeyed = srv.call(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-1/run",
        None,
        Some(TOKEN),
    );
    assert_eq!(unkeyed.status, 400, "{:?}", unkeyed.body);
    let unknown = srv.call(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-9/run",
        None,
        Some(TOKEN),
    );
    assert_eq!(unknown.status, 400, "{:?}", unknown.body);
    let session = srv.get("/v1/sessions/s-1");
    let results: Vec<&Value> = session.body["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .filter(|e| e["role"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 1, "{}", session.text);
    assert_eq!(results[0]["content"], "HELLO");

    // Only what the last prepared turn offered can be run: after a turn that offers no tools
    // (the hydration path with none retrieved), a call of `shout` is refused with 409 and
    // nothing is run or recorded, although the server still offers the tool.
    let narrow = srv.post(
        "/v1/sessions/s-1/turns",
        &json!({"message": "Nothing to shout.", "path": "hydration", "retrieved_tools": []}),
    );
    assert_eq!(narrow.status, 200, "{:?}", narrow.body);
    assert!(tool_names(&narrow).is_empty(), "{}", narrow.text);
    let r = srv.post(
        "/v1/sessions/s-1/replies",
        &json!({"text": "", "tool_calls": [{"id": "call-2", "name": "shout", "arguments": {"text": "again"}}]}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let before = srv.get("/v1/sessions/s-1").body;
    let refused_run = srv.call(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-2/run",
        None,
        Some(TOKEN),
    );
    assert_eq!(refused_run.status, 409, "{:?}", refused_run.body);
    assert_eq!(
        refused_run.code(),
        "tool_not_offered",
        "{:?}",
        refused_run.body
    );
    assert!(
        refused_run
            .text
            .contains("last prepared turn did not offer"),
        "{}",
        refused_run.text
    );
    assert_eq!(srv.get("/v1/sessions/s-1").body, before);
    // The runtime answers the call itself instead, and the conversation goes on.
    let answered = srv.post(
        "/v1/sessions/s-1/tool-results",
        &json!({"call_id": "call-2", "output": "not shouted"}),
    );
    assert_eq!(answered.status, 200, "{:?}", answered.body);

    // A call whose server goes away before it runs: 502 `tool_call_failed` (the upstream
    // failed, not this service; the clients do not retry it), or 409 `tool_not_offered` if
    // the 1-second re-listing noticed the loss first; either way nothing is recorded.
    let t = srv.post(
        "/v1/sessions/s-1/turns",
        &json!({"message": "Shout goodbye."}),
    );
    assert_eq!(t.status, 200, "{:?}", t.body);
    let r = srv.post(
        "/v1/sessions/s-1/replies",
        &json!({"text": "", "tool_calls": [{"id": "call-lost", "name": "shout", "arguments": {"text": "bye"}}]}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let before = srv.get("/v1/sessions/s-1").body;

    // Stopped: its tools and prompt leave the next turns, reported as an omission.
    stop(server);
    let lost = srv.keyed(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-lost/run",
        None,
        "run-lost",
    );
    match lost.status {
        502 => assert_eq!(lost.code(), "tool_call_failed", "{:?}", lost.body),
        409 => assert_eq!(lost.code(), "tool_not_offered", "{:?}", lost.body),
        other => panic!(
            "a call of a stopped server answered {other}: {:?}",
            lost.body
        ),
    }
    assert_eq!(srv.get("/v1/sessions/s-1").body, before);
    let answered = srv.post(
        "/v1/sessions/s-1/tool-results",
        &json!({"call_id": "call-lost", "output": "not shouted"}),
    );
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    let t2 = turn_until(&srv, "the stopped server is omitted", |t| {
        t.body["report"]["omissions"]
            .to_string()
            .contains("mcp:glossary")
    });
    assert!(
        !tool_names(&t2)
            .iter()
            .any(|n| n == "lookup" || n == "shout"),
        "{}",
        t2.text
    );
    assert!(!t2.body["request"]
        .to_string()
        .contains("Glossary answers quote"));

    // Restarted unchanged: restored.
    let server = glossary(&python, port, "");
    let t3 = turn_until(&srv, "the restarted server is offered again", |t| {
        tool_names(t).contains(&"lookup".to_owned())
    });
    assert!(t3.body["request"]
        .to_string()
        .contains("Glossary answers quote"));
    stop(server);

    // Restarted with a changed description of `lookup`: refused, its words nowhere.
    let server = glossary(&python, port, "description");
    let t4 = turn_until(&srv, "the changed tool is refused", |t| {
        t.body["refused_tools"]
            .to_string()
            .contains("definition_changed")
    });
    let refused: Vec<&Value> = t4.body["refused_tools"]
        .as_array()
        .expect("refused")
        .iter()
        .filter(|r| r["cause"] == "definition_changed")
        .collect();
    assert_eq!(refused.len(), 1, "{}", t4.text);
    assert_eq!(refused[0]["name"], "lookup");
    let names = tool_names(&t4);
    assert!(
        !names.contains(&"lookup".to_owned()) && names.contains(&"shout".to_owned()),
        "{names:?}"
    );
    assert!(
        !t4.body["request"].to_string().contains("SYSTEM OVERRIDE"),
        "{}",
        t4.text
    );
    // A call of the changed tool cannot be run: 409, nothing run or recorded.
    let r = srv.post(
        "/v1/sessions/s-1/replies",
        &json!({"text": "", "tool_calls": [{"id": "call-3", "name": "lookup", "arguments": {"term": "wg"}}]}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let before = srv.get("/v1/sessions/s-1").body;
    let drifted = srv.call(
        "POST",
        "/v1/sessions/s-1/tool-calls/call-3/run",
        None,
        Some(TOKEN),
    );
    assert_eq!(drifted.status, 409, "{:?}", drifted.body);
    assert_eq!(drifted.code(), "tool_not_offered", "{:?}", drifted.body);
    assert_eq!(srv.get("/v1/sessions/s-1").body, before);
    let metrics = srv.get("/metrics").text;
    let changed = metrics
        .lines()
        .find(|l| l.contains("tools_definition_changed") && !l.starts_with('#'))
        .unwrap_or_default();
    assert!(!changed.ends_with(" 0"), "{changed}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("strata_http_requests_total{")
                && l.contains("route=\"/v1/sessions/{session_id}/tool-calls/{call_id}/run\"")
                && l.contains("status=\"200\"")),
        "{metrics}"
    );
    assert!(
        srv.log_text().contains("differs from the signed pin"),
        "{}",
        srv.log_text()
    );
    stop(server);
}
