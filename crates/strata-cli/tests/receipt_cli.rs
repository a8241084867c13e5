//! `strata receipt` end to end (ADR-0021): a runtime key from `strata keygen`, a receipt from
//! `strata receipt assemble` for each output format, `verify` with the body and the definition,
//! `show` in words, `audit` of the log, and each kind of tampering refused with exit code 3 and
//! its own cause; a trust store pin (`--trust-sha256`) on every command that reads one.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::{Path, PathBuf};
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
        .env_remove("STRATA_TRUST_SHA256")
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn demo(file: &str) -> String {
    root()
        .join("crates/strata-cli/demo")
        .join(file)
        .display()
        .to_string()
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Key, trust store, and one receipt per format appended to `receipts.log`.
fn setup(dir: &Path) -> Vec<String> {
    let k = strata(
        dir,
        &["keygen", "--out", "runtime.key", "--trust-entry", "runtime"],
    );
    assert_eq!(k.code, 0, "{}", k.stderr);
    std::fs::write(dir.join("runtime-trust.toml"), &k.stdout).unwrap();
    let input = root()
        .join("examples/conversation.json")
        .display()
        .to_string();
    let mut heads = Vec::new();
    for (i, format) in ["text", "openai-chat", "anthropic"].iter().enumerate() {
        let body = format!("body{i}");
        let receipt = format!("receipt{i}.json");
        let r = strata(
            dir,
            &[
                "receipt",
                "assemble",
                "--agent",
                &demo("agent.signed.json"),
                "--trust",
                &demo("trust.toml"),
                "--input",
                &input,
                "--format",
                format,
                "--model",
                "test-model",
                "--max-tokens",
                "512",
                "--key",
                "runtime.key",
                "--body",
                &body,
                "--receipt",
                &receipt,
                "--log",
                "receipts.log",
            ],
        );
        assert_eq!(r.code, 0, "{format}: {}", r.stderr);
        let head = r.stdout.split("head ").nth(1).unwrap();
        heads.push(head.split_whitespace().next().unwrap().to_owned());
    }
    heads
}

/// Verifies ADR-0017: every command that reads a trust store takes its pin, and a wrong pin
/// refuses it (exit code 1, nothing on stdout) before anything is verified; the right pin
/// passes.
#[test]
fn a_wrong_trust_pin_refuses_every_reader_of_a_trust_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    setup(dir);
    let pin = |path: &Path| format!("sha256:{}", sha256_hex(&std::fs::read(path).unwrap()));
    let runtime_pin = pin(&dir.join("runtime-trust.toml"));
    let agent_pin = pin(Path::new(&demo("trust.toml")));
    let wrong = format!("sha256:{}", "0".repeat(64));
    let agent = demo("agent.signed.json");
    let agent_trust = demo("trust.toml");
    let verify = |pin: &str, agent_pin: &str| {
        vec![
            "receipt".to_owned(),
            "verify".into(),
            "receipt0.json".into(),
            "--trust".into(),
            "runtime-trust.toml".into(),
            "--trust-sha256".into(),
            pin.into(),
            "--agent".into(),
            agent.clone(),
            "--agent-trust".into(),
            agent_trust.clone(),
            "--agent-trust-sha256".into(),
            agent_pin.into(),
        ]
    };
    let runtime = |command: &[&str], pin: &str| {
        let mut args: Vec<String> = command.iter().map(|a| (*a).to_owned()).collect();
        args.extend(["--trust", "runtime-trust.toml", "--trust-sha256", pin].map(String::from));
        args
    };
    let inspect = |pin: &str| {
        [
            "inspect",
            &agent,
            "--trust",
            &agent_trust,
            "--trust-sha256",
            pin,
        ]
        .map(String::from)
        .to_vec()
    };
    let cases = [
        (
            "receipt verify",
            verify(&wrong, &agent_pin),
            verify(&runtime_pin, &agent_pin),
        ),
        (
            "receipt verify --agent-trust",
            verify(&runtime_pin, &wrong),
            verify(&runtime_pin, &agent_pin),
        ),
        (
            "receipt show",
            runtime(&["receipt", "show", "receipt0.json"], &wrong),
            runtime(&["receipt", "show", "receipt0.json"], &runtime_pin),
        ),
        (
            "receipt audit",
            runtime(&["receipt", "audit", "receipts.log"], &wrong),
            runtime(&["receipt", "audit", "receipts.log"], &runtime_pin),
        ),
        ("inspect", inspect(&wrong), inspect(&agent_pin)),
    ];
    for (name, refused, accepted) in cases {
        let args: Vec<&str> = refused.iter().map(String::as_str).collect();
        let r = strata(dir, &args);
        assert_eq!(r.code, 1, "{name}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("is pinned"), "{name}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{name}: {}", r.stdout);
        let args: Vec<&str> = accepted.iter().map(String::as_str).collect();
        let r = strata(dir, &args);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    }
}

/// Verifies ADR-0021: the five-command audit story works, and what `receipt assemble` wrote
/// is exactly what the receipt names (checked with an independent SHA-256).
#[test]
fn the_audit_story_in_five_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let heads = setup(dir);
    for i in 0..3 {
        let body = std::fs::read(dir.join(format!("body{i}"))).unwrap();
        let receipt = format!("receipt{i}.json");
        let v = strata(
            dir,
            &[
                "receipt",
                "verify",
                &receipt,
                "--trust",
                "runtime-trust.toml",
                "--request",
                &format!("body{i}"),
                "--agent",
                &demo("agent.signed.json"),
                "--agent-trust",
                &demo("trust.toml"),
            ],
        );
        assert_eq!(v.code, 0, "{}", v.stderr);
        assert_eq!(v.stdout.lines().count(), 3, "{}", v.stdout);
        assert!(v.stdout.contains(&sha256_hex(&body)), "{}", v.stdout);
        assert!(v.stdout.contains("agent ada-demo"), "{}", v.stdout);
    }
    let show = strata(
        dir,
        &[
            "receipt",
            "show",
            "receipt2.json",
            "--trust",
            "runtime-trust.toml",
        ],
    );
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.starts_with("VERIFIED"), "{}", show.stdout);
    for words in [
        "Sent: request-body (anthropic)",
        "Agent: ada-demo version 2",
        "(user authority)",
        "(data authority)",
        "Tool refused: send_email",
    ] {
        assert!(show.stdout.contains(words), "{words}: {}", show.stdout);
    }
    let unverified = strata(dir, &["receipt", "show", "receipt0.json"]);
    assert_eq!(unverified.code, 0, "{}", unverified.stderr);
    assert!(unverified.stdout.starts_with("NOT VERIFIED"));
    let audit = strata(
        dir,
        &[
            "receipt",
            "audit",
            "receipts.log",
            "--trust",
            "runtime-trust.toml",
            "--head",
            &heads[2],
        ],
    );
    assert_eq!(audit.code, 0, "{}", audit.stderr);
    assert!(
        audit
            .stdout
            .starts_with(&format!("OK 3 entries chained, head {}", heads[2])),
        "{}",
        audit.stdout
    );
    // A log file named on the command line is audited even with STRATA_POSTGRES exported
    // (for `strata serve`): the file wins, the database is not contacted.
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "receipt",
            "audit",
            "receipts.log",
            "--trust",
            "runtime-trust.toml",
        ])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("STRATA_POSTGRES", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("OK 3 entries chained"));
}

/// Verifies ADR-0021: every kind of tampering is refused by the command with exit code 3 and
/// its own cause.
#[test]
fn tampering_is_refused_with_its_own_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let heads = setup(dir);
    let refused = |args: &[&str], cause: &str| {
        let r = strata(dir, args);
        assert_eq!(r.code, 3, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.starts_with(&format!("REFUSED {cause}: ")),
            "{args:?}: {}",
            r.stderr
        );
    };
    // One bit of the body.
    let mut body = std::fs::read(dir.join("body1")).unwrap();
    body[40] ^= 0x02;
    std::fs::write(dir.join("body1.bad"), &body).unwrap();
    let t = "runtime-trust.toml";
    refused(
        &[
            "receipt",
            "verify",
            "receipt1.json",
            "--trust",
            t,
            "--request",
            "body1.bad",
        ],
        "subject_mismatch",
    );
    // One bit of the signature inside the receipt.
    let text = std::fs::read_to_string(dir.join("receipt1.json")).unwrap();
    let sig_at = text.find("\"sig\": \"").unwrap() + 12;
    let mut bytes = text.into_bytes();
    bytes[sig_at] = if bytes[sig_at] == b'A' { b'B' } else { b'A' };
    std::fs::write(dir.join("receipt1.bad"), &bytes).unwrap();
    refused(
        &["receipt", "verify", "receipt1.bad", "--trust", t],
        "bad_signature",
    );
    // Another definition than the one assembled from.
    let other_trust = strata(dir, &["keygen", "--out", "other.key", "--trust-entry", "o"]);
    std::fs::write(dir.join("other-trust.toml"), &other_trust.stdout).unwrap();
    refused(
        &[
            "receipt",
            "verify",
            "receipt1.json",
            "--trust",
            "other-trust.toml",
        ],
        "unknown_key",
    );
    // Log entries deleted, reordered and edited.
    let log = std::fs::read(dir.join("receipts.log")).unwrap();
    let header_len = "strata-receipt-log v1\n".len();
    let starts: Vec<usize> = {
        let mut v = Vec::new();
        let mut pos = header_len;
        while pos < log.len() {
            v.push(pos);
            let nl = pos + log[pos..].iter().position(|b| *b == b'\n').unwrap();
            let line = std::str::from_utf8(&log[pos..nl]).unwrap();
            let len: usize = line.split(' ').nth(2).unwrap().parse().unwrap();
            pos = nl + 1 + len + 1;
        }
        v.push(log.len());
        v
    };
    let entry = |i: usize| &log[starts[i]..starts[i + 1]];
    let write = |name: &str, parts: &[&[u8]]| {
        let mut out = log[..header_len].to_vec();
        for p in parts {
            out.extend_from_slice(p);
        }
        std::fs::write(dir.join(name), out).unwrap();
    };
    write("deleted.log", &[entry(0), entry(2)]);
    write("reordered.log", &[entry(1), entry(0), entry(2)]);
    let mut edited = log.clone();
    edited[starts[1] + 300] ^= 0x01;
    std::fs::write(dir.join("edited.log"), &edited).unwrap();
    write("short.log", &[entry(0), entry(1)]);
    refused(&["receipt", "audit", "deleted.log"], "deleted");
    refused(&["receipt", "audit", "reordered.log"], "reordered");
    refused(&["receipt", "audit", "edited.log"], "edited");
    refused(
        &["receipt", "audit", "short.log", "--head", &heads[2]],
        "head_mismatch",
    );
    // A missing log is an error (exit 1), not a verdict.
    let r = strata(dir, &["receipt", "audit", "missing.log"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let help = strata(dir, &["receipt", "--help"]);
    assert!(help.stdout.contains("Examples:") && help.stdout.contains("strata receipt verify"));
}
