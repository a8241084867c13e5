//! The conformance suite and the fault tests against the SQLite adapter. Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;

use std::sync::Arc;

use strata_memory::{HashEmbedder, ManualClock, SqliteStore, StoreOptions};

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> SqliteStore {
    SqliteStore::open_with(
        dir.path().join("memory.db"),
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_clock(clock.clone()),
    )
    .unwrap()
}

/// Verifies ADR-0012: SQLite working memory conforms.
#[test]
fn working_memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::working_memory(&open(&dir, &clock), &clock);
}

/// Verifies ADR-0031: SQLite batches are all or nothing, with their operation records, and
/// the records survive reopening the file and pass the integrity check.
#[test]
fn batches_conform() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::batches(&open(&dir, &clock), &clock);
    let reopened = open(&dir, &clock);
    assert_eq!(
        reopened.operation("b1", "key-1").unwrap().unwrap().answer,
        "second life"
    );
    reopened.check_integrity().unwrap();
}

/// SQLite entries keep their metadata object byte for byte, across reopening the file, under
/// the row checksum; a bad one refuses its batch.
#[test]
fn entry_meta_conforms_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    let store = open(&dir, &clock);
    conformance::entry_meta(&store, &clock);
    let mut held = Vec::new();
    for m in conformance::METAS {
        held.push(store.append("k", NewEntry::user("u").with_meta(m)).unwrap());
    }
    held.push(store.append("k", NewEntry::assistant("plain")).unwrap());
    drop(store);
    let reopened = open(&dir, &clock);
    assert_eq!(reopened.entries("k").unwrap(), held);
    reopened.check_integrity().unwrap();
}

/// Verifies ADR-0012: SQLite long-term memory conforms.
#[test]
fn long_term_memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::long_term_memory(&open(&dir, &clock), &clock);
}

/// Verifies ADR-0012: SQLite shared context conforms.
#[test]
fn shared_context_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::shared_context(Arc::new(open(&dir, &clock)), &clock);
}

use strata_memory::{
    LongTermMemory, MemoryError, NewEntry, NewMemory, Scope, SearchOptions, SharedContext,
    SharedContextWriter, WorkingMemory,
};

fn open_path(path: &std::path::Path) -> Result<SqliteStore, MemoryError> {
    SqliteStore::open(path)
}

/// Verifies ADR-0012: data survives closing and reopening the file.
#[test]
fn data_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let (entry, memory) = {
        let s = open_path(&path).unwrap();
        s.set_fact(&Scope::global(), "tz", "UTC").unwrap();
        (
            s.append("s", NewEntry::user("hello")).unwrap(),
            s.put(NewMemory::new("a", "the build uses cargo").with_tags(["x"]))
                .unwrap(),
        )
    };
    let s = open_path(&path).unwrap();
    assert_eq!(s.entries("s").unwrap(), vec![entry]);
    assert_eq!(s.get(&memory.id).unwrap(), Some(memory.clone()));
    let hits = s.search("cargo build", &SearchOptions::top(1)).unwrap();
    assert_eq!(hits[0].record, memory);
    assert_eq!(
        s.fact(&Scope::global(), "tz")
            .unwrap()
            .unwrap()
            .value
            .as_str(),
        "UTC"
    );
    s.check_integrity().unwrap();
    let stats = s.stats().unwrap();
    assert_eq!(
        (stats.memories, stats.entries, stats.sessions, stats.facts),
        (1, 1, 1, 1)
    );
    assert_eq!(
        stats.schema_version,
        strata_memory::sqlite::SQLITE_SCHEMA_VERSION
    );
}

/// Verifies ADR-0012: a file that is not a database is a Corrupt error and is left as it was.
#[test]
fn garbage_file_is_corrupt_and_not_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 13) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();
    match open_path(&path) {
        Err(MemoryError::Corrupt { detail, .. }) => assert!(!detail.is_empty()),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        garbage,
        "the file was changed"
    );
}

/// Verifies ADR-0012: damaged pages inside a real store are reported as Corrupt.
#[test]
fn damaged_pages_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    {
        let s = open_path(&path).unwrap();
        let many: Vec<NewMemory> = (0..300)
            .map(|i| NewMemory::new("a", format!("memory {i} with some words to index")))
            .collect();
        s.put_many(many).unwrap();
    }
    // Closing checkpointed the WAL into the main file; scribble over everything after page 1.
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 3 * 4096, "the store is several pages long");
    for (i, b) in bytes.iter_mut().enumerate().skip(4096) {
        *b = (i % 251) as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    let outcome = open_path(&path).and_then(|s| {
        s.check_integrity()?;
        s.search("memory words", &SearchOptions::top(3)).map(drop)
    });
    match outcome {
        Err(MemoryError::Corrupt { .. }) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// Verifies ADR-0012: a SQLite file of another application is not taken over.
#[test]
fn foreign_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        .unwrap();
    drop(c);
    assert!(matches!(open_path(&path), Err(MemoryError::Corrupt { .. })));
}

/// Verifies ADR-0012: a store written by a newer schema version is refused, naming both
/// versions.
#[test]
fn wrong_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    drop(open_path(&path).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE schema_version SET version = 42", [])
        .unwrap();
    drop(c);
    let e = open_path(&path).unwrap_err();
    match &e {
        MemoryError::SchemaVersionMismatch {
            found, expected, ..
        } => {
            assert_eq!(*found, 42);
            assert_eq!(*expected, strata_memory::sqlite::SQLITE_SCHEMA_VERSION);
        }
        other => panic!("expected SchemaVersionMismatch, got {other}"),
    }
    assert!(e.to_string().contains("schema version 42"), "{e}");
}

/// Verifies ADR-0012 and ADR-0046: an embedder of another dimension than the store's is
/// refused.
#[test]
fn embedder_dimension_mismatch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    drop(open_path(&path).unwrap());
    let e = SqliteStore::open_with(
        &path,
        Arc::new(HashEmbedder::new(64)),
        StoreOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            MemoryError::EmbedderMismatch {
                stored_dims: 256,
                given_dims: 64,
                ..
            }
        ),
        "{e}"
    );
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

/// Verifies ADR-0046: an embedder of the same dimension but another name is refused too, with
/// an error naming both embedders, and the refusal leaves the file as it was.
#[test]
fn embedder_of_another_name_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    {
        let s = open_path(&path).unwrap();
        s.put(NewMemory::new("a", "The cafeteria opens at seven."))
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let e = SqliteStore::open_with(
        &path,
        Arc::new(Renamed(HashEmbedder::default())),
        StoreOptions::default(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            MemoryError::EmbedderMismatch {
                stored_dims: 256,
                given_dims: 256,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        msg.contains("strata-hash-v1/256") && msg.contains("another-model/256"),
        "{msg}"
    );
    assert!(msg.contains("[memory.embedder]"), "{msg}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // The store still opens with its own embedder and holds its memory.
    let s = open_path(&path).unwrap();
    let hits = s.search("cafeteria", &SearchOptions::top(1)).unwrap();
    assert_eq!(hits.len(), 1);
}

/// Verifies ADR-0012: the entry size limit is configurable and applies to all three stores.
#[test]
fn oversized_entries_are_refused_with_the_configured_limit() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open_with(
        dir.path().join("memory.db"),
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_max_entry_bytes(100),
    )
    .unwrap();
    let too_big = "é".repeat(51); // 102 bytes
    let check = |r: Result<(), MemoryError>| match r {
        Err(MemoryError::EntryTooLarge { size, limit, .. }) => {
            assert_eq!((size, limit), (102, 100));
        }
        other => panic!("expected EntryTooLarge, got {other:?}"),
    };
    check(s.append("s", NewEntry::user(too_big.clone())).map(drop));
    check(s.put(NewMemory::new("a", too_big.clone())).map(drop));
    check(s.set_fact(&Scope::global(), "k", &too_big).map(drop));
    s.append("s", NewEntry::user("x".repeat(100))).unwrap();
    let e = s.append("s", NewEntry::user(too_big)).unwrap_err();
    assert!(e.to_string().contains("over the limit of 100 bytes"), "{e}");
}

/// Verifies ADR-0012: a second connection's writes are seen by a store's vector ranking.
#[test]
fn vector_cache_follows_other_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = open_path(&path).unwrap();
    let b = open_path(&path).unwrap();
    a.put(NewMemory::new("x", "first note about kubernetes"))
        .unwrap();
    let vec_only = SearchOptions::top(5).mode(strata_memory::SearchMode::Vector);
    assert_eq!(a.search("kubernetes", &vec_only).unwrap().len(), 1);
    let m = b
        .put(NewMemory::new("x", "second note about kubernetes"))
        .unwrap();
    let hits = a.search("kubernetes", &vec_only).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(b.delete(&m.id).unwrap());
    assert_eq!(a.search("kubernetes", &vec_only).unwrap().len(), 1);
}

/// Verifies ADR-0029: the lexical ranking a handle computes in process is SQLite FTS5's own
/// `bm25()` ranking of the same file, with every query word counted (common ones included),
/// also after another connection added, replaced and deleted memories.
#[test]
fn lexical_ranking_equals_fts5_after_other_connections_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = open_path(&path).unwrap();
    let b = open_path(&path).unwrap();
    let words: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    let text = |i: usize| -> String {
        // Varied texts: a skewed draw from the words, `project` in every memory and `alpha`
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
        out.push("project");
        if next() % 3 == 0 {
            out.push("alpha");
        }
        out.join(" ")
    };
    a.put_many(
        (0..400)
            .map(|i| {
                NewMemory::new("a", text(i))
                    .with_id(strata_memory::MemoryId::new(format!("m{i}")).unwrap())
            })
            .collect(),
    )
    .unwrap();
    let lexical = SearchOptions::top(20).mode(strata_memory::SearchMode::Lexical);
    a.search("project zebra", &lexical).unwrap();
    for i in (0..400).step_by(5) {
        b.put(
            NewMemory::new("a", text(i + 1000))
                .with_id(strata_memory::MemoryId::new(format!("m{i}")).unwrap()),
        )
        .unwrap();
    }
    for i in (1..400).step_by(9) {
        assert!(b
            .delete(&strata_memory::MemoryId::new(format!("m{i}")).unwrap())
            .unwrap());
    }
    let fts =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    for q in [
        "alpha w3",
        "project w1 alpha",
        "project",
        "w0 w7 w20 alpha",
        "alpha w2 w9 project",
        "w39 w38",
    ] {
        let match_expr = q.split(' ').collect::<Vec<_>>().join(" OR ");
        let mut stmt = fts
            .prepare(
                "SELECT m.id, -bm25(memories_fts) FROM memories_fts \
                 JOIN memories m ON m.key = memories_fts.rowid \
                 WHERE memories_fts MATCH ?1 ORDER BY bm25(memories_fts)",
            )
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
            // Each result scores what FTS5's result of its rank scores (ties in any order).
            assert!(
                (s - want[rank].1).abs() < 1e-9,
                "{q}: rank {rank}: {s} vs {}",
                want[rank].1
            );
        }
    }
}

/// Verifies ADR-0019: the vector ranking (int8 codes choosing candidates, exact vectors
/// ranking them) agrees with an exact ranking computed here from the embedder's vectors, over
/// more memories than one candidate pool.
#[test]
fn vector_ranking_matches_exact_search() {
    use strata_memory::{Embedder, SearchMode};
    let dir = tempfile::tempdir().unwrap();
    let s = open_path(&dir.path().join("memory.db")).unwrap();
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
    for chunk in texts.chunks(1000) {
        s.put_many(
            chunk
                .iter()
                .map(|t| NewMemory::new("a", t.clone()))
                .collect(),
        )
        .unwrap();
    }
    let e = HashEmbedder::default();
    let vectors = e
        .embed(&texts.iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    for q in [
        "deploys to staging",
        "coffee in the office",
        "keys for laptops in may",
        "tests",
    ] {
        let qv = e.embed(&[q]).unwrap().remove(0);
        let mut exact: Vec<f32> = vectors.iter().map(|v| dot(&qv, v)).collect();
        exact.sort_by(|a, b| b.partial_cmp(a).unwrap());
        let got = s
            .search(q, &SearchOptions::top(10).mode(SearchMode::Vector))
            .unwrap();
        assert_eq!(got.len(), 10);
        for (rank, h) in got.iter().enumerate() {
            let sim = dot(&qv, &e.embed(&[h.record.content.as_str()]).unwrap()[0]);
            // Each result is as similar as the exact result of its rank (ties allowed).
            assert!(
                (sim - exact[rank]).abs() < 1e-5,
                "{q}: rank {rank}: {sim} vs {}",
                exact[rank]
            );
        }
    }
}

/// Verifies ADR-0016: SQLite session state conforms, survives reopening, and a damaged row
/// fails its checksum instead of being read.
#[test]
fn session_state_conforms_and_is_checked() {
    use strata_memory::SessionState as _;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::session_state(&open(&dir, &clock), &clock);
    {
        let s = open(&dir, &clock);
        assert_eq!(
            s.put_state("k", "goals", "{\"a\":1}", None).unwrap(),
            Some(1)
        );
    }
    let s = open(&dir, &clock);
    assert_eq!(s.state("k", "goals").unwrap().unwrap().version, 1);
    drop(s);
    let c = rusqlite::Connection::open(dir.path().join("memory.db")).unwrap();
    c.execute(
        "UPDATE session_state SET value = '{\"a\":2}' WHERE session = 'k'",
        [],
    )
    .unwrap();
    drop(c);
    let s = open(&dir, &clock);
    assert!(matches!(
        s.state("k", "goals"),
        Err(MemoryError::Corrupt { .. })
    ));
}

#[test]
fn a_clear_removes_the_named_state_in_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::clear_with_state(&open(&dir, &clock));
}
