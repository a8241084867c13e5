//! Working memory (layer 5) in a SQLite store: the `wm_entries` table, one checksummed row
//! per entry in sequence order, with the tool-call pairing checked on append, and the
//! `wm_operations` table of retry-safe operations, written in the same transaction as the
//! entries they appended (ADR-0031).

use std::sync::Arc;

use rusqlite::params;
use strata_core::{Content, Role};

use super::integrity::{entry_sum, operation_sum, raw, raw_opt, utf8, verify_sum};
use super::SqliteStore;
use crate::error::{MemoryError, Result};
use crate::options::check_label;
use crate::working::{
    check_batch, check_batch_links, check_operation_key, check_tail, operation_live, Applied,
    Batch, CallState, Entry, Operation, WorkingMemory, MAX_LABEL_BYTES, OPERATION_TTL_MS,
};

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

    /// The record of operation `key` of `session`, live or not, checked against its checksum.
    pub(super) fn operation_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        key: &str,
    ) -> Result<Option<Operation>> {
        let mut stmt = conn
            .prepare_cached(
                "SELECT fingerprint, answer, at_ms, checksum FROM wm_operations WHERE session = ?1 AND key = ?2",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([session, key]).map_err(|e| self.err(e))?;
        let Some(r) = rows.next().map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        let loc = self.location.as_str();
        let fingerprint = raw(r, 0).map_err(|e| self.err(e))?;
        let answer = raw(r, 1).map_err(|e| self.err(e))?;
        let at_ms: i64 = r.get(2).map_err(|e| self.err(e))?;
        let stored = raw_opt(r, 3).map_err(|e| self.err(e))?;
        let name = || format!("operation `{key}` of session `{session}`");
        verify_sum(
            loc,
            "wm_operations",
            &name,
            stored,
            &operation_sum(
                session.as_bytes(),
                key.as_bytes(),
                fingerprint,
                answer,
                at_ms,
            ),
        )?;
        Ok(Some(Operation {
            key: key.to_owned(),
            fingerprint: utf8(loc, "wm_operations", &name, fingerprint)?,
            answer: utf8(loc, "wm_operations", &name, answer)?,
            at_ms,
        }))
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
                let meta = raw_opt(r, 6)?;
                let name = || format!("seq {seq}");
                let sum = entry_sum(seq, session.as_bytes(), role, call_id, content, at_ms, meta);
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
                        meta.map(|m| utf8(loc, "wm_entries", &name, m))
                            .transpose()?,
                    ))
                })())
            })
            .map_err(|e| self.err(e))?;
        let session: Arc<str> = Arc::from(session);
        let mut out = Vec::new();
        for row in rows {
            let (seq, role, call_id, content, at_ms, meta) = row.map_err(|e| self.err(e))??;
            out.push(Entry {
                seq: u64::try_from(seq).unwrap_or(0),
                session: session.clone(),
                role: role_from(&self.location, &role)?,
                call_id: call_id.map(Arc::from),
                content: Content::from(content),
                at_ms,
                meta: meta.map(Arc::from),
            });
        }
        Ok(out)
    }
}

impl WorkingMemory for SqliteStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn apply(&self, session: &str, batch: Batch) -> Result<Applied> {
        check_batch(&self.options, session, &batch)?;
        self.writable()?;
        let now = self.options.now_ms();
        let mut inner = self.lock();
        // One immediate transaction: the tail, the key and the pairing are checked against
        // what no other writer can change before the commit (ADR-0031).
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let last: Option<i64> = tx
            .prepare_cached("SELECT max(seq) FROM wm_entries WHERE session = ?1")
            .and_then(|mut st| st.query_row([session], |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        check_tail(
            session,
            batch.tail,
            last.map(|l| u64::try_from(l).unwrap_or(0)),
        )?;
        if let Some(op) = &batch.operation {
            if self
                .operation_in(&tx, session, &op.key)?
                .is_some_and(|o| operation_live(o.at_ms, now))
            {
                return Err(MemoryError::OperationExists {
                    session: session.to_owned(),
                    key: op.key.clone(),
                });
            }
        }
        check_batch_links(session, &batch.entries, |id| {
            let mut state = CallState::default();
            if batch.clear {
                return Ok(state);
            }
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
            Ok(state)
        })?;
        let mut applied = Applied::default();
        if batch.clear {
            applied.cleared = tx
                .execute("DELETE FROM wm_entries WHERE session = ?1", [session])
                .map_err(|e| self.err(e))?;
        }
        // Sequence numbers are chosen here (as AUTOINCREMENT would: above every number ever
        // used) so that each row's checksum can cover its own.
        let mut seq: i64 = tx
            .query_row(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'wm_entries'), 0), \
                 coalesce((SELECT max(seq) FROM wm_entries), 0))",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let key: Arc<str> = Arc::from(session);
        for entry in batch.entries {
            seq += 1;
            let sum = entry_sum(
                seq,
                session.as_bytes(),
                entry.role.name().as_bytes(),
                entry.call_id.as_deref().map(str::as_bytes),
                entry.content.as_bytes(),
                now,
                entry.meta.as_deref().map(str::as_bytes),
            );
            tx.prepare_cached(
                "INSERT INTO wm_entries (seq, session, role, call_id, content, at_ms, checksum, meta) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![seq, session, entry.role.name(), entry.call_id, entry.content, now, &sum[..], entry.meta])
            })
            .map_err(|e| self.err(e))?;
            applied.entries.push(Entry {
                seq: u64::try_from(seq).unwrap_or(0),
                session: key.clone(),
                role: entry.role,
                call_id: entry.call_id.as_deref().map(Arc::from),
                content: Content::from(entry.content),
                at_ms: now,
                meta: entry.meta.map(Arc::from),
            });
        }
        if let Some(op) = &batch.operation {
            tx.prepare_cached("DELETE FROM wm_operations WHERE at_ms <= ?1")
                .and_then(|mut st| st.execute([now.saturating_sub(OPERATION_TTL_MS)]))
                .map_err(|e| self.err(e))?;
            let sum = operation_sum(
                session.as_bytes(),
                op.key.as_bytes(),
                op.fingerprint.as_bytes(),
                op.answer.as_bytes(),
                now,
            );
            tx.prepare_cached(
                "INSERT OR REPLACE INTO wm_operations (session, key, fingerprint, answer, at_ms, checksum) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![session, op.key, op.fingerprint, op.answer, now, &sum[..]])
            })
            .map_err(|e| self.err(e))?;
        }
        if applied.cleared == 0 && applied.entries.is_empty() && batch.operation.is_none() {
            // Nothing written: end the transaction without touching the file.
            tx.rollback().map_err(|e| self.err(e))?;
        } else {
            self.commit(tx)?;
        }
        Ok(applied)
    }

    fn operation(&self, session: &str, key: &str) -> Result<Option<Operation>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        check_operation_key(key)?;
        let now = self.options.now_ms();
        let inner = self.lock();
        Ok(self
            .operation_in(&inner.conn, session, key)?
            .filter(|o| operation_live(o.at_ms, now)))
    }

    fn last_seq(&self, session: &str) -> Result<Option<u64>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        let last: Option<i64> = inner
            .conn
            .prepare_cached("SELECT max(seq) FROM wm_entries WHERE session = ?1")
            .and_then(|mut st| st.query_row([session], |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        Ok(last.map(|l| u64::try_from(l).unwrap_or(0)))
    }

    fn entries(&self, session: &str) -> Result<Vec<Entry>> {
        self.entries_where(
            session,
            "SELECT seq, role, call_id, content, at_ms, checksum, meta FROM wm_entries WHERE session = ?1 ORDER BY seq",
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
            "SELECT seq, role, call_id, content, at_ms, checksum, meta FROM wm_entries WHERE session = ?1 \
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
                    "SELECT seq, role, call_id, content, at_ms, checksum, meta FROM wm_entries \
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
                    "SELECT seq, role, call_id, content, at_ms, checksum, meta FROM wm_entries \
                     WHERE session = ?1 AND call_id = ?2 AND role = 'tool_call'",
                    &[&call],
                )
                .map(|found| !found.is_empty())
            },
        )?;
        tx.finish().map_err(|e| self.err(e))?;
        Ok(chosen)
    }
}
