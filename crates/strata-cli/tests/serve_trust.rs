//! Trust follows the operator into a running `strata serve` (ADR-0034): revoking the key that
//! signed the running agent stops its turns within one watcher interval and `readyz` answers 503,
//! a valid definition serves again; a reload never changes the agent's id; a trust store pinned
//! by its SHA-256 is refused at start and on reload when its bytes differ, truncations included.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod serve_harness;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use serve_harness::{sign_agent, strata, Server};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The id of the single key a `sign_agent` trust store lists.
fn key_id(trust: &Path) -> String {
    let text = std::fs::read_to_string(trust).unwrap();
    let line = text.lines().find(|l| l.starts_with("id = ")).unwrap();
    line.trim_start_matches("id = ")
        .trim_matches('"')
        .to_owned()
}

fn turn(srv: &Server, message: &str) -> serve_harness::Resp {
    srv.post("/v1/sessions/t/turns", &json!({ "message": message }))
}

/// Verifies ADR-0034: revoking the running agent's key refuses its turns (503
/// agent_unavailable) and readiness within the watcher interval, with a metric; signing a new
/// version with a new, trusted key serves again.
#[test]
fn revoking_the_running_agents_key_stops_its_turns() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(dir.path(), 1, "");
    let srv = Server::start_with(dir.path(), &agent, &trust, &["--watch-secs", "1"]);
    assert_eq!(turn(&srv, "hello").status, 200);
    let id = key_id(&trust);
    let original = std::fs::read_to_string(&trust).unwrap();
    std::fs::write(
        &trust,
        format!("{original}\n[[revoked]]\nid = \"{id}\"\nreason = \"laptop lost\"\n"),
    )
    .unwrap();
    wait_for("the revocation", || {
        turn(&srv, "still there?").status == 503
    });
    let refused = turn(&srv, "still there?");
    assert_eq!(refused.code(), "agent_unavailable");
    assert!(refused.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("revoked"));
    assert_eq!(srv.call("GET", "/readyz", None, None).status, 503);
    let metrics = srv.get("/metrics").body.as_str().unwrap().to_owned();
    assert!(metrics.contains("strata_agent_unavailable 1"), "{metrics}");
    // A threshold store whose only key is revoked cannot verify anything: a new key signs
    // version 2, the store trusts it, and the service serves again.
    let entry = strata(
        dir.path(),
        &["keygen", "--out", "new.key", "--trust-entry", "new-release"],
    );
    std::fs::write(
        &trust,
        format!("{original}\n{entry}\n[[revoked]]\nid = \"{id}\"\nreason = \"laptop lost\"\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agent.toml"),
        std::fs::read_to_string(dir.path().join("agent.toml"))
            .unwrap()
            .replace("version = 1", "version = 2"),
    )
    .unwrap();
    strata(
        dir.path(),
        &[
            "sign",
            "agent.toml",
            "--key",
            "new.key",
            "--out",
            "agent.signed.json",
        ],
    );
    wait_for("the new definition", || turn(&srv, "back?").status == 200);
    assert_eq!(srv.get("/v1/agent").body["version"], 2);
    assert_eq!(srv.call("GET", "/readyz", None, None).status, 200);
}

/// Verifies ADR-0034: a reload that would load another agent id is refused with its own reason,
/// and the service keeps serving the agent it started with.
#[test]
fn a_reload_never_changes_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(dir.path(), 1, "");
    let srv = Server::start_with(dir.path(), &agent, &trust, &["--watch-secs", "1"]);
    let before = srv.get("/v1/agent").body;
    let toml = std::fs::read_to_string(dir.path().join("agent.toml"))
        .unwrap()
        .replace("id = \"ada-demo\"", "id = \"mallory\"")
        .replace("version = 1", "version = 2");
    assert!(toml.contains("mallory"));
    std::fs::write(dir.path().join("agent.toml"), toml).unwrap();
    strata(
        dir.path(),
        &[
            "sign",
            "agent.toml",
            "--key",
            "release.key",
            "--out",
            "agent.signed.json",
        ],
    );
    srv.signal("HUP");
    wait_for("the refused reload", || {
        srv.get("/v1/agent").body["last_reload"]["ok"] == false
    });
    let after = srv.get("/v1/agent").body;
    assert_eq!(after["agent_id"], "ada-demo");
    assert_eq!(after["identity_digest"], before["identity_digest"]);
    assert!(after["last_reload"]["error"]
        .as_str()
        .unwrap()
        .contains("never changes who the agent is"));
    assert_eq!(turn(&srv, "who are you?").status, 200);
}

/// Verifies ADR-0034: a wrong `--trust-sha256` refuses the start; with the right one, a trust
/// store edited afterwards (a key revoked, or the file cut short) refuses the running agent at
/// the next check instead of being read.
#[test]
fn a_pinned_trust_store_is_checked_at_start_and_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(dir.path(), 1, "");
    let wrong = format!("sha256:{}", "0".repeat(64));
    let refused = Server::try_start(
        dir.path(),
        &agent,
        &trust,
        &["--trust-sha256", wrong.as_str()],
    );
    assert!(refused.is_err(), "a wrong pin started");
    let verdict = strata(
        dir.path(),
        &["verify", "agent.signed.json", "--trust", "trust.toml"],
    );
    let pin = verdict
        .split_whitespace()
        .find_map(|w| w.strip_prefix("trust="))
        .unwrap()
        .to_owned();
    let srv = Server::start_with(
        dir.path(),
        &agent,
        &trust,
        &["--trust-sha256", pin.as_str(), "--watch-secs", "1"],
    );
    assert_eq!(turn(&srv, "hello").status, 200);
    // Cut the store short: not parsed, refused.
    let bytes = std::fs::read(&trust).unwrap();
    std::fs::write(&trust, &bytes[..bytes.len() - 3]).unwrap();
    wait_for("the cut store", || turn(&srv, "again").status == 503);
    assert!(turn(&srv, "again").body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("pin"));
    // Put back: served again.
    std::fs::write(&trust, &bytes).unwrap();
    wait_for("the restored store", || turn(&srv, "again").status == 200);
}

/// Verifies ADR-0034 over every truncation: with a pin, no prefix of a trust store that revokes
/// a key is accepted (without one, a cut before `[[revoked]]` would verify the revoked key).
#[test]
fn every_truncation_of_a_pinned_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, trust) = sign_agent(dir.path(), 1, "");
    let entry = strata(
        dir.path(),
        &["keygen", "--out", "other.key", "--trust-entry", "other"],
    );
    let id = key_id(&trust);
    let full = format!(
        "{}\n{entry}\n[[revoked]]\nid = \"{id}\"\nreason = \"compromised\"\n",
        std::fs::read_to_string(&trust).unwrap()
    );
    std::fs::write(&trust, &full).unwrap();
    let pin = format!(
        "sha256:{}",
        strata_agentdef::trust_store_digest(full.as_bytes())
    );
    let source =
        strata_serve::AgentSource::new(&agent, &trust, &strata_serve::RollbackSpec::InMemory)
            .unwrap()
            .trust_pin(&pin)
            .unwrap();
    // The full store revokes the signer: the agent does not load.
    assert!(source.load().is_err());
    let mut accepted_unpinned = 0;
    for cut in 0..full.len() {
        std::fs::write(&trust, &full.as_bytes()[..cut]).unwrap();
        assert!(
            source.load().is_err(),
            "the store cut at byte {cut} was accepted"
        );
        if strata_serve::AgentSource::new(&agent, &trust, &strata_serve::RollbackSpec::InMemory)
            .unwrap()
            .load()
            .is_ok()
        {
            accepted_unpinned += 1;
        }
    }
    // Without the pin some cuts do verify the revoked key's agent: what the pin is for.
    assert!(accepted_unpinned > 0);
}

/// Verifies ADR-0034: `keygen --trust-entry NAME --trust-store FILE` adds the key to the store
/// and prints the store's new pin, the same digest `verify` prints and `--trust-sha256` takes.
#[test]
fn keygen_prints_the_pin_of_the_store_it_extends() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, _trust) = sign_agent(dir.path(), 1, "");
    let pin = strata(
        dir.path(),
        &[
            "keygen",
            "--out",
            "second.key",
            "--trust-entry",
            "second",
            "--trust-store",
            "trust.toml",
        ],
    );
    let pin = pin.trim();
    assert!(pin.starts_with("sha256:"), "{pin}");
    let bytes = std::fs::read(dir.path().join("trust.toml")).unwrap();
    assert_eq!(
        pin,
        format!("sha256:{}", strata_agentdef::trust_store_digest(&bytes))
    );
    let verdict = strata(
        dir.path(),
        &[
            "verify",
            "agent.signed.json",
            "--trust",
            "trust.toml",
            "--trust-sha256",
            pin,
        ],
    );
    assert!(verdict.contains(&format!("trust={pin}")), "{verdict}");
}
