//! The client against real MCP servers nobody here wrote or faked: the reference server
//! `@modelcontextprotocol/server-everything` (npm, `$STRATA_MCP_EVERYTHING`, its executable) and
//! `servers/glossary.py`, written with the official Python SDK (`$STRATA_MCP_PYTHON`, an
//! interpreter that has `mcp` installed). Without them a test says so and passes, unless
//! `STRATA_REQUIRE_MCP=1` (set by `.ci/run`), where a missing server fails it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use strata_core::ToolName;
use strata_mcp::spec::Transport;
use strata_mcp::{
    diff, pins_toml, Change, Client, Limits, LiveServers, PinnedTool, Selection, ServerSpec,
};
use strata_registry::{LiveSource, LiveState};

#[allow(clippy::print_stderr, reason = "a skipped test says why")]
fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var_os("STRATA_REQUIRE_MCP").is_none_or(|v| v != "1"),
                "STRATA_REQUIRE_MCP=1 but ${var} is not set (.ci/run installs the test servers)"
            );
            eprintln!("skipped: ${var} is not set (see .ci/run for how the MCP test servers are installed)");
            None
        }
    }
}

fn glossary_script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/glossary.py")
        .display()
        .to_string()
}

/// The glossary server over stdio, with `drift` in its environment through a wrapper `env`.
fn glossary(python: &str, drift: &str) -> ServerSpec {
    ServerSpec::stdio(
        "glossary",
        &[
            "env".into(),
            format!("STRATA_GLOSSARY_DRIFT={drift}"),
            python.into(),
            glossary_script(),
        ],
    )
    .expect("spec")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn quick() -> Limits {
    Limits {
        connect_timeout: Duration::from_secs(30),
        request_timeout: Duration::from_secs(20),
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(500),
        relist_every: Duration::from_millis(300),
        ..Limits::default()
    }
}

#[test]
fn the_reference_server_lists_tools_prompts_and_answers_a_call() {
    let Some(everything) = server("STRATA_MCP_EVERYTHING") else {
        return;
    };
    let spec = ServerSpec::stdio("everything", &[everything, "stdio".into()]).expect("spec");
    runtime().block_on(async {
        let client = Client::connect(&spec, quick()).await.expect("connects");
        let tools = client.list_tools().await.expect("lists tools");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        for expected in ["echo", "get-sum"] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
        assert!(!echo.description.is_empty());
        assert_eq!(echo.schema["type"], "object");
        assert!(
            echo.schema["properties"]["message"].is_object(),
            "{}",
            echo.schema
        );
        let prompts = client.list_prompts().await.expect("lists prompts");
        assert!(
            prompts
                .iter()
                .any(|p| p.text.as_deref().is_some_and(|t| !t.is_empty())),
            "no prompt without arguments: {prompts:?}"
        );
        assert!(
            prompts.iter().any(|p| p.text.is_none()),
            "the prompts that need arguments are listed without text: {prompts:?}"
        );
        let r = client
            .call_tool("echo", &json!({"message": "pinned words"}))
            .await
            .expect("calls");
        assert!(!r.is_error);
        assert!(r.text.contains("pinned words"), "{}", r.text);
        client.close().await;
    });
}

/// Verifies ADR-0041: the pins of a live server read back through the definition parser, and
/// a changed description or schema of the same server is reported as drift.
#[test]
fn pins_round_trip_and_drift_is_found_in_descriptions_and_schemas() {
    let Some(python) = server("STRATA_MCP_PYTHON") else {
        return;
    };
    let rt = runtime();
    let listing = |drift: &str| {
        rt.block_on(async {
            let c = Client::connect(&glossary(&python, drift), quick())
                .await
                .expect("connects");
            let tools = c.list_tools().await.expect("lists");
            c.close().await;
            tools
        })
    };
    let original = listing("");
    let toml_text = pins_toml("glossary", &original, &Selection::default()).expect("pins");
    assert!(toml_text.contains("[[core.tools]]"), "{toml_text}");
    // The pins read back through the definition's own parser, as a signer would read them.
    let definition = format!(
        "id = \"pin-test\"\nname = \"Pin\"\nversion = 1\n\n[core]\nidentity = \"A test agent.\"\n\n{toml_text}"
    );
    let def = strata_agentdef::definition::check_definition(&definition, None)
        .unwrap_or_else(|e| panic!("{e}\n{definition}"));
    let pinned: Vec<PinnedTool> = def.core.tools.iter().map(PinnedTool::from).collect();
    assert_eq!(pinned.len(), 3, "{definition}");
    assert!(pinned
        .iter()
        .all(|p| p.server.as_deref() == Some("glossary")));
    assert!(diff("glossary", &pinned, &original).is_empty());

    let described = listing("description");
    assert_eq!(
        diff("glossary", &pinned, &described).changes,
        vec![Change::Description {
            tool: "lookup".into()
        }]
    );
    let widened = listing("schema");
    let d = diff("glossary", &pinned, &widened);
    assert_eq!(d.changes.len(), 1, "{d:?}");
    assert!(matches!(&d.changes[0], Change::Schema { tool, .. } if tool == "lookup"));

    // --only and --except, and a name the server does not announce.
    let only = Selection {
        only: Some(["shout".to_owned()].into()),
        except: Default::default(),
    };
    let t = pins_toml("glossary", &original, &only).expect("pins");
    assert!(t.contains("shout") && !t.contains("lookup"), "{t}");
    let missing = Selection {
        only: None,
        except: ["nope".to_owned()].into(),
    };
    assert!(pins_toml("glossary", &original, &missing).is_err());
}

#[test]
fn a_server_that_never_answers_times_out() {
    let spec = ServerSpec::stdio("silent", &["sleep".into(), "30".into()]).expect("spec");
    let limits = Limits {
        connect_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let err = runtime()
        .block_on(Client::connect(&spec, limits))
        .expect_err("a silent server cannot be connected");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        err.to_string().contains("no initialisation within"),
        "{err}"
    );
}

#[test]
fn a_tool_list_change_is_listed_again() {
    let Some(python) = server("STRATA_MCP_PYTHON") else {
        return;
    };
    let rt = runtime();
    let live = LiveServers::start(vec![glossary(&python, "")], quick(), rt.handle().clone())
        .expect("starts");
    assert!(
        live.wait_connected(Duration::from_secs(30)),
        "{:?}",
        live.servers()
    );
    let names = |live: &LiveServers| match &live.servers()[0].state {
        LiveState::Connected { tools, .. } => {
            tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>()
        }
        other => panic!("{other:?}"),
    };
    assert!(!names(&live).contains(&"whisper".to_owned()));
    let r = live
        .call(&ToolName::new("add_tool").expect("name"), &json!({}))
        .expect("calls");
    assert_eq!(r.text, "added");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !names(&live).contains(&"whisper".to_owned()) {
        assert!(
            std::time::Instant::now() < deadline,
            "not re-listed: {:?}",
            names(&live)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn http_glossary(python: &str, port: u16) -> Child {
    Command::new(python)
        .arg(glossary_script())
        .args(["--http", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts the server")
}

#[test]
fn streamable_http_reconnects_after_the_server_restarts() {
    let Some(python) = server("STRATA_MCP_PYTHON") else {
        return;
    };
    let port = free_port();
    let mut child = http_glossary(&python, port);
    let rt = runtime();
    let spec = ServerSpec::new(
        "glossary",
        Transport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
        },
    )
    .expect("spec");
    let live = LiveServers::start(vec![spec], quick(), rt.handle().clone()).expect("starts");
    assert!(
        live.wait_connected(Duration::from_secs(30)),
        "{:?}",
        live.servers()
    );
    let first = live.servers()[0].generation;
    match &live.servers()[0].state {
        LiveState::Connected { tools, prompts } => {
            assert!(tools.iter().any(|t| t.name.as_str() == "lookup"));
            assert_eq!(prompts[0].name, "house_rules");
        }
        other => panic!("{other:?}"),
    }
    child.kill().expect("kill");
    child.wait().expect("wait");
    // An HTTP server's loss is noticed at the next listing.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while matches!(live.servers()[0].state, LiveState::Connected { .. }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the loss was not noticed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut child = http_glossary(&python, port);
    assert!(
        live.wait_connected(Duration::from_secs(30)),
        "{:?}",
        live.servers()
    );
    assert!(live.servers()[0].generation > first);
    child.kill().expect("kill");
    let _ = child.wait();
}

/// A lost Streamable HTTP server is found out by the first call that fails, not only at the
/// next periodic listing (here a minute away): its tools leave the offer at once.
#[test]
fn a_failed_call_lists_a_lost_http_server_again_at_once() {
    let Some(python) = server("STRATA_MCP_PYTHON") else {
        return;
    };
    let port = free_port();
    let mut child = http_glossary(&python, port);
    let rt = runtime();
    let spec = ServerSpec::new(
        "glossary",
        Transport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
        },
    )
    .expect("spec");
    let limits = Limits {
        relist_every: Duration::from_secs(60),
        request_timeout: Duration::from_secs(5),
        ..quick()
    };
    let live = LiveServers::start(vec![spec], limits, rt.handle().clone()).expect("starts");
    assert!(
        live.wait_connected(Duration::from_secs(30)),
        "{:?}",
        live.servers()
    );
    let shout = ToolName::new("shout").expect("name");
    let ok = live
        .call(&shout, &json!({"text": "hi"}))
        .expect("the call answers");
    assert_eq!(ok.text, "HI");
    child.kill().expect("kill");
    child.wait().expect("wait");
    let failed = live.call(&shout, &json!({"text": "hi"}));
    assert!(failed.is_err(), "{failed:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while matches!(live.servers()[0].state, LiveState::Connected { .. }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the loss was not noticed after the failed call"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
