//! The index snapshot next to a SQLite store (`<file>-index`): a new handle starts from it and
//! catches up through the change log; a damaged snapshot, one of another store, or one written
//! while others write is never trusted beyond what it can prove. Verifies ADR-0029.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use strata_memory::{
    Embedder, HashEmbedder, LongTermMemory, MemoryId, NewMemory, SearchMode, SearchOptions,
    SqliteStore,
};

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path).unwrap()
}

fn snapshot(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-index");
    PathBuf::from(p)
}

fn mid(s: &str) -> MemoryId {
    MemoryId::new(s).unwrap()
}

fn text(i: usize) -> String {
    const W: [&str; 12] = [
        "deploy", "staging", "coffee", "keys", "build", "alpha", "report", "office", "march",
        "laptop", "review", "cache",
    ];
    format!(
        "note {i} {} {} {} {}",
        W[i % 12],
        W[(i / 12) % 12],
        W[(i * 7) % 12],
        W[(i * 5 + 3) % 12]
    )
}

fn fill(store: &SqliteStore, range: std::ops::Range<usize>) {
    store
        .put_many(
            range
                .map(|i| NewMemory::new("a", text(i)).with_id(mid(&format!("m{i}"))))
                .collect(),
        )
        .unwrap();
}

/// The exact best vector match of `q` among `texts` (by id), computed here from the embedder.
fn exact_best(texts: &[(String, String)], q: &str) -> String {
    let e = HashEmbedder::default();
    let qv = e.embed(&[q]).unwrap().remove(0);
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let mut best: Option<(f32, &str)> = None;
    for (id, t) in texts {
        let v = e.embed(&[t.as_str()]).unwrap().remove(0);
        let s = dot(&qv, &v);
        if best.is_none_or(|(b, bid)| s > b || (s == b && id.as_str() < bid)) {
            best = Some((s, id));
        }
    }
    best.unwrap().1.to_owned()
}

fn vector_top(store: &SqliteStore, q: &str) -> String {
    store
        .search(q, &SearchOptions::top(1).mode(SearchMode::Vector))
        .unwrap()[0]
        .record
        .id
        .to_string()
}

/// Verifies ADR-0029: a new handle reads the snapshot, then only the rows changed since, and
/// ranks like exact search over what the store now holds.
#[test]
fn a_new_handle_starts_from_the_snapshot_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = open(&path);
    fill(&a, 0..500);
    a.search("coffee keys", &SearchOptions::top(5)).unwrap();
    assert_eq!(a.vector_cache_stats().full_loads, 1);
    assert!(
        snapshot(&path).is_file(),
        "the first full load writes a snapshot"
    );

    // Another connection writes after the snapshot: new, replaced and deleted memories.
    let b = open(&path);
    b.put(NewMemory::new("a", "zebra crossing near the office").with_id(mid("zebra")))
        .unwrap();
    b.put(NewMemory::new("a", "giraffe enclosure schedule").with_id(mid("m7")))
        .unwrap();
    assert!(b.delete(&mid("m9")).unwrap());

    let c = open(&path);
    let hits = c
        .search("zebra crossing office", &SearchOptions::top(3))
        .unwrap();
    let stats = c.vector_cache_stats();
    assert_eq!(stats.full_loads, 0, "{stats:?}");
    assert_eq!(stats.snapshot_loads, 1, "{stats:?}");
    assert_eq!(
        stats.rows_refreshed, 3,
        "only the changed rows are read: {stats:?}"
    );
    assert_eq!(hits[0].record.id.as_str(), "zebra");
    assert_eq!(vector_top(&c, "giraffe enclosure schedule"), "m7");
    let lexical = SearchOptions::top(600).mode(SearchMode::Lexical);
    let all = c.search("note", &lexical).unwrap();
    assert_eq!(
        all.len(),
        498,
        "all but the deleted and the replaced memory have `note`"
    );
    assert!(all
        .iter()
        .all(|h| h.record.id.as_str() != "m9" && h.record.id.as_str() != "m7"));

    let mut texts: Vec<(String, String)> = (0..500)
        .filter(|i| *i != 9)
        .map(|i| (format!("m{i}"), text(i)))
        .collect();
    texts.retain(|(id, _)| id != "m7");
    texts.push(("m7".into(), "giraffe enclosure schedule".into()));
    texts.push(("zebra".into(), "zebra crossing near the office".into()));
    for q in ["coffee keys review", "alpha build march", "laptop cache"] {
        assert_eq!(vector_top(&c, q), exact_best(&texts, q), "{q}");
    }
}

/// Verifies ADR-0029: flipped bytes anywhere, a truncated, an empty or an extended snapshot is
/// ignored (the handle loads from the rows and ranks right) and replaced by a good one.
#[test]
fn a_damaged_snapshot_is_ignored_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let a = open(&path);
    fill(&a, 0..300);
    a.search("coffee", &SearchOptions::top(5)).unwrap();
    let good = std::fs::read(snapshot(&path)).unwrap();
    let texts: Vec<(String, String)> = (0..300).map(|i| (format!("m{i}"), text(i))).collect();
    let want = exact_best(&texts, "alpha build march");
    let mut damages: Vec<Vec<u8>> = Vec::new();
    for at in [
        0,
        9,
        20,
        good.len() / 3,
        good.len() / 2,
        good.len() - 40,
        good.len() - 1,
    ] {
        let mut d = good.clone();
        d[at] ^= 0x41;
        damages.push(d);
    }
    damages.push(good[..good.len() / 2].to_vec());
    damages.push(Vec::new());
    let mut longer = good.clone();
    longer.extend_from_slice(b"trailing");
    damages.push(longer);
    for (n, bytes) in damages.into_iter().enumerate() {
        std::fs::write(snapshot(&path), &bytes).unwrap();
        let c = open(&path);
        assert_eq!(vector_top(&c, "alpha build march"), want, "damage {n}");
        let stats = c.vector_cache_stats();
        assert_eq!(
            (stats.full_loads, stats.snapshot_loads),
            (1, 0),
            "damage {n}"
        );
        // The full load wrote a good snapshot again.
        let d = open(&path);
        assert_eq!(vector_top(&d, "alpha build march"), want, "damage {n}");
        assert_eq!(d.vector_cache_stats().snapshot_loads, 1, "damage {n}");
    }
}

/// Verifies ADR-0029: a snapshot copied from another store is never used.
#[test]
fn a_snapshot_of_another_store_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, p2) = (dir.path().join("one.db"), dir.path().join("two.db"));
    let one = open(&p1);
    fill(&one, 0..200);
    one.search("coffee", &SearchOptions::top(5)).unwrap();
    let two = open(&p2);
    two.put_many(
        (0..50)
            .map(|i| NewMemory::new("a", format!("other store entry {i} zebra")))
            .collect(),
    )
    .unwrap();
    std::fs::copy(snapshot(&p1), snapshot(&p2)).unwrap();
    let fresh = open(&p2);
    let hits = fresh
        .search("coffee", &SearchOptions::top(500).mode(SearchMode::Lexical))
        .unwrap();
    assert!(
        hits.is_empty(),
        "the other store's memories were served: {hits:?}"
    );
    let stats = fresh.vector_cache_stats();
    assert_eq!((stats.full_loads, stats.snapshot_loads), (1, 0));
}

/// Verifies ADR-0029 (and ADR-0019: read commands never write): a read-only handle leaves no
/// snapshot behind.
#[test]
fn a_read_only_handle_writes_no_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    fill(&open(&path), 0..100);
    let ro = SqliteStore::open_read_only(
        &path,
        Arc::new(HashEmbedder::default()),
        strata_memory::StoreOptions::default(),
    )
    .unwrap();
    ro.search("coffee", &SearchOptions::top(5)).unwrap();
    assert!(!snapshot(&path).exists());
}

/// Verifies ADR-0029: handles opening, searching (and so writing snapshots) while another
/// thread writes: every
/// handle ends up seeing every acknowledged memory, and the last snapshot is valid.
#[test]
fn snapshots_written_while_others_write_stay_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    fill(&open(&path), 0..200);
    let threads = 6;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let writer = {
        let (path, barrier) = (path.clone(), barrier.clone());
        std::thread::spawn(move || {
            let w = open(&path);
            barrier.wait();
            for i in 200..260 {
                w.put(NewMemory::new("a", text(i)).with_id(mid(&format!("m{i}"))))
                    .unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..threads)
        .map(|t| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for round in 0..4 {
                    // New handles: some start from a snapshot another thread just wrote.
                    let s = open(&path);
                    s.search(&format!("coffee {t} {round}"), &SearchOptions::top(5))
                        .unwrap();
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    let lexical = SearchOptions::top(1_000).mode(SearchMode::Lexical);
    for _ in 0..2 {
        let s = open(&path);
        let hits = s.search("note", &lexical).unwrap();
        assert_eq!(hits.len(), 260);
        for i in [0usize, 199, 200, 259] {
            assert_eq!(vector_top(&s, &text(i)), format!("m{i}"));
        }
    }
}

/// Verifies ADR-0029: a snapshot newer than the store (an older copy of the file restored next
/// to it) is not used, so memories the store no longer holds are never considered.
#[test]
fn a_snapshot_newer_than_the_store_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let backup = dir.path().join("backup");
    std::fs::create_dir(&backup).unwrap();
    let files = |from: &Path, to: &Path| {
        for suffix in ["", "-wal", "-commits"] {
            let mut src = from.as_os_str().to_owned();
            src.push(suffix);
            let mut dst = to.as_os_str().to_owned();
            dst.push(suffix);
            if Path::new(&src).exists() {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    };
    {
        let s = open(&path);
        fill(&s, 0..100);
    }
    files(&path, &backup.join("memory.db"));
    {
        let s = open(&path);
        fill(&s, 100..200);
        s.search("coffee", &SearchOptions::top(5)).unwrap();
    }
    assert!(snapshot(&path).is_file());
    // Restore the older copy; the newer snapshot stays next to it.
    let mut shm = path.as_os_str().to_owned();
    shm.push("-shm");
    let _ = std::fs::remove_file(PathBuf::from(shm));
    files(&backup.join("memory.db"), &path);
    let s = open(&path);
    let all = s
        .search("note", &SearchOptions::top(1_000).mode(SearchMode::Lexical))
        .unwrap();
    let stats = s.vector_cache_stats();
    assert_eq!(
        (stats.full_loads, stats.snapshot_loads),
        (1, 0),
        "{stats:?}"
    );
    assert_eq!(all.len(), 100);
    for i in [0usize, 99] {
        assert_eq!(vector_top(&s, &text(i)), format!("m{i}"));
    }
}
