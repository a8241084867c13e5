//! Creating a SQLite store and keeping its schema current: the forward migrations, a new
//! store built apart and linked into place in one step, the recorded schema version, the
//! checksums of rows written before version 2, and the embedder recorded in `meta`
//! (ADR-0019).

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::db_err;
use super::integrity::{
    fact_sum, memory_sum, raw, raw_opt, session_sum, utf8, vector_sum, verify_sum, EntryRow,
};
use crate::embed::Embedder;
use crate::error::{MemoryError, Result};

/// The schema version this build writes.
pub const SQLITE_SCHEMA_VERSION: i64 = 6;

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
    // Version 4 (ADR-0031): records of retry-safe operations, kept with their session and
    // written in the transaction of the entries they appended; checksummed (ADR-0019).
    (
        4,
        r"
CREATE TABLE wm_operations (
    session     TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    answer      TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    checksum    BLOB NOT NULL,
    PRIMARY KEY (session, key)
) WITHOUT ROWID;
CREATE INDEX wm_operations_at ON wm_operations (at_ms);
",
    ),
    // Version 5: an opaque metadata object per working-memory entry, NULL for the rows already
    // there. The row checksum covers it when it is set (`entry_sum`), so the checksums of
    // those rows stay valid.
    (
        5,
        r"
ALTER TABLE wm_entries ADD COLUMN meta TEXT;
",
    ),
    // Version 6 (ADR-0036): damage never hides data. Each entry gets its number within the
    // session, and `wm_sessions` (checksummed) the first live and the next number of each
    // session, so a read that misses an entry sees the gap; `upgrade_to_6` numbers the
    // entries already there, after checking their checksums, and rewrites the checksums to
    // cover the numbers. `row_counts` holds the rows of each table (and of each group that a
    // read selects by index), kept by triggers in the writing transaction, for reads that
    // answer from an index to compare with. The change log gets a check value a trigger can
    // compute (`chk`, a function of the key that any change of one field breaks).
    (
        6,
        r"
ALTER TABLE wm_entries ADD COLUMN session_seq INTEGER;
CREATE TABLE wm_sessions (
    session   TEXT PRIMARY KEY,
    first_seq INTEGER NOT NULL,
    next_seq  INTEGER NOT NULL,
    checksum  BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE row_counts (
    name TEXT PRIMARY KEY,
    n    INTEGER NOT NULL
) WITHOUT ROWID;

ALTER TABLE memory_changes ADD COLUMN chk INTEGER;
UPDATE memory_changes SET chk = (key % 2147483629) * 1103515245 % 2147483629;
DROP TRIGGER memory_vectors_changed_insert;
DROP TRIGGER memory_vectors_changed_update;
DROP TRIGGER memories_changed_delete;
CREATE TRIGGER memory_vectors_changed_insert AFTER INSERT ON memory_vectors BEGIN
    INSERT INTO memory_changes (key, chk)
        VALUES (new.key, (new.key % 2147483629) * 1103515245 % 2147483629);
END;
CREATE TRIGGER memory_vectors_changed_update AFTER UPDATE ON memory_vectors BEGIN
    INSERT INTO memory_changes (key, chk)
        VALUES (new.key, (new.key % 2147483629) * 1103515245 % 2147483629);
END;
CREATE TRIGGER memories_changed_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memory_changes (key, chk)
        VALUES (old.key, (old.key % 2147483629) * 1103515245 % 2147483629);
END;

CREATE TRIGGER memories_count_insert AFTER INSERT ON memories BEGIN
    INSERT INTO row_counts (name, n) VALUES ('memories', 1), ('memories/' || new.agent_id, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER memories_count_delete AFTER DELETE ON memories BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name IN ('memories', 'memories/' || old.agent_id);
    DELETE FROM row_counts WHERE name = 'memories/' || old.agent_id AND n = 0;
END;
CREATE TRIGGER memories_count_update AFTER UPDATE OF agent_id ON memories
    WHEN old.agent_id IS NOT new.agent_id BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'memories/' || old.agent_id;
    DELETE FROM row_counts WHERE name = 'memories/' || old.agent_id AND n = 0;
    INSERT INTO row_counts (name, n) VALUES ('memories/' || new.agent_id, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER memory_vectors_count_insert AFTER INSERT ON memory_vectors BEGIN
    INSERT INTO row_counts (name, n) VALUES ('memory_vectors', 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER memory_vectors_count_delete AFTER DELETE ON memory_vectors BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'memory_vectors';
END;
CREATE TRIGGER memory_tags_count_insert AFTER INSERT ON memory_tags BEGIN
    INSERT INTO row_counts (name, n) VALUES ('memory_tags', 1), ('memory_tags/' || new.tag, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER memory_tags_count_delete AFTER DELETE ON memory_tags BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name IN ('memory_tags', 'memory_tags/' || old.tag);
    DELETE FROM row_counts WHERE name = 'memory_tags/' || old.tag AND n = 0;
END;
CREATE TRIGGER wm_entries_count_insert AFTER INSERT ON wm_entries BEGIN
    INSERT INTO row_counts (name, n) VALUES ('wm_entries', 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER wm_entries_count_delete AFTER DELETE ON wm_entries BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'wm_entries';
END;
CREATE TRIGGER wm_sessions_count_insert AFTER INSERT ON wm_sessions BEGIN
    INSERT INTO row_counts (name, n) VALUES ('wm_sessions', 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER wm_sessions_count_delete AFTER DELETE ON wm_sessions BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name = 'wm_sessions';
END;
CREATE TRIGGER shared_facts_count_insert AFTER INSERT ON shared_facts BEGIN
    INSERT INTO row_counts (name, n) VALUES ('shared_facts', 1), ('shared_facts/' || new.scope, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER shared_facts_count_delete AFTER DELETE ON shared_facts BEGIN
    UPDATE row_counts SET n = n - 1 WHERE name IN ('shared_facts', 'shared_facts/' || old.scope);
    DELETE FROM row_counts WHERE name = 'shared_facts/' || old.scope AND n = 0;
END;
CREATE TRIGGER session_state_count_insert AFTER INSERT ON session_state BEGIN
    INSERT INTO row_counts (name, n)
        VALUES ('session_state', 1), ('session_state/' || new.session, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER session_state_count_delete AFTER DELETE ON session_state BEGIN
    UPDATE row_counts SET n = n - 1
        WHERE name IN ('session_state', 'session_state/' || old.session);
    DELETE FROM row_counts WHERE name = 'session_state/' || old.session AND n = 0;
END;
CREATE TRIGGER wm_operations_count_insert AFTER INSERT ON wm_operations BEGIN
    INSERT INTO row_counts (name, n)
        VALUES ('wm_operations', 1), ('wm_operations/' || new.session, 1)
        ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER wm_operations_count_delete AFTER DELETE ON wm_operations BEGIN
    UPDATE row_counts SET n = n - 1
        WHERE name IN ('wm_operations', 'wm_operations/' || old.session);
    DELETE FROM row_counts WHERE name = 'wm_operations/' || old.session AND n = 0;
END;
",
    ),
];

/// The row counts `row_counts` keeps (ADR-0036), as one query: every count the triggers
/// maintain, computed from the tables themselves. `upgrade_to_6` fills the table with it and
/// `check_integrity` compares the table with it.
pub(super) const COUNTS_FROM_TABLES: &str = "
SELECT 'memories', count(*) FROM memories
UNION ALL SELECT 'memories/' || agent_id, count(*) FROM memories GROUP BY agent_id
UNION ALL SELECT 'memory_vectors', count(*) FROM memory_vectors
UNION ALL SELECT 'memory_tags', count(*) FROM memory_tags
UNION ALL SELECT 'memory_tags/' || tag, count(*) FROM memory_tags GROUP BY tag
UNION ALL SELECT 'wm_entries', count(*) FROM wm_entries
UNION ALL SELECT 'wm_sessions', count(*) FROM wm_sessions
UNION ALL SELECT 'shared_facts', count(*) FROM shared_facts
UNION ALL SELECT 'shared_facts/' || scope, count(*) FROM shared_facts GROUP BY scope
UNION ALL SELECT 'session_state', count(*) FROM session_state
UNION ALL SELECT 'session_state/' || session, count(*) FROM session_state GROUP BY session
UNION ALL SELECT 'wm_operations', count(*) FROM wm_operations
UNION ALL SELECT 'wm_operations/' || session, count(*) FROM wm_operations GROUP BY session";

/// Number the entries of a store of version 5 within their sessions and record each
/// session's span (ADR-0036). Every row's checksum is checked first, so that damage is
/// reported rather than sealed under a new checksum.
fn upgrade_to_6(tx: &Transaction<'_>, location: &str) -> Result<()> {
    let e = |err| db_err(location, err);
    let mut rows: Vec<(i64, i64, [u8; 16])> = Vec::new();
    let mut spans: Vec<(String, i64)> = Vec::new();
    {
        let mut stmt = tx
            .prepare(
                "SELECT seq, session, role, call_id, content, at_ms, checksum, meta FROM wm_entries \
                 ORDER BY session, seq",
            )
            .map_err(e)?;
        let mut q = stmt.query([]).map_err(e)?;
        while let Some(r) = q.next().map_err(e)? {
            let mut row = EntryRow {
                seq: r.get(0).map_err(e)?,
                session: raw(r, 1).map_err(e)?,
                role: raw(r, 2).map_err(e)?,
                call_id: raw_opt(r, 3).map_err(e)?,
                content: raw(r, 4).map_err(e)?,
                at_ms: r.get(5).map_err(e)?,
                meta: raw_opt(r, 7).map_err(e)?,
                session_seq: None,
            };
            let seq = row.seq;
            let name = || format!("seq {seq}");
            verify_sum(
                location,
                "wm_entries",
                &name,
                raw_opt(r, 6).map_err(e)?,
                &row.sum(),
            )?;
            let session = utf8(location, "wm_entries", &name, row.session)?;
            match spans.last_mut() {
                Some((s, n)) if *s == session => *n += 1,
                _ => spans.push((session, 1)),
            }
            let n = spans.last().map_or(1, |(_, n)| *n);
            row.session_seq = Some(n);
            rows.push((seq, n, row.sum()));
        }
    }
    for (seq, n, sum) in &rows {
        tx.execute(
            "UPDATE wm_entries SET session_seq = ?2, checksum = ?3 WHERE seq = ?1",
            params![seq, n, &sum[..]],
        )
        .map_err(e)?;
    }
    for (session, n) in spans {
        let sum = session_sum(session.as_bytes(), 1, n + 1);
        tx.execute(
            "INSERT INTO wm_sessions (session, first_seq, next_seq, checksum) VALUES (?1, 1, ?2, ?3)",
            params![session, n + 1, &sum[..]],
        )
        .map_err(e)?;
    }
    tx.execute_batch(&format!(
        "CREATE UNIQUE INDEX wm_entries_session_seq ON wm_entries (session, session_seq);
         DELETE FROM row_counts;
         INSERT INTO row_counts (name, n) {COUNTS_FROM_TABLES};"
    ))
    .map_err(e)
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
pub(super) fn create_new(path: &Path, location: &str, embedder: &dyn Embedder) -> Result<()> {
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

/// The schema version recorded in the store.
pub(super) fn schema_version(conn: &Connection, location: &str) -> Result<i64> {
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
pub(super) fn migrate(
    conn: &mut Connection,
    location: &str,
    embedder: &dyn Embedder,
) -> Result<()> {
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
        if *version == 6 {
            upgrade_to_6(&tx, location)?;
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
    let sums = row_sums(
        tx,
        location,
        "SELECT key, id, agent_id, content, tags, created_ms, updated_ms FROM memories",
        |key, r| {
            Ok(memory_sum(
                key,
                raw(r, 1)?,
                raw(r, 2)?,
                raw(r, 3)?,
                raw(r, 4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        },
    )?;
    write_sums(
        tx,
        location,
        "UPDATE memories SET checksum = ?2 WHERE key = ?1",
        sums,
    )?;
    let sums = row_sums(
        tx,
        location,
        "SELECT key, embedding FROM memory_vectors",
        |key, r| Ok(vector_sum(key, raw(r, 1)?)),
    )?;
    write_sums(
        tx,
        location,
        "UPDATE memory_vectors SET checksum = ?2 WHERE key = ?1",
        sums,
    )?;
    let sums = row_sums(
        tx,
        location,
        "SELECT seq, session, role, call_id, content, at_ms FROM wm_entries",
        |seq, r| {
            Ok(EntryRow {
                seq,
                session: raw(r, 1)?,
                role: raw(r, 2)?,
                call_id: raw_opt(r, 3)?,
                content: raw(r, 4)?,
                at_ms: r.get(5)?,
                meta: None,
                session_seq: None,
            }
            .sum())
        },
    )?;
    write_sums(
        tx,
        location,
        "UPDATE wm_entries SET checksum = ?2 WHERE seq = ?1",
        sums,
    )?;
    fill_fact_checksums(tx, location)
}

/// The checksum of each row that `select` finds, computed by `sum` from the row's integer
/// key (its first column) and the row.
fn row_sums(
    tx: &Transaction<'_>,
    location: &str,
    select: &str,
    sum: impl Fn(i64, &rusqlite::Row<'_>) -> rusqlite::Result<[u8; 16]>,
) -> Result<Vec<(i64, [u8; 16])>> {
    let e = |err| db_err(location, err);
    let mut sums = Vec::new();
    let mut stmt = tx.prepare(select).map_err(e)?;
    let mut rows = stmt.query([]).map_err(e)?;
    while let Some(r) = rows.next().map_err(e)? {
        let key: i64 = r.get(0).map_err(e)?;
        sums.push((key, sum(key, r).map_err(e)?));
    }
    Ok(sums)
}

/// Write each checksum of `sums` with `update`, whose `?1` is the row's key and `?2` its
/// checksum.
fn write_sums(
    tx: &Transaction<'_>,
    location: &str,
    update: &str,
    sums: Vec<(i64, [u8; 16])>,
) -> Result<()> {
    for (key, sum) in sums {
        tx.execute(update, params![key, &sum[..]])
            .map_err(|err| db_err(location, err))?;
    }
    Ok(())
}

/// Compute the checksums of the shared facts written before schema version 2 (ADR-0019);
/// a fact's key is its scope and its key.
fn fill_fact_checksums(tx: &Transaction<'_>, location: &str) -> Result<()> {
    let e = |err| db_err(location, err);
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
/// existing one (another name or dimension is refused, ADR-0046). Returns true when it wrote. With `read_only`, a store without them is
/// corrupt rather than new.
pub(super) fn check_embedder(
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
            let name = get("embedder")?.unwrap_or_default();
            crate::embed::check_recorded(location, &name, stored, embedder)?;
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashEmbedder;
    use crate::working::WorkingMemory;
    use crate::{MemoryError, SqliteStore};

    /// A store file at `version`, built by the migrations up to it, holding `rows` of
    /// `(session, content)` as entries with the checksums of that version (a wrong one for
    /// the row at `damaged`).
    fn store_at(path: &Path, version: i64, rows: &[(&str, &str)], damaged: Option<usize>) {
        let c = Connection::open(path).unwrap();
        c.execute_batch(
            "CREATE TABLE schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
             INSERT INTO schema_version (id, version) VALUES (1, 0);",
        )
        .unwrap();
        for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= version) {
            c.execute_batch(sql).unwrap();
            c.execute("UPDATE schema_version SET version = ?1", [v])
                .unwrap();
        }
        check_embedder(&c, "test", &HashEmbedder::default(), false).unwrap();
        for (i, (session, content)) in rows.iter().enumerate() {
            let seq = i64::try_from(i).unwrap() + 1;
            let mut sum = EntryRow {
                seq,
                session: session.as_bytes(),
                role: b"user",
                call_id: None,
                content: content.as_bytes(),
                at_ms: 7,
                meta: None,
                session_seq: None,
            }
            .sum();
            if damaged == Some(i) {
                sum[0] ^= 1;
            }
            c.execute(
                "INSERT INTO wm_entries (seq, session, role, content, at_ms, checksum) VALUES (?1, ?2, 'user', ?3, 7, ?4)",
                params![seq, session, content, &sum[..]],
            )
            .unwrap();
        }
    }

    const ROWS: &[(&str, &str)] = &[("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3")];

    /// Verifies ADR-0036: a store of version 4 (before entry metadata and session numbers)
    /// is migrated: its entries are numbered within their sessions in order, have no
    /// metadata, pass their new checksums and the whole check, and numbering goes on from
    /// there.
    #[test]
    fn a_version_4_store_gets_meta_and_session_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4.db");
        store_at(&path, 4, ROWS, None);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.stats().unwrap().schema_version, SQLITE_SCHEMA_VERSION);
        let a = store.entries("a").unwrap();
        let got: Vec<(u64, &str, Option<&str>)> = a
            .iter()
            .map(|e| (e.session_seq, e.content.as_str(), e.meta.as_deref()))
            .collect();
        assert_eq!(got, [(1, "a1", None), (2, "a2", None), (3, "a3", None)]);
        assert_eq!(store.entries("b").unwrap()[0].session_seq, 1);
        let next = store
            .append("a", crate::NewEntry::user("a4").with_meta("{}"))
            .unwrap();
        assert_eq!((next.session_seq, next.seq), (4, 5));
        store.check_integrity().unwrap();
        assert_eq!(store.stats().unwrap().entries, 5);
    }

    /// Verifies ADR-0036: a damaged row stops the migration to version 6 (its checksum is
    /// checked before a new one would seal it), and the store is left at its version.
    #[test]
    fn a_damaged_row_stops_the_migration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v5.db");
        store_at(&path, 5, ROWS, Some(2));
        match SqliteStore::open(&path) {
            Err(MemoryError::Corrupt { detail, .. }) => {
                assert!(detail.contains("seq 3"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        let c = Connection::open(&path).unwrap();
        assert_eq!(schema_version(&c, "test").unwrap(), 5);
    }
}
