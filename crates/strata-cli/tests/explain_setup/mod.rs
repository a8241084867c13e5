//! The example agent assembled into reports for `strata explain` to draw, shared by the tests
//! of the page and of the table.
#![allow(
    dead_code,
    reason = "each test file uses the part of the setup it needs"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The root of the repository.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run `strata args` in `dir`, which must succeed; its standard output.
pub fn strata(dir: &Path, args: &[&str]) -> String {
    strata_with(dir, args, &[])
}

/// Run `strata args` in `dir` with the environment variables `env` set, which must succeed;
/// its standard output.
pub fn strata_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("COLUMNS")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The headless browser on `PATH`, if any.
pub fn browser() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// The example agent, signed with a fresh key, and an input with thirty memories and a long
/// log next to the example's own turn.
pub fn page(dir: &Path) -> PathBuf {
    for f in ["ada.toml", "SOUL.md", "trust.toml"] {
        std::fs::copy(repo_root().join("examples/ada").join(f), dir.join(f)).unwrap();
    }
    // The screenshot folder may hold a key from an earlier run, which keygen never overwrites.
    let _ = std::fs::remove_file(dir.join("k.key"));
    let entry = strata(dir, &["keygen", "--out", "k.key", "--trust-entry", "k"]);
    let mut trust = std::fs::read_to_string(dir.join("trust.toml")).unwrap();
    trust.push_str(&entry);
    std::fs::write(dir.join("trust.toml"), trust).unwrap();
    strata(dir, &["sign", "ada.toml", "--key", "k.key"]);

    let mut input: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("examples/ada/turn.json")).unwrap())
            .unwrap();
    let sections = input["sections"].as_array_mut().unwrap();
    for i in 0..30 {
        sections.push(serde_json::json!({
            "layer": "long_term_memory",
            "id": format!("memory.{i}"),
            "content": format!("Fact {i}: {}", "check the dashboards before a deploy. ".repeat(3 + (i % 5) * 8)),
        }));
    }
    sections.push(serde_json::json!({
        "layer": "working_memory", "id": "log.big", "content": "build log line <b>bold?</b>\n".repeat(600)
    }));
    std::fs::write(dir.join("big.json"), input.to_string()).unwrap();
    explained(dir, "big.json", "out.json", "explain.html")
}

/// Assemble `input` within 8,000 tokens into the report `out`, and draw it into `html`.
pub fn explained(dir: &Path, input: &str, out: &str, html: &str) -> PathBuf {
    let json = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            input,
            "--budget",
            "8000",
            "--format",
            "json",
        ],
    );
    std::fs::write(dir.join(out), json).unwrap();
    strata(dir, &["explain", out, "--html", html]);
    dir.join(html)
}

/// The example's turn and a tool call whose arguments and result are each far over the budget:
/// a call and its result are kept or dropped together, and a pair is kept in cut form only when
/// one member fits whole beside the other cut, so dropping them leaves most of the budget
/// unused (run after `page`, which signs the agent).
pub fn idle_page(dir: &Path) -> PathBuf {
    let mut input: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("examples/ada/turn.json")).unwrap())
            .unwrap();
    let turns = input["turns"].as_array_mut().unwrap();
    turns.push(serde_json::json!({
        "role": "tool_call", "call_id": "call_2", "name": "file_read",
        "arguments": {"path": "build.log", "pattern": "error|warning|fatal ".repeat(3_000)}
    }));
    turns.push(serde_json::json!({
        "role": "tool_result", "call_id": "call_2",
        "content": "build log line <b>bold?</b>\n".repeat(3_000)
    }));
    std::fs::write(dir.join("idle.json"), input.to_string()).unwrap();
    explained(dir, "idle.json", "idle.out.json", "idle.html")
}
