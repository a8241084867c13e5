//! A signed definition is self-contained (ADR-0035): `strata sign` embeds the files it
//! references, so the envelope and a trust store copied into an empty directory are all that
//! `verify`, `assemble` and `serve` need; `sign` refuses a window that has already ended.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod serve_harness;

use std::process::Command;

use serde_json::json;
use serve_harness::{root, sign_agent, Server};

fn strata(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Verifies ADR-0035: with only the envelope and the trust store in a directory (no SOUL.md),
/// the definition verifies, assembles and serves.
#[test]
fn the_envelope_and_the_trust_store_are_all_a_runtime_needs() {
    let signing = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(signing.path(), 1, "");
    let empty = tempfile::tempdir().unwrap();
    std::fs::copy(&agent, empty.path().join("agent.signed.json")).unwrap();
    std::fs::copy(&trust, empty.path().join("trust.toml")).unwrap();
    assert!(!empty.path().join("SOUL.md").exists());
    let out = strata(
        empty.path(),
        &["verify", "agent.signed.json", "--trust", "trust.toml"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::copy(
        root().join("examples/ada/turn.json"),
        empty.path().join("turn.json"),
    )
    .unwrap();
    let out = strata(
        empty.path(),
        &[
            "assemble",
            "--agent",
            "agent.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "turn.json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let soul = std::fs::read_to_string(root().join("crates/strata-cli/demo/SOUL.md")).unwrap();
    let first = soul.lines().find(|l| !l.trim().is_empty()).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(first.trim()));
    let srv = Server::start_with(
        empty.path(),
        &empty.path().join("agent.signed.json"),
        &empty.path().join("trust.toml"),
        &[],
    );
    let t = srv.post("/v1/sessions/s/turns", &json!({"message": "who are you?"}));
    assert_eq!(t.status, 200, "{:?}", t.body);
}

/// Verifies ADR-0035: `strata sign` refuses a definition whose window has ended unless told
/// `--allow-expired`, and the envelope it writes embeds the referenced file.
#[test]
fn sign_refuses_an_ended_window_and_embeds_files() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, _trust) = sign_agent(dir.path(), 1, "");
    let envelope = strata_agentdef::Envelope::parse(&std::fs::read(&agent).unwrap()).unwrap();
    let payload = String::from_utf8(envelope.payload.to_vec()).unwrap();
    assert!(payload.contains("[embedded.\"SOUL.md\"]"), "{payload}");
    let toml = std::fs::read_to_string(dir.path().join("agent.toml")).unwrap();
    let expired = toml.replacen(
        "version = 1",
        "version = 1\nnot_after = \"2020-01-01T00:00:00Z\"",
        1,
    );
    std::fs::write(dir.path().join("old.toml"), expired).unwrap();
    let out = strata(
        dir.path(),
        &[
            "sign",
            "old.toml",
            "--key",
            "release.key",
            "--out",
            "old.json",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_after"));
    assert!(!dir.path().join("old.json").exists());
    let out = strata(
        dir.path(),
        &[
            "sign",
            "old.toml",
            "--key",
            "release.key",
            "--out",
            "old.json",
            "--allow-expired",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
