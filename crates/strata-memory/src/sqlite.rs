//! The SQLite adapter, the embedded default: one file in WAL mode holding working memory,
//! long-term memory and shared context, with no server (ADR-0012).
//!
//! Long-term memory keeps its text in `memories` (with an FTS5 table kept in step by triggers,
//! which `check_integrity` checks) and vectors as little-endian `f32` BLOBs in
//! `memory_vectors`. Each handle ranks from process memory (ADR-0029): an in-process BM25
//! index equal to FTS5's `bm25()` and the int8 codes of the vectors, both loaded at the first
//! search and refreshed from the change log when another connection writes (`PRAGMA
//! data_version` tells when), so such a write costs the next search the changed rows only.
//! The codes choose a pool of candidates that the exact vectors, read back from the file and
//! checked, rank.
//!
//! Damage is detected, never served (ADR-0019):
//!
//! - Every row of `memories`, `memory_vectors`, `wm_entries` and `shared_facts` carries a
//!   128-bit BLAKE3 checksum of its fields (key, text, metadata, timestamps, vector bytes),
//!   checked on every read: a row that does not match, or whose text is not valid UTF-8, is
//!   [`MemoryError::Corrupt`] naming the table and the row. What per-row checksums cannot see
//!   (a page of rows lost as a whole, damage inside the full-text index that changes which rows
//!   match) is what SQLite's own checks look for: [`StoreOptions::with_check_on_open`] runs
//!   `PRAGMA quick_check` at open, and [`SqliteStore::check_integrity`] runs the full
//!   `integrity_check`, the FTS5 index check and every row checksum.
//! - Committed transactions lost from the write-ahead log. SQLite checksums every WAL frame,
//!   but when a frame fails its checksum it silently stops replaying there: every later
//!   committed transaction is dropped without an error, and the loss becomes permanent at the
//!   next checkpoint. So every write transaction also increments a counter in `meta`, and
//!   after the commit the new value is written (and synced) to a small side file next to the
//!   database, `<file>-commits`. Opening a store whose counter is behind its side file fails
//!   with [`MemoryError::Corrupt`]. This catches a damaged, truncated or deleted `-wal` file
//!   and a database file replaced by an older copy. It cannot catch the loss of the newest
//!   transaction when the process or machine died between the commit and the side-file write
//!   (that transaction was never acknowledged), nor damage to a WAL frame before it is
//!   checkpointed that also damages the side file.
//! - A 0-byte file is refused (it is what a failed copy or a full disk leaves behind), and a
//!   new store is built in a temporary file and linked into place in one step, so two
//!   processes opening a new store at once both get the same, complete store.
//!
//! The schema is versioned in a `schema_version` table and migrated forward in one transaction
//! when the store opens. A store from a newer build is refused with
//! [`MemoryError::SchemaVersionMismatch`]; a file that is not a strata SQLite store, or a damaged
//! one, is refused with [`MemoryError::Corrupt`] and never recreated.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{
    params, params_from_iter, Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction,
};
use strata_core::{Content, Role};

use crate::embed::{embed_checked, Embedder, HashEmbedder};
use crate::error::{MemoryError, Result};
use crate::lexical::LexicalIndex;
use crate::long_term::{
    check_tags, dot, fuse, prepare_batch, ListOptions, LongTermMemory, MemoryId, MemoryRecord,
    NewMemory, SearchHit, SearchMode, SearchOptions,
};
use crate::options::{check_label, StoreOptions};
use crate::quant::{pool_size, top_positions, CodeCache};
use crate::shared::{check_fact_key, Fact, Scope, SharedContext, SharedContextWriter};
use crate::snapshot;
use crate::text::{query_terms, MAX_QUERY_TERMS};
use crate::working::{
    check_call_link, check_new_entry, CallState, Entry, NewEntry, WorkingMemory, MAX_LABEL_BYTES,
};

/// The schema version this build writes.
pub const SQLITE_SCHEMA_VERSION: i64 = 3;

/// Forward migrations: `(version reached, SQL)`, applied in order.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        r"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE wm_entries (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    role    TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool_call', 'tool_result')),
    call_id TEXT,
    content TEXT NOT NULL,
    at_ms   INTEGER NOT NULL
);
CREATE INDEX wm_entries_session ON wm_entries (session, seq);
CREATE INDEX wm_entries_call ON wm_entries (session, call_id) WHERE call_id IS NOT NULL;

CREATE TABLE memories (
    key        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    agent_id   TEXT NOT NULL,
    content    TEXT NOT NULL,
    tags       TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE INDEX memories_agent ON memories (agent_id, created_ms);
CREATE INDEX memories_created ON memories (created_ms, id);

-- Vectors live apart from the text so that lexical search and filters read small rows.
CREATE TABLE memory_vectors (
    key       INTEGER PRIMARY KEY REFERENCES memories (key) ON DELETE CASCADE,
    embedding BLOB NOT NULL
);

CREATE TABLE memory_tags (
    tag TEXT NOT NULL,
    key INTEGER NOT NULL REFERENCES memories (key) ON DELETE CASCADE,
    PRIMARY KEY (tag, key)
) WITHOUT ROWID;
CREATE INDEX memory_tags_key ON memory_tags (key);

CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, content = 'memories', content_rowid = 'key', tokenize = 'unicode61'
);
CREATE VIRTUAL TABLE memories_fts_vocab USING fts5vocab (memories_fts, 'row');
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content) VALUES (new.key, new.content);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.key, old.content);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF content ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.key, old.content);
    INSERT INTO memories_fts (rowid, content) VALUES (new.key, new.content);
END;

CREATE TABLE shared_facts (
    scope      TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
",
    ),
    // Version 2 (ADR-0019): per-row checksums and the commit counter. The checksums of rows
    // written by version 1 are filled in by `fill_checksums` in the same transaction.
    (
        2,
        r"
ALTER TABLE memories ADD COLUMN checksum BLOB;
ALTER TABLE memory_vectors ADD COLUMN checksum BLOB;
ALTER TABLE wm_entries ADD COLUMN checksum BLOB;
ALTER TABLE shared_facts ADD COLUMN checksum BLOB;
INSERT INTO meta (key, value) VALUES ('commits', '0') ON CONFLICT (key) DO NOTHING;
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))))
    ON CONFLICT (key) DO NOTHING;

-- The change log of vectors: other processes' vector caches read it to refresh only the rows
-- that changed. Old entries are pruned; `meta.changes_pruned_through` says up to where.
CREATE TABLE memory_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key INTEGER NOT NULL
);
INSERT INTO meta (key, value) VALUES ('changes_pruned_through', '0') ON CONFLICT (key) DO NOTHING;
CREATE TRIGGER memory_vectors_changed_insert AFTER INSERT ON memory_vectors BEGIN
    INSERT INTO memory_changes (key) VALUES (new.key);
END;
CREATE TRIGGER memory_vectors_changed_update AFTER UPDATE ON memory_vectors BEGIN
    INSERT INTO memory_changes (key) VALUES (new.key);
END;
CREATE TRIGGER memories_changed_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memory_changes (key) VALUES (old.key);
END;
",
    ),
    // Version 3: versioned per-session documents (the session's goals), checksummed like every
    // other row (ADR-0019).
    (
        3,
        r"
CREATE TABLE session_state (
    session    TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    checksum   BLOB NOT NULL,
    PRIMARY KEY (session, name)
) WITHOUT ROWID;
",
    ),
];

/// How many change-log entries are kept for other processes' caches to catch up with; a
/// cache further behind reloads everything.
const CHANGES_KEPT: i64 = 100_000;

/// A handle rewrites the index snapshot when it has caught up with this many change-log
/// entries since the snapshot was written, so that new handles stay well inside the kept log.
const SNAPSHOT_LAG: i64 = CHANGES_KEPT / 2;

/// What a handle keeps of every memory after its first search: the vectors as int8 codes
/// (ADR-0019; each vector scaled so its largest component is 127 and rounded, with the scale
/// kept; the codes only choose candidates, which are then ranked by their exact vectors read
/// from the file) and the texts as a BM25 index (ADR-0029).
#[derive(Debug, Default)]
struct VectorCache {
    data_version: i64,
    /// The last change-log entry the cache reflects.
    change_seq: i64,
    /// The change-log entry the snapshot on disk reflects, as far as this handle knows.
    snapshot_seq: i64,
    /// The codes.
    codes: CodeCache,
    /// The texts, for the lexical ranking (ADR-0029).
    lexical: LexicalIndex,
}

impl VectorCache {
    fn upsert(&mut self, dims: usize, key: i64, id: &MemoryId, v: &[f32], content: &str) {
        self.codes.upsert(dims, key, id, v);
        self.lexical.upsert(key, content);
    }

    fn remove(&mut self, dims: usize, key: i64) {
        self.codes.remove(dims, key);
        self.lexical.remove(key);
    }
}

#[derive(Debug)]
struct Inner {
    conn: Connection,
    vectors: Option<VectorCache>,
    stats: VectorCacheStats,
}

/// What the vector cache of one [`SqliteStore`] handle has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VectorCacheStats {
    /// Times every vector was loaded (the first search, or after falling too far behind).
    pub full_loads: u64,
    /// Times the cache caught up with other connections' writes through the change log.
    pub refreshes: u64,
    /// Vectors read again by those refreshes.
    pub rows_refreshed: u64,
    /// Times the cache started from the snapshot next to the file (ADR-0029).
    pub snapshot_loads: u64,
}

/// Size and content counts of a SQLite store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SqliteStats {
    /// The file.
    pub path: PathBuf,
    /// The schema version.
    pub schema_version: i64,
    /// The embedder the store was created with.
    pub embedder: String,
    /// Its dimension.
    pub dims: usize,
    /// Long-term memories.
    pub memories: u64,
    /// Working-memory entries.
    pub entries: u64,
    /// Sessions with working-memory entries.
    pub sessions: u64,
    /// Shared facts.
    pub facts: u64,
    /// Size of the database file in bytes (without the WAL).
    pub file_bytes: u64,
}

/// Working memory, long-term memory and shared context in one SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    location: String,
    name: String,
    options: StoreOptions,
    embedder: Arc<dyn Embedder>,
    inner: Mutex<Inner>,
    read_only: bool,
    /// The side file holding the commit counter (ADR-0019), opened at the first write.
    commits: Mutex<Option<std::fs::File>>,
    /// The random id of this store, which the side file repeats.
    store_id: String,
}

/// The side file that records how many write transactions the store has committed.
fn commits_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-commits");
    PathBuf::from(p)
}

const COMMITS_MAGIC: &[u8; 8] = b"STRATACC";
/// Magic, store id (32 hex digits), counter (u64 LE), and 16 bytes of BLAKE3 over those.
const COMMITS_LEN: usize = 8 + 32 + 8 + 16;

/// Parse a side file: the store id it belongs to and its counter, or `None` when it is not a
/// whole, valid record.
fn parse_commits(bytes: &[u8]) -> Option<(&[u8], u64)> {
    if bytes.len() != COMMITS_LEN || &bytes[..8] != COMMITS_MAGIC {
        return None;
    }
    if blake3::hash(&bytes[..48]).as_bytes()[..16] != bytes[48..] {
        return None;
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&bytes[40..48]);
    Some((&bytes[8..40], u64::from_le_bytes(n)))
}

fn commits_record(store_id: &str, n: u64) -> [u8; COMMITS_LEN] {
    let mut out = [0u8; COMMITS_LEN];
    out[..8].copy_from_slice(COMMITS_MAGIC);
    let id = store_id.as_bytes();
    out[8..8 + id.len().min(32)].copy_from_slice(&id[..id.len().min(32)]);
    out[40..48].copy_from_slice(&n.to_le_bytes());
    let h = blake3::hash(&out[..48]);
    out[48..].copy_from_slice(&h.as_bytes()[..16]);
    out
}

/// The store's id and commit counter from `meta`.
fn store_identity(conn: &Connection, location: &str) -> Result<(String, u64)> {
    let get = |k: &str| -> Result<Option<String>> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()
            .map_err(|e| db_err(location, e))
    };
    let id = get("store_id")?.unwrap_or_default();
    let n = get("commits")?.unwrap_or_default();
    let n = if n.is_empty() {
        0
    } else {
        n.parse().map_err(|_| MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!("meta.commits is `{n}`, not a count"),
        })?
    };
    Ok((id, n))
}

/// Refuse to open a store whose commit counter is behind its side file: committed
/// transactions were lost (ADR-0019). A side file that is missing, unreadable (a power loss
/// may tear it) or that belongs to another store (the file was deleted and created anew)
/// proves nothing and is ignored.
fn check_commits(conn: &Connection, location: &str, path: &Path) -> Result<()> {
    let side = commits_path(path);
    let bytes = match std::fs::read(&side) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(MemoryError::io("read", &side, e)),
    };
    let (store_id, found) = store_identity(conn, location)?;
    let Some((id, expected)) = parse_commits(&bytes) else {
        tracing::warn!(path = %side.display(), "the commit counter side file is unreadable; lost-commit detection restarts at the next write");
        return Ok(());
    };
    if id != store_id.as_bytes() {
        tracing::info!(path = %side.display(), "the commit counter side file belongs to an earlier store at this path; it is replaced at the next write");
        return Ok(());
    }
    if found < expected {
        return Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!(
                "the store acknowledged {expected} write transactions but holds only {found}: committed data was lost, most likely because the -wal file was damaged, truncated or deleted, or the database file was replaced by an older copy (if you restored a backup on purpose, delete {} and open it again)",
                side.display()
            ),
        });
    }
    Ok(())
}

/// Remove a file that may not exist, logging other failures.
fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a temporary file");
        }
    }
}

/// Build a new store in a temporary file next to `path`, then link it into place in one
/// step; when another process linked its own first, theirs is kept and ours removed. Either
/// way `path` then holds a complete store, never a half-initialised or empty file.
fn create_new(path: &Path, location: &str, embedder: &dyn Embedder) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "memory.db".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".{base}.new-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let cleanup = |tmp: &Path| {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = tmp.as_os_str().to_owned();
            p.push(suffix);
            remove_quietly(Path::new(&p));
        }
    };
    let build = || -> Result<()> {
        let mut conn = Connection::open(&tmp).map_err(|e| db_err(location, e))?;
        let e = |err| db_err(location, err);
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            .map_err(e)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(e)?;
        migrate(&mut conn, location, embedder)?;
        conn.close().map_err(|(_, err)| e(err))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|err| MemoryError::io("sync", &tmp, err))
    };
    if let Err(err) = build() {
        cleanup(&tmp);
        return Err(err);
    }
    let linked = std::fs::hard_link(&tmp, path);
    cleanup(&tmp);
    match linked {
        Ok(()) => {
            if let Ok(d) = std::fs::File::open(&dir) {
                if let Err(e) = d.sync_all() {
                    tracing::debug!(dir = %dir.display(), error = %e, "could not sync directory");
                }
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(MemoryError::io("create the SQLite store", path, e)),
    }
}

/// Run `PRAGMA quick_check` or `PRAGMA integrity_check`: [`MemoryError::Corrupt`] unless it
/// answers `ok`.
fn run_quick_check(conn: &Connection, location: &str, pragma: &str) -> Result<()> {
    let mut stmt = conn.prepare(pragma).map_err(|e| db_err(location, e))?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .map_err(|e| db_err(location, e))?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| db_err(location, e))?;
    if rows.len() == 1 && rows[0] == "ok" {
        Ok(())
    } else {
        Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!("{pragma}: {}", rows.join("; ")),
        })
    }
}

/// Map a SQLite error: damage and "not a database" become [`MemoryError::Corrupt`], and so do
/// values of the wrong type or text that is not UTF-8 (a column can only hold those when the
/// file was damaged or written by something else).
fn db_err(location: &str, e: rusqlite::Error) -> MemoryError {
    let corrupt = match &e {
        rusqlite::Error::SqliteFailure(f, _) => {
            matches!(f.code, ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
        }
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::Utf8Error(_)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => true,
        _ => false,
    };
    if corrupt {
        return MemoryError::Corrupt {
            location: location.to_owned(),
            detail: e.to_string(),
        };
    }
    MemoryError::Database {
        location: location.to_owned(),
        detail: e.to_string(),
    }
}

fn role_from(location: &str, s: &str) -> Result<Role> {
    match s {
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool_call" => Ok(Role::ToolCall),
        "tool_result" => Ok(Role::ToolResult),
        other => Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!("unknown role `{other}` in wm_entries"),
        }),
    }
}

fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn blob_to_vector(location: &str, dims: usize, b: &[u8]) -> Result<Vec<f32>> {
    if b.len() != dims * 4 {
        return Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!(
                "a stored vector has {} bytes, expected {} ({dims} dimensions)",
                b.len(),
                dims * 4
            ),
        });
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn tags_from(s: &str) -> Vec<Arc<str>> {
    s.split(' ')
        .filter(|t| !t.is_empty())
        .map(Arc::from)
        .collect()
}

fn tags_text(tags: &[Arc<str>]) -> String {
    tags.iter().map(|t| &**t).collect::<Vec<_>>().join(" ")
}

const RECORD_COLUMNS: &str =
    "m.id, m.agent_id, m.content, m.tags, m.created_ms, m.updated_ms, m.key, m.checksum";

/// A row checksum: BLAKE3 over the table name and each field, length-prefixed, cut to 128
/// bits. Implements ADR-0019.
struct RowSum(blake3::Hasher);

impl RowSum {
    fn new(table: &str) -> RowSum {
        let mut h = blake3::Hasher::new();
        h.update(b"strata-sqlite-row-v1\0");
        h.update(table.as_bytes());
        h.update(b"\0");
        RowSum(h)
    }

    fn bytes(mut self, b: &[u8]) -> RowSum {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    fn opt(mut self, b: Option<&[u8]>) -> RowSum {
        match b {
            None => {
                self.0.update(&[0]);
                self
            }
            Some(b) => {
                self.0.update(&[1]);
                self.bytes(b)
            }
        }
    }

    fn int(mut self, i: i64) -> RowSum {
        self.0.update(&i.to_le_bytes());
        self
    }

    fn finish(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.0.finalize().as_bytes()[..16]);
        out
    }
}

fn memory_sum(
    key: i64,
    id: &[u8],
    agent: &[u8],
    content: &[u8],
    tags: &[u8],
    created: i64,
    updated: i64,
) -> [u8; 16] {
    RowSum::new("memories")
        .int(key)
        .bytes(id)
        .bytes(agent)
        .bytes(content)
        .bytes(tags)
        .int(created)
        .int(updated)
        .finish()
}

fn vector_sum(key: i64, blob: &[u8]) -> [u8; 16] {
    RowSum::new("memory_vectors").int(key).bytes(blob).finish()
}

fn entry_sum(
    seq: i64,
    session: &[u8],
    role: &[u8],
    call_id: Option<&[u8]>,
    content: &[u8],
    at_ms: i64,
) -> [u8; 16] {
    RowSum::new("wm_entries")
        .int(seq)
        .bytes(session)
        .bytes(role)
        .opt(call_id)
        .bytes(content)
        .int(at_ms)
        .finish()
}

fn fact_sum(scope: &[u8], key: &[u8], value: &[u8], updated: i64) -> [u8; 16] {
    RowSum::new("shared_facts")
        .bytes(scope)
        .bytes(key)
        .bytes(value)
        .int(updated)
        .finish()
}

fn state_sum(session: &[u8], name: &[u8], value: &[u8], version: i64, updated: i64) -> [u8; 16] {
    RowSum::new("session_state")
        .bytes(session)
        .bytes(name)
        .bytes(value)
        .int(version)
        .int(updated)
        .finish()
}

/// The raw bytes of a text column (no UTF-8 conversion yet: the checksum is over the bytes).
fn raw<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<&'r [u8]> {
    match row.get_ref(i)? {
        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => Ok(b),
        other => Err(rusqlite::Error::InvalidColumnType(
            i,
            format!("column {i}"),
            other.data_type(),
        )),
    }
}

fn raw_opt<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<&'r [u8]>> {
    match row.get_ref(i)? {
        rusqlite::types::ValueRef::Null => Ok(None),
        _ => raw(row, i).map(Some),
    }
}

/// Check a row's stored checksum against the one computed from its fields.
fn verify_sum(
    location: &str,
    table: &str,
    row_name: &dyn Fn() -> String,
    stored: Option<&[u8]>,
    computed: &[u8; 16],
) -> Result<()> {
    if stored == Some(&computed[..]) {
        return Ok(());
    }
    Err(MemoryError::Corrupt {
        location: location.to_owned(),
        detail: format!(
            "{table} row {} fails its checksum ({}); the row was damaged on disk",
            row_name(),
            if stored.is_none() {
                "no checksum stored"
            } else {
                "its fields changed"
            }
        ),
    })
}

/// Text of a verified row: not UTF-8 is damage.
fn utf8(location: &str, table: &str, row_name: &dyn Fn() -> String, b: &[u8]) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| MemoryError::Corrupt {
        location: location.to_owned(),
        detail: format!(
            "{table} row {} holds text that is not valid UTF-8",
            row_name()
        ),
    })
}

/// A memory from a row of [`RECORD_COLUMNS`], after checking its checksum.
fn record_from_row(
    location: &str,
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<MemoryRecord>> {
    record_from_row_at(location, row, 0)
}

/// [`record_from_row`] for [`RECORD_COLUMNS`] starting at column `at`.
fn record_from_row_at(
    location: &str,
    row: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<Result<MemoryRecord>> {
    let id = raw(row, at)?;
    let agent = raw(row, at + 1)?;
    let content = raw(row, at + 2)?;
    let tags = raw(row, at + 3)?;
    let created_ms: i64 = row.get(at + 4)?;
    let updated_ms: i64 = row.get(at + 5)?;
    let key: i64 = row.get(at + 6)?;
    let stored = raw_opt(row, at + 7)?;
    let name = || format!("key {key} (id `{}`)", String::from_utf8_lossy(id));
    let computed = memory_sum(key, id, agent, content, tags, created_ms, updated_ms);
    let check = || -> Result<MemoryRecord> {
        verify_sum(location, "memories", &name, stored, &computed)?;
        let id = utf8(location, "memories", &name, id)?;
        Ok(MemoryRecord {
            id: MemoryId::new(&id).map_err(|_| MemoryError::Corrupt {
                location: location.to_owned(),
                detail: format!("invalid memory id `{id}` in memories"),
            })?,
            agent_id: Arc::from(utf8(location, "memories", &name, agent)?),
            content: Content::from(utf8(location, "memories", &name, content)?),
            tags: tags_from(&utf8(location, "memories", &name, tags)?),
            created_ms,
            updated_ms,
        })
    };
    Ok(check())
}

/// SQL (and its parameters) restricting `m` to an agent and to memories with all `tags`.
fn filter_sql(agent: Option<&str>, tags: &[Arc<str>]) -> (String, Vec<String>) {
    let mut sql = String::new();
    let mut params = Vec::new();
    if let Some(a) = agent {
        sql.push_str(" AND m.agent_id = ?");
        params.push(a.to_owned());
    }
    if !tags.is_empty() {
        let marks = vec!["?"; tags.len()].join(", ");
        sql.push_str(&format!(
            " AND (SELECT count(*) FROM memory_tags t WHERE t.key = m.key AND t.tag IN ({marks})) = {}",
            tags.len()
        ));
        params.extend(tags.iter().map(|t| t.to_string()));
    }
    (sql, params)
}

impl SqliteStore {
    /// Open (or create) the store at `path` with the built-in [`HashEmbedder`].
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(
            path,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
    }

    /// Open (or create) the store at `path` with this embedder and these options.
    ///
    /// Errors: [`MemoryError::Corrupt`] for a file that is not a strata SQLite store or is
    /// damaged; [`MemoryError::SchemaVersionMismatch`] for a store from a newer build;
    /// [`MemoryError::DimensionMismatch`] when the store was created with an embedder of
    /// another dimension.
    pub fn open_with(
        path: impl AsRef<Path>,
        embedder: Arc<dyn Embedder>,
        options: StoreOptions,
    ) -> Result<SqliteStore> {
        SqliteStore::open_impl(path.as_ref(), embedder, options, false)
    }

    /// Open an existing store for reading only: nothing is created, migrated or written.
    ///
    /// Errors as [`SqliteStore::open_with`], and also: [`MemoryError::Io`] when there is no
    /// file at `path`, [`MemoryError::SchemaVersionMismatch`] for a store of an older schema
    /// (open it once for writing to migrate it). Every write through the handle fails with
    /// [`MemoryError::Invalid`].
    pub fn open_read_only(
        path: impl AsRef<Path>,
        embedder: Arc<dyn Embedder>,
        options: StoreOptions,
    ) -> Result<SqliteStore> {
        SqliteStore::open_impl(path.as_ref(), embedder, options, true)
    }

    /// Implements ADR-0019: refuse empty files, create new stores atomically, migrate and
    /// record the embedder in one transaction, check the commit counter and, on request, run
    /// `quick_check`.
    fn open_impl(
        path: &Path,
        embedder: Arc<dyn Embedder>,
        options: StoreOptions,
        read_only: bool,
    ) -> Result<SqliteStore> {
        crate::embed::check_dims(embedder.as_ref())?;
        let path = path.to_path_buf();
        let location = path.display().to_string();
        if path.is_dir() {
            return Err(MemoryError::io(
                "open the SQLite store",
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is a directory"),
            ));
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == 0 => {
                return Err(MemoryError::Corrupt {
                    location,
                    detail: "the file is empty (0 bytes), so it is not a strata store; strata creates new stores only where no file exists".into(),
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !read_only => {
                create_new(&path, &location, embedder.as_ref())?;
            }
            Err(e) => return Err(MemoryError::io("open the SQLite store", &path, e)),
        }
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        } | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let mut conn =
            Connection::open_with_flags(&path, flags).map_err(|e| db_err(&location, e))?;
        let e = |err| db_err(&location, err);
        // Until the checks below pass, closing must not checkpoint: a WAL that lost commits
        // would otherwise be folded into the database file and the evidence deleted.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(e)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(e)?;
        if !read_only {
            let mode: String = conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
                .map_err(e)?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(path = %location, mode, "SQLite store is not in WAL mode");
            }
        }
        conn.pragma_update(None, "foreign_keys", true).map_err(e)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(e)?;
        if options.check_on_open {
            run_quick_check(&conn, &location, "PRAGMA quick_check")?;
        }
        check_commits(&conn, &location, &path)?;
        if read_only {
            let found = schema_version(&conn, &location)?;
            if found != SQLITE_SCHEMA_VERSION {
                return Err(MemoryError::SchemaVersionMismatch {
                    location,
                    found,
                    expected: SQLITE_SCHEMA_VERSION,
                });
            }
            check_embedder(&conn, &location, embedder.as_ref(), true)?;
        } else {
            migrate(&mut conn, &location, embedder.as_ref())?;
        }
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)
            .map_err(e)?;
        let (store_id, _) = store_identity(&conn, &location)?;
        Ok(SqliteStore {
            name: options.name_or(|| format!("sqlite:{location}")),
            path,
            location,
            options,
            embedder,
            inner: Mutex::new(Inner {
                conn,
                vectors: None,
                stats: VectorCacheStats::default(),
            }),
            read_only,
            commits: Mutex::new(None),
            store_id,
        })
    }

    /// Refuse writes through a read-only handle.
    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(MemoryError::invalid(
                "write",
                format!(
                    "the store at {} was opened read-only; open it with `SqliteStore::open_with` to write",
                    self.location
                ),
            ));
        }
        Ok(())
    }

    /// Count a write transaction and commit it; then record the new count in the side file
    /// (ADR-0019). A failure to update the side file is logged, not returned: the transaction
    /// is committed and durable by then, only the loss detection for it is weaker.
    fn commit(&self, tx: Transaction<'_>) -> Result<()> {
        let n: i64 = tx
            .query_row(
                "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'commits' \
                 RETURNING CAST(value AS INTEGER)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        if let Err(e) = self.note_commit(u64::try_from(n).unwrap_or(0)) {
            tracing::warn!(store = %self.name, error = %e, "could not update the commit counter side file; loss of this transaction from the WAL would go unnoticed");
        }
        Ok(())
    }

    fn note_commit(&self, n: u64) -> std::io::Result<()> {
        use std::io::{Read as _, Seek as _, Write as _};
        let mut guard = self
            .commits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(commits_path(&self.path))?,
            );
        }
        let Some(file) = guard.as_mut() else {
            return Ok(());
        };
        // Several processes may commit at once: keep the largest count, under the file lock.
        file.lock()?;
        let res = (|| {
            let mut cur = Vec::new();
            file.seek(std::io::SeekFrom::Start(0))?;
            file.read_to_end(&mut cur)?;
            let have = parse_commits(&cur)
                .filter(|(id, _)| *id == self.store_id.as_bytes())
                .map(|(_, n)| n);
            if have.is_none_or(|have| n > have) {
                file.seek(std::io::SeekFrom::Start(0))?;
                file.write_all(&commits_record(&self.store_id, n))?;
                file.set_len(COMMITS_LEN as u64)?;
                file.sync_data()?;
            }
            Ok(())
        })();
        let unlocked = file.unlock();
        res.and(unlocked)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn err(&self, e: rusqlite::Error) -> MemoryError {
        db_err(&self.location, e)
    }

    /// Check the whole store (ADR-0019): SQLite's `integrity_check` (page structure and that
    /// every index matches its table), the FTS5 index against the memories (on a writable
    /// handle: FTS5's check runs as a statement that needs one), and the checksum of every
    /// row. [`MemoryError::Corrupt`] names the first damage found. Reads the whole file.
    pub fn check_integrity(&self) -> Result<()> {
        {
            let inner = self.lock();
            run_quick_check(&inner.conn, &self.location, "PRAGMA integrity_check")?;
            if !self.read_only {
                inner
                    .conn
                    .execute(
                        "INSERT INTO memories_fts (memories_fts, rank) VALUES ('integrity-check', 1)",
                        [],
                    )
                    .map_err(|e| MemoryError::Corrupt {
                        location: self.location.clone(),
                        detail: format!("the full-text index does not match the memories: {e}"),
                    })?;
            }
        }
        self.list(&ListOptions::all())?;
        {
            let mut inner = self.lock();
            inner.vectors = None;
            self.fresh_vectors(&mut inner)?;
        }
        let sessions: Vec<String> = {
            let inner = self.lock();
            let mut stmt = inner
                .conn
                .prepare("SELECT DISTINCT session FROM wm_entries")
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(|e| self.err(e))?
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| self.err(e))?;
            rows
        };
        for s in sessions {
            self.entries(&s)?;
        }
        let scopes: Vec<String> = {
            let inner = self.lock();
            let mut stmt = inner
                .conn
                .prepare("SELECT DISTINCT scope FROM shared_facts")
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(|e| self.err(e))?
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| self.err(e))?;
            rows
        };
        let scopes = scopes
            .into_iter()
            .map(|s| {
                Scope::new(&s).map_err(|_| MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!("invalid scope `{s}` in shared_facts"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.facts(&scopes)?;
        Ok(())
    }

    /// A fact from a row of `value, updated_ms, checksum`, after checking its checksum.
    fn verified_fact(
        &self,
        loc: &str,
        scope: &Scope,
        key: &str,
        r: &rusqlite::Row<'_>,
    ) -> Result<Fact> {
        let name = || format!("({}, {key})", scope.as_str());
        let value = raw(r, 0).map_err(|e| self.err(e))?;
        let updated_ms: i64 = r.get(1).map_err(|e| self.err(e))?;
        let stored = raw_opt(r, 2).map_err(|e| self.err(e))?;
        let sum = fact_sum(scope.as_str().as_bytes(), key.as_bytes(), value, updated_ms);
        verify_sum(loc, "shared_facts", &name, stored, &sum)?;
        Ok(Fact {
            scope: scope.clone(),
            key: Arc::from(key),
            value: Content::from(utf8(loc, "shared_facts", &name, value)?),
            updated_ms,
        })
    }

    /// Counts and sizes.
    pub fn stats(&self) -> Result<SqliteStats> {
        let inner = self.lock();
        let c = &inner.conn;
        let one = |sql: &str| -> Result<u64> {
            c.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|n| u64::try_from(n).unwrap_or(0))
                .map_err(|e| self.err(e))
        };
        let meta = |k: &str| -> Result<String> {
            c.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
                .map_err(|e| self.err(e))
        };
        Ok(SqliteStats {
            path: self.path.clone(),
            schema_version: c
                .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
                .map_err(|e| self.err(e))?,
            embedder: meta("embedder")?,
            dims: self.embedder.dims(),
            memories: one("SELECT count(*) FROM memories")?,
            entries: one("SELECT count(*) FROM wm_entries")?,
            sessions: one("SELECT count(DISTINCT session) FROM wm_entries")?,
            facts: one("SELECT count(*) FROM shared_facts")?,
            file_bytes: one(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            )?,
        })
    }

    /// Make sure the vector cache matches the file (ADR-0019). The first call loads every
    /// vector. Later, when another connection has committed (`PRAGMA data_version` moved), only
    /// the memories named in the change log since the cache's last entry are read again; a
    /// full reload happens only when the cache is older than the pruned part of the log.
    fn fresh_vectors<'a>(&self, inner: &'a mut Inner) -> Result<&'a VectorCache> {
        let dv: i64 = inner
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if let Some(cache) = inner.vectors.as_mut().filter(|c| c.data_version == dv) {
            if cache.change_seq - cache.snapshot_seq > SNAPSHOT_LAG {
                self.write_snapshot(cache);
            }
            return self.cache_ref(inner);
        }
        // One read transaction, so the log and the rows are read at the same moment.
        let tx = inner
            .conn
            .unchecked_transaction()
            .map_err(|e| self.err(e))?;
        let (pruned, last): (i64, i64) = tx
            .query_row(
                "SELECT (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'changes_pruned_through'), \
                 coalesce((SELECT max(seq) FROM memory_changes), 0)",
                [],
                |r| Ok((r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get(1)?)),
            )
            .map_err(|e| self.err(e))?;
        if inner.vectors.is_none() {
            // ADR-0029: a new handle starts from the snapshot when one fits this store.
            inner.vectors = self.read_snapshot(pruned, last, dv);
            if inner.vectors.is_some() {
                inner.stats.snapshot_loads += 1;
            }
        }
        let incremental = inner
            .vectors
            .as_ref()
            .is_some_and(|c| c.change_seq >= pruned);
        if incremental {
            let mut cache = inner.vectors.take().unwrap_or_default();
            let res = self.apply_changes(&tx, &mut cache, last);
            drop(tx);
            let n = res?;
            inner.stats.refreshes += 1;
            inner.stats.rows_refreshed += n;
            cache.data_version = dv;
            if last - cache.snapshot_seq > SNAPSHOT_LAG {
                self.write_snapshot(&mut cache);
            }
            inner.vectors = Some(cache);
            return self.cache_ref(inner);
        }
        let mut cache = VectorCache {
            data_version: dv,
            change_seq: last,
            ..VectorCache::default()
        };
        let res = self.load_all(&tx, &mut cache);
        drop(tx);
        res?;
        inner.stats.full_loads += 1;
        tracing::debug!(store = %self.name, vectors = cache.codes.len(), texts = cache.lexical.len(), "loaded vector cache");
        self.write_snapshot(&mut cache);
        inner.vectors = Some(cache);
        self.cache_ref(inner)
    }

    /// The snapshot of the indexes next to the file, if it belongs to this store, has this
    /// dimension and reflects a change-log entry between the pruned part of the log and its
    /// end; `None` (with the reason logged) otherwise. Implements ADR-0029.
    fn read_snapshot(&self, pruned: i64, last: i64, dv: i64) -> Option<VectorCache> {
        let path = snapshot::snapshot_path(&self.path);
        let dims = self.embedder.dims();
        let t = std::time::Instant::now();
        let res = snapshot::read(&path, |h, r| {
            if h.store_id != self.store_id {
                return Err(snapshot::SnapshotError::Invalid(
                    "it belongs to another store",
                ));
            }
            if h.dims as usize != dims {
                return Err(snapshot::SnapshotError::Invalid("another dimension"));
            }
            if h.change_seq < pruned {
                return Err(snapshot::SnapshotError::Invalid(
                    "older than the kept change log",
                ));
            }
            if h.change_seq > last {
                // The file went back in time (an older copy restored): the snapshot describes
                // changes the store no longer has.
                return Err(snapshot::SnapshotError::Invalid(
                    "newer than the store's change log",
                ));
            }
            let codes = CodeCache::load(dims, r)?;
            let lexical = LexicalIndex::load(r)?;
            Ok((codes, lexical))
        });
        match res {
            Ok((h, (codes, lexical))) => {
                tracing::debug!(store = %self.name, vectors = codes.len(), took_ms = t.elapsed().as_millis() as u64, "read index snapshot");
                Some(VectorCache {
                    data_version: dv,
                    change_seq: h.change_seq,
                    snapshot_seq: h.change_seq,
                    codes,
                    lexical,
                })
            }
            Err(snapshot::SnapshotError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(store = %self.location, snapshot = %path.display(), error = %e, "ignoring the index snapshot; loading from the rows");
                None
            }
        }
    }

    /// Write the cache as the snapshot next to the file (never for a read-only handle). A
    /// failure only costs the next new handle a full load, so it is logged, not returned.
    fn write_snapshot(&self, cache: &mut VectorCache) {
        if self.read_only {
            return;
        }
        let path = snapshot::snapshot_path(&self.path);
        let header = snapshot::Header {
            store_id: self.store_id.clone(),
            change_seq: cache.change_seq,
            dims: u32::try_from(self.embedder.dims()).unwrap_or(u32::MAX),
        };
        let res = snapshot::write(&path, &header, |w| {
            cache.codes.save(w)?;
            cache.lexical.save(w)
        });
        match res {
            Ok(()) => cache.snapshot_seq = cache.change_seq,
            Err(e) => {
                tracing::warn!(store = %self.location, snapshot = %path.display(), error = %e, "could not write the index snapshot");
            }
        }
    }

    /// Bring this handle's search indexes up to date with the file and write their snapshot
    /// next to it, so that the first search of the next handle reads the snapshot instead of
    /// every row (ADR-0029). A bulk import calls this once at its end, so that loading a large
    /// store is paid by the import, not by a later search. Nothing is written by a read-only
    /// handle; a snapshot that cannot be written is logged, as on any search.
    pub fn prepare_search(&self) -> Result<()> {
        let mut inner = self.lock();
        self.fresh_vectors(&mut inner)?;
        if let Some(cache) = inner.vectors.as_mut() {
            if cache.snapshot_seq != cache.change_seq {
                self.write_snapshot(cache);
            }
        }
        Ok(())
    }

    /// What this handle's vector cache has done: full loads, and refreshes through the change
    /// log after other connections wrote (ADR-0019).
    pub fn vector_cache_stats(&self) -> VectorCacheStats {
        self.lock().stats
    }

    /// Where the change log ends and what `data_version` says, read inside a write
    /// transaction: if no other connection has committed since the cache was last refreshed,
    /// the cache plus this transaction's own changes is the whole store.
    fn log_position(&self, tx: &Transaction<'_>) -> Result<(i64, i64)> {
        let dv: i64 = tx
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        let last: i64 = tx
            .query_row(
                "SELECT coalesce(max(seq), 0) FROM memory_changes",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        Ok((dv, last))
    }

    fn cache_ref<'a>(&self, inner: &'a Inner) -> Result<&'a VectorCache> {
        inner.vectors.as_ref().ok_or_else(|| MemoryError::Database {
            location: self.location.clone(),
            detail: "vector cache missing after load".into(),
        })
    }

    /// A row of [`CACHE_COLUMNS`], checked against both of its checksums: `(id, vector,
    /// content)`.
    fn checked_row(
        &self,
        row: &rusqlite::Row<'_>,
        key: i64,
    ) -> Result<(MemoryId, Vec<f32>, String)> {
        let dims = self.embedder.dims();
        let blob = row.get_ref(1).map_err(|e| self.err(e))?;
        let blob = blob.as_blob().map_err(|e| MemoryError::Corrupt {
            location: self.location.clone(),
            detail: format!("embedding is not a blob: {e}"),
        })?;
        let stored = raw_opt(row, 2).map_err(|e| self.err(e))?;
        let record = record_from_row_at(&self.location, row, 3).map_err(|e| self.err(e))??;
        verify_sum(
            &self.location,
            "memory_vectors",
            &|| format!("key {key} (id `{}`)", record.id),
            stored,
            &vector_sum(key, blob),
        )?;
        let v = blob_to_vector(&self.location, dims, blob)?;
        Ok((record.id, v, record.content.as_str().to_owned()))
    }

    fn load_all(&self, conn: &Connection, cache: &mut VectorCache) -> Result<()> {
        let dims = self.embedder.dims();
        let sql = format!(
            "SELECT v.key, v.embedding, v.checksum, {RECORD_COLUMNS} FROM memory_vectors v JOIN memories m ON m.key = v.key"
        );
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let key: i64 = row.get(0).map_err(|e| self.err(e))?;
            let (id, v, content) = self.checked_row(row, key)?;
            cache.upsert(dims, key, &id, &v, &content);
        }
        Ok(())
    }

    fn apply_changes(&self, conn: &Connection, cache: &mut VectorCache, last: i64) -> Result<u64> {
        let dims = self.embedder.dims();
        let keys: Vec<i64> = {
            let mut stmt = conn
                .prepare_cached("SELECT DISTINCT key FROM memory_changes WHERE seq > ?1")
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([cache.change_seq], |r| r.get(0))
                .map_err(|e| self.err(e))?
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| self.err(e))?;
            rows
        };
        let sql = format!(
            "SELECT v.key, v.embedding, v.checksum, {RECORD_COLUMNS} FROM memory_vectors v JOIN memories m ON m.key = v.key WHERE v.key = ?1"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        for key in &keys {
            let mut rows = stmt.query([key]).map_err(|e| self.err(e))?;
            match rows.next().map_err(|e| self.err(e))? {
                Some(row) => {
                    let (id, v, content) = self.checked_row(row, *key)?;
                    cache.upsert(dims, *key, &id, &v, &content);
                }
                None => cache.remove(dims, *key),
            }
        }
        tracing::debug!(store = %self.name, changed = keys.len(), "refreshed vector cache");
        cache.change_seq = last;
        Ok(keys.len() as u64)
    }

    /// Keep the change log short: drop entries older than the last [`CHANGES_KEPT`].
    fn prune_changes(&self, tx: &Transaction<'_>) -> Result<()> {
        let floor: Option<i64> = tx
            .query_row(
                "SELECT max(seq) - ?1 FROM memory_changes",
                [CHANGES_KEPT],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if let Some(floor) = floor.filter(|f| *f > 0) {
            let n = tx
                .execute("DELETE FROM memory_changes WHERE seq <= ?1", [floor])
                .map_err(|e| self.err(e))?;
            if n > 0 {
                tx.execute(
                    "UPDATE meta SET value = ?1 WHERE key = 'changes_pruned_through'",
                    [floor.to_string()],
                )
                .map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    fn put_in(
        &self,
        tx: &Transaction<'_>,
        m: &NewMemory,
        tags: &[Arc<str>],
        vector: &[f32],
    ) -> Result<(i64, MemoryRecord)> {
        let now = self.options.now_ms();
        let id = m.id.clone().unwrap_or_else(|| MemoryId::generate(now));
        let existing: Option<(i64, i64)> = tx
            .prepare_cached("SELECT key, created_ms FROM memories WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(|e| self.err(e))?;
        let blob = vector_to_blob(vector);
        let tag_text = tags_text(tags);
        let (key, created_ms) = match existing {
            Some((key, created)) => {
                let sum = memory_sum(
                    key,
                    id.as_str().as_bytes(),
                    m.agent_id.as_bytes(),
                    m.content.as_bytes(),
                    tag_text.as_bytes(),
                    created,
                    now,
                );
                tx.prepare_cached(
                    "UPDATE memories SET agent_id = ?2, content = ?3, tags = ?4, updated_ms = ?5, checksum = ?6 WHERE key = ?1",
                )
                .and_then(|mut s| s.execute(params![key, m.agent_id, m.content, tag_text, now, &sum[..]]))
                .and_then(|_| tx.execute("DELETE FROM memory_tags WHERE key = ?1", [key]))
                .map_err(|e| self.err(e))?;
                (key, created)
            }
            None => {
                // The key is chosen here so that the row's checksum can cover it.
                let key: i64 = tx
                    .prepare_cached("SELECT coalesce(max(key), 0) + 1 FROM memories")
                    .and_then(|mut s| s.query_row([], |r| r.get(0)))
                    .map_err(|e| self.err(e))?;
                let sum = memory_sum(
                    key,
                    id.as_str().as_bytes(),
                    m.agent_id.as_bytes(),
                    m.content.as_bytes(),
                    tag_text.as_bytes(),
                    now,
                    now,
                );
                tx.prepare_cached(
                    "INSERT INTO memories (key, id, agent_id, content, tags, created_ms, updated_ms, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
                )
                .and_then(|mut s| s.execute(params![key, id.as_str(), m.agent_id, m.content, tag_text, now, &sum[..]]))
                .map_err(|e| self.err(e))?;
                (key, now)
            }
        };
        let vsum = vector_sum(key, &blob);
        tx.prepare_cached(
            "INSERT OR REPLACE INTO memory_vectors (key, embedding, checksum) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut s| s.execute(params![key, blob, &vsum[..]]))
        .map_err(|e| self.err(e))?;
        for t in tags {
            tx.prepare_cached("INSERT INTO memory_tags (tag, key) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute(params![&**t, key]))
                .map_err(|e| self.err(e))?;
        }
        Ok((
            key,
            MemoryRecord {
                id,
                agent_id: Arc::from(m.agent_id.as_str()),
                content: Content::from(m.content.as_str()),
                tags: tags.to_vec(),
                created_ms,
                updated_ms: now,
            },
        ))
    }

    fn record_by_key(&self, conn: &Connection, key: i64) -> Result<Option<MemoryRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM memories m WHERE m.key = ?1");
        conn.prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_row([key], |r| record_from_row(&self.location, r))
                    .optional()
            })
            .map_err(|e| self.err(e))?
            .transpose()
    }

    fn allowed_keys(
        &self,
        conn: &Connection,
        agent: Option<&str>,
        tags: &[Arc<str>],
    ) -> Result<HashSet<i64>> {
        let (filter, fparams) = filter_sql(agent, tags);
        let sql = format!("SELECT m.key FROM memories m WHERE 1 = 1{filter}");
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params_from_iter(fparams.iter()), |r| r.get::<_, i64>(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<HashSet<i64>>>()
            .map_err(|e| self.err(e))
    }
}

/// The schema version recorded in the store.
fn schema_version(conn: &Connection, location: &str) -> Result<i64> {
    conn.query_row("SELECT version FROM schema_version WHERE id = 1", [], |r| {
        r.get(0)
    })
    .optional()
    .map_err(|e| db_err(location, e))?
    .ok_or_else(|| MemoryError::Corrupt {
        location: location.to_owned(),
        detail: "the schema_version table is empty".into(),
    })
}

/// Bring the schema up to [`SQLITE_SCHEMA_VERSION`] and record (or check) the embedder, all in
/// one immediate transaction, so that processes opening the same store at once never see a
/// half-migrated schema or race to insert the same `meta` rows.
fn migrate(conn: &mut Connection, location: &str, embedder: &dyn Embedder) -> Result<()> {
    let e = |err| db_err(location, err);
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(e)?;
    let has_version: i64 = tx
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .map_err(e)?;
    let found: i64 = if has_version == 0 {
        let others: i64 = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )
            .map_err(e)?;
        if others > 0 {
            return Err(MemoryError::Corrupt {
                location: location.to_owned(),
                detail: "a SQLite database with other tables and no strata schema_version table"
                    .into(),
            });
        }
        tx.execute_batch(
            "CREATE TABLE schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
             INSERT INTO schema_version (id, version) VALUES (1, 0);",
        )
        .map_err(e)?;
        0
    } else {
        schema_version(&tx, location)?
    };
    if !(0..=SQLITE_SCHEMA_VERSION).contains(&found) {
        return Err(MemoryError::SchemaVersionMismatch {
            location: location.to_owned(),
            found,
            expected: SQLITE_SCHEMA_VERSION,
        });
    }
    let mut changed = false;
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        tracing::info!(path = location, version, "migrating SQLite memory store");
        tx.execute_batch(sql).map_err(e)?;
        if *version == 2 {
            fill_checksums(&tx, location)?;
        }
        tx.execute(
            "UPDATE schema_version SET version = ?1 WHERE id = 1",
            [version],
        )
        .map_err(e)?;
        changed = true;
    }
    changed |= check_embedder(&tx, location, embedder, false)?;
    if changed {
        tx.commit().map_err(e)
    } else {
        // Nothing to write: end the transaction without touching the file.
        tx.rollback().map_err(e)
    }
}

/// Compute the checksums of rows written before schema version 2 (ADR-0019).
fn fill_checksums(tx: &Transaction<'_>, location: &str) -> Result<()> {
    let e = |err| db_err(location, err);
    let mut sums: Vec<(i64, [u8; 16])> = Vec::new();
    {
        let mut stmt = tx
            .prepare(
                "SELECT key, id, agent_id, content, tags, created_ms, updated_ms FROM memories",
            )
            .map_err(e)?;
        let mut rows = stmt.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let key: i64 = r.get(0).map_err(e)?;
            let sum = memory_sum(
                key,
                raw(r, 1).map_err(e)?,
                raw(r, 2).map_err(e)?,
                raw(r, 3).map_err(e)?,
                raw(r, 4).map_err(e)?,
                r.get(5).map_err(e)?,
                r.get(6).map_err(e)?,
            );
            sums.push((key, sum));
        }
    }
    for (key, sum) in sums.drain(..) {
        tx.execute(
            "UPDATE memories SET checksum = ?2 WHERE key = ?1",
            params![key, &sum[..]],
        )
        .map_err(e)?;
    }
    {
        let mut stmt = tx
            .prepare("SELECT key, embedding FROM memory_vectors")
            .map_err(e)?;
        let mut rows = stmt.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let key: i64 = r.get(0).map_err(e)?;
            sums.push((key, vector_sum(key, raw(r, 1).map_err(e)?)));
        }
    }
    for (key, sum) in sums.drain(..) {
        tx.execute(
            "UPDATE memory_vectors SET checksum = ?2 WHERE key = ?1",
            params![key, &sum[..]],
        )
        .map_err(e)?;
    }
    {
        let mut stmt = tx
            .prepare("SELECT seq, session, role, call_id, content, at_ms FROM wm_entries")
            .map_err(e)?;
        let mut rows = stmt.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let seq: i64 = r.get(0).map_err(e)?;
            let sum = entry_sum(
                seq,
                raw(r, 1).map_err(e)?,
                raw(r, 2).map_err(e)?,
                raw_opt(r, 3).map_err(e)?,
                raw(r, 4).map_err(e)?,
                r.get(5).map_err(e)?,
            );
            sums.push((seq, sum));
        }
    }
    for (seq, sum) in sums.drain(..) {
        tx.execute(
            "UPDATE wm_entries SET checksum = ?2 WHERE seq = ?1",
            params![seq, &sum[..]],
        )
        .map_err(e)?;
    }
    let mut facts: Vec<(String, String, [u8; 16])> = Vec::new();
    {
        let mut stmt = tx
            .prepare("SELECT scope, key, value, updated_ms FROM shared_facts")
            .map_err(e)?;
        let mut rows = stmt.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let scope: String = r.get(0).map_err(e)?;
            let key: String = r.get(1).map_err(e)?;
            let sum = fact_sum(
                scope.as_bytes(),
                key.as_bytes(),
                raw(r, 2).map_err(e)?,
                r.get(3).map_err(e)?,
            );
            facts.push((scope, key, sum));
        }
    }
    for (scope, key, sum) in facts {
        tx.execute(
            "UPDATE shared_facts SET checksum = ?3 WHERE scope = ?1 AND key = ?2",
            params![scope, key, &sum[..]],
        )
        .map_err(e)?;
    }
    Ok(())
}

/// Record the embedder's dimension and name in a new store, or check them against an
/// existing one. Returns true when it wrote. With `read_only`, a store without them is
/// corrupt rather than new.
fn check_embedder(
    conn: &Connection,
    location: &str,
    embedder: &dyn Embedder,
    read_only: bool,
) -> Result<bool> {
    let e = |err| db_err(location, err);
    let get = |k: &str| -> Result<Option<String>> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()
            .map_err(e)
    };
    match get("dims")? {
        None if read_only => Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: "meta has no `dims` row".into(),
        }),
        None => {
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('dims', ?1), ('embedder', ?2) \
                 ON CONFLICT (key) DO NOTHING",
                params![embedder.dims().to_string(), embedder.name()],
            )
            .map_err(e)?;
            Ok(true)
        }
        Some(d) => {
            let stored: usize = d.parse().map_err(|_| MemoryError::Corrupt {
                location: location.to_owned(),
                detail: format!("meta.dims is `{d}`, not a number"),
            })?;
            if stored != embedder.dims() {
                return Err(MemoryError::DimensionMismatch {
                    context: format!(
                        "the store at {location} (embedder {})",
                        get("embedder")?.unwrap_or_default()
                    ),
                    expected: stored,
                    found: embedder.dims(),
                });
            }
            let name = get("embedder")?.unwrap_or_default();
            if name != embedder.name() {
                tracing::warn!(
                    path = location,
                    stored = name,
                    given = embedder.name(),
                    "the store was created with another embedder of the same dimension; vector ranking may be meaningless"
                );
            }
            Ok(false)
        }
    }
}

impl SqliteStore {
    /// The entries of `session` that `sql` selects (its columns as in `entries`, the session
    /// as `?1`, then `more`), each checked against its checksum.
    fn entries_where(
        &self,
        session: &str,
        sql: &str,
        more: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Entry>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        self.entries_on(&inner.conn, session, sql, more)
    }

    /// [`Self::entries_where`] on a connection the caller holds (inside its transaction).
    fn entries_on(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        sql: &str,
        more: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<Entry>> {
        let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let loc = self.location.as_str();
        let mut params: Vec<&dyn rusqlite::ToSql> = vec![&session];
        params.extend_from_slice(more);
        let rows = stmt
            .query_map(params.as_slice(), |r| {
                let seq: i64 = r.get(0)?;
                let role = raw(r, 1)?;
                let call_id = raw_opt(r, 2)?;
                let content = raw(r, 3)?;
                let at_ms: i64 = r.get(4)?;
                let stored = raw_opt(r, 5)?;
                let name = || format!("seq {seq}");
                let sum = entry_sum(seq, session.as_bytes(), role, call_id, content, at_ms);
                Ok((|| -> Result<_> {
                    verify_sum(loc, "wm_entries", &name, stored, &sum)?;
                    Ok((
                        seq,
                        utf8(loc, "wm_entries", &name, role)?,
                        call_id
                            .map(|c| utf8(loc, "wm_entries", &name, c))
                            .transpose()?,
                        utf8(loc, "wm_entries", &name, content)?,
                        at_ms,
                    ))
                })())
            })
            .map_err(|e| self.err(e))?;
        let session: Arc<str> = Arc::from(session);
        let mut out = Vec::new();
        for row in rows {
            let (seq, role, call_id, content, at_ms) = row.map_err(|e| self.err(e))??;
            out.push(Entry {
                seq: u64::try_from(seq).unwrap_or(0),
                session: session.clone(),
                role: role_from(&self.location, &role)?,
                call_id: call_id.map(Arc::from),
                content: Content::from(content),
                at_ms,
            });
        }
        Ok(out)
    }
}

impl WorkingMemory for SqliteStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn append(&self, session: &str, entry: NewEntry) -> Result<Entry> {
        check_new_entry(&self.options, session, &entry)?;
        self.writable()?;
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        if let Some(id) = entry.call_id.as_deref() {
            let mut state = CallState::default();
            let mut stmt = tx
                .prepare_cached("SELECT role FROM wm_entries WHERE session = ?1 AND call_id = ?2")
                .map_err(|e| self.err(e))?;
            let roles = stmt
                .query_map([session, id], |r| r.get::<_, String>(0))
                .map_err(|e| self.err(e))?;
            for r in roles {
                match r.map_err(|e| self.err(e))?.as_str() {
                    "tool_call" => state.has_call = true,
                    "tool_result" => state.has_result = true,
                    _ => {}
                }
            }
            drop(stmt);
            check_call_link(session, &entry, state)?;
        }
        let at_ms = self.options.now_ms();
        // The sequence number is chosen here (as AUTOINCREMENT would: above every number ever
        // used) so that the row's checksum can cover it.
        let seq: i64 = tx
            .query_row(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'wm_entries'), 0), \
                 coalesce((SELECT max(seq) FROM wm_entries), 0)) + 1",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let sum = entry_sum(
            seq,
            session.as_bytes(),
            entry.role.name().as_bytes(),
            entry.call_id.as_deref().map(str::as_bytes),
            entry.content.as_bytes(),
            at_ms,
        );
        tx.prepare_cached(
            "INSERT INTO wm_entries (seq, session, role, call_id, content, at_ms, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut s| {
            s.execute(params![seq, session, entry.role.name(), entry.call_id, entry.content, at_ms, &sum[..]])
        })
        .map_err(|e| self.err(e))?;
        self.commit(tx)?;
        Ok(Entry {
            seq: u64::try_from(seq).unwrap_or(0),
            session: Arc::from(session),
            role: entry.role,
            call_id: entry.call_id.as_deref().map(Arc::from),
            content: Content::from(entry.content),
            at_ms,
        })
    }

    fn entries(&self, session: &str) -> Result<Vec<Entry>> {
        self.entries_where(
            session,
            "SELECT seq, role, call_id, content, at_ms, checksum FROM wm_entries WHERE session = ?1 ORDER BY seq",
            &[],
        )
    }

    fn has_session(&self, session: &str) -> Result<bool> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        inner
            .conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM wm_entries WHERE session = ?1)")
            .and_then(|mut st| st.query_row([session], |r| r.get(0)))
            .map_err(|e| self.err(e))
    }

    fn current_exchange(&self, session: &str) -> Result<Vec<Entry>> {
        // Both walk the (session, seq) index, the inner one backwards from the newest entry to
        // the newest user entry; a session without a user entry compares with NULL and
        // selects nothing.
        self.entries_where(
            session,
            "SELECT seq, role, call_id, content, at_ms, checksum FROM wm_entries WHERE session = ?1 \
             AND seq >= (SELECT seq FROM wm_entries WHERE session = ?1 AND role = 'user' \
             ORDER BY seq DESC LIMIT 1) ORDER BY seq",
            &[],
        )
    }

    fn recent_within(
        &self,
        session: &str,
        token_budget: usize,
        tokenizer: &dyn strata_core::Tokenizer,
    ) -> Result<Vec<Entry>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        // One read transaction over every page and lookup: the pages are one snapshot of the
        // session, whatever other connections write or clear meanwhile.
        let inner = self.lock();
        let tx = inner
            .conn
            .unchecked_transaction()
            .map_err(|e| self.err(e))?;
        let chosen = crate::working::select_recent_paged(
            token_budget,
            tokenizer,
            crate::working::FIRST_PAGE,
            |before, limit| {
                self.entries_on(
                    &tx,
                    session,
                    "SELECT seq, role, call_id, content, at_ms, checksum FROM wm_entries \
                     WHERE session = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
                    &[&before, &limit],
                )
            },
            // The call's row is read and checked like any other: a damaged one is an error,
            // not a missing call.
            |call| {
                self.entries_on(
                    &tx,
                    session,
                    "SELECT seq, role, call_id, content, at_ms, checksum FROM wm_entries \
                     WHERE session = ?1 AND call_id = ?2 AND role = 'tool_call'",
                    &[&call],
                )
                .map(|found| !found.is_empty())
            },
        )?;
        tx.finish().map_err(|e| self.err(e))?;
        Ok(chosen)
    }

    fn clear(&self, session: &str) -> Result<usize> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        self.writable()?;
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let n = tx
            .execute("DELETE FROM wm_entries WHERE session = ?1", [session])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            tx.rollback().map_err(|e| self.err(e))?;
        } else {
            self.commit(tx)?;
        }
        Ok(n)
    }
}

impl LongTermMemory for SqliteStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.embedder.dims()
    }

    fn put_many(&self, memories: Vec<NewMemory>) -> Result<Vec<MemoryRecord>> {
        self.writable()?;
        let (tags, vectors) = prepare_batch(&self.options, self.embedder.as_ref(), &memories)?;
        let dims = self.embedder.dims();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let mut done = Vec::with_capacity(memories.len());
        for ((m, t), v) in memories.iter().zip(&tags).zip(&vectors) {
            done.push(self.put_in(&tx, m, t, v)?);
        }
        self.prune_changes(&tx)?;
        let (dv, last) = self.log_position(&tx)?;
        self.commit(tx)?;
        if let Some(cache) = inner.vectors.as_mut() {
            for ((key, rec), v) in done.iter().zip(&vectors) {
                cache.upsert(dims, *key, &rec.id, v, rec.content.as_str());
            }
            if cache.data_version == dv {
                cache.change_seq = last;
            }
        }
        Ok(done.into_iter().map(|(_, r)| r).collect())
    }

    fn get(&self, id: &MemoryId) -> Result<Option<MemoryRecord>> {
        let inner = self.lock();
        let sql = format!("SELECT {RECORD_COLUMNS} FROM memories m WHERE m.id = ?1");
        inner
            .conn
            .prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| record_from_row(&self.location, r))
                    .optional()
            })
            .map_err(|e| self.err(e))?
            .transpose()
    }

    fn delete(&self, id: &MemoryId) -> Result<bool> {
        let dims = self.embedder.dims();
        self.writable()?;
        let mut guard = self.lock();
        let inner = &mut *guard;
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let key: Option<i64> = tx
            .query_row(
                "DELETE FROM memories WHERE id = ?1 RETURNING key",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if key.is_some() {
            self.commit(tx)?;
        } else {
            tx.rollback().map_err(|e| self.err(e))?;
        }
        if let (Some(k), Some(cache)) = (key, inner.vectors.as_mut()) {
            cache.remove(dims, k);
        }
        Ok(key.is_some())
    }

    fn list(&self, options: &ListOptions) -> Result<Vec<MemoryRecord>> {
        options.check()?;
        let tags = check_tags(&options.tags)?;
        let inner = self.lock();
        let (filter, fparams) = filter_sql(options.agent_id.as_deref(), &tags);
        let limit = options
            .limit
            .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(options.offset).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM memories m WHERE 1 = 1{filter} \
             ORDER BY m.created_ms, m.id LIMIT {limit} OFFSET {offset}"
        );
        let mut stmt = inner.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params_from_iter(fparams.iter()), |r| {
                record_from_row(&self.location, r)
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(r.map_err(|e| self.err(e))??);
        }
        Ok(out)
    }

    fn count(&self, agent_id: Option<&str>) -> Result<usize> {
        if let Some(a) = agent_id {
            check_label("agent id", a, MAX_LABEL_BYTES)?;
        }
        let inner = self.lock();
        let n: i64 = match agent_id {
            Some(a) => inner.conn.query_row(
                "SELECT count(*) FROM memories WHERE agent_id = ?1",
                [a],
                |r| r.get(0),
            ),
            None => inner
                .conn
                .query_row("SELECT count(*) FROM memories", [], |r| r.get(0)),
        }
        .map_err(|e| self.err(e))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>> {
        options.check()?;
        let tags = check_tags(&options.tags)?;
        let terms = query_terms(query, MAX_QUERY_TERMS);
        if terms.is_empty() || options.top_k == 0 {
            return Ok(Vec::new());
        }
        let n = options.candidate_count();
        let qv = if options.mode == SearchMode::Lexical {
            None
        } else {
            Some(embed_checked(self.embedder.as_ref(), &[query])?.remove(0))
        };
        let agent = options.agent_id.as_deref();
        let dims = self.embedder.dims();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let allowed = if agent.is_some() || !tags.is_empty() {
            Some(self.allowed_keys(&inner.conn, agent, &tags)?)
        } else {
            None
        };
        self.fresh_vectors(inner)?;
        let cache = self.cache_ref(inner)?;
        let mut keys: HashMap<MemoryId, i64> = HashMap::new();
        let lexical: Vec<MemoryId> = if options.mode == SearchMode::Vector {
            Vec::new()
        } else {
            // ADR-0029: BM25 from the handle's in-process index, equal to FTS5's `bm25()`.
            let scored = cache.lexical.best(
                &terms,
                |k| allowed.as_ref().is_none_or(|a| a.contains(&k)),
                n,
            );
            let scored: Vec<(usize, f64)> = scored
                .into_iter()
                .filter_map(|(k, s)| cache.codes.position(k).map(|p| (p, s)))
                .collect();
            top_positions(scored, n, &cache.codes.ids)
                .into_iter()
                .map(|p| {
                    keys.insert(cache.codes.ids[p].clone(), cache.codes.keys[p]);
                    cache.codes.ids[p].clone()
                })
                .collect()
        };
        let vector: Vec<MemoryId> = match &qv {
            None => Vec::new(),
            Some(q) => {
                // ADR-0019: int8 codes choose a pool, exact vectors from the file rank it.
                let cache = &cache.codes;
                let pool = cache.candidates(dims, q, allowed.as_ref(), pool_size(n));
                let mut stmt = inner
                    .conn
                    .prepare_cached("SELECT embedding, checksum FROM memory_vectors WHERE key = ?1")
                    .map_err(|e| self.err(e))?;
                let mut exact: Vec<(usize, f32)> = Vec::with_capacity(pool.len());
                for i in pool {
                    let key = cache.keys[i];
                    let mut rows = stmt.query([key]).map_err(|e| self.err(e))?;
                    let Some(row) = rows.next().map_err(|e| self.err(e))? else {
                        continue;
                    };
                    let blob = raw(row, 0).map_err(|e| self.err(e))?;
                    let stored = raw_opt(row, 1).map_err(|e| self.err(e))?;
                    verify_sum(
                        &self.location,
                        "memory_vectors",
                        &|| format!("key {key} (id `{}`)", cache.ids[i]),
                        stored,
                        &vector_sum(key, blob),
                    )?;
                    let v = blob_to_vector(&self.location, dims, blob)?;
                    let sim = dot(q, &v);
                    if options.keeps_similarity(sim) {
                        exact.push((i, sim));
                    }
                }
                top_positions(exact, n, &cache.ids)
                    .into_iter()
                    .map(|i| {
                        keys.insert(cache.ids[i].clone(), cache.keys[i]);
                        cache.ids[i].clone()
                    })
                    .collect()
            }
        };
        let mut hits = Vec::new();
        for (id, score, lr, vr) in fuse(&lexical, &vector, options) {
            let Some(&key) = keys.get(&id) else { continue };
            if let Some(record) = self.record_by_key(&inner.conn, key)? {
                hits.push(SearchHit {
                    record,
                    score,
                    lexical_rank: lr,
                    vector_rank: vr,
                });
            }
        }
        Ok(hits)
    }
}

impl SharedContext for SqliteStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn fact(&self, scope: &Scope, key: &str) -> Result<Option<Fact>> {
        let inner = self.lock();
        let loc = self.location.as_str();
        inner
            .conn
            .query_row(
                "SELECT value, updated_ms, checksum FROM shared_facts WHERE scope = ?1 AND key = ?2",
                [scope.as_str(), key],
                |r| Ok(self.verified_fact(loc, scope, key, r)),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .transpose()
    }

    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>> {
        let inner = self.lock();
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT value, updated_ms, checksum, key FROM shared_facts WHERE scope = ?1 ORDER BY key",
            )
            .map_err(|e| self.err(e))?;
        let loc = self.location.as_str();
        let mut out = Vec::new();
        for scope in scopes {
            let rows = stmt
                .query_map([scope.as_str()], |r| {
                    let key = raw(r, 3)?;
                    let key = std::str::from_utf8(key).map_err(rusqlite::Error::Utf8Error)?;
                    Ok(self.verified_fact(loc, scope, key, r))
                })
                .map_err(|e| self.err(e))?;
            for row in rows {
                out.push(row.map_err(|e| self.err(e))??);
            }
        }
        Ok(out)
    }
}

impl SharedContextWriter for SqliteStore {
    fn set_fact(&self, scope: &Scope, key: &str, value: &str) -> Result<Fact> {
        check_fact_key(key)?;
        self.options.check_size("shared fact", value)?;
        self.writable()?;
        let now = self.options.now_ms();
        let sum = fact_sum(
            scope.as_str().as_bytes(),
            key.as_bytes(),
            value.as_bytes(),
            now,
        );
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        tx.execute(
            "INSERT INTO shared_facts (scope, key, value, updated_ms, checksum) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms, checksum = excluded.checksum",
            params![scope.as_str(), key, value, now, &sum[..]],
        )
        .map_err(|e| self.err(e))?;
        self.commit(tx)?;
        Ok(Fact {
            scope: scope.clone(),
            key: Arc::from(key),
            value: Content::from(value),
            updated_ms: now,
        })
    }

    fn remove_fact(&self, scope: &Scope, key: &str) -> Result<bool> {
        self.writable()?;
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let n = tx
            .execute(
                "DELETE FROM shared_facts WHERE scope = ?1 AND key = ?2",
                [scope.as_str(), key],
            )
            .map_err(|e| self.err(e))?;
        if n > 0 {
            self.commit(tx)?;
        } else {
            tx.rollback().map_err(|e| self.err(e))?;
        }
        Ok(n > 0)
    }
}

impl crate::state::SessionState for SqliteStore {
    fn state(&self, session: &str, name: &str) -> Result<Option<crate::state::StateDoc>> {
        crate::state::check_state_key(session, name)?;
        let inner = self.lock();
        let loc = self.location.as_str();
        let row_name = || format!("({session}, {name})");
        inner
            .conn
            .query_row(
                "SELECT value, version, updated_ms, checksum FROM session_state WHERE session = ?1 AND name = ?2",
                [session, name],
                |r| {
                    let read = || -> Result<crate::state::StateDoc> {
                        let value = raw(r, 0).map_err(|e| self.err(e))?;
                        let version: i64 = r.get(1).map_err(|e| self.err(e))?;
                        let updated_ms: i64 = r.get(2).map_err(|e| self.err(e))?;
                        let stored = raw_opt(r, 3).map_err(|e| self.err(e))?;
                        let sum = state_sum(
                            session.as_bytes(),
                            name.as_bytes(),
                            value,
                            version,
                            updated_ms,
                        );
                        verify_sum(loc, "session_state", &row_name, stored, &sum)?;
                        Ok(crate::state::StateDoc {
                            value: utf8(loc, "session_state", &row_name, value)?,
                            version: crate::state::version_of(version),
                            updated_ms,
                        })
                    };
                    Ok(read())
                },
            )
            .optional()
            .map_err(|e| self.err(e))?
            .transpose()
    }

    fn put_state(
        &self,
        session: &str,
        name: &str,
        value: &str,
        expected: Option<u64>,
    ) -> Result<Option<u64>> {
        crate::state::check_state_key(session, name)?;
        self.options.check_size("session state", value)?;
        self.writable()?;
        let now = self.options.now_ms();
        let next = expected.map_or(1, |v| crate::state::stored_version(v).saturating_add(1));
        let sum = state_sum(
            session.as_bytes(),
            name.as_bytes(),
            value.as_bytes(),
            next,
            now,
        );
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let current: Option<i64> = tx
            .query_row(
                "SELECT version FROM session_state WHERE session = ?1 AND name = ?2",
                [session, name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if current != expected.map(crate::state::stored_version) {
            return Ok(None);
        }
        tx.execute(
            "INSERT INTO session_state (session, name, value, version, updated_ms, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT (session, name) DO UPDATE SET value = excluded.value, version = excluded.version, \
             updated_ms = excluded.updated_ms, checksum = excluded.checksum",
            params![session, name, value, next, now, &sum[..]],
        )
        .map_err(|e| self.err(e))?;
        self.commit(tx)?;
        Ok(Some(crate::state::version_of(next)))
    }

    fn remove_state(&self, session: &str, name: &str) -> Result<bool> {
        crate::state::check_state_key(session, name)?;
        self.writable()?;
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let n = tx
            .execute(
                "DELETE FROM session_state WHERE session = ?1 AND name = ?2",
                [session, name],
            )
            .map_err(|e| self.err(e))?;
        self.commit(tx)?;
        Ok(n > 0)
    }
}
