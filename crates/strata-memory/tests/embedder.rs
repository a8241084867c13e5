//! The OpenAI-compatible embedding client against a local HTTP server this test starts on
//! 127.0.0.1, and the built-in hashing embedder behind a real store. Verifies ADR-0012.
#![cfg(feature = "http")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use strata_memory::{
    Embedder, HashEmbedder, LongTermMemory, MemoryError, NewMemory, OpenAiEmbedder, SearchMode,
    SearchOptions, SqliteStore, StoreOptions,
};

/// What the fake server does with a request.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Answer with hashed vectors of `dims`, in reverse order of the inputs.
    Ok(usize),
    /// Answer HTTP 401 with an OpenAI-style error body.
    Unauthorized,
    /// Answer with something that is not an embeddings response.
    Garbage,
}

struct Seen {
    path: String,
    auth: Option<String>,
    body: serde_json::Value,
}

/// Start a one-thread HTTP server; returns its base URL and the requests it has seen.
fn server(mode: Mode) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            handle(stream, mode, &log);
        }
    });
    (base, seen)
}

fn handle(mut stream: TcpStream, mode: Mode, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_owned();
    let mut len = 0usize;
    let mut auth = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => len = value.trim().parse().unwrap(),
            "authorization" => auth = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let (status, answer) = match mode {
        Mode::Ok(dims) => {
            let inputs: Vec<String> = body["input"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            let e = HashEmbedder::new(dims);
            let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
            let vectors = e.embed(&refs).unwrap();
            let data: Vec<serde_json::Value> = vectors
                .into_iter()
                .enumerate()
                .rev()
                .map(
                    |(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}),
                )
                .collect();
            (
                "200 OK",
                serde_json::json!({"object": "list", "data": data, "model": body["model"]})
                    .to_string(),
            )
        }
        Mode::Unauthorized => (
            "401 Unauthorized",
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#
                .to_owned(),
        ),
        Mode::Garbage => ("200 OK", r#"{"hello":"world"}"#.to_owned()),
    };
    log.lock().unwrap().push(Seen { path, auth, body });
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    )
    .unwrap();
    stream.flush().unwrap();
}

/// Verifies ADR-0012: the client speaks the protocol: path, model, inputs in batches, bearer
/// key, vectors put back in input order.
#[test]
fn client_speaks_the_embeddings_protocol() {
    let (base, seen) = server(Mode::Ok(16));
    let e = OpenAiEmbedder::new(&base, "text-embedding-test", 16)
        .with_api_key("sk-test")
        .with_batch_size(2);
    assert!(
        !format!("{e:?}").contains("sk-test"),
        "the key is never printed"
    );
    let texts = ["alpha beta", "gamma", "delta epsilon", "zeta", "eta"];
    let got = e.embed(&texts).unwrap();
    let expect = HashEmbedder::new(16).embed(&texts).unwrap();
    assert_eq!(got, expect);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "5 texts in batches of 2");
    for s in seen.iter() {
        assert_eq!(s.path, "/v1/embeddings");
        assert_eq!(s.auth.as_deref(), Some("Bearer sk-test"));
        assert_eq!(s.body["model"], "text-embedding-test");
        assert_eq!(s.body["encoding_format"], "float");
        assert!(s.body.get("dimensions").is_none());
    }
    assert_eq!(seen[2].body["input"], serde_json::json!(["eta"]));
    assert_eq!(
        OpenAiEmbedder::new(&format!("{base}/v1/"), "m", 3).endpoint(),
        format!("{base}/v1/embeddings")
    );
}

/// Verifies ADR-0012: a store works end to end with the HTTP embedder.
#[test]
fn store_searches_with_the_http_embedder() {
    let (base, _) = server(Mode::Ok(32));
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(
        dir.path().join("m.db"),
        Arc::new(OpenAiEmbedder::new(&base, "m", 32)),
        StoreOptions::default(),
    )
    .unwrap();
    store
        .put_many(vec![
            NewMemory::new("a", "the release train leaves on thursday"),
            NewMemory::new("a", "coffee beans are in the left cupboard"),
        ])
        .unwrap();
    // A memory's own text is its nearest vector (cosine 1), whatever else the query shares
    // with other memories: the vector ranking alone, through the HTTP embedder, finds it, and
    // so does hybrid search, where both rankings agree (no tie for the fusion to break).
    let query = "the release train leaves on thursday";
    for mode in [SearchMode::Vector, SearchMode::Hybrid] {
        let hits = store
            .search(query, &SearchOptions::top(1).mode(mode))
            .unwrap();
        assert_eq!(hits[0].record.content.as_str(), query, "{mode:?}");
    }
    assert_eq!(store.dims(), 32);
}

/// Verifies ADR-0012: vectors of another length than configured are a dimension mismatch,
/// and a store created with another dimension refuses the embedder.
#[test]
fn dimension_mismatches_are_errors() {
    let (base, _) = server(Mode::Ok(8));
    let e = OpenAiEmbedder::new(&base, "m", 12);
    match e.embed(&["x"]).unwrap_err() {
        MemoryError::DimensionMismatch {
            expected, found, ..
        } => assert_eq!((expected, found), (12, 8)),
        other => panic!("expected DimensionMismatch, got {other}"),
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    drop(SqliteStore::open(&path).unwrap());
    let err = SqliteStore::open_with(
        &path,
        Arc::new(OpenAiEmbedder::new(&base, "m", 8)),
        StoreOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            MemoryError::EmbedderMismatch {
                stored_dims: 256,
                given_dims: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("`strata-hash-v1/256` (256 dimensions) and cannot be used with `openai-compatible:m/8` (8 dimensions)"),
        "{err}"
    );
}

/// Verifies ADR-0012: server errors and unreachable servers are Embedder errors that say what
/// happened.
#[test]
fn server_errors_are_reported() {
    let (base, _) = server(Mode::Unauthorized);
    let e = OpenAiEmbedder::new(&base, "m", 8)
        .embed(&["x"])
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, MemoryError::Embedder { .. }), "{msg}");
    assert!(
        msg.contains("HTTP 401") && msg.contains("Incorrect API key"),
        "{msg}"
    );

    let (base, _) = server(Mode::Garbage);
    let e = OpenAiEmbedder::new(&base, "m", 8)
        .embed(&["x"])
        .unwrap_err();
    assert!(e.to_string().contains("not an embeddings response"), "{e}");

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = OpenAiEmbedder::new(&format!("http://127.0.0.1:{port}"), "m", 8)
        .with_timeout(std::time::Duration::from_secs(2))
        .embed(&["x"])
        .unwrap_err();
    assert!(e.to_string().contains("could not reach"), "{e}");
}

/// Verifies ADR-0046: `[memory.embedder]` builds the hashing embedder or a client of the named
/// server whose key comes from the named environment variable; a missing variable is a
/// configuration error naming it.
#[test]
fn the_configured_embedder_reads_its_key_from_the_named_variable() {
    use strata_memory::{embedder_from_config_with, EmbedderConfig};
    use strata_registry::ConfigError;
    let hashing = embedder_from_config_with(&EmbedderConfig::Hashing { dims: Some(32) }, &|_| {
        panic!("the hashing embedder reads no variable")
    })
    .unwrap();
    assert_eq!(hashing.name(), "strata-hash-v1/32");
    let (base, seen) = server(Mode::Ok(8));
    let config = EmbedderConfig::OpenAi {
        url: base,
        model: "concepts".into(),
        dimensions: 8,
        api_key_env: Some("STRATA_TEST_EMBED_KEY".into()),
        request_dimensions: true,
    };
    let env = |name: &str| {
        assert_eq!(name, "STRATA_TEST_EMBED_KEY");
        Ok("sk-local".to_owned())
    };
    let e = embedder_from_config_with(&config, &env).unwrap();
    assert_eq!(e.name(), "openai-compatible:concepts/8");
    assert_eq!(e.embed(&["breakfast"]).unwrap()[0].len(), 8);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].auth.as_deref(), Some("Bearer sk-local"));
        assert_eq!(seen[0].body["model"], "concepts");
        assert_eq!(seen[0].body["dimensions"], 8);
    }
    for (value, why) in [
        (Err(std::env::VarError::NotPresent), "is not set"),
        (Ok(String::new()), "is set but empty"),
    ] {
        let err = embedder_from_config_with(&config, &|_| value.clone()).unwrap_err();
        assert!(matches!(err, ConfigError::Value { .. }), "{err}");
        assert_eq!(err.key(), Some("memory.embedder.api_key_env"));
        let msg = err.to_string();
        assert!(
            msg.contains("`STRATA_TEST_EMBED_KEY`") && msg.contains(why),
            "{msg}"
        );
    }
}
