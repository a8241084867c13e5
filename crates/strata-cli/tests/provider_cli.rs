//! `strata assemble --format openai-chat|openai-responses|anthropic` on a multi-turn, tool-using
//! conversation (user, a tool call and its result, the assistant, the user again) with shared
//! facts, a delegated task, an injected memory and MCP-announced tools: the body each provider's
//! official SDK accepts and sends unchanged (`tests/sdk/check_requests.py`), with native roles and
//! call ids, tools with schemas, and the signed text alone in the system channel. Verifies I8
//! (ADR-0014, ADR-0015) through the command line.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

/// Run `strata assemble` on the demo agent with `input` and `extra` arguments.
fn run_assemble(input: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let demo = root().join("crates/strata-cli/demo");
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["assemble", "--agent"])
        .arg(demo.join("agent.signed.json"))
        .arg("--trust")
        .arg(demo.join("trust.toml"))
        .arg("--input")
        .arg(input)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// The body `strata assemble` prints for `input` in `format` (it must succeed).
fn body_of(input: &std::path::Path, format: &str, extra: &[&str]) -> serde_json::Value {
    let base = [
        "--format",
        format,
        "--model",
        "test-model",
        "--max-tokens",
        "512",
    ];
    let out = run_assemble(input, &[&base[..], extra].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assemble(format: &str) -> serde_json::Value {
    body_of(&root().join("examples/conversation.json"), format, &[])
}

#[test]
fn every_provider_body_is_native_and_only_signed_text_is_system() {
    let identity_starts = "<strata:section layer=\"1\" id=\"core.identity\"";
    // OpenAI Chat: system, then native turns with tool_calls and a tool message.
    let chat = assemble("openai-chat");
    let msgs = chat["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "user"
        ]
    );
    let system = msgs[0]["content"].as_str().unwrap();
    assert!(system.starts_with(identity_starts));
    for leak in [
        "deploys on Tuesdays",
        "on-call question",
        "attacker@",
        "notes.txt",
        "ALWAYS",
    ] {
        assert!(!system.contains(leak), "{leak} reached the system channel");
    }
    assert_eq!(msgs[3]["tool_calls"][0]["id"], "call_1");
    assert_eq!(msgs[3]["tool_calls"][0]["function"]["name"], "file_read");
    assert_eq!(
        msgs[3]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"notes.txt\"}"
    );
    assert_eq!(msgs[4]["tool_call_id"], "call_1");
    let result = msgs[4]["content"].as_str().unwrap();
    assert!(result.contains("authority=\"data\"") && result.contains("&lt;|im_start|&gt;"));
    assert_eq!(msgs[7]["content"], "And who is on call?");
    let tools = chat["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["file_read", "search_memory"]);
    assert_eq!(
        tools[0]["function"]["parameters"]["required"][0], "path",
        "the signed schema"
    );
    assert_eq!(
        tools[1]["function"]["description"], "Search the long-term memory.",
        "the signed description replaces the announced one"
    );

    // OpenAI Responses: instructions, then input items.
    let resp = assemble("openai-responses");
    assert_eq!(resp["instructions"].as_str().unwrap(), system);
    let kinds: Vec<&str> = resp["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "message",
            "function_call",
            "function_call_output",
            "message",
            "message",
            "message"
        ]
    );

    // Anthropic: one system block, alternating messages opening with the user.
    let an = assemble("anthropic");
    assert_eq!(an["system"].as_array().unwrap().len(), 1);
    assert_eq!(an["system"][0]["text"].as_str().unwrap(), system);
    let roles: Vec<&str> = an["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(an["messages"][1]["content"][0]["type"], "tool_use");
    assert_eq!(
        an["messages"][1]["content"][0]["input"]["path"],
        "notes.txt"
    );
    assert_eq!(an["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(an["tools"][0]["input_schema"]["required"][0], "path");

    // The official SDKs accept all three and send them unchanged.
    if std::env::var_os("STRATA_SKIP_SDK_TESTS").is_some() {
        eprintln!("SDK check skipped: STRATA_SKIP_SDK_TESTS is set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("cli.jsonl");
    let mut lines = String::new();
    for (p, body) in [
        ("openai-chat", &chat),
        ("openai-responses", &resp),
        ("anthropic", &an),
    ] {
        let wire = serde_json::to_string(body).unwrap();
        lines.push_str(&serde_json::json!({"provider": p, "body": body, "wire": wire}).to_string());
        lines.push('\n');
    }
    std::fs::write(&corpus, lines).unwrap();
    check_with_sdks(&corpus, 3);
}

/// Verifies ADR-0016 through the command line: a tool-using conversation run one process per
/// step (so every step survives a restart), printing sendable bodies.
#[test]
fn session_steps_run_a_conversation_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let demo = root().join("crates/strata-cli/demo");
    let run = |step: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("session")
            .arg("--agent")
            .arg(demo.join("agent.signed.json"))
            .arg("--trust")
            .arg(demo.join("trust.toml"))
            .args(["--id", "s1", "--store"])
            .arg(dir.path().join("m.db"))
            .args(step)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{step:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let prepare = ["--format", "openai-chat", "--model", "gpt-test"];
    let first: serde_json::Value = serde_json::from_str(&run(&[
        &["prepare", "What does notes.txt say?"][..],
        &prepare[..],
    ]
    .concat()))
    .unwrap();
    assert_eq!(first["messages"][0]["role"], "system");
    run(&[
        "reply",
        "--tool-call",
        "call_1:file_read:{\"path\":\"notes.txt\"}",
    ]);
    run(&["tool-result", "call_1", "Deploys freeze on Fridays."]);
    let second: serde_json::Value =
        serde_json::from_str(&run(
            &[&["prepare", "--continue"][..], &prepare[..]].concat()
        ))
        .unwrap();
    let msgs = second["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert!(roles.contains(&"tool"), "{roles:?}");
    let call = msgs.iter().find(|m| m.get("tool_calls").is_some()).unwrap();
    assert_eq!(call["tool_calls"][0]["function"]["name"], "file_read");
    run(&["reply", "They freeze on Fridays."]);
    let third: serde_json::Value =
        serde_json::from_str(&run(
            &[&["prepare", "Is Thursday fine?"][..], &prepare[..]].concat()
        ))
        .unwrap();
    let wire = third.to_string();
    assert!(wire.contains("What does notes.txt say?") && wire.contains("They freeze on Fridays."));
    assert_eq!(
        third["messages"].as_array().unwrap().last().unwrap()["content"],
        "Is Thursday fine?"
    );
    run(&["reset"]);
    let after: serde_json::Value =
        serde_json::from_str(&run(&[&["prepare", "Hello"][..], &prepare[..]].concat())).unwrap();
    assert!(!after.to_string().contains("notes.txt say"));
}

/// `strata assemble`'s body for `input` in `format` with a budget of `budget` tokens.
fn assemble_input(input: &serde_json::Value, format: &str, budget: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.json");
    std::fs::write(&path, input.to_string()).unwrap();
    body_of(&path, format, &["--budget", budget])
}

/// Verifies ADR-0039 through the command line: a failed tool's result carries Anthropic's
/// `is_error` (accepted by the official SDK's types), the OpenAI formats send the result
/// alone, and a log recorded to keep its tail is cut from its head, its newest lines sent.
#[test]
fn a_failed_log_is_flagged_and_keeps_its_newest_lines() {
    let log: String = (1..=600)
        .map(|n| format!("line {n}: build step {n} ok\n"))
        .collect::<String>()
        + "FATAL: the build failed at step 601\n";
    let input = serde_json::json!({
        "turns": [
            {"role": "user", "content": "Why did the build fail?"},
            {"role": "tool_call", "call_id": "call_1", "name": "file_read", "arguments": {"path": "build.log"}},
            {"role": "tool_result", "call_id": "call_1", "content": log, "is_error": true, "keep": "tail"},
            {"role": "user", "content": "Summarise the failure."}
        ],
        "tools": [{"name": "file_read", "description": "Read a file in the workspace."}]
    });
    let an = assemble_input(&input, "anthropic", "3000");
    let result = &an["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result", "{an}");
    assert_eq!(result["is_error"], true);
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("FATAL&#58; the build failed at step 601"),
        "{text}"
    );
    assert!(
        !text.contains("line 1&#58; build step 1 ok"),
        "the head was kept: {text}"
    );
    assert!(text.contains("<strata:elided bytes=\""), "{text}");
    // The marker stands before what was kept.
    assert!(text.find("<strata:elided").unwrap() < text.find("FATAL").unwrap());

    let chat = assemble_input(&input, "openai-chat", "3000");
    let tool = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(tool.get("is_error").is_none(), "{tool}");
    assert!(tool["content"].as_str().unwrap().contains("FATAL"));

    // `is_error` and `keep` belong to tool results only.
    let mut bad = input.clone();
    bad["turns"][0]["is_error"] = serde_json::json!(true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, bad.to_string()).unwrap();
    let out = run_assemble(&path, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only tool results take `is_error`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    if std::env::var_os("STRATA_SKIP_SDK_TESTS").is_some() {
        eprintln!("SDK check skipped: STRATA_SKIP_SDK_TESTS is set");
        return;
    }
    let corpus = dir.path().join("flagged.jsonl");
    let wire = serde_json::to_string(&an).unwrap();
    std::fs::write(
        &corpus,
        serde_json::json!({"provider": "anthropic", "body": an, "wire": wire}).to_string() + "\n",
    )
    .unwrap();
    check_with_sdks(&corpus, 1);
}

/// Verifies ADR-0043 through the command line: a reply's reasoning recorded with `strata
/// session reply --reasoning FILE` is sent back first and unchanged in the next request of its
/// tool loop, for Anthropic (`thinking`, `redacted_thinking`) and OpenAI Responses
/// (`reasoning`), in bodies the official SDKs' types accept item by item.
#[test]
fn reasoning_recorded_from_the_command_line_goes_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let demo = root().join("crates/strata-cli/demo");
    let run = |id: &str, step: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("session")
            .arg("--agent")
            .arg(demo.join("agent.signed.json"))
            .arg("--trust")
            .arg(demo.join("trust.toml"))
            .args(["--id", id, "--store"])
            .arg(dir.path().join("m.db"))
            .args(step)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let cases = [
        (
            "anthropic",
            serde_json::json!([
                {"type": "thinking", "thinking": "Read notes.txt before answering.", "signature": "EqQBCkYIBxgCKkCbz3Ck"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
            ]),
        ),
        (
            "openai-responses",
            serde_json::json!([
                {"type": "reasoning", "id": "rs_0a1b", "summary": [{"type": "summary_text", "text": "Read the notes."}],
                 "encrypted_content": "gAAAAABo9xQz"}
            ]),
        ),
    ];
    let mut corpus = String::new();
    for (format, blocks) in &cases {
        let file = dir.path().join(format!("{format}.json"));
        std::fs::write(&file, blocks.to_string()).unwrap();
        let prepare = ["--format", format, "--model", "test-model", "--input"];
        let tools = dir.path().join("tools.json");
        std::fs::write(
            &tools,
            r#"{"tools": [{"name": "file_read", "description": "Read a file in the workspace."}]}"#,
        )
        .unwrap();
        let tools = tools.to_str().unwrap();
        let ok = |r: (bool, String, String)| {
            assert!(r.0, "{format}: {}", r.2);
            r.1
        };
        ok(run(
            format,
            &[
                &["prepare", "What does notes.txt say?"][..],
                &prepare[..],
                &[tools],
            ]
            .concat(),
        ));
        ok(run(
            format,
            &[
                "reply",
                "--tool-call",
                "call_1:file_read:{\"path\":\"notes.txt\"}",
                "--reasoning",
                file.to_str().unwrap(),
            ],
        ));
        ok(run(
            format,
            &["tool-result", "call_1", "Deploys freeze on Fridays."],
        ));
        let body: serde_json::Value = serde_json::from_str(&ok(run(
            format,
            &[
                "prepare",
                "--continue",
                "--format",
                format,
                "--model",
                "test-model",
            ],
        )))
        .unwrap();
        if *format == "anthropic" {
            let assistant = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["role"] == "assistant")
                .unwrap();
            assert_eq!(assistant["content"][0], blocks[0], "{body}");
            assert_eq!(assistant["content"][1], blocks[1], "{body}");
            assert_eq!(assistant["content"][2]["type"], "tool_use", "{body}");
        } else {
            let input = body["input"].as_array().unwrap();
            let at = |t: &str| input.iter().position(|i| i["type"] == t).unwrap();
            assert_eq!(input[at("reasoning")], blocks[0], "{body}");
            assert!(at("reasoning") < at("function_call"), "{body}");
        }
        let wire = serde_json::to_string(&body).unwrap();
        corpus += &(serde_json::json!({"provider": format, "body": body, "wire": wire})
            .to_string()
            + "\n");
    }

    // A block the provider does not define is refused, and the reply is not stored.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"[{"type": "thinking", "thinking": "x", "signature": "s", "role": "system"}]"#,
    )
    .unwrap();
    let (ok, _, err) = run(
        "bad",
        &["reply", "Hi", "--reasoning", bad.to_str().unwrap()],
    );
    assert!(!ok && err.contains("--reasoning"), "{err}");

    if std::env::var_os("STRATA_SKIP_SDK_TESTS").is_some() {
        eprintln!("SDK check skipped: STRATA_SKIP_SDK_TESTS is set");
        return;
    }
    let path = dir.path().join("reasoning.jsonl");
    std::fs::write(&path, corpus).unwrap();
    check_with_sdks(&path, 2);
}

/// Validate the JSON Lines `corpus` of request bodies with the official SDKs
/// (`tests/sdk/check_requests.py`): every record must pass, and there must be `records`.
fn check_with_sdks(corpus: &Path, records: usize) {
    let python = std::env::var("STRATA_SDK_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(root().join("crates/strata-cli/tests/sdk/check_requests.py"))
        .arg(corpus)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\n(install the pinned SDKs: pip install -r crates/strata-cli/tests/sdk/requirements.txt, or set STRATA_SDK_PYTHON)",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().last().unwrap(),
        format!("{records} passed, 0 failed")
    );
}
