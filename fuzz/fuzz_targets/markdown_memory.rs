//! Fuzz target: Markdown memory (ADR-0012): the MEMORY.md index reader respects its limits and
//! the wikilink graph walk terminates within its depth and size on any notes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_memory::{IndexLimits, MemoryIndex, NoteGraph, WalkOptions};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let index = MemoryIndex::from_text(&text, IndexLimits::new(20, 500));
    let _ = index;
    let _ = strata_memory::markdown::wikilinks(&text);
    // Split the input into notes on a separator, link them as they say, and walk.
    let notes: Vec<(String, String)> = text.split('\u{1}').enumerate().map(|(i, t)| (format!("n{}.md", i % 7), t.to_owned())).collect();
    let graph = NoteGraph::from_notes(notes);
    let starts: Vec<&str> = graph.notes().take(2).map(|n| &*n.name).collect();
    let walk = graph.neighbours(&starts, WalkOptions::new(3, 50).with_backlinks());
    assert!(walk.len() <= 50);
    assert!(walk.iter().all(|n| n.depth <= 3));
});
