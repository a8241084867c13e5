//! Planted damage, one kind per check (ADR-0036): rows lost from a session, a session's
//! record lost or changed, counts that disagree with their tables, index entries damaged in
//! the file, and damage to the tables that carry no row checksum (the change log, `meta`, the
//! tag index, the row counts). Each test writes a store, damages it behind the store's back
//! (raw SQL, or bytes of an index page), and shows that the reads that could be misled answer
//! an error and that `check_integrity` names the damage.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use strata_core::EstimateTokenizer;
use strata_memory::{
    ListOptions, LongTermMemory, MemoryError, NewEntry, NewMemory, Operation, Scope, SessionState,
    SharedContext, SharedContextWriter, SqliteStore, WorkingMemory,
};

/// A store with a session `talk` of five entries, an operation record, memories of two
/// agents with tags, facts and a state document; closed.
fn write(path: &Path) -> Vec<strata_memory::MemoryRecord> {
    let s = SqliteStore::open(path).unwrap();
    s.append("talk", NewEntry::user("one")).unwrap();
    s.append("talk", NewEntry::tool_call("c1", "{}")).unwrap();
    s.append("talk", NewEntry::tool_result("c1", "three"))
        .unwrap();
    s.append("talk", NewEntry::assistant("four")).unwrap();
    s.apply(
        "talk",
        strata_memory::Batch {
            entries: vec![NewEntry::user("five")],
            operation: Some(Operation::new("op", "fp", "answer")),
            ..Default::default()
        },
    )
    .unwrap();
    let recs = s
        .put_many(vec![
            NewMemory::new("a", "alpha note about deploys").with_tags(["ops"]),
            NewMemory::new("a", "beta note about rollbacks").with_tags(["ops", "x"]),
            NewMemory::new("b", "gamma note about on-call"),
        ])
        .unwrap();
    s.set_fact(&Scope::global(), "tz", "UTC").unwrap();
    s.set_fact(&Scope::global(), "region", "eu").unwrap();
    s.put_state("talk", "goals", "[]", None).unwrap();
    recs
}

fn raw(path: &Path, sql: &str) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch(sql).unwrap();
}

fn corrupt<T: std::fmt::Debug>(what: &str, r: Result<T, MemoryError>) -> String {
    match r {
        Err(MemoryError::Corrupt { detail, .. }) => detail,
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
}

/// The findings of the whole check, as `check: detail` lines.
fn findings(s: &SqliteStore) -> Vec<String> {
    s.integrity_report()
        .findings
        .into_iter()
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect()
}

fn setup() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Vec<strata_memory::MemoryRecord>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let recs = write(&path);
    (dir, path, recs)
}

/// Verifies ADR-0036: an entry lost from the middle of a session is a gap that every read of
/// the session reports, not a shorter history.
#[test]
fn a_lost_entry_is_a_gap_on_every_read() {
    let (_d, path, _) = setup();
    raw(
        &path,
        "DELETE FROM wm_entries WHERE session = 'talk' AND session_seq = 4",
    );
    let s = SqliteStore::open(&path).unwrap();
    let tok = EstimateTokenizer::new();
    corrupt("entries", s.entries("talk"));
    corrupt("recent_within", s.recent_within("talk", 10_000, &tok));
    // The exchange in progress starts after the lost entry: it is answered, and whole.
    assert_eq!(s.current_exchange("talk").unwrap().len(), 1);
    assert!(findings(&s).iter().any(|f| f.starts_with("wm_entries:")));
    // The newest entry lost: the tail itself is damage.
    raw(
        &path,
        "DELETE FROM wm_entries WHERE session = 'talk' AND session_seq = 5",
    );
    let s = SqliteStore::open(&path).unwrap();
    corrupt("last_seq", s.last_seq("talk"));
    corrupt("current_exchange", s.current_exchange("talk"));
    // A write to a damaged session is refused and changes nothing.
    corrupt("append", s.append("talk", NewEntry::user("six")));
    assert_eq!(s.stats().unwrap().entries, 3);
}

/// Verifies ADR-0036: a session record lost, or changed behind its checksum, is damage; so
/// is an entry renumbered.
#[test]
fn session_records_and_numbers_are_checked() {
    let (_d, path, _) = setup();
    raw(&path, "UPDATE wm_sessions SET next_seq = next_seq + 1");
    let s = SqliteStore::open(&path).unwrap();
    assert!(corrupt("has_session", s.has_session("talk")).contains("wm_sessions"));
    drop(s);
    raw(&path, "DELETE FROM wm_sessions");
    let s = SqliteStore::open(&path).unwrap();
    assert!(corrupt("entries", s.entries("talk")).contains("no wm_sessions row"));
    drop(s);
    let (_d, path, _) = setup();
    raw(
        &path,
        "UPDATE wm_entries SET session_seq = 9 WHERE session_seq = 2",
    );
    let s = SqliteStore::open(&path).unwrap();
    assert!(corrupt("entries", s.entries("talk")).contains("checksum"));
}

/// A read of the store, its answer dropped.
type Read = dyn Fn(&SqliteStore) -> Result<(), MemoryError>;

/// Verifies ADR-0036: a count that disagrees with what an index answered is damage, for
/// every read that compares: facts, state documents, operation records, memories by agent,
/// by tag and in all, the store's statistics; and the whole check names the count.
#[test]
fn counts_that_disagree_are_damage() {
    let cases: [(&str, &Read); 7] = [
        ("shared_facts/global", &|s| {
            s.facts(&[Scope::global()]).map(drop)
        }),
        ("session_state/talk", &|s| {
            s.state("talk", "missing").map(drop)
        }),
        ("wm_operations/talk", &|s| {
            s.operation("talk", "missing").map(drop)
        }),
        ("memories/a", &|s| {
            s.list(&ListOptions::all().agent("a")).map(drop)
        }),
        ("memory_tags/ops", &|s| {
            s.search("note", &strata_memory::SearchOptions::top(5).tags(["ops"]))
                .map(drop)
        }),
        ("memories", &|s| s.count(None).map(drop)),
        ("wm_entries", &|s| s.stats().map(drop)),
    ];
    for (name, read) in cases {
        let (_d, path, _) = setup();
        raw(
            &path,
            &format!("UPDATE row_counts SET n = n + 1 WHERE name = '{name}'"),
        );
        let s = SqliteStore::open(&path).unwrap();
        assert!(corrupt(name, read(&s)).contains(name), "{name}");
        assert!(
            findings(&s)
                .iter()
                .any(|f| f.starts_with("row_counts:") && f.contains(name)),
            "{name}: {:?}",
            findings(&s)
        );
    }
}

/// Verifies ADR-0036: the change log, written by triggers without a checksum, is checked for
/// its structure and check values.
#[test]
fn the_change_log_is_checked() {
    let (_d, path, _) = setup();
    raw(
        &path,
        "UPDATE memory_changes SET key = key + 1 WHERE seq = 2",
    );
    let s = SqliteStore::open(&path).unwrap();
    assert!(findings(&s)
        .iter()
        .any(|f| f.starts_with("memory_changes:")));
    drop(s);
    let (_d, path, _) = setup();
    raw(&path, "DELETE FROM memory_changes WHERE seq = 2");
    let s = SqliteStore::open(&path).unwrap();
    let f = findings(&s);
    assert!(
        f.iter()
            .any(|f| f.starts_with("memory_changes:") && f.contains("change 3")),
        "{f:?}"
    );
}

/// Verifies ADR-0036: `meta` and the tag index, which carry no row checksum, are checked for
/// their shape and against the memories.
#[test]
fn meta_and_tags_are_checked() {
    for sql in [
        "UPDATE meta SET value = 'not-an-id' WHERE key = 'store_id'",
        "UPDATE meta SET value = '-1' WHERE key = 'commits'",
        "INSERT INTO meta (key, value) VALUES ('planted', 'x')",
        "DELETE FROM meta WHERE key = 'embedder'",
    ] {
        let (_d, path, _) = setup();
        raw(&path, sql);
        let s = SqliteStore::open(&path);
        let Ok(s) = s else {
            // The open itself may refuse a damaged `meta`.
            continue;
        };
        assert!(findings(&s).iter().any(|f| f.starts_with("meta:")), "{sql}");
    }
    let (_d, path, _) = setup();
    // The row lost, its count not: what a damaged page does (SQL would keep the count).
    raw(
        &path,
        "DELETE FROM memory_tags WHERE tag = 'x';
         INSERT INTO row_counts (name, n) VALUES ('memory_tags/x', 1), ('memory_tags', 1)
             ON CONFLICT (name) DO UPDATE SET n = n + 1;",
    );
    let s = SqliteStore::open(&path).unwrap();
    let f = findings(&s);
    assert!(f.iter().any(|f| f.starts_with("memory_tags:")), "{f:?}");
    // A listing by tag matches the rows' own tags, so it still answers in full.
    assert_eq!(s.list(&ListOptions::all().tags(["x"])).unwrap().len(), 1);
}

/// The page (1-based) holding the root of the index `name`.
fn root_page(path: &Path, name: &str) -> usize {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row(
        "SELECT rootpage FROM sqlite_master WHERE name = ?1",
        [name],
        |r| r.get(0),
    )
    .unwrap()
}

/// Change one byte of the `nth` occurrence of `needle` in page `page` of the file.
fn damage_in_page(path: &Path, page: usize, needle: &[u8], nth: usize) {
    let c = rusqlite::Connection::open(path).unwrap();
    let size: usize = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    drop(c);
    let mut bytes = std::fs::read(path).unwrap();
    let start = (page - 1) * size;
    let at = bytes[start..start + size]
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| start + i)
        .nth(nth)
        .expect("the needle is in the page");
    bytes[at + needle.len() - 1] ^= 0x01;
    std::fs::write(path, &bytes).unwrap();
}

/// Verifies ADR-0036: damage inside an index page, which SQLite's own reads do not notice,
/// is reported by the reads that use the index: a session read through its index misses an
/// entry (a gap), a memory looked up by its id is not found by the index but is by a scan.
#[test]
fn damaged_index_entries_are_reported_by_the_reads() {
    let (_d, path, recs) = setup();
    damage_in_page(&path, root_page(&path, "wm_entries_session"), b"talk", 2);
    let s = SqliteStore::open(&path).unwrap();
    corrupt("entries", s.entries("talk"));
    assert!(findings(&s)
        .iter()
        .any(|f| f.starts_with("integrity_check:")));
    drop(s);

    let (_d, path, recs2) = setup();
    let _ = recs;
    let id = recs2[1].id.as_str().as_bytes().to_vec();
    damage_in_page(
        &path,
        root_page(&path, "sqlite_autoindex_memories_1"),
        &id,
        0,
    );
    let s = SqliteStore::open(&path).unwrap();
    let detail = corrupt("get", s.get(&recs2[1].id));
    assert!(detail.contains("id index"), "{detail}");
}
