//! What the command says on its happy and unhappy paths: messages name the flag or the HTTP
//! field a user can change (never a Rust API), a closed standard error does not crash a
//! command, `verify` exits with the code its help promises, and nothing the user asked for is
//! reported as a warning.
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

/// Messages name what the user can change: a flag of the command (or the service's HTTP
/// field), never a Rust type or function, and a prefix is said once.
#[test]
fn messages_name_the_flag_to_change_not_a_rust_api() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    signed_example(dir);
    let assemble = |extra: &[&str]| {
        let mut args = vec![
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
        ];
        args.extend_from_slice(extra);
        strata(dir, &args)
    };

    // A context window too small for the response reserve.
    let r = assemble(&["--input", "turn.json", "--context-window", "100"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--context-window 100"), "{}", r.stderr);
    assert!(
        r.stderr.matches("invalid budget").count() <= 1,
        "{}",
        r.stderr
    );
    let session = |step: &[&str]| {
        let mut args = vec![
            "session",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--store",
            "m.db",
            "--id",
            "s1",
            "prepare",
            "--model",
            "claude-sonnet-4-5",
        ];
        args.extend_from_slice(step);
        strata(dir, &args)
    };
    let r = session(&["hello", "--context-window", "100"]);
    assert_ne!(r.code, 0);
    assert_eq!(
        r.stderr.matches("invalid budget").count(),
        1,
        "{}",
        r.stderr
    );

    // A missing rollback state names the flag that creates it, and no Rust API.
    let r = assemble(&["--input", "turn.json", "--rollback-state", "missing.json"]);
    assert!(r.stderr.contains("--init-rollback-state"), "{}", r.stderr);
    assert!(!r.stderr.contains("RollbackGuard"), "{}", r.stderr);

    // A tool call without its result names --drop-unpaired.
    let mut input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("turn.json")).unwrap()).unwrap();
    input["turns"].as_array_mut().unwrap().insert(
        1,
        serde_json::json!(
            {"role": "tool_call", "call_id": "call_9", "name": "file_read", "arguments": {"path": "x"}}
        ),
    );
    std::fs::write(dir.join("unpaired.json"), input.to_string()).unwrap();
    let anthropic = [
        "--input",
        "unpaired.json",
        "--format",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--max-tokens",
        "100",
    ];
    let r = assemble(&anthropic);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--drop-unpaired"), "{}", r.stderr);
    assert!(!r.stderr.contains("pair policy"), "{}", r.stderr);
    let r = assemble(&[&anthropic[..], &["--drop-unpaired"]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);

    // An Anthropic request needs --max-tokens.
    let r = assemble(&[
        "--input",
        "turn.json",
        "--format",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
    ]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--max-tokens"), "{}", r.stderr);
    assert!(!r.stderr.contains("request parameters"), "{}", r.stderr);

    // An empty user message names --continue.
    let r = session(&[" "]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("--continue"), "{}", r.stderr);
    assert!(!r.stderr.contains("continue_turn"), "{}", r.stderr);
}

/// `verify --help` lists a damaged or missing rollback state among the refusals, with exit code
/// 3 and the verdict line; the command does what its help says (ADR-0017).
#[test]
fn a_missing_or_damaged_rollback_state_is_refused_as_the_help_says() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    signed_example(dir);
    let help = strata(dir, &["verify", "--help"]).stdout.replace('\n', " ");
    assert!(help.contains("rollback_state_missing"), "{help}");
    assert!(help.contains("exit code 3"), "{help}");
    let verify = |state: &str| {
        strata(
            dir,
            &[
                "verify",
                "ada.signed.json",
                "--trust",
                "trust.toml",
                "--rollback-state",
                state,
            ],
        )
    };
    let r = verify("missing.json");
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("REFUSED rollback_state_missing: "),
        "{}",
        r.stderr
    );
    std::fs::write(
        dir.join("damaged.json"),
        "strata-rollback-state v2\nsha256:00\n{}\n",
    )
    .unwrap();
    let r = verify("damaged.json");
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("REFUSED rollback_state_damaged: "),
        "{}",
        r.stderr
    );
}

/// What the user asked for is not a warning: creating the rollback state with
/// `--init-rollback-state`, and the README's `receipt verify`, which reads a definition that
/// may have expired since the receipt was made. A weakened expiry asked for elsewhere still
/// warns.
#[test]
fn happy_paths_print_no_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    signed_example(dir);
    let r = strata(
        dir,
        &[
            "verify",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--rollback-state",
            "rollback.json",
            "--init-rollback-state",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("WARN"), "{}", r.stderr);
    assert!(r.stdout.starts_with("OK agent=ada"), "{}", r.stdout);

    // The README's receipt commands.
    let r = strata(
        dir,
        &["keygen", "--out", "runtime.key", "--trust-entry", "runtime"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(dir.join("runtime-trust.toml"), &r.stdout).unwrap();
    let r = strata(
        dir,
        &[
            "receipt",
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "turn.json",
            "--format",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "--max-tokens",
            "1024",
            "--key",
            "runtime.key",
            "--body",
            "request.json",
            "--receipt",
            "receipt.json",
            "--log",
            "receipts.log",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = strata(
        dir,
        &[
            "receipt",
            "verify",
            "receipt.json",
            "--trust",
            "runtime-trust.toml",
            "--request",
            "request.json",
            "--agent",
            "ada.signed.json",
            "--agent-trust",
            "trust.toml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("WARN"), "{}", r.stderr);

    // Asked for on a command that serves a model: still a warning.
    let r = strata(
        dir,
        &[
            "verify",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--ignore-expiry-dangerously",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("WARN"), "{}", r.stderr);
}

/// Verifies ADR-0047: `strata session compact` stores a summary that the next prepared request
/// carries in place of its range; a range reaching the newest user message is refused, with
/// the reason, and nothing is stored.
#[test]
fn session_compact_stores_a_summary_that_stands_in_for_its_range() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    signed_example(dir);
    let session = |step: &[&str]| {
        let mut args = vec![
            "session",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--store",
            "m.db",
            "--id",
            "c1",
        ];
        args.extend_from_slice(step);
        strata(dir, &args)
    };
    for (q, a) in [
        ("Which team owns billing?", "The payments team."),
        ("Who is on call?", "Noor, this week."),
    ] {
        let r = session(&["prepare", q, "--model", "claude-sonnet-4-5"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let r = session(&["reply", a]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let r = session(&["prepare", "And tomorrow?", "--model", "claude-sonnet-4-5"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let refused = session(&["compact", "--first", "1", "--last", "5", "--summary", "x"]);
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("exchange in progress"),
        "{}",
        refused.stderr
    );
    let r = session(&[
        "compact",
        "--first",
        "1",
        "--last",
        "2",
        "--summary",
        "Billing belongs to the payments team.",
        "--model",
        "claude-haiku-4-5",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("entries 1-2"), "{}", r.stderr);
    let r = session(&["prepare", "--continue", "--model", "claude-sonnet-4-5"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Billing belongs to the payments team."),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("Which team owns billing?"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("Who is on call?"), "{}", r.stdout);
}
