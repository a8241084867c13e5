//! Bad input, answered well: each test gives the real `strata` binary one mistake a newcomer
//! makes and checks that it is refused (or survived) with an exit code and a message that says
//! what went wrong and what to do, without leaving damage behind.
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

fn run(mut cmd: Command) -> Run {
    let out = cmd.env_remove("RUST_LOG").output().unwrap();
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn strata(dir: &Path, args: &[&str]) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.args(args).current_dir(dir);
    run(c)
}

/// Run strata with a file-size limit of 0 bytes (and SIGXFSZ ignored), so that every write of
/// data fails as on a full disk, whoever runs the test (root included).
fn strata_on_a_full_disk(dir: &Path, args: &[&str]) -> Run {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg("trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir);
    run(c)
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example agent in `dir`, with a fresh key in its trust store.
fn example(dir: &Path) {
    for f in ["ada.toml", "SOUL.md", "trust.toml", "turn.json"] {
        std::fs::copy(repo_root().join("examples/ada").join(f), dir.join(f)).unwrap();
    }
    let r = strata(dir, &["keygen", "--out", "k.key", "--trust-entry", "k"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut trust = std::fs::read_to_string(dir.join("trust.toml")).unwrap();
    trust.push_str(&r.stdout);
    std::fs::write(dir.join("trust.toml"), trust).unwrap();
}

/// A temporary folder holding the example agent, signed (`ada.signed.json`).
fn signed_example() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    example(tmp.path());
    let r = strata(tmp.path(), &["sign", "ada.toml", "--key", "k.key"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    tmp
}

fn edit_definition(dir: &Path, from: &str, to: &str) {
    let p = dir.join("ada.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains(from), "{from}");
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn sign_refuses_a_broken_template_an_unlisted_preferred_tool_and_version_zero() {
    let cases = [
        (
            "tier1 = \"Be brief: one paragraph.\"",
            "tier1 = \"Be brief {{ unclosed\"",
            "templates.assistant.tier1 is not a valid template",
        ),
        (
            "prefer_over = [\"search_memory\"]",
            "prefer_over = [\"shell\"]",
            "`shell` is not on the allowlist",
        ),
        ("version = 1", "version = 0", "version is 0"),
        (
            "[characteristics]",
            "[[core.tools]]\nname = \"file_read\"\ndescription = \"Read any file.\"\n\n[characteristics]",
            "tool `file_read` is listed twice in the allowlist",
        ),
    ];
    for (from, to, says) in cases {
        let tmp = tempfile::tempdir().unwrap();
        example(tmp.path());
        edit_definition(tmp.path(), from, to);
        let r = strata(tmp.path(), &["sign", "ada.toml", "--key", "k.key"]);
        assert_eq!(r.code, 1, "{to}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{to}: {}", r.stderr);
        assert!(
            !tmp.path().join("ada.signed.json").exists(),
            "{to}: an envelope was written"
        );
    }
}

/// Verifies ADR-0015: an unpaired tool call in the input history gets the same exit code and
/// message whatever `--format` (plain text, JSON and every provider format), and
/// `--drop-unpaired` lets it through in every format.
#[test]
fn an_unpaired_tool_call_is_refused_the_same_way_in_every_format() {
    let tmp = signed_example();
    let dir = tmp.path();
    for (name, turns) in [
        (
            "call.json",
            r#"{"role": "tool_call", "call_id": "c1", "name": "file_read", "arguments": {"path": "notes.txt"}}"#,
        ),
        (
            "result.json",
            r#"{"role": "tool_result", "call_id": "c1", "content": "Fridays."}"#,
        ),
    ] {
        std::fs::write(
            dir.join(name),
            format!(
                r#"{{"turns": [{{"role": "user", "content": "Read notes.txt"}}, {turns}, {{"role": "user", "content": "And?"}}]}}"#
            ),
        )
        .unwrap();
        let missing = if name == "call.json" {
            "result"
        } else {
            "call"
        };
        for format in [
            "text",
            "json",
            "openai-chat",
            "openai-responses",
            "anthropic",
        ] {
            let args = [
                "assemble",
                "--agent",
                "ada.signed.json",
                "--trust",
                "trust.toml",
                "--input",
                name,
                "--format",
                format,
                "--model",
                "m",
                "--max-tokens",
                "256",
            ];
            let r = strata(dir, &args);
            assert_eq!(r.code, 1, "{name} {format}: {}", r.stderr);
            assert!(
                r.stderr
                    .contains(&format!("invalid history: tool call `c1` has no {missing}")),
                "{name} {format}: {}",
                r.stderr
            );
            assert!(r.stdout.is_empty(), "{name} {format}");
            let mut dropping = args.to_vec();
            dropping.push("--drop-unpaired");
            let r = strata(dir, &dropping);
            assert_eq!(r.code, 0, "{name} {format} --drop-unpaired: {}", r.stderr);
        }
    }
}

/// Verifies ADR-0016: `session prepare --continue` on a session with no user message yet fails
/// and says why, and a reply calling a tool that is not on the signed allowlist is refused with
/// nothing stored (the next continued turn holds no trace of it).
#[test]
fn session_refuses_an_empty_continue_and_a_reply_calling_an_unlisted_tool() {
    let tmp = signed_example();
    let dir = tmp.path();
    let session = |step: &[&str]| {
        let mut args = vec![
            "session",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--id",
            "s1",
            "--store",
            "memory.db",
        ];
        args.extend_from_slice(step);
        strata(dir, &args)
    };
    let provider = [
        "--format",
        "anthropic",
        "--model",
        "m",
        "--max-tokens",
        "256",
    ];
    let continued = |extra: &[&str]| {
        let mut step = vec!["prepare", "--continue"];
        step.extend_from_slice(extra);
        session(&step)
    };
    let r = continued(&provider);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("has no user message yet"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);

    let mut first = vec!["prepare", "Read notes.txt"];
    first.extend_from_slice(&provider);
    let r = session(&first);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = session(&[
        "reply",
        "--tool-call",
        r#"call_1:file_read:{"path":"notes.txt"}"#,
        "--tool-call",
        "call_2:delete_everything:{}",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("`delete_everything`")
            && r.stderr.contains("not on the agent's signed allowlist"),
        "{}",
        r.stderr
    );
    let r = continued(&provider);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stdout.contains("call_1"),
        "nothing of the refused reply is stored: {}",
        r.stdout
    );
}

#[test]
fn assemble_refuses_duplicate_section_ids_in_one_layer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    example(dir);
    assert_eq!(strata(dir, &["sign", "ada.toml", "--key", "k.key"]).code, 0);
    std::fs::write(
        dir.join("dup.json"),
        r#"{"sections": [
            {"layer": "long_term_memory", "id": "m1", "content": "one"},
            {"layer": "long_term_memory", "id": "m1", "content": "two"}]}"#,
    )
    .unwrap();
    let r = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "dup.json",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("section id `m1` is given twice in layer 6"),
        "{}",
        r.stderr
    );
    // The same id in two layers is a conflict the higher layer wins, and is reported.
    std::fs::write(
        dir.join("cross.json"),
        r#"{"sections": [
            {"layer": "shared", "id": "m1", "content": "one"},
            {"layer": "long_term_memory", "id": "m1", "content": "two"}]}"#,
    )
    .unwrap();
    let r = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "cross.json",
            "--format",
            "json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn layer_numbers_in_json_are_read_and_bad_ones_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    example(dir);
    assert_eq!(strata(dir, &["sign", "ada.toml", "--key", "k.key"]).code, 0);
    std::fs::write(
        dir.join("n.json"),
        r#"{"sections": [{"layer": 5, "id": "note", "content": "by number"}]}"#,
    )
    .unwrap();
    let r = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "n.json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("by number"), "{}", r.stdout);
    std::fs::write(
        dir.join("bad.json"),
        r#"{"sections": [{"layer": 9, "id": "note", "content": "x"}]}"#,
    )
    .unwrap();
    let r = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "bad.json",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("unknown layer `9`"), "{}", r.stderr);
    assert!(!r.stderr.contains("expected value"), "{}", r.stderr);
}

#[test]
fn a_budget_below_the_reserve_names_the_reserve_and_where_it_comes_from() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    example(dir);
    assert_eq!(strata(dir, &["sign", "ada.toml", "--key", "k.key"]).code, 0);
    let r = strata(
        dir,
        &[
            "assemble",
            "--agent",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--input",
            "turn.json",
            "--budget",
            "100",
        ],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("--budget 100 leaves no room")
            && r.stderr.contains("1024 tokens are reserved")
            && r.stderr.contains("signed definition"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("invalid budget: invalid budget"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unwritable_rollback_state_is_an_error_naming_the_state_file_not_a_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    example(dir);
    assert_eq!(strata(dir, &["sign", "ada.toml", "--key", "k.key"]).code, 0);
    let r = strata(
        dir,
        &[
            "verify",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--rollback-state",
            "rb.json",
            "--init-rollback-state",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Bump the version so that the next verify must record it.
    edit_definition(dir, "version = 1", "version = 2");
    assert_eq!(strata(dir, &["sign", "ada.toml", "--key", "k.key"]).code, 0);
    let before = std::fs::read(dir.join("rb.json")).unwrap();
    let r = strata_on_a_full_disk(
        dir,
        &[
            "verify",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--rollback-state",
            "rb.json",
        ],
    );
    assert_eq!(r.code, 1, "an I/O failure is not a refusal: {}", r.stderr);
    assert!(!r.stderr.contains("REFUSED"), "{}", r.stderr);
    assert!(r.stderr.contains("rb.json"), "{}", r.stderr);
    assert!(!r.stderr.contains(".tmp"), "{}", r.stderr);
    assert_eq!(std::fs::read(dir.join("rb.json")).unwrap(), before);
    // With room to write, the same command succeeds.
    let r = strata(
        dir,
        &[
            "verify",
            "ada.signed.json",
            "--trust",
            "trust.toml",
            "--rollback-state",
            "rb.json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn keygen_on_a_full_disk_leaves_no_key_file_and_the_retry_works() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = strata_on_a_full_disk(dir, &["keygen", "--out", "release.key"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        !dir.join("release.key").exists(),
        "a 0-byte key file was left behind"
    );
    let r = strata(dir, &["keygen", "--out", "release.key"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(std::fs::metadata(dir.join("release.key")).unwrap().len() > 40);
}

#[test]
fn keygen_out_a_folder_says_to_give_a_file_path() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("keys")).unwrap();
    let r = strata(tmp.path(), &["keygen", "--out", "keys"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("keys is a folder"), "{}", r.stderr);
    assert!(!r.stderr.contains("already exists"), "{}", r.stderr);
}

#[test]
fn demo_dir_naming_a_file_says_to_give_a_folder_and_leaves_the_file_alone() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "keep me").unwrap();
    let r = strata(tmp.path(), &["demo", "--dir", "notes.txt"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("is a file, not a folder"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("notes.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn an_empty_trust_store_says_how_to_add_a_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    example(dir);
    assert_eq!(strata(dir, &["sign", "ada.toml", "--key", "k.key"]).code, 0);
    std::fs::copy(
        repo_root().join("examples/ada/trust.toml"),
        dir.join("empty.toml"),
    )
    .unwrap();
    let r = strata(dir, &["verify", "ada.signed.json", "--trust", "empty.toml"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("lists no keys"), "{}", r.stderr);
    assert!(r.stderr.contains("--trust-entry"), "{}", r.stderr);
}

#[test]
fn memory_commands_never_turn_a_file_that_is_not_a_store_into_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("empty.txt"), b"").unwrap();
    std::fs::write(dir.join("notes.txt"), b"my notes\n").unwrap();
    for (file, says) in [
        ("empty.txt", "it is empty"),
        ("notes.txt", "not a SQLite database"),
    ] {
        for args in [
            vec!["memory", "stats", "--store", file],
            vec!["memory", "add", "a fact", "--store", file],
        ] {
            let before = std::fs::read(dir.join(file)).unwrap();
            let r = strata(dir, &args);
            assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
            assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
            assert_eq!(std::fs::read(dir.join(file)).unwrap(), before, "{args:?}");
        }
    }
}

#[test]
fn a_folder_import_survives_odd_file_names_a_nul_and_names_the_file_it_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let notes = dir.join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("good.md"), "Deploys on Tuesdays.\n").unwrap();
    std::fs::write(notes.join("nul.md"), b"before \0 after\n").unwrap();
    // A file name that is not UTF-8 (valid on Linux).
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.md");
    std::fs::write(notes.join(odd), "Lunch at noon.\n").unwrap();
    let r = strata(dir, &["memory", "--store", "m.db", "import", "notes"]);
    assert_eq!(r.code, 1, "one note was refused: {}", r.stderr);
    assert!(!r.stderr.contains("No such file"), "{}", r.stderr);
    assert!(
        r.stdout.contains("imported 2 memories"),
        "the other notes are stored: {}",
        r.stdout
    );
    assert!(
        r.stdout.contains("note nul.md") && r.stdout.contains("NUL"),
        "the refused note is named: {}",
        r.stdout
    );
    let r = strata(dir, &["memory", "--store", "m.db", "search", "lunch"]);
    assert!(r.stdout.contains("Lunch at noon"), "{}", r.stdout);
}

#[test]
fn a_bad_tag_is_refused_before_the_import_starts_and_names_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("m.jsonl"), "{\"content\": \"a fact\"}\n").unwrap();
    let r = strata(
        dir,
        &[
            "memory",
            "--store",
            "m.db",
            "import",
            "m.jsonl",
            "--tag",
            "two words",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--tag \"two words\""), "{}", r.stderr);
    assert!(!dir.join("m.db").exists(), "nothing was created");
    // A bad tag inside a JSONL line names the line.
    std::fs::write(
        dir.join("t.jsonl"),
        "{\"content\": \"ok\"}\n{\"content\": \"x\", \"tags\": [\"no spaces allowed\"]}\n",
    )
    .unwrap();
    let r = strata(dir, &["memory", "--store", "m.db", "import", "t.jsonl"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains("line 2"), "{}", r.stdout);
}

#[test]
fn memory_add_and_import_default_to_the_same_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let add = strata(tmp.path(), &["memory", "add", "--help"]).stdout;
    let import = strata(tmp.path(), &["memory", "import", "--help"]).stdout;
    let default_of = |help: &str| {
        let line = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("--agent"))
            .take_while(|l| !l.trim_start().starts_with("--tag"))
            .collect::<Vec<_>>()
            .join(" ");
        let at = line.find("[default: ").expect("--agent shows its default");
        line[at..].split(']').next().unwrap().to_owned()
    };
    assert_eq!(default_of(&add), default_of(&import));
}
