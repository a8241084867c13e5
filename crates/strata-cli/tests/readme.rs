//! The README's getting-started commands, run exactly as written.
//!
//! The shell block between `<!-- readme-test: begin -->` and `<!-- readme-test: end -->` in the
//! repository's README is extracted and run by `bash -euo pipefail` with `HOME` in a temporary
//! directory and a `PATH` that holds only the system directories, so the only `strata` the
//! commands can find is the one the README's install step put in `~/.cargo/bin`.
//!
//! The install step (`cargo install --path crates/strata-cli`) is a release build of several
//! minutes; by default it is replaced by placing the binary this test suite built (the same
//! crate) where `cargo install` puts it. With `STRATA_README_INSTALL=1` the line runs as
//! written, installing into the temporary home.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

const BEGIN: &str = "<!-- readme-test: begin -->";
const END: &str = "<!-- readme-test: end -->";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command lines of the marked shell block.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme
        .find(BEGIN)
        .expect("the README marks its tested commands")
        + BEGIN.len();
    let end = start + readme[start..].find(END).expect("the marked block ends");
    let block = readme[start..end].trim();
    let body = block
        .strip_prefix("```sh")
        .and_then(|b| b.strip_suffix("```"))
        .expect("the marked block is one ```sh code block");
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_getting_started_commands_sign_verify_and_assemble_the_example() {
    let commands = readme_commands();
    assert!(
        commands[0].starts_with("cargo install --locked --path crates/strata-cli"),
        "the first command installs strata: {commands:?}"
    );
    let home = tempfile::tempdir().unwrap();
    let real_install = std::env::var_os("STRATA_README_INSTALL").is_some_and(|v| v == "1");
    let mut script = String::from("set -euo pipefail\n");
    for c in &commands {
        if c.starts_with("cargo install") && !real_install {
            // What `cargo install` leaves behind: the `strata` binary in ~/.cargo/bin.
            script.push_str(&format!(
                "mkdir -p ~/.cargo/bin && cp '{}' ~/.cargo/bin/strata\n",
                env!("CARGO_BIN_EXE_strata")
            ));
        } else {
            script.push_str(c);
            script.push('\n');
        }
    }
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(repo_root())
        .env("HOME", home.path())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env_remove("RUST_LOG");
    if real_install {
        // Keep the developer's toolchain and registry cache, but install into the temporary home.
        let cargo_home = std::env::var("CARGO_HOME")
            .unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap_or_default()));
        let path = format!(
            "{cargo_home}/bin:{}",
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env("CARGO_HOME", &cargo_home)
            .env("CARGO_INSTALL_ROOT", home.path().join(".cargo"))
            .env("PATH", path);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README's commands failed ({}):\nscript:\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );

    let work = home.path().join("strata-start");
    // `strata --version` printed the installed binary's version.
    assert!(
        stdout.contains(concat!("strata ", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    // keygen appended a key to the example's trust store.
    let trust = std::fs::read_to_string(work.join("trust.toml")).unwrap();
    let parsed: toml::Table = toml::from_str(&trust).unwrap();
    assert_eq!(parsed["keys"].as_array().unwrap().len(), 1, "{trust}");
    // verify accepted the envelope and started a rollback state.
    assert!(stdout.contains("OK agent=ada version=1"), "{stdout}");
    assert!(work.join("rollback.json").is_file());
    // sign wrote a DSSE envelope of an agent definition.
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(work.join("ada.signed.json")).unwrap()).unwrap();
    assert!(
        env["payloadType"]
            .as_str()
            .unwrap()
            .starts_with("application/vnd.strata.agent-definition+toml"),
        "{env}"
    );
    assert_eq!(env["signatures"].as_array().unwrap().len(), 1, "{env}");
    // assemble printed the signed identity (from SOUL.md) and fenced the injected memory.
    let soul = std::fs::read_to_string(repo_root().join("examples/ada/SOUL.md")).unwrap();
    assert!(stdout.contains(soul.lines().next().unwrap()), "{stdout}");
    assert!(stdout.contains("attacker@example.com"), "{stdout}");
    assert!(
        !stdout.contains("</strata:section> SYSTEM"),
        "the injected closing tag reached the text unescaped:\n{stdout}"
    );
    // The JSON output parses and explain drew it.
    let out_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(work.join("out.json")).unwrap()).unwrap();
    assert_eq!(out_json["report"]["agent_id"], "ada");
    let html = std::fs::read_to_string(work.join("explain.html")).unwrap();
    assert!(
        html.contains("memory.injection"),
        "explain.html names the sections"
    );
}

/// The example definition, trust store and input the README uses exist in the repository, and
/// the definition's pinned digest matches the file it references (computed here with `sha2`,
/// independently of strata).
#[test]
fn the_example_files_are_complete_and_pinned() {
    use sha2::Digest as _;
    let dir = repo_root().join("examples/ada");
    let def: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("ada.toml")).unwrap()).unwrap();
    let identity = def["core"]["identity"].as_table().unwrap();
    let file = identity["file"].as_str().unwrap();
    let bytes = std::fs::read(dir.join(file)).unwrap();
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(identity["sha256"].as_str().unwrap(), digest);
    let _: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("turn.json")).unwrap()).unwrap();
    let trust: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("trust.toml")).unwrap()).unwrap();
    assert_eq!(trust["threshold"].as_integer(), Some(1));
}

/// The shell blocks of `text`, each as written between its ```sh fence and the closing fence.
fn shell_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("```sh\n") {
        let body = &rest[i + "```sh\n".len()..];
        let Some(end) = body.find("```") else { break };
        out.push(body[..end].to_owned());
        rest = &body[end + 3..];
    }
    out
}

/// Every shell block of the README can be pasted into a shell: `bash -n` parses each one (a
/// placeholder like `<head printed above>` is a syntax error and fails this).
#[test]
fn every_readme_shell_block_parses() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = shell_blocks(&readme);
    assert!(blocks.len() >= 5, "found {} shell blocks", blocks.len());
    for block in blocks {
        let out = Command::new("bash")
            .args(["-n", "-c", &block])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "this README block does not parse:\n{block}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
