//! The MEMORY.md reader and the wikilink graph over a real folder of notes. Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::Path;

use strata_memory::markdown::{note_memory_id, Neighbour, TruncatedBy};
use strata_memory::{
    InMemoryStore, IndexLimits, LongTermMemory, MemoryIndex, NoteGraph, SearchOptions, WalkOptions,
};

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn keys(n: &[Neighbour]) -> Vec<(String, usize, String)> {
    n.iter()
        .map(|x| (x.key.to_string(), x.depth, x.via.to_string()))
        .collect()
}

fn folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a -> b, c ; b -> d, a (cycle) ; c -> d, missing ; d -> e ; e -> a (long cycle)
    write(d, "a.md", "# A\nLinks to [[B]] and [[c|see C]].\n");
    write(d, "sub/b.md", "B links [[D#Section]] and back to [[a]].\n");
    write(
        d,
        "sub/deeper/c.md",
        "C links [[d]] and [[Missing Note]].\n`[[not-a-link]]`\n",
    );
    write(d, "d.md", "D links ![[e.md]].\n");
    write(d, "e.md", "E closes the loop: [[A]].\n");
    write(d, "lonely.md", "No links here.\n");
    write(d, ".hidden/x.md", "[[a]]");
    write(d, "notes.txt", "[[a]] not markdown");
    dir
}

/// Verifies ADR-0012: breadth-first, depth-limited, deterministic, cycle-safe.
#[test]
fn walks_are_breadth_first_depth_limited_and_deterministic() {
    let dir = folder();
    let g = NoteGraph::load(dir.path()).unwrap();
    assert_eq!(g.len(), 6, "hidden folders and other files are skipped");
    assert_eq!(g.note("B").unwrap().path, "sub/b.md");
    assert_eq!(
        g.dangling(),
        vec![(
            std::sync::Arc::from("c"),
            std::sync::Arc::from("missing note")
        )]
    );

    let w1 = g.neighbours(&["a"], WalkOptions::new(1, 20));
    assert_eq!(
        keys(&w1),
        vec![("b".into(), 1, "a".into()), ("c".into(), 1, "a".into())]
    );
    let w3 = g.neighbours(&["a"], WalkOptions::new(3, 20));
    assert_eq!(
        keys(&w3),
        vec![
            ("b".into(), 1, "a".into()),
            ("c".into(), 1, "a".into()),
            ("d".into(), 2, "b".into()),
            ("e".into(), 3, "d".into()),
        ]
    );
    // Deeper than the graph: the cycles e -> a and b -> a end the walk.
    let w10 = g.neighbours(&["a"], WalkOptions::new(10, 20));
    assert_eq!(w10, w3);
    assert_eq!(g.neighbours(&["a"], WalkOptions::new(0, 20)), vec![]);
    // Several start notes: none is returned as a neighbour of another.
    let w = g.neighbours(&["d", "b", "nope"], WalkOptions::new(1, 20));
    assert_eq!(
        keys(&w),
        vec![("e".into(), 1, "d".into()), ("a".into(), 1, "b".into())]
    );
    // Limits and backlinks.
    assert_eq!(g.neighbours(&["a"], WalkOptions::new(3, 2)).len(), 2);
    let back = g.neighbours(&["d"], WalkOptions::new(1, 20).with_backlinks());
    assert_eq!(
        keys(&back),
        vec![
            ("e".into(), 1, "d".into()),
            ("b".into(), 1, "d".into()),
            ("c".into(), 1, "d".into()),
        ]
    );
    assert!(g
        .neighbours(&["lonely"], WalkOptions::new(5, 20).with_backlinks())
        .is_empty());
    // Same input, same output, also after reloading.
    let again = NoteGraph::load(dir.path()).unwrap();
    assert_eq!(again.neighbours(&["a"], WalkOptions::new(3, 20)), w3);
}

/// Verifies ADR-0012: notes found by search lead to their linked neighbours.
#[test]
fn search_results_seed_the_walk() {
    let dir = folder();
    let g = NoteGraph::load(dir.path()).unwrap();
    let store = InMemoryStore::new();
    store.put_many(g.to_memories("agent")).unwrap();
    let hits = store
        .search("closes the loop", &SearchOptions::top(1))
        .unwrap();
    assert_eq!(hits[0].record.id, note_memory_id("e"));
    let key = g.note_key_of_memory(&hits[0].record.id).unwrap().clone();
    let n = g.neighbours(&[&key], WalkOptions::new(1, 5));
    assert_eq!(keys(&n), vec![("a".into(), 1, "e".into())]);
}

/// Verifies ADR-0012: MEMORY.md is read within configurable limits and truncation is reported.
#[test]
fn memory_index_is_read_within_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("MEMORY.md");
    assert_eq!(
        MemoryIndex::read(&path, IndexLimits::default()).unwrap(),
        None
    );

    let text: String = (0..250)
        .map(|i| format!("- fact {i}: {}\n", "x".repeat(90)))
        .collect();
    std::fs::write(&path, &text).unwrap();
    let idx = MemoryIndex::read(&path, IndexLimits::default())
        .unwrap()
        .unwrap();
    let t = idx.truncated.unwrap();
    // 250 lines of ~100 characters: 200 lines would be ~20,800 characters, so the
    // character limit cuts first, on a line boundary.
    assert_eq!(t.by, TruncatedBy::Chars);
    assert!(idx.text.chars().count() <= 20_000);
    assert!(idx.text.ends_with('\n'));
    assert_eq!(t.total_lines, 250);
    assert_eq!(t.kept_lines, idx.text.lines().count());
    assert!(text.starts_with(&idx.text));

    let idx = MemoryIndex::read(&path, IndexLimits::new(10, 1_000_000))
        .unwrap()
        .unwrap();
    assert_eq!(idx.truncated.unwrap().by, TruncatedBy::Lines);
    assert_eq!(idx.text.lines().count(), 10);

    let idx = MemoryIndex::read(&path, IndexLimits::new(1000, 1_000_000))
        .unwrap()
        .unwrap();
    assert!(idx.truncated.is_none());
    assert_eq!(idx.text, text);
}
