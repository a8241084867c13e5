//! Long-term memory (layer 6) in a SQLite store: memories written with their vectors and
//! tags, read back checked, listed and counted with agent and tag filters, and hybrid search
//! ranked from the handle's in-process indexes and the exact vectors in the file.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Transaction};
use strata_core::Content;

use super::integrity::{memory_sum, raw, raw_opt, utf8, vector_sum, verify_sum};
use super::{SqliteStore, VectorCache};
use crate::embed::embed_checked;
use crate::error::{MemoryError, Result};
use crate::long_term::{
    check_tags, dot, fuse, prepare_batch, ListOptions, LongTermMemory, MemoryId, MemoryRecord,
    NewMemory, SearchHit, SearchMode, SearchOptions,
};
use crate::options::check_label;
use crate::quant::{pool_size, top_positions, CodeCache};
use crate::text::{query_terms, MAX_QUERY_TERMS};
use crate::working::MAX_LABEL_BYTES;

pub(super) fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn blob_to_vector(location: &str, dims: usize, b: &[u8]) -> Result<Vec<f32>> {
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

pub(super) const RECORD_COLUMNS: &str =
    "m.id, m.agent_id, m.content, m.tags, m.created_ms, m.updated_ms, m.key, m.checksum";

/// A memory from a row of [`RECORD_COLUMNS`], after checking its checksum.
fn record_from_row(
    location: &str,
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<MemoryRecord>> {
    record_from_row_at(location, row, 0)
}

/// [`record_from_row`] for [`RECORD_COLUMNS`] starting at column `at`.
pub(super) fn record_from_row_at(
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
            "INSERT INTO memory_vectors (key, embedding, checksum) VALUES (?1, ?2, ?3) \
             ON CONFLICT (key) DO UPDATE SET embedding = excluded.embedding, checksum = excluded.checksum",
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

    /// Compare what a read of a whole group, filtered by `agent` and `tags`, found through an
    /// index (`found` rows) with the counts (ADR-0036): a read by agent (or of everything)
    /// must find the group's kept count; a read by tags counts each tag's index entries
    /// before the rows they select are trusted.
    fn check_filtered(
        &self,
        conn: &Connection,
        agent: Option<&str>,
        tags: &[Arc<str>],
        found: usize,
    ) -> Result<()> {
        if !tags.is_empty() {
            for t in tags {
                self.check_counted(
                    conn,
                    &format!("memory_tags/{t}"),
                    "SELECT count(*) FROM memory_tags WHERE tag = ?1",
                    Some(t),
                )?;
            }
            return Ok(());
        }
        let group = agent.map_or_else(|| "memories".to_owned(), |a| format!("memories/{a}"));
        self.check_count(conn, &group, found as u64)
    }

    /// A memory the search indexes hold but whose row was not found: damage, unless another
    /// connection wrote since the indexes were brought up to date (it may have deleted it).
    fn missing_row(&self, conn: &Connection, data_version: i64, key: i64) -> Result<()> {
        let now: i64 = conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if now == data_version {
            return Err(MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!(
                    "memory {key} is in the search indexes but its row was not found; a page was damaged on disk"
                ),
            });
        }
        Ok(())
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
        let keys = rows
            .collect::<rusqlite::Result<HashSet<i64>>>()
            .map_err(|e| self.err(e))?;
        self.check_filtered(conn, agent, tags, keys.len())?;
        Ok(keys)
    }
}

/// The BM25 ranking of `terms` from the handle's in-process index (ADR-0029), equal to
/// FTS5's `bm25()`: the positions in the codes of the best `n` memories among those
/// `allowed` (all when `None`).
fn lexical_positions(
    cache: &VectorCache,
    terms: &[String],
    allowed: Option<&HashSet<i64>>,
    n: usize,
) -> Vec<usize> {
    let scored = cache
        .lexical
        .best(terms, |k| allowed.is_none_or(|a| a.contains(&k)), n);
    let scored: Vec<(usize, f64)> = scored
        .into_iter()
        .filter_map(|(k, s)| cache.codes.position(k).map(|p| (p, s)))
        .collect();
    top_positions(scored, n, &cache.codes.ids)
}

impl SqliteStore {
    /// The similarity to the query vector `q` of the exact vector, read from the file and
    /// checked against its checksum, of each memory of the pool (positions in `codes`),
    /// for those `options` keeps. A vector missing from the file is damage unless the file
    /// changed since `data_version`; then it is skipped.
    fn exact_similarities(
        &self,
        conn: &Connection,
        codes: &CodeCache,
        data_version: i64,
        q: &[f32],
        pool: Vec<usize>,
        options: &SearchOptions,
    ) -> Result<Vec<(usize, f32)>> {
        let dims = self.embedder.dims();
        let mut stmt = conn
            .prepare_cached("SELECT embedding, checksum FROM memory_vectors WHERE key = ?1")
            .map_err(|e| self.err(e))?;
        let mut exact: Vec<(usize, f32)> = Vec::with_capacity(pool.len());
        for i in pool {
            let key = codes.keys[i];
            let mut rows = stmt.query([key]).map_err(|e| self.err(e))?;
            let Some(row) = rows.next().map_err(|e| self.err(e))? else {
                self.missing_row(conn, data_version, key)?;
                continue;
            };
            let blob = raw(row, 0).map_err(|e| self.err(e))?;
            let stored = raw_opt(row, 1).map_err(|e| self.err(e))?;
            verify_sum(
                &self.location,
                "memory_vectors",
                &|| format!("key {key} (id `{}`)", codes.ids[i]),
                stored,
                &vector_sum(key, blob),
            )?;
            let v = blob_to_vector(&self.location, dims, blob)?;
            let sim = dot(q, &v);
            if options.keeps_similarity(sim) {
                exact.push((i, sim));
            }
        }
        Ok(exact)
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
        let found = inner
            .conn
            .prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| record_from_row(&self.location, r))
                    .optional()
            })
            .map_err(|e| self.err(e))?
            .transpose()?;
        if found.is_none() {
            // A miss is checked without the id index (ADR-0036): a scan of the table must not
            // find the id either. Misses cost a scan; hits do not.
            let scanned: i64 = inner
                .conn
                .prepare_cached("SELECT count(*) FROM memories NOT INDEXED WHERE id = ?1")
                .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            if scanned > 0 {
                return Err(MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "memory `{id}` is in the memories table but not in its id index; the index was damaged on disk"
                    ),
                });
            }
        }
        Ok(found)
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
        // Tags are matched against each row's own checksummed tag list, not through the tag
        // index, whose damage could drop a row without a sign.
        let (filter, fparams) = filter_sql(options.agent_id.as_deref(), &[]);
        // The whole group is read, checked and counted, then sorted and cut here (ADR-0036):
        // a page cut by SQL from an index's order would follow an index entry that damage
        // moved, or skip a dangling one, without a sign. A page costs a read of its group.
        let sql = format!("SELECT {RECORD_COLUMNS} FROM memories m WHERE 1 = 1{filter}");
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
        drop(stmt);
        // Rows an index put in the wrong group are damage: each row must match the filter.
        if let Some(r) = out.iter().find(|r| {
            options
                .agent_id
                .as_deref()
                .is_some_and(|a| &*r.agent_id != a)
        }) {
            return Err(MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!(
                    "memory `{}` was listed under a filter it does not match; an index was damaged on disk",
                    r.id
                ),
            });
        }
        let mut seen = HashSet::new();
        if let Some(twice) = out.iter().find(|r| !seen.insert(&r.id)) {
            return Err(MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!(
                    "memory `{}` was listed twice; a page was damaged on disk",
                    twice.id
                ),
            });
        }
        self.check_filtered(&inner.conn, options.agent_id.as_deref(), &[], out.len())?;
        out.retain(|r| tags.iter().all(|t| r.tags.contains(t)));
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(out
            .into_iter()
            .skip(options.offset)
            .take(options.limit.unwrap_or(usize::MAX))
            .collect())
    }

    fn count(&self, agent_id: Option<&str>) -> Result<usize> {
        if let Some(a) = agent_id {
            check_label("agent id", a, MAX_LABEL_BYTES)?;
        }
        let inner = self.lock();
        let n = match agent_id {
            Some(a) => self.check_counted(
                &inner.conn,
                &format!("memories/{a}"),
                "SELECT count(*) FROM memories WHERE agent_id = ?1",
                Some(a),
            ),
            None => self.check_counted(
                &inner.conn,
                "memories",
                "SELECT count(*) FROM memories",
                None,
            ),
        }?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
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
        let data_version = cache.data_version;
        let mut keys: HashMap<MemoryId, i64> = HashMap::new();
        let codes = &cache.codes;
        // The ids of the memories at `positions` of the codes, each noted with its key.
        let mut ids_at = |positions: Vec<usize>| -> Vec<MemoryId> {
            positions
                .into_iter()
                .map(|p| {
                    keys.insert(codes.ids[p].clone(), codes.keys[p]);
                    codes.ids[p].clone()
                })
                .collect()
        };
        let lexical: Vec<MemoryId> = if options.mode == SearchMode::Vector {
            Vec::new()
        } else {
            ids_at(lexical_positions(cache, &terms, allowed.as_ref(), n))
        };
        let vector: Vec<MemoryId> = match &qv {
            None => Vec::new(),
            Some(q) => {
                // ADR-0019: int8 codes choose a pool, exact vectors from the file rank it.
                let pool = codes.candidates(dims, q, allowed.as_ref(), pool_size(n));
                let exact =
                    self.exact_similarities(&inner.conn, codes, data_version, q, pool, options)?;
                ids_at(top_positions(exact, n, &codes.ids))
            }
        };
        let mut hits = Vec::new();
        for (id, score, lr, vr) in fuse(&lexical, &vector, options) {
            let Some(&key) = keys.get(&id) else { continue };
            match self.record_by_key(&inner.conn, key)? {
                Some(record) => hits.push(SearchHit {
                    record,
                    score,
                    lexical_rank: lr,
                    vector_rank: vr,
                }),
                None => self.missing_row(&inner.conn, data_version, key)?,
            }
        }
        Ok(hits)
    }
}
