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
//! - Every row of `memories`, `memory_vectors`, `wm_entries`, `wm_sessions`, `shared_facts`,
//!   `session_state` and `wm_operations` carries a
//!   128-bit BLAKE3 checksum of its fields (key, text, metadata, timestamps, vector bytes),
//!   checked on every read: a row that does not match, or whose text is not valid UTF-8, is
//!   [`MemoryError::Corrupt`] naming the table and the row. What per-row checksums cannot see
//!   (a page of rows lost as a whole, damage inside the full-text index that changes which rows
//!   match) is what SQLite's own checks look for: [`StoreOptions::with_check_on_open`] runs
//!   `PRAGMA quick_check` at open, and [`SqliteStore::check_integrity`] runs the full
//!   `integrity_check`, the FTS5 index check, every row checksum and the structure of the
//!   tables without one (ADR-0036).
//! - Rows a damaged page or index hides from a read (ADR-0036). Row checksums cannot see a
//!   row that is not read, so reads compare what they found with what the store recorded in
//!   the writing transaction: a session's entries are numbered and `wm_sessions` keeps each
//!   session's span (a gap is damage), `row_counts` keeps the rows of each table and of each
//!   group a read selects through an index, and a lookup that misses is confirmed without the
//!   index. Such a read answers [`MemoryError::Corrupt`], never a shorter result.
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
//!
//! The code is split by job: `schema` creates a store and migrates it, `integrity` holds the
//! row checksums, `counts` the kept row counts, `check` the check of the whole store,
//! `vectors` the handle's in-process search indexes
//! and the change log, and `working`, `long_term`, `shared` and `state` implement the store
//! traits on their tables. This file holds the handle itself: opening, locking, and counting
//! commits.

mod check;
mod counts;
mod integrity;
mod long_term;
mod schema;
mod shared;
mod state;
mod vectors;
mod working;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction};

use crate::embed::{Embedder, HashEmbedder};
use crate::error::{MemoryError, Result};
use crate::options::StoreOptions;
use integrity::run_quick_check;
use schema::{check_embedder, create_new, migrate, schema_version};
use vectors::VectorCache;

pub use check::{IntegrityFinding, IntegrityReport};
pub use schema::SQLITE_SCHEMA_VERSION;

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
                    "the store at {} was opened read-only, so nothing can be written to it",
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
            // Counts an index may answer are compared with the kept counts (ADR-0036).
            memories: self.check_counted(c, "memories", "SELECT count(*) FROM memories", None)?,
            entries: self.check_counted(
                c,
                "wm_entries",
                "SELECT count(*) FROM wm_entries",
                None,
            )?,
            sessions: one("SELECT count(*) FROM wm_sessions WHERE next_seq > first_seq")?,
            facts: self.check_counted(
                c,
                "shared_facts",
                "SELECT count(*) FROM shared_facts",
                None,
            )?,
            file_bytes: one(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            )?,
        })
    }
}
