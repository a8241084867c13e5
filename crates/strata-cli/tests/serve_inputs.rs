//! The per-turn inputs that built-in contributors and signed templates read (skills, thinking
//! level, sender and channel, voice, language, model, time zone) reach the turn through every
//! interface: the service's turn request and `strata session prepare`, against the real binary.
//! A refused input is refused with the same words everywhere and stores nothing, and `strata
//! sign` refuses a template that asks for a value no input provides.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod serve_harness;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use serve_harness::{root, sign_agent, strata, Server, TOKEN};

/// The demo definition with assistant templates that name the model, signed in `dir`.
fn agent_naming_the_model(dir: &Path) -> (PathBuf, PathBuf) {
    let (agent, trust) = sign_agent(dir, 3, "");
    let toml = std::fs::read_to_string(dir.join("agent.toml")).unwrap();
    let at = toml.find("[templates.assistant]").unwrap();
    let end = toml[at..].find("\n\n").map_or(toml.len(), |e| at + e);
    let templated = toml.replace(
        &toml[at..end],
        "[templates.assistant]\n\
         tier1 = \"Written for {{ model }}.\"\n\
         tier2 = \"Written for {{ model }}.\"\n\
         tier3 = \"Written for {{ model }}.\"\n\
         tier4 = \"Written for {{ model }}.\"\n\
         tier5 = \"Written for {{ model }}.\"",
    );
    std::fs::write(dir.join("agent.toml"), templated).unwrap();
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
    (agent, trust)
}

fn prepare(dir: &Path, agent: &Path, trust: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("session")
        .arg("--agent")
        .arg(agent)
        .arg("--trust")
        .arg(trust)
        .args(["--id", "cli", "--store"])
        .arg(dir.join("cli.db"))
        .args([
            "prepare",
            "Review the release notes.",
            "--model",
            "cli-model",
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The section ids of a turn's report.
fn section_ids(report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![report];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(id)) = m.get("id") {
                    out.push(id.clone());
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a.iter()),
            _ => {}
        }
    }
    out
}

/// Each body is refused with 400 `invalid_request` and exactly the library's `words`, and the
/// session `id` does not exist afterwards.
fn refused_and_nothing_stored(srv: &Server, id: &str, cases: &[(Value, &String)]) {
    for (body, words) in cases {
        let r = srv.post(&format!("/v1/sessions/{id}/turns"), body);
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_request"),
            "{:?}",
            r.body
        );
        assert_eq!(&message(&r.body), *words);
        assert_eq!(
            srv.call("GET", &format!("/v1/sessions/{id}"), None, Some(TOKEN))
                .status,
            404,
            "a refused turn stored something"
        );
    }
}

#[test]
fn every_per_turn_input_reaches_the_turn_over_http_and_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = agent_naming_the_model(dir.path());
    let srv = Server::start_with(dir.path(), &agent, &trust, &[]);

    // No model in the turn: the server's model fills it, so the template renders.
    let plain = srv.post("/v1/sessions/in-1/turns", &json!({"message": "Hello"}));
    assert_eq!(plain.status, 200, "{:?}", plain.body);
    let request = plain.body["request"].to_string();
    assert!(request.contains("Written for test-model."), "{request}");
    assert!(request.contains("Model&#58; test-model"), "{request}");

    let full = srv.post(
        "/v1/sessions/in-2/turns",
        &json!({"message": "Review the release notes.",
                "skills": [{"id": "review/notes", "instructions": "Check every date twice."}],
                "thinking": "high",
                "inbound": {"sender": "maria-from-ops", "channel": "slack"},
                "voice": true,
                "language": "Portuguese",
                "model": "other-model",
                "time_zone": "Asia/Kolkata +05:30"}),
    );
    assert_eq!(full.status, 200, "{:?}", full.body);
    let request = full.body["request"].to_string();
    for want in [
        "Check every date twice.",
        "maria-from-ops",
        "slack",
        "Asia/Kolkata",
        "Written for other-model.",
        "Model&#58; other-model",
    ] {
        assert!(request.contains(want), "{want} missing from {request}");
    }
    assert_eq!(full.body["request"]["model"], "other-model");
    let ids = section_ids(&full.body["report"]);
    // The requested language reaches the assembler, where the signed `language` of layer 1
    // wins over it (I4): the report names the conflict.
    let conflicts = full.body["report"]["conflicts"].to_string();
    assert!(
        conflicts.contains("\"language\"") && conflicts.contains("core.language"),
        "{conflicts}"
    );
    for want in ["skill/review/notes", "thinking", "inbound", "voice"] {
        assert!(
            ids.iter().any(|i| i.ends_with(want)),
            "no section {want} in {ids:?}"
        );
    }

    // The same refusal words from the library, the service and the command line; a refused
    // turn stores nothing.
    let library_thinking = "max"
        .parse::<strata_registry::ThinkingLevel>()
        .unwrap_err()
        .to_string();
    let library_zone = "Mars"
        .parse::<strata_registry::TimeZone>()
        .unwrap_err()
        .to_string();
    let library_skill = strata_registry::ActiveSkill::new("bad id", "x")
        .unwrap_err()
        .to_string();
    refused_and_nothing_stored(
        &srv,
        "in-bad",
        &[
            (
                json!({"message": "Hi", "thinking": "max"}),
                &library_thinking,
            ),
            (json!({"message": "Hi", "time_zone": "Mars"}), &library_zone),
            (
                json!({"message": "Hi", "skills": [{"id": "bad id", "instructions": "x"}]}),
                &library_skill,
            ),
        ],
    );

    let skill = dir.path().join("review.md");
    std::fs::write(&skill, "Check every date twice.").unwrap();
    let spec = format!("review/notes={}", skill.display());
    let out = prepare(
        dir.path(),
        &agent,
        &trust,
        &[
            "--skill",
            &spec,
            "--thinking",
            "high",
            "--sender",
            "maria-from-ops",
            "--channel",
            "slack",
            "--inbound-meta",
            "thread=release-42",
            "--voice",
            "--language",
            "Portuguese",
            "--time-zone",
            "Asia/Kolkata +05:30",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = String::from_utf8_lossy(&out.stdout);
    for want in [
        "Check every date twice.",
        "maria-from-ops",
        "release-42",
        "Asia/Kolkata",
        "Written for cli-model.",
    ] {
        assert!(body.contains(want), "{want} missing from {body}");
    }
    let bad_skill = format!("bad id={}", skill.display());
    for (flags, words) in [
        (vec!["--thinking", "max"], &library_thinking),
        (vec!["--time-zone", "Mars"], &library_zone),
        (vec!["--skill", bad_skill.as_str()], &library_skill),
    ] {
        let out = prepare(dir.path(), &agent, &trust, &flags);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(words.as_str()), "{stderr} lacks {words:?}");
    }
}

#[test]
fn sign_refuses_a_template_using_a_value_no_input_provides() {
    let dir = tempfile::tempdir().unwrap();
    sign_agent(dir.path(), 3, "");
    let toml = std::fs::read_to_string(dir.path().join("agent.toml")).unwrap();
    let bad = toml.replace(
        "tier1 = \"Answer in one or two sentences.\"",
        "tier1 = \"Answer {{ user_name }} for {{ model }}.\"",
    );
    assert_ne!(bad, toml);
    std::fs::write(dir.path().join("agent.toml"), bad).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "sign",
            "agent.toml",
            "--key",
            "release.key",
            "--out",
            "x.json",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "templates.assistant.tier1 uses the value `user_name`, which no input provides"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("x.json").exists());
    let _ = root();
}

/// The recent footprint (Ivy), the session's business context (DevClaw) and the sanity-check
/// switch (Prompts System) reach the turn over HTTP and through `strata session prepare`, a
/// `[[prompts]]` sanity check of `strata.toml` takes part unless a turn turns it off, and a bad
/// footprint or business context is refused with the library's words and stores nothing.
#[test]
fn footprint_business_context_and_sanity_checks_reach_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(dir.path(), 3, "");
    let config = dir.path().join("strata.toml");
    std::fs::write(
        &config,
        "[[prompts]]\nid = \"reality\"\nkind = \"operational_guidelines\"\nwhen = \"sanity_check\"\n\
         text = \"Check each claim against a tool result first.\"\n",
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    let srv = Server::start_with(dir.path(), &agent, &trust, &["--config", config_arg]);

    let r = srv.post(
        "/v1/sessions/fp-1/turns",
        &json!({"message": "Did the build pass?",
                "recent_footprint": ["ran cargo build: ok", "ran cargo test: 1 failure"],
                "business_context": "Customer Acme, plan Enterprise, renewal in March."}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let request = r.body["request"].to_string();
    for want in [
        "ran cargo test",
        "renewal in March",
        "Check each claim against a tool result first.",
    ] {
        assert!(request.contains(want), "{want} missing from {request}");
    }
    let ids = section_ids(&r.body["report"]);
    for want in ["recent-footprint", "business-context", "config:reality"] {
        assert!(
            ids.iter().any(|i| i == want),
            "no section {want} in {ids:?}"
        );
    }
    let off = srv.post(
        "/v1/sessions/fp-2/turns",
        &json!({"message": "Hi", "sanity_checks": false}),
    );
    assert_eq!(off.status, 200, "{:?}", off.body);
    assert!(!off.body["request"]
        .to_string()
        .contains("Check each claim against"));

    let library_footprint = {
        let lines: Vec<std::sync::Arc<str>> = vec!["a\nb".into()];
        strata_registry::inputs::check_footprint(&lines)
            .unwrap_err()
            .to_string()
    };
    let library_business = strata_registry::inputs::check_business_context("  ")
        .unwrap_err()
        .to_string();
    refused_and_nothing_stored(
        &srv,
        "fp-bad",
        &[
            (
                json!({"message": "Hi", "recent_footprint": ["a\nb"]}),
                &library_footprint,
            ),
            (
                json!({"message": "Hi", "business_context": "  "}),
                &library_business,
            ),
        ],
    );

    let business = dir.path().join("business.md");
    std::fs::write(
        &business,
        "Customer Acme, plan Enterprise, renewal in March.",
    )
    .unwrap();
    let out = prepare(
        dir.path(),
        &agent,
        &trust,
        &[
            "--footprint",
            "ran cargo build: ok",
            "--footprint",
            "ran cargo test: 1 failure",
            "--business-context",
            business.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.contains("ran cargo test"), "{body}");
    assert!(body.contains("renewal in March"), "{body}");
    // `--config` brings the sanity check; `--no-sanity-checks` leaves it out.
    let with_config = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("session")
            .arg("--agent")
            .arg(&agent)
            .arg("--trust")
            .arg(&trust)
            .args(["--config", config_arg, "--id", "cfg", "--store"])
            .arg(dir.path().join("cfg.db"))
            .args(["prepare", "Hi.", "--model", "cli-model"])
            .args(extra)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let on = with_config(&[]);
    assert!(
        on.status.success(),
        "{}",
        String::from_utf8_lossy(&on.stderr)
    );
    assert!(String::from_utf8_lossy(&on.stdout).contains("Check each claim against"));
    let off = with_config(&["--no-sanity-checks"]);
    assert!(
        off.status.success(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
    assert!(!String::from_utf8_lossy(&off.stdout).contains("Check each claim against"));
    let out = prepare(dir.path(), &agent, &trust, &["--footprint", "a\nb"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(library_footprint.as_str()),
        "{stderr} lacks {library_footprint:?}"
    );
}
