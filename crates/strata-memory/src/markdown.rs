//! Markdown memory: the `MEMORY.md` index and the wikilink graph over a folder of notes.
//!
//! The index is a hand-kept Markdown file that is read whole into layer 6, within limits
//! (200 lines and 20,000 characters by default, both configurable) and with truncation
//! reported, never silent. The graph follows `[[note]]` and `[[note|alias]]` links between
//! notes: starting from the notes a search returned, a breadth-first walk up to a depth limit
//! adds their neighbours, in a deterministic order, visiting each note once however the links
//! loop. Note text is untrusted content like any other store content (ADR-0006, ADR-0012).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::error::{MemoryError, Result};
use crate::long_term::{MemoryId, NewMemory};

/// Limits on how much of `MEMORY.md` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexLimits {
    /// The most lines kept (default 200).
    pub max_lines: usize,
    /// The most characters (Unicode scalar values) kept (default 20,000).
    pub max_chars: usize,
}

impl Default for IndexLimits {
    fn default() -> Self {
        IndexLimits {
            max_lines: 200,
            max_chars: 20_000,
        }
    }
}

impl IndexLimits {
    /// Limits of `max_lines` lines and `max_chars` characters.
    pub fn new(max_lines: usize, max_chars: usize) -> IndexLimits {
        IndexLimits {
            max_lines,
            max_chars,
        }
    }
}

/// Which limit cut the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncatedBy {
    /// The line limit.
    Lines,
    /// The character limit.
    Chars,
}

/// How an index was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Truncation {
    /// The limit that cut it (the character limit when both did).
    pub by: TruncatedBy,
    /// Lines kept (a partly kept line counts).
    pub kept_lines: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// Characters kept.
    pub kept_chars: usize,
    /// Characters in the file.
    pub total_chars: usize,
}

/// The part of a `MEMORY.md` file that fits the limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryIndex {
    /// Where it was read from, when it came from a file.
    pub path: Option<PathBuf>,
    /// The kept text.
    pub text: String,
    /// Set when the text was cut.
    pub truncated: Option<Truncation>,
}

impl MemoryIndex {
    /// Read `path` within `limits`; `Ok(None)` when the file does not exist.
    pub fn read(path: impl AsRef<Path>, limits: IndexLimits) -> Result<Option<MemoryIndex>> {
        let path = path.as_ref();
        // Only a regular file is read: a FIFO or a device in its place would block the read.
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            tracing::warn!(path = %path.display(), "the memory index is not a regular file; left out");
            return Ok(None);
        }
        match std::fs::read(path) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let mut index = MemoryIndex::from_text(&text, limits);
                index.path = Some(path.to_path_buf());
                if let Some(t) = index.truncated {
                    tracing::info!(
                        path = %path.display(),
                        kept_lines = t.kept_lines,
                        total_lines = t.total_lines,
                        kept_chars = t.kept_chars,
                        total_chars = t.total_chars,
                        "MEMORY.md was truncated to its limits"
                    );
                }
                Ok(Some(index))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(MemoryError::io("read", path, e)),
        }
    }

    /// Cut `text` to `limits`: first to whole lines, then to characters, preferring to end on a
    /// line boundary when the character limit falls inside a line (a single line longer than
    /// the limit is cut inside).
    pub fn from_text(text: &str, limits: IndexLimits) -> MemoryIndex {
        let total_lines = text.lines().count();
        let total_chars = text.chars().count();
        // Byte end after `max_lines` lines (keeping their line breaks).
        let mut end = text.len();
        let mut by = None;
        if total_lines > limits.max_lines {
            end = text
                .match_indices('\n')
                .nth(limits.max_lines.saturating_sub(1))
                .map_or(text.len(), |(i, _)| i + 1);
            if limits.max_lines == 0 {
                end = 0;
            }
            by = Some(TruncatedBy::Lines);
        }
        let kept = &text[..end];
        let kept = if kept.chars().count() > limits.max_chars {
            by = Some(TruncatedBy::Chars);
            let cut = kept
                .char_indices()
                .nth(limits.max_chars)
                .map_or(kept.len(), |(i, _)| i);
            let within = &kept[..cut];
            match within.rfind('\n') {
                Some(nl) => &within[..=nl],
                None => within,
            }
        } else {
            kept
        };
        let truncated = by.map(|by| Truncation {
            by,
            kept_lines: kept.lines().count(),
            total_lines,
            kept_chars: kept.chars().count(),
            total_chars,
        });
        MemoryIndex {
            path: None,
            text: kept.to_owned(),
            truncated,
        }
    }
}

/// One note of a folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    /// Its name: the file name without `.md`.
    pub name: Arc<str>,
    /// The path relative to the folder, with `/` separators.
    pub path: String,
    /// Its text.
    pub text: String,
    /// The keys of the notes it links to, in order of first appearance, without repeats.
    pub links: Vec<Arc<str>>,
}

/// The key a note or a link target is looked up by: the last path segment, without a heading
/// or block reference and without `.md`, lower-cased (as note apps resolve links).
pub fn note_key(target: &str) -> String {
    let t = target.split(['#', '^']).next().unwrap_or("").trim();
    let t = t.rsplit(['/', '\\']).next().unwrap_or(t);
    let t = t.strip_suffix(".md").unwrap_or(t);
    t.trim().to_lowercase()
}

/// The link targets in `text`: `[[target]]`, `[[target|alias]]`, `[[target#heading]]`, and
/// embeds `![[target]]`, as note keys in order of first appearance. Links inside fenced code
/// blocks and inline code are not links.
pub fn wikilinks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans.
        let mut plain = String::with_capacity(line.len());
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(start) = rest.find("[[") {
            let after = &rest[start + 2..];
            let Some(close) = after.find("]]") else {
                break;
            };
            let inner = &after[..close];
            rest = &after[close + 2..];
            if inner.contains('[') || inner.contains('\n') {
                continue;
            }
            let target = inner.split('|').next().unwrap_or("");
            let key = note_key(target);
            if !key.is_empty() && seen.insert(key.clone()) {
                out.push(key);
            }
        }
    }
    out
}

/// How far and how wide [`NoteGraph::neighbours`] walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalkOptions {
    /// How many links away from a start note to go (default 1).
    pub depth: usize,
    /// The most notes returned (default 20).
    pub max_notes: usize,
    /// Also walk links backwards, from a note to the notes that link to it (default false).
    pub backlinks: bool,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            depth: 1,
            max_notes: 20,
            backlinks: false,
        }
    }
}

impl WalkOptions {
    /// Walk `depth` links away, returning at most `max_notes`.
    pub fn new(depth: usize, max_notes: usize) -> WalkOptions {
        WalkOptions {
            depth,
            max_notes,
            backlinks: false,
        }
    }

    /// Also follow links backwards.
    #[must_use]
    pub fn with_backlinks(mut self) -> Self {
        self.backlinks = true;
        self
    }
}

/// A note reached by a walk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Neighbour {
    /// The note's key.
    pub key: Arc<str>,
    /// How many links from the nearest start note.
    pub depth: usize,
    /// The key of the note it was reached from.
    pub via: Arc<str>,
}

/// The wikilink graph of a folder of notes.
#[derive(Debug, Clone, Default)]
pub struct NoteGraph {
    notes: BTreeMap<Arc<str>, Note>,
    backlinks: HashMap<Arc<str>, Vec<Arc<str>>>,
    by_memory_id: HashMap<MemoryId, Arc<str>>,
}

impl NoteGraph {
    /// Read every `*.md` file under `dir` (recursively, in sorted path order). When two files
    /// share a name, the first by path wins and the other is skipped with a warning.
    pub fn load(dir: impl AsRef<Path>) -> Result<NoteGraph> {
        let dir = dir.as_ref();
        let mut files = Vec::new();
        collect_md(dir, dir, &mut files)?;
        files.sort();
        let mut notes = Vec::with_capacity(files.len());
        for rel in files {
            // Read by the path as the file system gave it (a name that is not UTF-8 included);
            // the note is named by its lossy UTF-8 form.
            let full = dir.join(&rel);
            let bytes = std::fs::read(&full).map_err(|e| MemoryError::io("read", &full, e))?;
            notes.push((
                rel.to_string_lossy().replace('\\', "/"),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        Ok(NoteGraph::from_notes(notes))
    }

    /// Build from `(relative path, text)` pairs.
    pub fn from_notes<I, P, T>(notes: I) -> NoteGraph
    where
        I: IntoIterator<Item = (P, T)>,
        P: Into<String>,
        T: Into<String>,
    {
        let mut graph = NoteGraph::default();
        for (path, text) in notes {
            let path: String = path.into().replace('\\', "/");
            let text: String = text.into();
            let stem = path.rsplit('/').next().unwrap_or(&path);
            let name: Arc<str> = Arc::from(stem.strip_suffix(".md").unwrap_or(stem));
            let key: Arc<str> = Arc::from(note_key(&name));
            if key.is_empty() {
                continue;
            }
            if let Some(existing) = graph.notes.get(&key) {
                tracing::warn!(kept = %existing.path, skipped = %path, "two notes share a name");
                continue;
            }
            let links = wikilinks(&text)
                .into_iter()
                .filter(|l| **l != *key)
                .map(Arc::from)
                .collect();
            graph.notes.insert(
                key,
                Note {
                    name,
                    path,
                    text,
                    links,
                },
            );
        }
        let mut back: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
        for (key, note) in &graph.notes {
            for l in &note.links {
                back.entry(l.clone()).or_default().push(key.clone());
            }
        }
        graph.backlinks = back;
        graph.by_memory_id = graph
            .notes
            .keys()
            .map(|k| (note_memory_id(k), k.clone()))
            .collect();
        graph
    }

    /// The key of the note imported as the memory `id` (see [`NoteGraph::to_memories`]).
    pub fn note_key_of_memory(&self, id: &MemoryId) -> Option<&Arc<str>> {
        self.by_memory_id.get(id)
    }

    /// The note with this name or key.
    pub fn note(&self, name: &str) -> Option<&Note> {
        self.notes.get(note_key(name).as_str())
    }

    /// Every note, by key.
    pub fn notes(&self) -> impl Iterator<Item = &Note> {
        self.notes.values()
    }

    /// How many notes there are.
    pub fn len(&self) -> usize {
        self.notes.len()
    }

    /// True when there are no notes.
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    /// Links whose target is not a note of the folder: `(from, target)`, sorted.
    pub fn dangling(&self) -> Vec<(Arc<str>, Arc<str>)> {
        let mut out: Vec<(Arc<str>, Arc<str>)> = self
            .notes
            .iter()
            .flat_map(|(k, n)| {
                n.links
                    .iter()
                    .filter(|l| !self.notes.contains_key(*l))
                    .map(move |l| (k.clone(), l.clone()))
            })
            .collect();
        out.sort();
        out
    }

    /// Breadth-first walk from `start` (note names or keys, in order of importance), up to
    /// `options.depth` links away. Returns the notes reached, not the start notes themselves,
    /// nearest first; at equal depth in the order they were reached (start notes in the order
    /// given, links in the order they appear in a note, backlinks by key). Each note appears
    /// once, so cycles end the walk; unknown start notes and dangling links are skipped.
    pub fn neighbours(&self, start: &[&str], options: WalkOptions) -> Vec<Neighbour> {
        let mut visited: HashSet<Arc<str>> = HashSet::new();
        let mut queue: VecDeque<(Arc<str>, usize)> = VecDeque::new();
        for s in start {
            if let Some((k, _)) = self.notes.get_key_value(note_key(s).as_str()) {
                if visited.insert(k.clone()) {
                    queue.push_back((k.clone(), 0));
                }
            }
        }
        let mut out = Vec::new();
        while let Some((key, depth)) = queue.pop_front() {
            if depth >= options.depth {
                continue;
            }
            let Some(note) = self.notes.get(&key) else {
                continue;
            };
            let mut next: Vec<&Arc<str>> = note.links.iter().collect();
            if options.backlinks {
                let mut back: Vec<&Arc<str>> =
                    self.backlinks.get(&key).into_iter().flatten().collect();
                back.sort();
                next.extend(back);
            }
            for n in next {
                let Some((nk, _)) = self.notes.get_key_value(n) else {
                    continue;
                };
                if !visited.insert(nk.clone()) {
                    continue;
                }
                if out.len() >= options.max_notes {
                    return out;
                }
                out.push(Neighbour {
                    key: nk.clone(),
                    depth: depth + 1,
                    via: key.clone(),
                });
                queue.push_back((nk.clone(), depth + 1));
            }
        }
        out
    }

    /// The path of every note relative to the folder it was loaded from, in the order of
    /// [`NoteGraph::to_memories`], so that an import can name the file of a memory it refused.
    pub fn paths(&self) -> Vec<&str> {
        self.notes.values().map(|n| &*n.path).collect()
    }

    /// Every note as a long-term memory of `agent_id`, with the id [`note_memory_id`] and the
    /// tag `note`, in key order.
    pub fn to_memories(&self, agent_id: &str) -> Vec<NewMemory> {
        self.notes
            .keys()
            .zip(self.notes.values())
            .map(|(key, note)| {
                NewMemory::new(agent_id, note.text.clone())
                    .with_id(note_memory_id(key))
                    .with_tags(["note"])
            })
            .collect()
    }
}

/// The memory id a note is imported under: `note:` and the note key made safe for ids; when
/// that changed the key, a short hash of the key keeps different notes apart.
pub fn note_memory_id(name: &str) -> MemoryId {
    let key = note_key(name);
    let mut slug: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    slug.truncate(100);
    if slug != key || slug.is_empty() {
        let h = blake3::hash(key.as_bytes()).to_hex();
        slug.push('-');
        slug.push_str(&h[..8]);
    }
    // The slug holds only id characters and is at most 109 bytes, so the id is valid.
    MemoryId::new(format!("note:{slug}")).unwrap_or_else(|_| MemoryId::generate(0))
}

fn collect_md(root: &Path, dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| MemoryError::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| MemoryError::io("list", dir, e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| MemoryError::io("inspect", &path, e))?;
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if kind.is_dir() && !hidden {
            collect_md(root, &path, out)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "md") {
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_links_with_aliases_headings_and_embeds() {
        let text =
            "See [[Alpha]] and [[beta|the B note]], [[Gamma#Intro]], ![[folder/Delta.md]].\n\
                    Repeat [[alpha]]. Broken [[ ]] and [[unclosed.\n\
                    `[[in code]]`\n```\n[[fenced]]\n```\n[[after]]";
        assert_eq!(
            wikilinks(text),
            vec!["alpha", "beta", "gamma", "delta", "after"]
        );
    }

    #[test]
    fn index_limits() {
        let text: String = (0..300).map(|i| format!("line {i}\n")).collect();
        let idx = MemoryIndex::from_text(&text, IndexLimits::default());
        let t = idx.truncated.unwrap();
        assert_eq!(t.by, TruncatedBy::Lines);
        assert_eq!((t.kept_lines, t.total_lines), (200, 300));
        assert!(idx.text.ends_with("line 199\n"));

        let idx = MemoryIndex::from_text(&text, IndexLimits::new(1000, 20));
        let t = idx.truncated.unwrap();
        assert_eq!(t.by, TruncatedBy::Chars);
        assert_eq!(idx.text, "line 0\nline 1\n");
        assert_eq!(t.kept_chars, 14);

        let idx = MemoryIndex::from_text("ééééé", IndexLimits::new(10, 3));
        assert_eq!(idx.text, "ééé");
        let idx = MemoryIndex::from_text("short\n", IndexLimits::default());
        assert!(idx.truncated.is_none());
        assert_eq!(idx.text, "short\n");
    }

    #[test]
    fn note_ids_are_valid_and_distinct() {
        let a = note_memory_id("Project Plan");
        let b = note_memory_id("project-plan");
        assert_ne!(a, b);
        assert_eq!(b.as_str(), "note:project-plan");
        assert!(note_memory_id("日本語").as_str().starts_with("note:"));
    }
}
