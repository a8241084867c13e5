//! The conformance suite and the fault tests against the PostgreSQL adapter, on a real server
//! that the harness starts. Verifies ADR-0012.
#![cfg(feature = "postgres")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;
mod pg_harness;

use std::sync::Arc;

use strata_memory::{HashEmbedder, ManualClock, PgStore, StoreOptions};

fn store(schema_prefix: &str, clock: &Arc<ManualClock>) -> PgStore {
    let server = pg_harness::shared();
    PgStore::connect_with(
        &server.test_params(),
        &pg_harness::fresh_schema(schema_prefix),
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_clock(clock.clone()),
    )
    .unwrap()
}

/// Verifies ADR-0012: PostgreSQL working memory conforms.
#[test]
fn working_memory_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::working_memory(&store("wm", &clock), &clock);
}

/// Verifies ADR-0031: PostgreSQL batches are all or nothing, with their operation records.
#[test]
fn batches_conform() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::batches(&store("batches", &clock), &clock);
}

/// PostgreSQL entries keep their metadata object byte for byte; a bad one refuses its batch.
#[test]
fn entry_meta_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::entry_meta(&store("meta", &clock), &clock);
}

/// Verifies ADR-0016: PostgreSQL session state conforms.
#[test]
fn session_state_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::session_state(&store("state", &clock), &clock);
}

/// Verifies ADR-0012: PostgreSQL long-term memory conforms.
#[test]
fn long_term_memory_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::long_term_memory(&store("ltm", &clock), &clock);
}

/// Verifies ADR-0012: PostgreSQL shared context conforms.
#[test]
fn shared_context_conforms() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::shared_context(Arc::new(store("shared", &clock)), &clock);
}

use strata_memory::{
    LongTermMemory, MemoryError, NewEntry, NewMemory, Scope, SharedContext, SharedContextWriter,
    WorkingMemory,
};

/// Verifies ADR-0012: stopping the server mid-test gives a connection-lost error, the store
/// reconnects once the server is back, and nothing that was acknowledged is lost.
#[test]
fn lost_connection_is_reported_and_nothing_stored_is_lost() {
    let server = pg_harness::PgServer::start();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    let store = PgStore::connect_with(
        &server.test_params(),
        "faults",
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_clock(clock.clone()),
    )
    .unwrap();
    let global = Scope::global();
    let mut entries = Vec::new();
    let mut memories = Vec::new();
    for i in 0..20 {
        entries.push(
            store
                .append("s", NewEntry::user(format!("turn {i}")))
                .unwrap(),
        );
        memories.push(
            store
                .put(NewMemory::new(
                    "agent",
                    format!("memory number {i} about topic {}", i % 3),
                ))
                .unwrap(),
        );
        store
            .set_fact(&global, &format!("k{i}"), &format!("v{i}"))
            .unwrap();
    }

    server.stop();
    let lost = |r: Result<(), MemoryError>| match r {
        Err(e) => assert!(e.is_connection_lost(), "expected ConnectionLost, got {e}"),
        Ok(()) => panic!("an operation succeeded while the server was down"),
    };
    lost(store.append("s", NewEntry::user("while down")).map(drop));
    lost(store.entries("s").map(drop));
    lost(store.put(NewMemory::new("agent", "while down")).map(drop));
    lost(
        store
            .search("memory topic", &strata_memory::SearchOptions::top(3))
            .map(drop),
    );
    lost(store.set_fact(&global, "down", "x").map(drop));
    let e = store.fact(&global, "k1").unwrap_err();
    assert!(
        e.to_string().contains("lost the connection"),
        "the message says what happened: {e}"
    );

    server.restart();
    // The same store reconnects by itself.
    assert_eq!(store.entries("s").unwrap(), entries);
    for m in &memories {
        assert_eq!(store.get(&m.id).unwrap().as_ref(), Some(m));
    }
    assert_eq!(store.count(None).unwrap(), 20);
    assert_eq!(
        store.facts(std::slice::from_ref(&global)).unwrap().len(),
        20
    );
    assert_eq!(
        store.fact(&global, "k7").unwrap().unwrap().value.as_str(),
        "v7"
    );
    // A new connection sees the same data, and writes work again.
    let again = PgStore::connect_with(
        &server.test_params(),
        "faults",
        Arc::new(HashEmbedder::default()),
        StoreOptions::default(),
    )
    .unwrap();
    assert_eq!(again.entries("s").unwrap(), entries);
    again.append("s", NewEntry::user("after restart")).unwrap();
    assert_eq!(store.entries("s").unwrap().len(), 21);
}

/// Verifies ADR-0036: entries are numbered within their session, the numbers go on after a
/// clear, and an entry lost from a session is a gap that the reads report instead of a
/// shorter history; a clear that finds another number of entries than recorded is refused.
#[test]
fn a_lost_entry_is_a_gap() {
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("gap");
    let store = PgStore::connect_with(
        &server.test_params(),
        &schema,
        Arc::new(HashEmbedder::default()),
        StoreOptions::default(),
    )
    .unwrap();
    store.append("s", NewEntry::user("gone")).unwrap();
    store.clear("s").unwrap();
    for i in 0..4 {
        store.append("s", NewEntry::user(format!("m{i}"))).unwrap();
    }
    let numbers: Vec<u64> = store
        .entries("s")
        .unwrap()
        .iter()
        .map(|e| e.session_seq)
        .collect();
    assert_eq!(numbers, [2, 3, 4, 5]);
    let mut c = postgres::Client::connect(&server.test_params(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "DELETE FROM \"{schema}\".wm_entries WHERE session = 's' AND session_seq = 3"
    ))
    .unwrap();
    let tok = strata_core::EstimateTokenizer::new();
    for r in [
        store.entries("s").map(drop),
        store.recent_within("s", 10_000, &tok).map(drop),
        store.clear("s").map(drop),
    ] {
        assert!(matches!(r, Err(MemoryError::Corrupt { .. })), "{r:?}");
    }
    c.batch_execute(&format!(
        "DELETE FROM \"{schema}\".wm_entries WHERE session = 's' AND session_seq = 5"
    ))
    .unwrap();
    let r = store.last_seq("s");
    assert!(matches!(r, Err(MemoryError::Corrupt { .. })), "{r:?}");
}

/// Verifies ADR-0012: a schema version this build does not know is refused by name.
#[test]
fn wrong_schema_version_is_refused() {
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("version");
    drop(
        PgStore::connect_with(
            &server.test_params(),
            &schema,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
        .unwrap(),
    );
    let mut c = postgres::Client::connect(&server.test_params(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "UPDATE \"{schema}\".schema_version SET version = 99"
    ))
    .unwrap();
    let e = PgStore::connect_with(
        &server.test_params(),
        &schema,
        Arc::new(HashEmbedder::default()),
        StoreOptions::default(),
    )
    .unwrap_err();
    match e {
        MemoryError::SchemaVersionMismatch {
            found, expected, ..
        } => {
            assert_eq!(found, 99);
            assert_eq!(expected, strata_memory::pg::PG_SCHEMA_VERSION);
        }
        other => panic!("expected SchemaVersionMismatch, got {other}"),
    }
}

/// Verifies ADR-0012: an embedder of another dimension than the store's is refused.
#[test]
fn embedder_dimension_mismatch_is_refused() {
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("dims");
    let open = |dims| {
        PgStore::connect_with(
            &server.test_params(),
            &schema,
            Arc::new(HashEmbedder::new(dims)),
            StoreOptions::default(),
        )
    };
    drop(open(256).unwrap());
    match open(64).unwrap_err() {
        MemoryError::EmbedderMismatch {
            stored_dims,
            given_dims,
            ..
        } => assert_eq!((stored_dims, given_dims), (256, 64)),
        other => panic!("expected EmbedderMismatch, got {other}"),
    }
}

/// An embedder of the store's dimension under another name.
#[derive(Debug)]
struct Renamed(HashEmbedder);

impl strata_memory::Embedder for Renamed {
    fn name(&self) -> &str {
        "another-model/256"
    }
    fn dims(&self) -> usize {
        self.0.dims()
    }
    fn embed(&self, texts: &[&str]) -> strata_memory::Result<Vec<Vec<f32>>> {
        self.0.embed(texts)
    }
}

/// Verifies ADR-0046: an embedder of the store's dimension under another name is refused,
/// naming both, and the store's recorded embedder is unchanged.
#[test]
fn embedder_of_another_name_is_refused() {
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("rename");
    let open = |e: Arc<dyn strata_memory::Embedder>| {
        PgStore::connect_with(&server.test_params(), &schema, e, StoreOptions::default())
    };
    drop(open(Arc::new(HashEmbedder::default())).unwrap());
    let e = open(Arc::new(Renamed(HashEmbedder::default()))).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, MemoryError::EmbedderMismatch { .. }), "{e}");
    assert!(
        msg.contains("strata-hash-v1/256") && msg.contains("another-model/256"),
        "{msg}"
    );
    // Still the store of the first embedder.
    drop(open(Arc::new(HashEmbedder::default())).unwrap());
}

/// Verifies ADR-0012: an unreachable server is a connection error, not a hang or a panic.
#[test]
fn unreachable_server_is_connection_lost() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = PgStore::connect(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname=none connect_timeout=2"
    ))
    .unwrap_err();
    assert!(e.is_connection_lost(), "{e}");
}

/// Verifies ADR-0019: a version 1 store (no codes) is migrated: codes are computed for the
/// stored vectors, and the vector ranking over more memories than one candidate pool agrees
/// with an exact ranking computed here from the embedder's vectors.
#[test]
fn codes_are_filled_by_migration_and_rank_like_exact_search() {
    use strata_memory::{Embedder, SearchMode, SearchOptions};
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("codes");
    let connect = || {
        PgStore::connect_with(
            &server.test_params(),
            &schema,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
        .unwrap()
    };
    let texts: Vec<String> = (0..3000)
        .map(|i| {
            format!(
                "note {i} about {} and {} in {}",
                ["deploys", "keys", "coffee", "builds", "tests"][i % 5],
                ["staging", "prod", "laptops", "the office"][i % 4],
                [
                    "march",
                    "april",
                    "may",
                    "june",
                    "july",
                    "august",
                    "september"
                ][i % 7]
            )
        })
        .collect();
    let store = connect();
    for chunk in texts.chunks(500) {
        store
            .put_many(
                chunk
                    .iter()
                    .map(|t| NewMemory::new("a", t.clone()))
                    .collect(),
            )
            .unwrap();
    }
    drop(store);
    let mut c = postgres::Client::connect(&server.test_params(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "DROP TABLE \"{schema}\".wm_sessions;
         ALTER TABLE \"{schema}\".wm_entries DROP COLUMN session_seq;
         ALTER TABLE \"{schema}\".wm_entries DROP COLUMN meta;
         DROP TABLE \"{schema}\".wm_operations;
         DROP TABLE \"{schema}\".session_state;
         DROP TRIGGER memories_deleted ON \"{schema}\".memories;
         DROP FUNCTION \"{schema}\".note_memory_deletion();
         DROP TABLE \"{schema}\".memory_deletions;
         DROP TABLE \"{schema}\".memory_codes;
         UPDATE \"{schema}\".schema_version SET version = 1"
    ))
    .unwrap();
    let store = connect();
    let n: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".memory_codes"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 3000);

    let e = HashEmbedder::default();
    let vectors = e
        .embed(&texts.iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let (mut hit, mut total) = (0, 0);
    for q in [
        "deploys to staging",
        "coffee in the office",
        "keys for laptops in may",
        "tests",
    ] {
        let qv = e.embed(&[q]).unwrap().remove(0);
        let mut exact: Vec<(f32, &str)> = vectors
            .iter()
            .zip(&texts)
            .map(|(v, t)| (dot(&qv, v), t.as_str()))
            .collect();
        exact.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
        let cut = exact[9].0;
        let got = store
            .search(q, &SearchOptions::top(10).mode(SearchMode::Vector))
            .unwrap();
        assert_eq!(got.len(), 10);
        for h in &got {
            total += 1;
            // Ties at the cut make any of the tied texts a correct answer.
            let sim = dot(&qv, &e.embed(&[h.record.content.as_str()]).unwrap()[0]);
            if sim >= cut - 1e-6 {
                hit += 1;
            }
        }
    }
    assert!(hit * 100 >= total * 95, "recall@10 {hit}/{total}");
}

/// Verifies ADR-0019: a handle's code cache follows writes and deletions made through another
/// handle (another runtime) without reloading.
#[test]
fn code_cache_follows_other_handles() {
    use strata_memory::{MemoryId, SearchMode, SearchOptions};
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("follow");
    let connect = || {
        PgStore::connect_with(
            &server.test_params(),
            &schema,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
        .unwrap()
    };
    let (a, b) = (connect(), connect());
    a.put_many(
        (0..300)
            .map(|i| {
                NewMemory::new("a", format!("routine note number {i} about builds"))
                    .with_id(MemoryId::new(format!("k{i}")).unwrap())
            })
            .collect(),
    )
    .unwrap();
    let vector = SearchOptions::top(3).mode(SearchMode::Vector);
    a.search("routine builds", &vector).unwrap();
    b.put(
        NewMemory::new("a", "zebra crossing near the office")
            .with_id(MemoryId::new("zebra").unwrap()),
    )
    .unwrap();
    b.put(NewMemory::new("a", "giraffe enclosure schedule").with_id(MemoryId::new("k7").unwrap()))
        .unwrap();
    assert!(b.delete(&MemoryId::new("k9").unwrap()).unwrap());
    let top = |q: &str| a.search(q, &vector).unwrap()[0].record.id.to_string();
    assert_eq!(top("zebra crossing near the office"), "zebra");
    assert_eq!(top("giraffe enclosure schedule"), "k7");
    let all = a
        .search(
            "routine note number 9 about builds",
            &SearchOptions::top(400).mode(SearchMode::Vector),
        )
        .unwrap();
    assert_eq!(all.len(), 300);
    assert!(all.iter().all(|h| h.record.id.as_str() != "k9"));
}

/// Verifies ADR-0029: the PostgreSQL lexical ranking is BM25 as SQLite FTS5's `bm25()`
/// computes it over the same memories (every query word counted, common ones included), also
/// after another handle added, replaced and deleted memories.
#[test]
fn lexical_ranking_equals_fts5_bm25_of_the_same_memories() {
    use strata_memory::{SearchMode, SearchOptions};
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("lexical");
    let connect = || {
        PgStore::connect_with(
            &server.test_params(),
            &schema,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
        .unwrap()
    };
    let (a, b) = (connect(), connect());
    let words: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    let text = |i: usize| -> String {
        // Varied texts: a skewed draw from the words, `the` in every memory and `alpha`
        // in about a third (common enough that a ranking leaving out words found in more
        // than a fifth of the memories would drop it, rare enough to weigh).
        let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let len = 2 + next() % 12;
        let mut out: Vec<&str> = (0..len)
            .map(|_| {
                let r = next() % 64;
                words[((r * r) / 103) as usize % words.len()].as_str()
            })
            .collect();
        out.push("the");
        if next() % 3 == 0 {
            out.push("alpha");
        }
        out.join(" ")
    };
    let mut contents: std::collections::BTreeMap<String, String> = Default::default();
    let mut batch = Vec::new();
    for i in 0..300 {
        contents.insert(format!("m{i}"), text(i));
        batch.push(
            NewMemory::new("a", text(i))
                .with_id(strata_memory::MemoryId::new(format!("m{i}")).unwrap()),
        );
    }
    a.put_many(batch).unwrap();
    let lexical = SearchOptions::top(20).mode(SearchMode::Lexical);
    a.search("the zebra", &lexical).unwrap();
    for i in (0..300).step_by(4) {
        contents.insert(format!("m{i}"), text(i + 500));
        b.put(
            NewMemory::new("a", text(i + 500))
                .with_id(strata_memory::MemoryId::new(format!("m{i}")).unwrap()),
        )
        .unwrap();
    }
    for i in (1..300).step_by(7) {
        contents.remove(&format!("m{i}"));
        assert!(b
            .delete(&strata_memory::MemoryId::new(format!("m{i}")).unwrap())
            .unwrap());
    }
    let fts = rusqlite::Connection::open_in_memory().unwrap();
    fts.execute_batch("CREATE VIRTUAL TABLE f USING fts5 (id UNINDEXED, content)")
        .unwrap();
    for (id, c) in &contents {
        fts.execute("INSERT INTO f (id, content) VALUES (?1, ?2)", [id, c])
            .unwrap();
    }
    for q in [
        "alpha w3",
        "the w1 alpha",
        "the",
        "w0 w7 w20 alpha",
        "alpha w2 w9 the",
        "w39 w38",
    ] {
        let match_expr = q.split(' ').collect::<Vec<_>>().join(" OR ");
        let mut stmt = fts
            .prepare("SELECT id, -bm25(f) FROM f WHERE f MATCH ?1 ORDER BY bm25(f)")
            .unwrap();
        let want: Vec<(String, f64)> = stmt
            .query_map([&match_expr], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let score: std::collections::HashMap<&str, f64> =
            want.iter().map(|(i, s)| (i.as_str(), *s)).collect();
        let got = a.search(q, &lexical).unwrap();
        assert_eq!(got.len(), want.len().min(20), "{q}");
        for (rank, h) in got.iter().enumerate() {
            let s = score[h.record.id.as_str()];
            assert!(
                (s - want[rank].1).abs() < 1e-9,
                "{q}: rank {rank}: {s} vs {}",
                want[rank].1
            );
        }
    }
}

/// Verifies ADR-0012: a batch stored in one statement keeps each memory's tags (none, one,
/// several), a batch repeating an id stores the last version, and both are read back whole.
#[test]
fn batches_keep_tags_and_the_last_of_repeated_ids() {
    use strata_memory::{LongTermMemory, MemoryId};
    let server = pg_harness::shared();
    let schema = pg_harness::fresh_schema("batch");
    let store = PgStore::connect_with(
        &server.test_params(),
        &schema,
        Arc::new(HashEmbedder::default()),
        StoreOptions::default(),
    )
    .unwrap();
    let id = |s: &str| MemoryId::new(s).unwrap();
    let stored = store
        .put_many(vec![
            NewMemory::new("a", "no tags").with_id(id("t0")),
            NewMemory::new("a", "one tag")
                .with_id(id("t1"))
                .with_tags(["ops"]),
            NewMemory::new("b", "two tags")
                .with_id(id("t2"))
                .with_tags(["ops", "team:core/x-y.z"]),
        ])
        .unwrap();
    assert_eq!(stored.len(), 3);
    let got = |s: &str| store.get(&id(s)).unwrap().unwrap();
    assert!(got("t0").tags.is_empty());
    assert_eq!(got("t1").tags.len(), 1);
    assert_eq!(&*got("t2").tags[1], "team:core/x-y.z");
    assert_eq!(&*got("t2").agent_id, "b");
    let again = store
        .put_many(vec![
            NewMemory::new("a", "first version").with_id(id("d")),
            NewMemory::new("a", "second version").with_id(id("d")),
        ])
        .unwrap();
    assert_eq!(again.len(), 2);
    assert_eq!(got("d").content.as_str(), "second version");
    assert_eq!(store.count(None).unwrap(), 4);
}

#[test]
fn a_clear_removes_the_named_state_in_its_transaction() {
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::clear_with_state(&store("clearstate", &clock));
}
