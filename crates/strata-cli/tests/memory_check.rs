//! `strata memory check` through the real binary (ADR-0036): a clean store exits 0, a store
//! with a damaged byte exits 4 and names the damage, in text and in JSON, and a missing store
//! is an error (1), not a verdict.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::Path;
use std::process::Command;

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
        .env_remove("STRATA_MEMORY_STORE")
        .output()
        .unwrap();
    Run {
        code: out.status.code().expect("the process exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Verifies ADR-0036: the check's verdict is its exit code, and every finding is printed.
#[test]
fn check_exits_0_when_clean_and_4_when_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = strata(d, &["memory", "--store", "none.db", "check"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("there is no memory store"),
        "{}",
        missing.stderr
    );

    for text in [
        "MARKER-ONE the staging deploy needs the VPN",
        "MARKER-TWO deploys freeze on Fridays",
    ] {
        let r = strata(
            d,
            &["memory", "--store", "m.db", "add", text, "--agent", "ada"],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let clean = strata(d, &["memory", "--store", "m.db", "check"]);
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    assert!(clean.stdout.contains("result    clean"), "{}", clean.stdout);
    assert!(clean.stdout.contains("memory_changes"), "{}", clean.stdout);
    let json = strata(d, &["memory", "--store", "m.db", "--json", "check"]);
    assert_eq!(json.code, 0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["clean"], true);
    assert_eq!(v["findings"].as_array().map(Vec::len), Some(0));

    // One byte of a memory's text, changed in the file.
    let path = d.join("m.db");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(10)
        .position(|w| w == b"MARKER-TWO")
        .expect("the text is in the file");
    bytes[at + 7] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();

    let damaged = strata(d, &["memory", "--store", "m.db", "check"]);
    assert_eq!(damaged.code, 4, "{}{}", damaged.stdout, damaged.stderr);
    assert!(
        damaged.stdout.contains("result    DAMAGED"),
        "{}",
        damaged.stdout
    );
    assert!(damaged.stdout.contains("checksum"), "{}", damaged.stdout);
    assert!(damaged.stderr.contains("is damaged"), "{}", damaged.stderr);
    let json = strata(d, &["memory", "--store", "m.db", "--json", "check"]);
    assert_eq!(json.code, 4);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["clean"], false);
    let findings = v["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["check"] == "memories"),
        "{findings:?}"
    );
    // The check wrote nothing.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}
