//! `strata memory --config` embeds with the embedder `strata.toml` names (ADR-0046): a store
//! created with the local embeddings server ranks by meaning, and opening it with another
//! embedder is refused with both named. The server is
//! crates/strata-assembler/tests/servers/embeddings.py (Python 3, standard library only).
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod serve_harness;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const KEY: &str = "sk-test-concepts";

struct Server(Child, u16);

impl Server {
    fn start() -> Server {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../strata-assembler/tests/servers/embeddings.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--key", KEY, "--model", "concepts-v1"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 on PATH");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .parse()
            .unwrap();
        Server(child, port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn strata(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir)
        .env("STRATA_TEST_CONCEPTS_KEY", KEY)
        .env_remove("STRATA_MEMORY_STORE")
        .output()
        .unwrap()
}

#[test]
fn memory_commands_use_the_configured_embedder_and_keep_it() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("strata.toml"),
        format!(
            "[memory.embedder]\nkind = \"openai\"\nurl = \"http://127.0.0.1:{}\"\nmodel = \"concepts-v1\"\ndimensions = 8\napi_key_env = \"STRATA_TEST_CONCEPTS_KEY\"\n",
            server.1
        ),
    )
    .unwrap();
    let with = |args: &[&str]| {
        let mut all = vec!["memory", "--store", "m.db", "--config", "strata.toml"];
        all.extend_from_slice(args);
        strata(dir, &all)
    };
    for text in [
        "The cafeteria serves morning meals from 7 to 10.",
        "The WireGuard tunnel to the office opens at boot.",
    ] {
        let o = with(&["add", "--agent", "ada", text]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = with(&["search", "breakfast hours", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hits: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = hits[0]["record"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no hit in {hits}"));
    assert!(first.contains("cafeteria"), "{hits}");
    assert_eq!(hits[0]["vector_rank"], 1, "{hits}");

    // Without the configuration the hashing embedder would mix its vectors in: refused.
    let o = strata(
        dir,
        &["memory", "--store", "m.db", "search", "breakfast hours"],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("concepts-v1") && err.contains("hash"), "{err}");
}

/// `strata serve --embedder-url ... --embedder-model ... --embedder-dimensions ...
/// --embedder-key-env ...` searches memory by meaning; a bad value is refused before the
/// service starts, naming the flag.
#[test]
fn serve_takes_the_embedder_from_its_flags() {
    let server = Server::start();
    std::env::set_var("STRATA_TEST_CONCEPTS_KEY", KEY);
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", server.1);
    let srv = serve_harness::Server::start(
        tmp.path(),
        &[
            "--embedder-url",
            &url,
            "--embedder-model",
            "concepts-v1",
            "--embedder-dimensions",
            "8",
            "--embedder-key-env",
            "STRATA_TEST_CONCEPTS_KEY",
        ],
    );
    for text in [
        "The cafeteria serves morning meals from 7 to 10.",
        "The WireGuard tunnel to the office opens at boot.",
    ] {
        let r = srv.post("/v1/memories", &serde_json::json!({"content": text}));
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let hits = srv.post(
        "/v1/memories/search",
        &serde_json::json!({"query": "breakfast hours"}),
    );
    assert_eq!(hits.status, 200, "{:?}", hits.body);
    let first = hits.body["results"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(first.contains("cafeteria"), "{}", hits.text);

    let o = strata(
        tmp.path(),
        &[
            "serve",
            "--agent",
            "a.json",
            "--trust",
            "t.toml",
            "--model",
            "m",
            "--embedder-url",
            "ftp://example.com",
            "--embedder-model",
            "m",
            "--embedder-dimensions",
            "8",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--embedder-url"), "{err}");
}
