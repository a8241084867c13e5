//! Working memory (layer 5) in a SQLite store: the `wm_entries` table, one checksummed row
//! per entry in sequence order, with the tool-call pairing checked on append, and the
//! `wm_operations` table of retry-safe operations, written in the same transaction as the
//! entries they appended (ADR-0031).
//!
//! Every entry is numbered within its session, and `wm_sessions` keeps each session's first
//! live and next number under a checksum (ADR-0036). Every read of a session checks what it
//! found against that span: an entry lost from a page or an index is a gap, and the read
//! fails with [`MemoryError::Corrupt`] instead of serving a shorter history.

use std::sync::Arc;

use rusqlite::{params, OptionalExtension};
use strata_core::{Content, Role};

use super::integrity::{operation_sum, raw, raw_opt, session_sum, utf8, verify_sum, EntryRow};
use super::SqliteStore;
use crate::error::{MemoryError, Result};
use crate::options::check_label;
use crate::working::{
    check_batch, check_batch_links, check_exchange, check_operation_key, check_page, check_span,
    check_tail, confirm_no_call, inconsistent, operation_live, Applied, Batch, CallState, Entry,
    NewEntry, Operation, SessionSpan, SpanPart, WorkingMemory, MAX_LABEL_BYTES, OPERATION_TTL_MS,
};

/// The columns every read of entries selects, in the order `entries_on` reads them.
const ENTRY_COLUMNS: &str = "seq, role, call_id, content, at_ms, checksum, meta, session_seq";

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
                let row = EntryRow {
                    seq: r.get(0)?,
                    session: session.as_bytes(),
                    role: raw(r, 1)?,
                    call_id: raw_opt(r, 2)?,
                    content: raw(r, 3)?,
                    at_ms: r.get(4)?,
                    meta: raw_opt(r, 6)?,
                    session_seq: Some(r.get(7)?),
                };
                let stored = raw_opt(r, 5)?;
                let seq = row.seq;
                let name = || format!("seq {seq}");
                Ok((|| -> Result<_> {
                    verify_sum(loc, "wm_entries", &name, stored, &row.sum())?;
                    Ok((
                        seq,
                        utf8(loc, "wm_entries", &name, row.role)?,
                        row.call_id
                            .map(|c| utf8(loc, "wm_entries", &name, c))
                            .transpose()?,
                        utf8(loc, "wm_entries", &name, row.content)?,
                        row.at_ms,
                        row.meta
                            .map(|m| utf8(loc, "wm_entries", &name, m))
                            .transpose()?,
                        row.session_seq.unwrap_or(0),
                    ))
                })())
            })
            .map_err(|e| self.err(e))?;
        let session: Arc<str> = Arc::from(session);
        let mut out = Vec::new();
        for row in rows {
            let (seq, role, call_id, content, at_ms, meta, session_seq) =
                row.map_err(|e| self.err(e))??;
            out.push(Entry {
                seq: u64::try_from(seq).unwrap_or(0),
                session: session.clone(),
                session_seq: u64::try_from(session_seq).unwrap_or(0),
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

impl SqliteStore {
    /// The span of `session` from `wm_sessions`, checked against its checksum (ADR-0036). A
    /// session without a record must have no entries: one that has some lost its record.
    pub(super) fn span_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
    ) -> Result<SessionSpan> {
        let found: Option<(i64, i64, Option<Vec<u8>>)> = conn
            .prepare_cached(
                "SELECT first_seq, next_seq, checksum FROM wm_sessions WHERE session = ?1",
            )
            .and_then(|mut st| {
                st.query_row([session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .map_err(|e| self.err(e))?;
        let Some((first, next, stored)) = found else {
            let orphans: bool = conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM wm_entries WHERE session = ?1)")
                .and_then(|mut st| st.query_row([session], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            if orphans {
                return Err(MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "session `{session}` has entries but no wm_sessions row; the row was lost on disk"
                    ),
                });
            }
            return Ok(SessionSpan::NEW);
        };
        verify_sum(
            &self.location,
            "wm_sessions",
            &|| format!("`{session}`"),
            stored.as_deref(),
            &session_sum(session.as_bytes(), first, next),
        )?;
        SessionSpan::stored(&self.location, session, first, next)
    }

    /// The newest entry of a session with span `span`, found by its number and checked.
    fn newest_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        span: SessionSpan,
    ) -> Result<Option<Entry>> {
        if span.len() == 0 {
            return Ok(None);
        }
        let number = i64::try_from(span.next - 1).unwrap_or(i64::MAX);
        let found = self.entries_on(
            conn,
            session,
            &format!(
                "SELECT {ENTRY_COLUMNS} FROM wm_entries WHERE session = ?1 AND session_seq = ?2"
            ),
            &[&number],
        )?;
        check_span(&self.location, session, span, &found, SpanPart::Newest)?;
        Ok(found.into_iter().next())
    }

    /// Every entry of `session`, checked whole against its span.
    pub(super) fn session_on(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
    ) -> Result<Vec<Entry>> {
        let span = self.span_in(conn, session)?;
        let all = self.entries_on(
            conn,
            session,
            &format!("SELECT {ENTRY_COLUMNS} FROM wm_entries WHERE session = ?1 ORDER BY seq"),
            &[],
        )?;
        check_span(&self.location, session, span, &all, SpanPart::Whole)?;
        Ok(all)
    }

    /// Every operation record of `session`, checked and counted (ADR-0036); damage when
    /// `missed`, a key its lookup did not find, is among them.
    pub(super) fn operations_on(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        missed: Option<&str>,
    ) -> Result<Vec<Operation>> {
        let keys = self.texts(
            conn,
            "SELECT key FROM wm_operations WHERE session = ?1",
            session,
        )?;
        self.check_count(conn, &format!("wm_operations/{session}"), keys.len() as u64)?;
        if let Some(k) = missed.filter(|k| keys.iter().any(|x| x == k)) {
            return Err(inconsistent(
                &self.location,
                session,
                &format!("operation `{k}` was not found by its key"),
            ));
        }
        let mut out = Vec::new();
        for k in &keys {
            if let Some(op) = self.operation_in(conn, session, k)? {
                out.push(op);
            }
        }
        Ok(out)
    }
}

impl SqliteStore {
    /// Check the tool calls and results of `batch` against those `session` holds (none, when
    /// the batch clears it first).
    fn check_links_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        batch: &Batch,
    ) -> Result<()> {
        check_batch_links(session, &batch.entries, |id| {
            let mut state = CallState::default();
            if batch.clear {
                return Ok(state);
            }
            let mut stmt = conn
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
        })
    }

    /// Delete every entry of `session`, which must be the `span.len()` entries its span says;
    /// returns how many.
    fn clear_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        span: SessionSpan,
    ) -> Result<usize> {
        let cleared = conn
            .execute("DELETE FROM wm_entries WHERE session = ?1", [session])
            .map_err(|e| self.err(e))?;
        if cleared as u64 != span.len() {
            return Err(inconsistent(
                &self.location,
                session,
                &format!(
                    "a clear found {} entries where the session holds {}",
                    cleared,
                    span.len()
                ),
            ));
        }
        Ok(cleared)
    }

    /// Insert `entries` into `session`, each with its checksum, numbered from `next` and
    /// stamped `now`: the entries as stored, and the number the entry after them gets.
    fn insert_entries_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        entries: Vec<NewEntry>,
        mut next: u64,
        now: i64,
    ) -> Result<(Vec<Entry>, u64)> {
        // Sequence numbers are chosen here (as AUTOINCREMENT would: above every number ever
        // used) so that each row's checksum can cover its own.
        let mut seq: i64 = conn
            .query_row(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'wm_entries'), 0), \
                 coalesce((SELECT max(seq) FROM wm_entries), 0))",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let key: Arc<str> = Arc::from(session);
        let mut stored = Vec::with_capacity(entries.len());
        for entry in entries {
            seq += 1;
            let number = i64::try_from(next).unwrap_or(i64::MAX);
            let sum = EntryRow {
                seq,
                session: session.as_bytes(),
                role: entry.role.name().as_bytes(),
                call_id: entry.call_id.as_deref().map(str::as_bytes),
                content: entry.content.as_bytes(),
                at_ms: now,
                meta: entry.meta.as_deref().map(str::as_bytes),
                session_seq: Some(number),
            }
            .sum();
            conn.prepare_cached(
                "INSERT INTO wm_entries (seq, session, role, call_id, content, at_ms, checksum, meta, session_seq) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut s| {
                s.execute(params![seq, session, entry.role.name(), entry.call_id, entry.content, now, &sum[..], entry.meta, number])
            })
            .map_err(|e| self.err(e))?;
            stored.push(Entry {
                seq: u64::try_from(seq).unwrap_or(0),
                session: key.clone(),
                session_seq: next,
                role: entry.role,
                call_id: entry.call_id.as_deref().map(Arc::from),
                content: Content::from(entry.content),
                at_ms: now,
                meta: entry.meta.map(Arc::from),
            });
            next += 1;
        }
        Ok((stored, next))
    }

    /// Record, under its checksum, that `session` now spans the numbers `first..next`
    /// (ADR-0036).
    fn record_span_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        first: u64,
        next: u64,
    ) -> Result<()> {
        let (f, n) = (
            i64::try_from(first).unwrap_or(i64::MAX),
            i64::try_from(next).unwrap_or(i64::MAX),
        );
        let sum = session_sum(session.as_bytes(), f, n);
        conn.prepare_cached(
            "INSERT INTO wm_sessions (session, first_seq, next_seq, checksum) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (session) DO UPDATE SET first_seq = excluded.first_seq, \
             next_seq = excluded.next_seq, checksum = excluded.checksum",
        )
        .and_then(|mut st| st.execute(params![session, f, n, &sum[..]]))
        .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Record the operation `op` of `session` at `now`, under its checksum, after deleting
    /// the operations that are no longer live.
    fn record_operation_in(
        &self,
        conn: &rusqlite::Connection,
        session: &str,
        op: &Operation,
        now: i64,
    ) -> Result<()> {
        conn.prepare_cached("DELETE FROM wm_operations WHERE at_ms <= ?1")
            .and_then(|mut st| st.execute([now.saturating_sub(OPERATION_TTL_MS)]))
            .map_err(|e| self.err(e))?;
        let sum = operation_sum(
            session.as_bytes(),
            op.key.as_bytes(),
            op.fingerprint.as_bytes(),
            op.answer.as_bytes(),
            now,
        );
        // An upsert, not INSERT OR REPLACE: a replacement would bypass the delete trigger
        // that keeps the row counts (ADR-0036).
        conn.prepare_cached(
            "INSERT INTO wm_operations (session, key, fingerprint, answer, at_ms, checksum) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (session, key) DO UPDATE SET \
             fingerprint = excluded.fingerprint, answer = excluded.answer, \
             at_ms = excluded.at_ms, checksum = excluded.checksum",
        )
        .and_then(|mut st| {
            st.execute(params![
                session,
                op.key,
                op.fingerprint,
                op.answer,
                now,
                &sum[..]
            ])
        })
        .map_err(|e| self.err(e))?;
        Ok(())
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
        // what no other writer can change before the commit (ADR-0031). A refusal, damage
        // found included, returns before the commit and so changes nothing.
        let tx = inner
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let span = self.span_in(&tx, session)?;
        let last = self.newest_in(&tx, session, span)?.map(|e| e.seq);
        check_tail(session, batch.tail, last)?;
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
        self.check_links_in(&tx, session, &batch)?;
        let mut applied = Applied::default();
        let mut first = span.first;
        if batch.clear {
            applied.cleared = self.clear_in(&tx, session, span)?;
            first = span.next;
        }
        let (entries, next) =
            self.insert_entries_in(&tx, session, batch.entries, span.next, now)?;
        applied.entries = entries;
        if (first, next) != (span.first, span.next) {
            self.record_span_in(&tx, session, first, next)?;
        }
        if let Some(op) = &batch.operation {
            self.record_operation_in(&tx, session, op, now)?;
        }
        let mut removed = 0;
        for name in &batch.remove_state {
            removed += tx
                .execute(
                    "DELETE FROM session_state WHERE session = ?1 AND name = ?2",
                    [session, name.as_str()],
                )
                .map_err(|e| self.err(e))?;
        }
        if applied.cleared == 0
            && applied.entries.is_empty()
            && batch.operation.is_none()
            && removed == 0
        {
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
        let found = self.operation_in(&inner.conn, session, key)?;
        if found.is_none() {
            // A miss is checked: the session's records, read and counted, must not hold it.
            self.operations_on(&inner.conn, session, Some(key))?;
        }
        Ok(found.filter(|o| operation_live(o.at_ms, now)))
    }

    fn last_seq(&self, session: &str) -> Result<Option<u64>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        let span = self.span_in(&inner.conn, session)?;
        Ok(self.newest_in(&inner.conn, session, span)?.map(|e| e.seq))
    }

    fn entries(&self, session: &str) -> Result<Vec<Entry>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        let tx = inner
            .conn
            .unchecked_transaction()
            .map_err(|e| self.err(e))?;
        let all = self.session_on(&tx, session)?;
        tx.finish().map_err(|e| self.err(e))?;
        Ok(all)
    }

    fn has_session(&self, session: &str) -> Result<bool> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        Ok(self.span_in(&inner.conn, session)?.len() > 0)
    }

    fn current_exchange(&self, session: &str) -> Result<Vec<Entry>> {
        check_label("session id", session, MAX_LABEL_BYTES)?;
        let inner = self.lock();
        let tx = inner
            .conn
            .unchecked_transaction()
            .map_err(|e| self.err(e))?;
        let span = self.span_in(&tx, session)?;
        // Both walk the (session, seq) index, the inner one backwards from the newest entry to
        // the newest user entry; a session without a user entry compares with NULL and
        // selects nothing.
        let found = self.entries_on(
            &tx,
            session,
            &format!(
                "SELECT {ENTRY_COLUMNS} FROM wm_entries WHERE session = ?1 \
                 AND seq >= (SELECT seq FROM wm_entries WHERE session = ?1 AND role = 'user' \
                 ORDER BY seq DESC LIMIT 1) ORDER BY seq"
            ),
            &[],
        )?;
        // No user entry found: the session is read whole to be sure none was missed.
        check_exchange(&self.location, session, span, &found, || {
            self.session_on(&tx, session)
        })?;
        tx.finish().map_err(|e| self.err(e))?;
        Ok(found)
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
        let span = self.span_in(&tx, session)?;
        let expect = std::cell::Cell::new(span.next.saturating_sub(1));
        let page_sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM wm_entries \
             WHERE session = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3"
        );
        let call_sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM wm_entries \
             WHERE session = ?1 AND call_id = ?2 AND role = 'tool_call'"
        );
        let chosen = crate::working::select_recent_paged(
            token_budget,
            tokenizer,
            crate::working::FIRST_PAGE,
            |before, limit| {
                let page = self.entries_on(&tx, session, &page_sql, &[&before, &limit])?;
                let complete = i64::try_from(page.len()).unwrap_or(i64::MAX) < limit;
                expect.set(check_page(
                    &self.location,
                    session,
                    span,
                    expect.get(),
                    &page,
                    complete,
                )?);
                Ok(page)
            },
            // The call's row is read and checked like any other: a damaged one is an error,
            // not a missing call. A result always follows its call in a session, so a call
            // not found by the index is looked for in the whole session before the result is
            // taken as an orphan.
            |call| {
                if !self
                    .entries_on(&tx, session, &call_sql, &[&call])?
                    .is_empty()
                {
                    return Ok(true);
                }
                let all = self.session_on(&tx, session)?;
                confirm_no_call(&self.location, session, call, &all)
            },
        )?;
        tx.finish().map_err(|e| self.err(e))?;
        Ok(chosen)
    }
}
