//! Fault tests of the SQLite adapter: damaged rows and pages, a damaged write-ahead log,
//! empty files, concurrent first opens, bad embedders and bad arguments, and the damage,
//! kill -9 and concurrency campaigns. Verifies ADR-0019.
//!
//! The campaigns run a short version by default; set `STRATA_MEMORY_CAMPAIGN_TRIALS` to run
//! more trials.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use strata_memory::{
    Embedder, HashEmbedder, ListOptions, LongTermMemory, MemoryError, MemoryId, NewEntry,
    NewMemory, Scope, SearchOptions, SharedContext, SharedContextWriter, SqliteStore, StoreOptions,
    WorkingMemory,
};

fn trials(default: usize) -> usize {
    std::env::var("STRATA_MEMORY_CAMPAIGN_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn next_rand(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn open(path: &Path) -> Result<SqliteStore, MemoryError> {
    SqliteStore::open(path)
}

fn open_checked(path: &Path) -> Result<SqliteStore, MemoryError> {
    SqliteStore::open_with(
        path,
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_check_on_open(true),
    )
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// A memory text carrying a marker that can be found in the file.
fn marked(i: usize) -> String {
    format!("QXMARK{i:05} the release checklist item number {i} says to tag the build")
}

/// Verifies ADR-0019: a byte of a memory's text damaged inside the database file is reported
/// as Corrupt, naming the row, by `get`, `list` and `search`; the changed text is never served.
#[test]
fn damaged_text_in_a_page_is_corrupt_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let id = {
        let s = open(&path).unwrap();
        s.put_many(
            (0..50)
                .map(|i| {
                    NewMemory::new("a", marked(i)).with_id(MemoryId::new(format!("k{i}")).unwrap())
                })
                .collect(),
        )
        .unwrap();
        MemoryId::new("k7").unwrap()
    };
    // Closing checkpointed the WAL: the text is in the main file. Change one letter of it
    // (still valid UTF-8, so only the checksum can tell).
    let mut bytes = std::fs::read(&path).unwrap();
    let marker = b"QXMARK00007 the release";
    // Every copy: pages freed when the tree grew may still hold an old one.
    let copies: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i)
        .collect();
    assert!(!copies.is_empty());
    for at in copies {
        bytes[at + 12] = b'T';
    }
    std::fs::write(&path, &bytes).unwrap();

    let s = open(&path).unwrap();
    match s.get(&id) {
        Err(MemoryError::Corrupt { detail, .. }) => {
            assert!(detail.contains("memories row"), "{detail}");
            assert!(detail.contains(id.as_str()), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(
        s.list(&ListOptions::all()),
        Err(MemoryError::Corrupt { .. })
    ));
    assert!(matches!(
        s.search("QXMARK00007 release checklist", &SearchOptions::top(3)),
        Err(MemoryError::Corrupt { .. })
    ));
    assert!(matches!(
        s.check_integrity(),
        Err(MemoryError::Corrupt { .. })
    ));
}

/// Verifies ADR-0019: text that is not UTF-8 in a row is Corrupt, not a conversion error; a
/// vector, an entry or a fact changed behind the store's back fails its checksum.
#[test]
fn invalid_utf8_and_changed_rows_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let s = open(&path).unwrap();
    let m = s.put(NewMemory::new("a", "plain text")).unwrap();
    s.append("sess", NewEntry::user("hello")).unwrap();
    s.set_fact(&Scope::global(), "tz", "UTC").unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "UPDATE memories SET agent_id = CAST(x'61ff62' AS TEXT) WHERE id = ?1",
        [m.id.as_str()],
    )
    .unwrap();
    raw.execute("UPDATE wm_entries SET content = 'hellO'", [])
        .unwrap();
    raw.execute("UPDATE shared_facts SET value = 'UTC+1'", [])
        .unwrap();
    drop(raw);
    match s.get(&m.id) {
        Err(MemoryError::Corrupt { detail, .. }) => assert!(detail.contains("row"), "{detail}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(
        s.entries("sess"),
        Err(MemoryError::Corrupt { .. })
    ));
    assert!(matches!(
        s.fact(&Scope::global(), "tz"),
        Err(MemoryError::Corrupt { .. })
    ));
    assert!(matches!(
        s.facts(&[Scope::global()]),
        Err(MemoryError::Corrupt { .. })
    ));

    // A vector changed on disk is caught when the vectors are loaded.
    let path2 = dir.path().join("vectors.db");
    let s2 = open(&path2).unwrap();
    s2.put(NewMemory::new("a", "vectors are checked too"))
        .unwrap();
    let raw = rusqlite::Connection::open(&path2).unwrap();
    raw.execute(
        "UPDATE memory_vectors SET embedding = zeroblob(length(embedding))",
        [],
    )
    .unwrap();
    drop(raw);
    assert!(matches!(
        s2.search("vectors checked", &SearchOptions::top(3)),
        Err(MemoryError::Corrupt { .. })
    ));
}

/// Copy a store's files (database, WAL, commit counter) while it is open, as they are on
/// disk at this moment.
fn snapshot(src: &Path, dst: &Path) {
    for suffix in ["", "-wal", "-commits"] {
        let from = with_suffix(src, suffix);
        if from.exists() {
            std::fs::copy(&from, with_suffix(dst, suffix)).unwrap();
        }
    }
}

/// Verifies ADR-0019: a damaged byte in the write-ahead log, which makes SQLite drop every
/// later committed transaction without an error, is detected through the commit counter;
/// the store is refused, and refused again on the next open (the loss is not folded in).
#[test]
fn damaged_wal_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.db");
    let s = open(&live).unwrap();
    for i in 0..20 {
        s.put(NewMemory::new("a", marked(i))).unwrap();
    }
    let copy = dir.path().join("copy.db");
    snapshot(&live, &copy);
    // The copy as taken is whole.
    {
        let c = open(&copy).unwrap();
        assert_eq!(c.count(None).unwrap(), 20);
    }
    snapshot(&live, &copy);
    let wal = with_suffix(&copy, "-wal");
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 32 + 24 + 4096 * 4, "the WAL holds frames");
    // A byte in the middle of the WAL: its frame and every later commit fail the chain.
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();
    for _ in 0..2 {
        match open(&copy) {
            Err(MemoryError::Corrupt { detail, .. }) => {
                assert!(detail.contains("acknowledged"), "{detail}")
            }
            other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
        }
    }
}

/// Verifies ADR-0019: a 0-byte file is refused, by a writable and a read-only open, and
/// stays 0 bytes; nothing is created next to it.
#[test]
fn empty_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(open(&path), Err(MemoryError::Corrupt { .. })));
    assert!(matches!(
        SqliteStore::open_read_only(
            &path,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default()
        ),
        Err(MemoryError::Corrupt { .. })
    ));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("memory.db")]);
}

/// Verifies ADR-0019: a read-only open never writes: a missing store is not created, and the
/// bytes of an existing store do not change; writes through it are refused.
#[test]
fn read_only_open_never_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let ro = |p: &Path| {
        SqliteStore::open_read_only(
            p,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
    };
    assert!(matches!(ro(&path), Err(MemoryError::Io { .. })));
    assert!(!path.exists());
    {
        let s = open(&path).unwrap();
        s.put(NewMemory::new("a", "kept as it is")).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let s = ro(&path).unwrap();
    assert_eq!(s.count(None).unwrap(), 1);
    assert_eq!(
        s.search("kept", &SearchOptions::top(1)).unwrap()[0]
            .record
            .content
            .as_str(),
        "kept as it is"
    );
    assert!(matches!(
        s.put(NewMemory::new("a", "no")),
        Err(MemoryError::Invalid { .. })
    ));
    drop(s);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// Verifies ADR-0019: the concurrency campaign, first open. Eight threads open the same new
/// store at the same moment, many times over; every open succeeds and every write lands.
#[test]
fn concurrent_first_open_is_idempotent() {
    let rounds = trials(25);
    let dir = tempfile::tempdir().unwrap();
    for round in 0..rounds {
        let path = Arc::new(dir.path().join(format!("r{round}.db")));
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let s = open(&path)?;
                    s.put(NewMemory::new("a", format!("thread {t}")))?;
                    Ok::<_, MemoryError>(())
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        assert_eq!(open(&path).unwrap().count(None).unwrap(), 8);
    }
}

/// An embedder that says it has 0 dimensions.
#[derive(Debug)]
struct ZeroDims;

impl Embedder for ZeroDims {
    fn name(&self) -> &str {
        "zero"
    }
    fn dims(&self) -> usize {
        0
    }
    fn embed(&self, texts: &[&str]) -> strata_memory::Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|_| Vec::new()).collect())
    }
}

/// An embedder whose components are huge but finite: the hash embedder's vector times 3e38.
#[derive(Debug)]
struct Huge(HashEmbedder);

impl Embedder for Huge {
    fn name(&self) -> &str {
        "huge"
    }
    fn dims(&self) -> usize {
        self.0.dims()
    }
    fn embed(&self, texts: &[&str]) -> strata_memory::Result<Vec<Vec<f32>>> {
        Ok(self
            .0
            .embed(texts)?
            .into_iter()
            .map(|v| {
                let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
                v.into_iter().map(|x| x / max * 3e38).collect()
            })
            .collect())
    }
}

/// Verifies ADR-0019: an embedder of 0 dimensions is refused when the store opens; one with
/// huge finite components gives unit vectors, finite scores and the same ranking as the same
/// embedder at normal scale (the matching memory first, the same memories after it; those
/// that tie may come in either order).
#[test]
fn embedders_are_validated_at_the_boundary() {
    let dir = tempfile::tempdir().unwrap();
    match SqliteStore::open_with(
        dir.path().join("zero.db"),
        Arc::new(ZeroDims),
        StoreOptions::default(),
    ) {
        Err(MemoryError::Embedder { detail, .. }) => assert!(detail.contains("0 dimensions")),
        other => panic!("expected Embedder error, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        strata_memory::embed_checked(&ZeroDims, &["x"]),
        Err(MemoryError::Embedder { .. })
    ));
    let v = strata_memory::embed_checked(&Huge(HashEmbedder::default()), &["deploy the fix"])
        .unwrap()
        .remove(0);
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");

    let texts = [
        "deploy the staging build",
        "coffee on the third floor",
        "rotate the api keys",
    ];
    let rank = |e: Arc<dyn Embedder>, name: &str| {
        let s = SqliteStore::open_with(dir.path().join(name), e, StoreOptions::default()).unwrap();
        for t in texts {
            s.put(NewMemory::new("a", t)).unwrap();
        }
        let hits = s
            .search(
                "staging deploy",
                &SearchOptions::top(3).mode(strata_memory::SearchMode::Vector),
            )
            .unwrap();
        assert!(hits.iter().all(|h| h.score.is_finite()));
        hits.into_iter()
            .map(|h| h.record.content.to_string())
            .collect::<Vec<_>>()
    };
    // The one memory that shares words with the query ranks first at either scale; the other
    // two share none, so their similarities tie and their order (and their rank-fused scores,
    // 1/62 and 1/63) falls to their random ids: they are compared as a set.
    let plain = rank(Arc::new(HashEmbedder::default()), "plain.db");
    let huge = rank(Arc::new(Huge(HashEmbedder::default())), "huge.db");
    for ranked in [&plain, &huge] {
        assert_eq!(
            ranked.first().map(String::as_str),
            Some("deploy the staging build"),
            "{ranked:?}"
        );
    }
    let (mut a, mut b) = (plain.clone(), huge.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(a.len(), 3);
}

/// Verifies ADR-0019: limits no store can honour and NUL in filters are Invalid.
#[test]
fn bad_limits_and_filters_are_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("memory.db")).unwrap();
    s.put(NewMemory::new("a", "something to find")).unwrap();
    for opts in [
        SearchOptions::top(usize::MAX),
        SearchOptions::top(5).candidates(usize::MAX),
        SearchOptions::top(5).agent("a\0b"),
    ] {
        match s.search("something", &opts) {
            Err(MemoryError::Invalid { .. }) => {}
            other => panic!("{opts:?}: expected Invalid, got {other:?}"),
        }
    }
    assert!(matches!(
        s.list(&ListOptions::all().agent("x\0")),
        Err(MemoryError::Invalid { .. })
    ));
    assert!(matches!(
        s.list(&ListOptions::all().page(usize::MAX, 1)),
        Err(MemoryError::Invalid { .. })
    ));
    assert!(matches!(
        s.count(Some("nul\0")),
        Err(MemoryError::Invalid { .. })
    ));
    assert!(matches!(
        s.entries("sess\0"),
        Err(MemoryError::Invalid { .. })
    ));
}

/// Verifies ADR-0019: a store written by schema version 1 (no checksums) is migrated: the
/// checksums of its rows are filled in and the rows read back unchanged.
#[test]
fn version_1_store_is_migrated_with_checksums() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let (m, e) = {
        let s = open(&path).unwrap();
        s.set_fact(&Scope::global(), "tz", "UTC").unwrap();
        (
            s.put(NewMemory::new("a", "migrated memory").with_tags(["t"]))
                .unwrap(),
            s.append("sess", NewEntry::user("migrated entry")).unwrap(),
        )
    };
    // Turn it back into a version 1 store.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch(
        "DROP TRIGGER memories_count_insert;
         DROP TRIGGER memories_count_delete;
         DROP TRIGGER memories_count_update;
         DROP TRIGGER memory_vectors_count_insert;
         DROP TRIGGER memory_vectors_count_delete;
         DROP TRIGGER memory_tags_count_insert;
         DROP TRIGGER memory_tags_count_delete;
         DROP TRIGGER wm_entries_count_insert;
         DROP TRIGGER wm_entries_count_delete;
         DROP TRIGGER shared_facts_count_insert;
         DROP TRIGGER shared_facts_count_delete;
         DROP TRIGGER session_state_count_insert;
         DROP TRIGGER session_state_count_delete;
         DROP TRIGGER wm_operations_count_insert;
         DROP TRIGGER wm_operations_count_delete;
         DROP TABLE row_counts;
         DROP TABLE wm_sessions;
         DROP INDEX wm_entries_session_seq;
         ALTER TABLE wm_entries DROP COLUMN session_seq;
         ALTER TABLE wm_entries DROP COLUMN meta;
         DROP TABLE wm_operations;
         DROP TABLE session_state;
         ALTER TABLE memories DROP COLUMN checksum;
         ALTER TABLE memory_vectors DROP COLUMN checksum;
         ALTER TABLE wm_entries DROP COLUMN checksum;
         ALTER TABLE shared_facts DROP COLUMN checksum;
         DROP TRIGGER memory_vectors_changed_insert;
         DROP TRIGGER memory_vectors_changed_update;
         DROP TRIGGER memories_changed_delete;
         DROP TABLE memory_changes;
         DELETE FROM meta WHERE key IN ('commits', 'store_id', 'changes_pruned_through');
         UPDATE schema_version SET version = 1;",
    )
    .unwrap();
    drop(raw);
    std::fs::remove_file(with_suffix(&path, "-commits")).unwrap();
    let s = open(&path).unwrap();
    assert_eq!(s.get(&m.id).unwrap(), Some(m));
    assert_eq!(s.entries("sess").unwrap(), vec![e]);
    assert_eq!(
        s.fact(&Scope::global(), "tz")
            .unwrap()
            .unwrap()
            .value
            .as_str(),
        "UTC"
    );
    s.check_integrity().unwrap();
}

/// What a store held when it was written, to compare with what it serves after damage.
struct Written {
    memories: HashMap<MemoryId, String>,
    entries: Vec<String>,
}

fn write_store(path: &Path, seed: &mut u64) -> Written {
    let s = open(path).unwrap();
    let n = 150 + (next_rand(seed) % 150) as usize;
    let batch: Vec<NewMemory> = (0..n)
        .map(|i| {
            let filler = "lorem ipsum dolor ".repeat((next_rand(seed) % 30) as usize);
            NewMemory::new("a", format!("{} {filler}", marked(i)))
        })
        .collect();
    let recs = s.put_many(batch).unwrap();
    let mut entries = Vec::new();
    for i in 0..20 {
        let text = format!("entry {i} {}", "x".repeat((next_rand(seed) % 200) as usize));
        s.append("sess", NewEntry::user(text.clone())).unwrap();
        entries.push(text);
    }
    Written {
        memories: recs
            .into_iter()
            .map(|r| (r.id, r.content.to_string()))
            .collect(),
        entries,
    }
}

/// Everything a store serves, or the first error.
fn read_all(s: &SqliteStore, written: &Written) -> Result<(usize, usize), MemoryError> {
    let all = s.list(&ListOptions::all())?;
    for r in &all {
        let want = written.memories.get(&r.id).expect("a memory nobody wrote");
        assert_eq!(r.content.as_str(), want, "damaged text served for {}", r.id);
    }
    let mut found = 0;
    for (id, want) in &written.memories {
        if let Some(r) = s.get(id)? {
            assert_eq!(r.content.as_str(), want, "damaged text served for {id}");
            found += 1;
        }
    }
    for q in ["release checklist", "QXMARK00003 tag", "lorem build"] {
        for h in s.search(q, &SearchOptions::top(10))? {
            let want = written.memories.get(&h.record.id).unwrap();
            assert_eq!(h.record.content.as_str(), want, "damaged text served");
        }
    }
    let entries = s.entries("sess")?;
    for e in &entries {
        assert!(
            written.entries.contains(&e.content.to_string()),
            "damaged entry served"
        );
    }
    Ok((all.len().min(found), entries.len()))
}

/// Verifies ADR-0019: the SQLite damage campaign. Each trial writes a store, closes it, flips
/// random bytes somewhere after the file header, and reads everything back through a store
/// opened with the structural check and then checked in full. Damaged text is never served
/// (asserted in every read); the outcome of each trial is counted: refused at open, refused by
/// the full check, or read back whole. A trial in which rows are missing while every check
/// passed is a silent loss, and there must be none.
#[test]
fn damage_campaign_never_serves_damaged_rows() {
    let n = trials(20);
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let (mut at_open, mut at_check, mut at_read, mut whole, mut silent) = (0, 0, 0, 0, 0);
    for trial in 0..n {
        let path = dir.path().join(format!("t{trial}.db"));
        let written = write_store(&path, &mut seed);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = 100 + (next_rand(&mut seed) % (bytes.len() as u64 - 100)) as usize;
        let run = if trial % 2 == 0 {
            1
        } else {
            1 + (next_rand(&mut seed) % 16) as usize
        };
        for b in bytes.iter_mut().skip(at).take(run) {
            *b ^= (next_rand(&mut seed) % 255 + 1) as u8;
        }
        std::fs::write(&path, &bytes).unwrap();
        let s = match open_checked(&path) {
            Ok(s) => s,
            Err(MemoryError::Corrupt { .. }) => {
                at_open += 1;
                continue;
            }
            Err(e) => panic!("trial {trial}: unexpected error at open: {e}"),
        };
        // What a reader sees without the full check: never damaged text (asserted inside).
        let served = read_all(&s, &written);
        match s.check_integrity() {
            Err(MemoryError::Corrupt { .. }) => {
                at_check += 1;
                if served.is_err() {
                    at_read += 1;
                }
            }
            Err(e) => panic!("trial {trial}: unexpected error in the check: {e}"),
            Ok(()) => match served {
                Ok((m, e)) if m == written.memories.len() && e == written.entries.len() => {
                    whole += 1
                }
                Ok(_) => silent += 1,
                Err(MemoryError::Corrupt { .. }) => at_read += 1,
                Err(e) => panic!("trial {trial}: unexpected error: {e}"),
            },
        }
    }
    eprintln!(
        "sqlite damage campaign: {n} trials: {at_open} refused at open (quick_check), {at_check} refused by check_integrity ({at_read} of all trials also refused by a read), {whole} read back whole, {silent} silent losses, 0 damaged rows served"
    );
    assert_eq!(silent, 0, "rows went missing with every check passing");
}

/// The environment variable that turns [`sqlite_crash_child`] into the writer process.
const CHILD_ENV: &str = "STRATA_MEMORY_SQLITE_CRASH_CHILD";

/// The writer half of [`sqlite_kill_9_campaign`]: it does nothing unless started with
/// [`CHILD_ENV`]; then it writes memories, entries and facts until killed, printing
/// `ACK <kind> <n>` after each write returns.
#[test]
fn sqlite_crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let s = open(Path::new(&path)).unwrap();
    let start = s.count(None).unwrap();
    let out = std::io::stdout();
    for i in start.. {
        let text = marked(i);
        match i % 3 {
            0 => {
                s.put(NewMemory::new("a", text).with_id(MemoryId::new(format!("k{i}")).unwrap()))
                    .unwrap();
            }
            1 => {
                s.put_many(vec![NewMemory::new("a", text.clone())
                    .with_id(MemoryId::new(format!("k{i}")).unwrap())])
                    .unwrap();
                s.append("crash", NewEntry::user(text)).unwrap();
            }
            _ => {
                s.put(NewMemory::new("a", text).with_id(MemoryId::new(format!("k{i}")).unwrap()))
                    .unwrap();
                s.set_fact(&Scope::global(), &format!("f{i}"), "v").unwrap();
            }
        }
        let mut lock = out.lock();
        writeln!(lock, "ACK {i}").unwrap();
        lock.flush().unwrap();
    }
}

/// Verifies ADR-0019: the SQLite kill -9 campaign. A writer process is killed with SIGKILL
/// at random moments; after each kill the store must open (commit counter included), and at
/// the end every acknowledged write is there, intact, and the full check passes.
#[test]
fn sqlite_kill_9_campaign() {
    let rounds = trials(10);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    drop(open(&path).unwrap());
    let exe = std::env::current_exe().unwrap();
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut acked: Vec<usize> = Vec::new();
    for _ in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "sqlite_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("ACK ") {
                    got.push(line[at + 4..].trim().parse::<usize>().unwrap());
                }
            }
            got
        });
        std::thread::sleep(Duration::from_millis(100 + next_rand(&mut seed) % 300));
        child.kill().unwrap();
        child.wait().unwrap();
        acked.extend(reader.join().unwrap());
        drop(open(&path).unwrap());
    }
    assert!(
        acked.len() >= rounds,
        "too few acknowledged writes to prove anything"
    );
    let s = open(&path).unwrap();
    s.check_integrity().unwrap();
    let entries: Vec<String> = s
        .entries("crash")
        .unwrap()
        .into_iter()
        .map(|e| e.content.to_string())
        .collect();
    for i in &acked {
        let r = s
            .get(&MemoryId::new(format!("k{i}")).unwrap())
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged memory k{i} lost"));
        assert_eq!(r.content.as_str(), marked(*i));
        match i % 3 {
            1 => assert!(entries.contains(&marked(*i)), "entry {i} lost"),
            2 => assert!(s
                .fact(&Scope::global(), &format!("f{i}"))
                .unwrap()
                .is_some()),
            _ => {}
        }
    }
    eprintln!(
        "sqlite kill -9 campaign: {rounds} kills, {} acknowledged writes, 0 lost",
        acked.len()
    );
}

/// Verifies ADR-0019: the WAL damage campaign. Each trial snapshots a live store's files,
/// damages bytes of the snapshot's WAL, and opens it: either the open is refused as Corrupt or
/// every acknowledged memory is served intact.
#[test]
fn wal_damage_campaign() {
    let n = trials(20);
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.db");
    let s = open(&live).unwrap();
    let mut written = HashMap::new();
    for i in 0..30 {
        let r = s.put(NewMemory::new("a", marked(i))).unwrap();
        written.insert(r.id, r.content.to_string());
    }
    let wal_len = std::fs::metadata(with_suffix(&live, "-wal")).unwrap().len();
    let mut seed = 0xdead_beef_cafe_f00du64;
    let (mut refused, mut intact) = (0, 0);
    for trial in 0..n {
        let copy = dir.path().join(format!("c{trial}.db"));
        snapshot(&live, &copy);
        let wal = with_suffix(&copy, "-wal");
        let mut bytes = std::fs::read(&wal).unwrap();
        let at = (next_rand(&mut seed) % wal_len) as usize;
        bytes[at] ^= (next_rand(&mut seed) % 255 + 1) as u8;
        std::fs::write(&wal, &bytes).unwrap();
        match open(&copy) {
            Err(MemoryError::Corrupt { .. }) => refused += 1,
            Err(e) => panic!("trial {trial}: unexpected error {e}"),
            Ok(c) => {
                let all = c.list(&ListOptions::all());
                match all {
                    Err(MemoryError::Corrupt { .. }) => refused += 1,
                    Err(e) => panic!("trial {trial}: {e}"),
                    Ok(all) => {
                        assert_eq!(all.len(), written.len(), "trial {trial}: commits lost");
                        for r in all {
                            assert_eq!(written[&r.id], r.content.as_str());
                        }
                        intact += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "wal damage campaign: {n} trials, {refused} refused, {intact} intact, 0 silent losses"
    );
}

/// Verifies ADR-0019: a store deleted and created anew at the same path is not mistaken for a
/// store that lost commits (the side file left behind belongs to the old store), while an
/// older copy of the same store is.
#[test]
fn recreated_store_is_not_an_older_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let old_copy = dir.path().join("old.db");
    {
        let s = open(&path).unwrap();
        s.put(NewMemory::new("a", "first")).unwrap();
    }
    std::fs::copy(&path, &old_copy).unwrap();
    {
        let s = open(&path).unwrap();
        for i in 0..5 {
            s.put(NewMemory::new("a", format!("more {i}"))).unwrap();
        }
    }
    // Put the older copy back in place of the store: refused.
    std::fs::copy(&old_copy, &path).unwrap();
    assert!(matches!(open(&path), Err(MemoryError::Corrupt { .. })));
    // Delete the store and start again: a new store, not a damaged one.
    std::fs::remove_file(&path).unwrap();
    let s = open(&path).unwrap();
    assert_eq!(s.count(None).unwrap(), 0);
    s.put(NewMemory::new("a", "new")).unwrap();
    drop(s);
    assert_eq!(open(&path).unwrap().count(None).unwrap(), 1);
}

/// Verifies ADR-0019: after another connection writes, a handle's vector cache reads only the
/// memories that changed (added, replaced, deleted), and its own writes cost no reload.
#[test]
fn foreign_write_refreshes_only_the_changed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = open(&path).unwrap();
    a.put_many(
        (0..200)
            .map(|i| {
                NewMemory::new("a", marked(i)).with_id(MemoryId::new(format!("k{i}")).unwrap())
            })
            .collect(),
    )
    .unwrap();
    let vector = SearchOptions::top(3).mode(strata_memory::SearchMode::Vector);
    a.search("release checklist", &vector).unwrap();
    assert_eq!(a.vector_cache_stats().full_loads, 1);

    let b = open(&path).unwrap();
    b.put(
        NewMemory::new("a", "zebra crossing near the office")
            .with_id(MemoryId::new("zebra").unwrap()),
    )
    .unwrap();
    b.delete(&MemoryId::new("k5").unwrap()).unwrap();
    b.put(NewMemory::new("a", "giraffe enclosure schedule").with_id(MemoryId::new("k6").unwrap()))
        .unwrap();

    let hits = a.search("zebra crossing office", &vector).unwrap();
    assert_eq!(hits[0].record.id.as_str(), "zebra");
    let hits = a.search("giraffe enclosure schedule", &vector).unwrap();
    assert_eq!(hits[0].record.id.as_str(), "k6");
    let hits = a
        .search(
            &marked(5),
            &SearchOptions::top(200).mode(strata_memory::SearchMode::Vector),
        )
        .unwrap();
    assert!(hits.iter().all(|h| h.record.id.as_str() != "k5"));
    let stats = a.vector_cache_stats();
    assert_eq!(stats.full_loads, 1, "{stats:?}");
    assert_eq!(stats.refreshes, 1, "{stats:?}");
    assert_eq!(stats.rows_refreshed, 3, "{stats:?}");

    // Own writes update the cache directly.
    a.put(NewMemory::new("a", "okapi sighting")).unwrap();
    assert_eq!(
        a.search("okapi sighting", &vector).unwrap()[0]
            .record
            .content
            .as_str(),
        "okapi sighting"
    );
    assert_eq!(a.vector_cache_stats(), stats);
}
