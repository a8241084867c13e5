//! `strata mcp pin` and `strata mcp diff` against real MCP servers: the reference server
//! `@modelcontextprotocol/server-everything` (`$STRATA_MCP_EVERYTHING`, its executable) and
//! `crates/strata-mcp/tests/servers/glossary.py` on the official Python SDK (`$STRATA_MCP_PYTHON`).
//! Without them a test says so and passes, unless `STRATA_REQUIRE_MCP=1` (set by `.ci/run`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const STRATA: &str = env!("CARGO_BIN_EXE_strata");

#[allow(clippy::print_stderr, reason = "a skipped test says why")]
fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            assert!(
                std::env::var_os("STRATA_REQUIRE_MCP").is_none_or(|v| v != "1"),
                "STRATA_REQUIRE_MCP=1 but ${var} is not set (.ci/run installs the test servers)"
            );
            eprintln!("skipped: ${var} is not set (see .ci/run)");
            None
        }
    }
}

fn glossary_script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../strata-mcp/tests/servers/glossary.py")
        .display()
        .to_string()
}

fn strata(dir: &Path, args: &[&str]) -> Output {
    Command::new(STRATA)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("runs strata")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The example agent's definition and soul, and a fresh key in a trust store, in `dir`.
fn example(dir: &Path) {
    let ada = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/ada");
    for f in ["ada.toml", "SOUL.md"] {
        std::fs::copy(ada.join(f), dir.join(f)).expect("copy");
    }
    let o = strata(dir, &["keygen", "--out", "k.key", "--trust-entry", "k"]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(dir.join("trust.toml"), &o.stdout).expect("trust");
}

/// Verifies ADR-0041: pins written from a live server sign, match the unchanged server (exit
/// 0), and a changed description or schema is drift (exit 5) naming the tool.
#[test]
fn pin_sign_and_diff_against_a_drifting_server() {
    let Some(python) = server("STRATA_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    example(d);
    let script = glossary_script();
    let before = std::fs::read_to_string(d.join("ada.toml")).expect("read");
    let o = strata(
        d,
        &[
            "mcp", "pin", "--server", "glossary", "--out", "ada.toml", "--except", "add_tool",
            "--", &python, &script,
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let after = std::fs::read_to_string(d.join("ada.toml")).expect("read");
    assert!(after.starts_with(&before));
    assert!(
        after.contains("description = \"Look up a term in the team glossary.\""),
        "{after}"
    );
    // Pinning the same tools again would pin them twice: refused, and the file is unchanged.
    let o = strata(
        d,
        &[
            "mcp", "pin", "--server", "glossary", "--out", "ada.toml", "--only", "shout", "--",
            &python, &script,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(d.join("ada.toml")).expect("read"),
        after
    );

    let o = strata(d, &["sign", "ada.toml", "--key", "k.key"]);
    assert!(o.status.success(), "{}", text(&o));
    let diff = |drift: &str| {
        strata(
            d,
            &[
                "mcp",
                "diff",
                "--definition",
                "ada.signed.json",
                "--server",
                "glossary",
                "--",
                "env",
                &format!("STRATA_GLOSSARY_DRIFT={drift}"),
                &python,
                &script,
            ],
        )
    };
    // `add_tool` was left out, so the unchanged server still shows one new tool; the pins of
    // the others match.
    let o = diff("");
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "new: `add_tool` is announced but not pinned\n"
    );
    let o = diff("description");
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("changed description: `lookup`"),
        "{}",
        text(&o)
    );
    let o = diff("schema");
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("changed schema: `lookup`"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_reference_server_pins_and_then_matches() {
    let Some(everything) = server("STRATA_MCP_EVERYTHING") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    example(d);
    let o = strata(
        d,
        &[
            "mcp",
            "pin",
            "--server",
            "everything",
            "--out",
            "ada.toml",
            "--",
            &everything,
            "stdio",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = strata(d, &["sign", "ada.toml", "--key", "k.key"]);
    assert!(o.status.success(), "{}", text(&o));
    for definition in ["ada.toml", "ada.signed.json"] {
        let o = strata(
            d,
            &[
                "mcp",
                "diff",
                "--definition",
                definition,
                "--server",
                "everything",
                "--",
                &everything,
                "stdio",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(o.stdout.is_empty(), "{}", text(&o));
    }
    // A server name that pins nothing: every announced tool is new.
    let o = strata(
        d,
        &[
            "mcp",
            "diff",
            "--definition",
            "ada.toml",
            "--server",
            "other",
            "--",
            &everything,
            "stdio",
        ],
    );
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
}

/// Verifies ADR-0041: `strata session` connects to the `[[mcp]]` servers of its `--config`:
/// `prepare` offers their pinned tools and their prompts (as layer-3 data), `run-call` runs a
/// recorded call through the server and records its result once; a call of a tool the last
/// prepared turn did not offer is refused and nothing is recorded.
#[test]
fn a_session_offers_and_runs_the_tools_of_its_configured_servers() {
    let Some(python) = server("STRATA_MCP_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    example(d);
    let script = glossary_script();
    let o = strata(
        d,
        &[
            "mcp", "pin", "--server", "glossary", "--out", "ada.toml", "--except", "add_tool",
            "--", &python, &script,
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = strata(d, &["sign", "ada.toml", "--key", "k.key"]);
    assert!(o.status.success(), "{}", text(&o));
    let command = serde_json::to_string(&[python.as_str(), script.as_str()]).expect("json");
    std::fs::write(
        d.join("strata.toml"),
        format!("[[mcp]]\nname = \"glossary\"\ncommand = {command}\n"),
    )
    .expect("config");
    let session = |step: &[&str]| {
        let mut args = vec![
            "session",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--store",
            "m.db",
            "--config",
            "strata.toml",
            "--id",
            "s1",
        ];
        args.extend_from_slice(step);
        strata(d, &args)
    };
    let o = session(&["prepare", "Shout hello.", "--model", "claude-sonnet-4-5"]);
    assert!(o.status.success(), "{}", text(&o));
    let body: serde_json::Value = serde_json::from_slice(&o.stdout).expect("body");
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"shout") && tools.contains(&"lookup"),
        "{tools:?}"
    );
    assert!(
        body.to_string()
            .contains("Glossary answers quote the glossary entry verbatim."),
        "{body}"
    );

    let o = session(&["reply", "--tool-call", "c1:shout:{\"text\":\"hello\"}"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = session(&["run-call", "c1"]);
    assert!(o.status.success(), "{}", text(&o));
    let run: serde_json::Value = serde_json::from_slice(&o.stdout).expect("run");
    assert_eq!(run["output"], "HELLO", "{run}");
    assert_eq!(run["is_error"], false, "{run}");
    // Run once: the call has a result now.
    let o = session(&["run-call", "c1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already has a result"),
        "{}",
        text(&o)
    );

    // A call recorded after a turn that offered no tools (the hydration path with none
    // retrieved) is not run.
    std::fs::write(d.join("none.json"), "{\"tools\": []}").expect("input");
    let o = session(&[
        "prepare",
        "Nothing to shout.",
        "--model",
        "claude-sonnet-4-5",
        "--path",
        "hydration",
        "--retrieved-tools",
        "none.json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = session(&["reply", "--tool-call", "c2:lookup:{\"term\":\"wg\"}"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = session(&["run-call", "c2"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("did not offer"),
        "{}",
        text(&o)
    );
}
