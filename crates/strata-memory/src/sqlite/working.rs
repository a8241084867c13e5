//! Working memory (layer 5) in a SQLite store: the `wm_entries` table, one checksummed row
//! per entry in sequence order, with the tool-call pairing checked on append.

use std::sync::Arc;

use rusqlite::params;
use strata_core::{Content, Role};

use super::integrity::{entry_sum, raw, raw_opt, utf8, verify_sum};
use super::SqliteStore;
use crate::error::{MemoryError, Result};
use crate::options::check_label;
use crate::working::{
    check_call_link, check_new_entry, CallState, Entry, NewEntry, WorkingMemory, MAX_LABEL_BYTES,
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
