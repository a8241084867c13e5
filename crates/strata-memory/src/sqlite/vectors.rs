//! The in-process search indexes of a SQLite store handle (ADR-0019, ADR-0029): the int8
//! codes of the vectors and the BM25 index of the texts, loaded at the first search (from the
//! snapshot next to the file when one fits), kept current from the change log when another
//! connection writes, and written back as the snapshot; and the pruning of that log.

use rusqlite::{Connection, Transaction};

use super::integrity::{raw_opt, vector_sum, verify_sum};
use super::long_term::{blob_to_vector, record_from_row_at, RECORD_COLUMNS};
use super::{Inner, SqliteStore, VectorCacheStats};
use crate::error::{MemoryError, Result};
use crate::lexical::LexicalIndex;
use crate::long_term::MemoryId;
use crate::quant::CodeCache;
use crate::snapshot;

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
pub(super) struct VectorCache {
    pub(super) data_version: i64,
    /// The last change-log entry the cache reflects.
    pub(super) change_seq: i64,
    /// The change-log entry the snapshot on disk reflects, as far as this handle knows.
    pub(super) snapshot_seq: i64,
    /// The codes.
    pub(super) codes: CodeCache,
    /// The texts, for the lexical ranking (ADR-0029).
    pub(super) lexical: LexicalIndex,
}

impl VectorCache {
    pub(super) fn upsert(
        &mut self,
        dims: usize,
        key: i64,
        id: &MemoryId,
        v: &[f32],
        content: &str,
    ) {
        self.codes.upsert(dims, key, id, v);
        self.lexical.upsert(key, content);
    }

    pub(super) fn remove(&mut self, dims: usize, key: i64) {
        self.codes.remove(dims, key);
        self.lexical.remove(key);
    }
}

impl SqliteStore {
    /// Make sure the vector cache matches the file (ADR-0019). The first call loads every
    /// vector. Later, when another connection has committed (`PRAGMA data_version` moved), only
    /// the memories named in the change log since the cache's last entry are read again; a
    /// full reload happens only when the cache is older than the pruned part of the log.
    pub(super) fn fresh_vectors<'a>(&self, inner: &'a mut Inner) -> Result<&'a VectorCache> {
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
    pub(super) fn log_position(&self, tx: &Transaction<'_>) -> Result<(i64, i64)> {
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

    pub(super) fn cache_ref<'a>(&self, inner: &'a Inner) -> Result<&'a VectorCache> {
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
        let mut keys = std::collections::HashSet::new();
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let key: i64 = row.get(0).map_err(|e| self.err(e))?;
            let (id, v, content) = self.checked_row(row, key)?;
            if !keys.insert(key) {
                // A damaged cell pointer can make a page yield one row twice and hide another.
                return Err(MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "memory {key} was read twice from its table; a page was damaged on disk"
                    ),
                });
            }
            cache.upsert(dims, key, &id, &v, &content);
        }
        let n = keys.len() as u64;
        // Every memory and every vector was read, once (ADR-0036): a row lost from either
        // table would leave a memory out of every search.
        self.check_count(conn, "memories", n)?;
        self.check_count(conn, "memory_vectors", n)
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
        // A row the log names but the table lacks was taken as deleted; the counts, read in
        // the same transaction, tell a deletion from a row a damaged page hides (ADR-0036).
        let held = cache.codes.len() as u64;
        self.check_count(conn, "memories", held)?;
        self.check_count(conn, "memory_vectors", held)?;
        self.check_count(conn, "memories", cache.lexical.len() as u64)?;
        tracing::debug!(store = %self.name, changed = keys.len(), "refreshed vector cache");
        cache.change_seq = last;
        Ok(keys.len() as u64)
    }

    /// Keep the change log short: drop entries older than the last [`CHANGES_KEPT`].
    pub(super) fn prune_changes(&self, tx: &Transaction<'_>) -> Result<()> {
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
}
