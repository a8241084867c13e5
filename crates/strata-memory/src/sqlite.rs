//! The SQLite adapter, the embedded default: one file in WAL mode holding working memory,
//! long-term memory and shared context, with no server (ADR-0012).
//!
//! Long-term memory is indexed twice: an FTS5 table for BM25 (SQLite's `bm25()` is negative,
//! lower is better, so it is sorted ascending) and vectors stored as little-endian `f32` BLOBs,
//! ranked by cosine similarity in Rust. The vectors are cached in process memory after the
//! first search; `PRAGMA data_version` tells when another connection has written to the file,
//! and the cache is reloaded then. Query words found in more than a fifth of all memories are
//! left out of the BM25 query while a rarer word remains: they carry almost no weight but would
//! make FTS5 score most of the table.
//!
//! The schema is versioned in a `schema_version` table and migrated forward in one transaction
//! when the store opens. A store from a newer build is refused with
//! [`MemoryError::SchemaVersionMismatch`]; a file that is not a strata SQLite store, or a damaged
//! one, is refused with [`MemoryError::Corrupt`] and never recreated.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, ErrorCode, OptionalExtension, Transaction};
use strata_core::{Content, Role};

use crate::embed::{embed_checked, Embedder, HashEmbedder};
use crate::error::{MemoryError, Result};
use crate::long_term::{
    check_tags, dot, fuse, prepare_batch, ListOptions, LongTermMemory, MemoryId, MemoryRecord,
    NewMemory, SearchHit, SearchMode, SearchOptions,
};
use crate::options::StoreOptions;
use crate::shared::{check_fact_key, Fact, Scope, SharedContext, SharedContextWriter};
use crate::text::{query_terms, MAX_QUERY_TERMS};
use crate::working::{check_call_link, check_new_entry, CallState, Entry, NewEntry, WorkingMemory};

/// The schema version this build writes.
pub const SQLITE_SCHEMA_VERSION: i64 = 1;

/// Forward migrations: `(version reached, SQL)`, applied in order.
const MIGRATIONS: &[(i64, &str)] = &[(
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
)];

/// The share of all memories above which a query term counts as common (see
/// `SqliteStore::drop_common_terms`).
const COMMON_TERM_SHARE: f64 = 0.2;

/// Vectors of every memory, held after the first search.
#[derive(Debug, Default)]
struct VectorCache {
    data_version: i64,
    keys: Vec<i64>,
    ids: Vec<MemoryId>,
    data: Vec<f32>,
    pos: HashMap<i64, usize>,
}

impl VectorCache {
    fn upsert(&mut self, dims: usize, key: i64, id: &MemoryId, v: &[f32]) {
        if let Some(&p) = self.pos.get(&key) {
            self.ids[p] = id.clone();
            self.data[p * dims..(p + 1) * dims].copy_from_slice(v);
        } else {
            self.pos.insert(key, self.keys.len());
            self.keys.push(key);
            self.ids.push(id.clone());
            self.data.extend_from_slice(v);
        }
    }

    fn remove(&mut self, dims: usize, key: i64) {
        let Some(p) = self.pos.remove(&key) else {
            return;
        };
        let last = self.keys.len() - 1;
        if p != last {
            let moved = self.keys[last];
            self.keys.swap(p, last);
            self.ids.swap(p, last);
            let (head, tail) = self.data.split_at_mut(last * dims);
            head[p * dims..(p + 1) * dims].copy_from_slice(&tail[..dims]);
            self.pos.insert(moved, p);
        }
        self.keys.pop();
        self.ids.pop();
        self.data.truncate(last * dims);
    }
}

#[derive(Debug)]
struct Inner {
    conn: Connection,
    vectors: Option<VectorCache>,
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
}

/// Map a SQLite error: damage and "not a database" become [`MemoryError::Corrupt`].
fn db_err(location: &str, e: rusqlite::Error) -> MemoryError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        if matches!(f.code, ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) {
            return MemoryError::Corrupt {
                location: location.to_owned(),
                detail: e.to_string(),
            };
        }
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

const RECORD_COLUMNS: &str = "m.id, m.agent_id, m.content, m.tags, m.created_ms, m.updated_ms";

fn record_from_row(
    location: &str,
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<MemoryRecord>> {
    let id: String = row.get(0)?;
    let agent: String = row.get(1)?;
    let content: String = row.get(2)?;
    let tags: String = row.get(3)?;
    let created_ms: i64 = row.get(4)?;
    let updated_ms: i64 = row.get(5)?;
    Ok(MemoryId::new(&id)
        .map_err(|_| MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!("invalid memory id `{id}` in memories"),
        })
        .map(|id| MemoryRecord {
            id,
            agent_id: Arc::from(agent),
            content: Content::from(content),
            tags: tags_from(&tags),
            created_ms,
            updated_ms,
        }))
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
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        if path.is_dir() {
            return Err(MemoryError::io(
                "open the SQLite store",
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is a directory"),
            ));
        }
        let conn = Connection::open(&path).map_err(|e| db_err(&location, e))?;
        let e = |err| db_err(&location, err);
        conn.busy_timeout(Duration::from_secs(10)).map_err(e)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(e)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %location, mode, "SQLite store is not in WAL mode");
        }
        conn.pragma_update(None, "foreign_keys", true).map_err(e)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(e)?;
        let mut inner = Inner {
            conn,
            vectors: None,
        };
        migrate(&mut inner.conn, &location)?;
        check_embedder(&inner.conn, &location, embedder.as_ref())?;
        Ok(SqliteStore {
            name: options.name_or(|| format!("sqlite:{location}")),
            path,
            location,
            options,
            embedder,
            inner: Mutex::new(inner),
        })
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

    /// Run SQLite's `quick_check` over the whole file: [`MemoryError::Corrupt`] when it
    /// finds damage.
    pub fn check_integrity(&self) -> Result<()> {
        let inner = self.lock();
        let mut stmt = inner
            .conn
            .prepare("PRAGMA quick_check")
            .map_err(|e| self.err(e))?;
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e))?;
        if rows.len() == 1 && rows[0] == "ok" {
            Ok(())
        } else {
            Err(MemoryError::Corrupt {
                location: self.location.clone(),
                detail: rows.join("; "),
            })
        }
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

    /// Make sure the vector cache matches the file, loading it when needed.
    fn fresh_vectors<'a>(&self, inner: &'a mut Inner) -> Result<&'a VectorCache> {
        let dv: i64 = inner
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        let stale = inner.vectors.as_ref().is_none_or(|c| c.data_version != dv);
        if stale {
            let dims = self.embedder.dims();
            let mut cache = VectorCache {
                data_version: dv,
                ..VectorCache::default()
            };
            let mut stmt = inner
                .conn
                .prepare(
                    "SELECT v.key, m.id, v.embedding FROM memory_vectors v JOIN memories m ON m.key = v.key",
                )
                .map_err(|e| self.err(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
            while let Some(row) = rows.next().map_err(|e| self.err(e))? {
                let key: i64 = row.get(0).map_err(|e| self.err(e))?;
                let id: String = row.get(1).map_err(|e| self.err(e))?;
                let blob = row.get_ref(2).map_err(|e| self.err(e))?;
                let blob = blob.as_blob().map_err(|e| MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!("embedding is not a blob: {e}"),
                })?;
                let v = blob_to_vector(&self.location, dims, blob)?;
                let id = MemoryId::new(&id).map_err(|_| MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!("invalid memory id `{id}` in memories"),
                })?;
                cache.upsert(dims, key, &id, &v);
            }
            drop(rows);
            drop(stmt);
            tracing::debug!(store = %self.name, vectors = cache.keys.len(), "loaded vector cache");
            inner.vectors = Some(cache);
        }
        inner.vectors.as_ref().ok_or_else(|| MemoryError::Database {
            location: self.location.clone(),
            detail: "vector cache missing after load".into(),
        })
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
                tx.prepare_cached(
                    "UPDATE memories SET agent_id = ?2, content = ?3, tags = ?4, updated_ms = ?5 WHERE key = ?1",
                )
                .and_then(|mut s| s.execute(params![key, m.agent_id, m.content, tag_text, now]))
                .and_then(|_| tx.execute("DELETE FROM memory_tags WHERE key = ?1", [key]))
                .map_err(|e| self.err(e))?;
                (key, created)
            }
            None => {
                tx.prepare_cached(
                    "INSERT INTO memories (id, agent_id, content, tags, created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                )
                .and_then(|mut s| s.execute(params![id.as_str(), m.agent_id, m.content, tag_text, now]))
                .map_err(|e| self.err(e))?;
                (tx.last_insert_rowid(), now)
            }
        };
        tx.prepare_cached("INSERT OR REPLACE INTO memory_vectors (key, embedding) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![key, blob]))
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

    fn lexical(
        &self,
        conn: &Connection,
        terms: &[String],
        agent: Option<&str>,
        tags: &[Arc<str>],
        n: usize,
    ) -> Result<Vec<(MemoryId, i64)>> {
        let terms = self.drop_common_terms(conn, terms)?;
        let fts_query = terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" OR ");
        let (filter, fparams) = filter_sql(agent, tags);
        let sql = if filter.is_empty() {
            // Without filters, FTS5 picks the best `n` by itself and only those are joined.
            format!(
                "SELECT m.id, m.key, f.s FROM \
                 (SELECT rowid, rank AS s FROM memories_fts WHERE memories_fts MATCH ? \
                  ORDER BY rank LIMIT {n}) f \
                 JOIN memories m ON m.key = f.rowid ORDER BY f.s ASC, m.id ASC"
            )
        } else {
            format!(
                "SELECT m.id, m.key, bm25(memories_fts) AS s FROM memories_fts \
                 JOIN memories m ON m.key = memories_fts.rowid \
                 WHERE memories_fts MATCH ?{filter} ORDER BY s ASC, m.id ASC LIMIT {n}"
            )
        };
        let mut all = vec![fts_query];
        all.extend(fparams);
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params_from_iter(all.iter()), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, key) = row.map_err(|e| self.err(e))?;
            let id = MemoryId::new(&id).map_err(|_| MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!("invalid memory id `{id}` in memories"),
            })?;
            out.push((id, key));
        }
        Ok(out)
    }

    /// Leave out query terms found in more than [`COMMON_TERM_SHARE`] of all memories while a
    /// rarer term remains. Such terms weigh almost nothing in BM25 (their idf is below ln 5)
    /// but make FTS5 score most rows of the table; without them a 100,000-memory search reads
    /// a fraction of the index.
    fn drop_common_terms(&self, conn: &Connection, terms: &[String]) -> Result<Vec<String>> {
        if terms.len() <= 1 {
            return Ok(terms.to_vec());
        }
        let total: i64 = conn
            .query_row("SELECT count(*) FROM memories", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        let limit = (total as f64 * COMMON_TERM_SHARE).max(1.0);
        let mut stmt = conn
            .prepare_cached("SELECT doc FROM memories_fts_vocab WHERE term = ?1")
            .map_err(|e| self.err(e))?;
        let mut with_df = Vec::with_capacity(terms.len());
        for t in terms {
            let df: i64 = stmt
                .query_row([t], |r| r.get(0))
                .optional()
                .map_err(|e| self.err(e))?
                .unwrap_or(0);
            with_df.push((t, df));
        }
        let kept: Vec<String> = with_df
            .iter()
            .filter(|(_, df)| (*df as f64) <= limit)
            .map(|(t, _)| (*t).clone())
            .collect();
        if !kept.is_empty() {
            return Ok(kept);
        }
        // Every term is common: keep the rarest one (the first of equals).
        let rarest = with_df
            .iter()
            .min_by_key(|(_, df)| *df)
            .map(|(t, _)| (*t).clone());
        Ok(rarest.into_iter().collect())
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

/// The positions of the best `n` scores, best first, ties by memory id.
fn top_indices(mut scored: Vec<(usize, f32)>, n: usize, ids: &[MemoryId]) -> Vec<usize> {
    let cmp = |a: &(usize, f32), b: &(usize, f32)| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| ids[a.0].cmp(&ids[b.0]))
    };
    if n == 0 {
        return Vec::new();
    }
    if scored.len() > n {
        scored.select_nth_unstable_by(n - 1, cmp);
        scored.truncate(n);
    }
    scored.sort_by(cmp);
    scored.into_iter().map(|(i, _)| i).collect()
}

fn migrate(conn: &mut Connection, location: &str) -> Result<()> {
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
        tx.query_row("SELECT version FROM schema_version WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(e)?
        .ok_or_else(|| MemoryError::Corrupt {
            location: location.to_owned(),
            detail: "the schema_version table is empty".into(),
        })?
    };
    if !(0..=SQLITE_SCHEMA_VERSION).contains(&found) {
        return Err(MemoryError::SchemaVersionMismatch {
            location: location.to_owned(),
            found,
            expected: SQLITE_SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        tracing::info!(path = location, version, "migrating SQLite memory store");
        tx.execute_batch(sql).map_err(e)?;
        tx.execute(
            "UPDATE schema_version SET version = ?1 WHERE id = 1",
            [version],
        )
        .map_err(e)?;
    }
    tx.commit().map_err(e)
}

fn check_embedder(conn: &Connection, location: &str, embedder: &dyn Embedder) -> Result<()> {
    let e = |err| db_err(location, err);
    let get = |k: &str| -> Result<Option<String>> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()
            .map_err(e)
    };
    match get("dims")? {
        None => {
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('dims', ?1), ('embedder', ?2)",
                params![embedder.dims().to_string(), embedder.name()],
            )
            .map_err(e)?;
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
        }
    }
    Ok(())
}

impl WorkingMemory for SqliteStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn append(&self, session: &str, entry: NewEntry) -> Result<Entry> {
        check_new_entry(&self.options, session, &entry)?;
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
        tx.prepare_cached(
            "INSERT INTO wm_entries (session, role, call_id, content, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .and_then(|mut s| {
            s.execute(params![session, entry.role.name(), entry.call_id, entry.content, at_ms])
        })
        .map_err(|e| self.err(e))?;
        let seq = tx.last_insert_rowid();
        tx.commit().map_err(|e| self.err(e))?;
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
        let inner = self.lock();
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT seq, role, call_id, content, at_ms FROM wm_entries WHERE session = ?1 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([session], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let session: Arc<str> = Arc::from(session);
        let mut out = Vec::new();
        for row in rows {
            let (seq, role, call_id, content, at_ms) = row.map_err(|e| self.err(e))?;
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

    fn clear(&self, session: &str) -> Result<usize> {
        let inner = self.lock();
        inner
            .conn
            .execute("DELETE FROM wm_entries WHERE session = ?1", [session])
            .map_err(|e| self.err(e))
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
        tx.commit().map_err(|e| self.err(e))?;
        if let Some(cache) = inner.vectors.as_mut() {
            for ((key, rec), v) in done.iter().zip(&vectors) {
                cache.upsert(dims, *key, &rec.id, v);
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
        let mut guard = self.lock();
        let inner = &mut *guard;
        let key: Option<i64> = inner
            .conn
            .query_row(
                "DELETE FROM memories WHERE id = ?1 RETURNING key",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if let (Some(k), Some(cache)) = (key, inner.vectors.as_mut()) {
            cache.remove(dims, k);
        }
        Ok(key.is_some())
    }

    fn list(&self, options: &ListOptions) -> Result<Vec<MemoryRecord>> {
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
        let mut keys: HashMap<MemoryId, i64> = HashMap::new();
        let lexical: Vec<MemoryId> = if options.mode == SearchMode::Vector {
            Vec::new()
        } else {
            self.lexical(&inner.conn, &terms, agent, &tags, n)?
                .into_iter()
                .map(|(id, key)| {
                    keys.insert(id.clone(), key);
                    id
                })
                .collect()
        };
        let vector: Vec<MemoryId> = match &qv {
            None => Vec::new(),
            Some(q) => {
                let allowed = if agent.is_some() || !tags.is_empty() {
                    Some(self.allowed_keys(&inner.conn, agent, &tags)?)
                } else {
                    None
                };
                let cache = self.fresh_vectors(inner)?;
                let scored: Vec<(usize, f32)> = cache
                    .data
                    .chunks_exact(dims)
                    .enumerate()
                    .filter(|(i, _)| allowed.as_ref().is_none_or(|a| a.contains(&cache.keys[*i])))
                    .map(|(i, v)| (i, dot(q, v)))
                    .filter(|(_, s)| options.keeps_similarity(*s))
                    .collect();
                top_indices(scored, n, &cache.ids)
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
        inner
            .conn
            .query_row(
                "SELECT value, updated_ms FROM shared_facts WHERE scope = ?1 AND key = ?2",
                [scope.as_str(), key],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
            .map(|o| {
                o.map(|(value, updated_ms)| Fact {
                    scope: scope.clone(),
                    key: Arc::from(key),
                    value: Content::from(value),
                    updated_ms,
                })
            })
    }

    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>> {
        let inner = self.lock();
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT key, value, updated_ms FROM shared_facts WHERE scope = ?1 ORDER BY key",
            )
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for scope in scopes {
            let rows = stmt
                .query_map([scope.as_str()], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(|e| self.err(e))?;
            for row in rows {
                let (key, value, updated_ms) = row.map_err(|e| self.err(e))?;
                out.push(Fact {
                    scope: scope.clone(),
                    key: Arc::from(key),
                    value: Content::from(value),
                    updated_ms,
                });
            }
        }
        Ok(out)
    }
}

impl SharedContextWriter for SqliteStore {
    fn set_fact(&self, scope: &Scope, key: &str, value: &str) -> Result<Fact> {
        check_fact_key(key)?;
        self.options.check_size("shared fact", value)?;
        let now = self.options.now_ms();
        let inner = self.lock();
        inner
            .conn
            .execute(
                "INSERT INTO shared_facts (scope, key, value, updated_ms) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
                params![scope.as_str(), key, value, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(Fact {
            scope: scope.clone(),
            key: Arc::from(key),
            value: Content::from(value),
            updated_ms: now,
        })
    }

    fn remove_fact(&self, scope: &Scope, key: &str) -> Result<bool> {
        let inner = self.lock();
        inner
            .conn
            .execute(
                "DELETE FROM shared_facts WHERE scope = ?1 AND key = ?2",
                [scope.as_str(), key],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }
}
