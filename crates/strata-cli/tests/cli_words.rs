//! What the command says on its happy and unhappy paths: a closed standard error does not
//! crash a command.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn strata(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("STRATA_TRUST_SHA256")
        .output()
        .unwrap();
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example agent in `dir`, signed with a fresh key that its trust store lists.
fn signed_example(dir: &Path) {
    for f in ["ada.toml", "SOUL.md", "trust.toml", "turn.json"] {
        std::fs::copy(repo_root().join("examples/ada").join(f), dir.join(f)).unwrap();
    }
    let r = strata(dir, &["keygen", "--out", "k.key", "--trust-entry", "k"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut trust = std::fs::read_to_string(dir.join("trust.toml")).unwrap();
    trust.push_str(&r.stdout);
    std::fs::write(dir.join("trust.toml"), trust).unwrap();
    let r = strata(dir, &["sign", "ada.toml", "--key", "k.key"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Run `strata args` with its standard error closed by the reader before anything is written,
/// reading standard output whole; the exit code.
fn with_stderr_closed(dir: &Path, args: &[&str]) -> i32 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child.wait().unwrap().code().unwrap_or(-1)
}

/// Log lines written to a standard error whose reader went away (`strata demo 2>&1 | head -1`)
/// are lost, and the command still ends as it would have: no panic, no exit code 101.
#[test]
fn a_closed_standard_error_loses_the_logs_but_never_crashes_the_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    signed_example(dir);
    // -v logs every step at info; --ignore-expiry-dangerously logs a warning.
    assert_eq!(with_stderr_closed(dir, &["-v", "demo"]), 0);
    assert_eq!(
        with_stderr_closed(
            dir,
            &[
                "verify",
                "ada.signed.json",
                "--trust",
                "trust.toml",
                "--ignore-expiry-dangerously",
            ],
        ),
        0
    );
}
