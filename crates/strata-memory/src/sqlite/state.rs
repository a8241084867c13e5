//! Per-session state documents in a SQLite store: the `session_state` table, one checksummed
//! row per session and name, written only while the version the writer read is still the
//! stored one.

use rusqlite::{params, OptionalExtension};

use super::integrity::{raw, raw_opt, state_sum, utf8, verify_sum};
use super::SqliteStore;
use crate::error::Result;

impl crate::state::SessionState for SqliteStore {
    fn state(&self, session: &str, name: &str) -> Result<Option<crate::state::StateDoc>> {
        crate::state::check_state_key(session, name)?;
        let inner = self.lock();
        let loc = self.location.as_str();
        let row_name = || format!("({session}, {name})");
        let found = inner
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
            .transpose()?;
        if found.is_none() {
            // A miss is checked (ADR-0036): the session's documents, each against its checksum
            // (a damaged name is found here) and counted, must be all there, and none of
            // them this one.
            let mut names = Vec::new();
            {
                let mut st = inner
                    .conn
                    .prepare_cached(
                        "SELECT name, value, version, updated_ms, checksum FROM session_state WHERE session = ?1",
                    )
                    .map_err(|e| self.err(e))?;
                let mut rows = st.query([session]).map_err(|e| self.err(e))?;
                while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                    let n = raw(r, 0).map_err(|e| self.err(e))?;
                    let sum = state_sum(
                        session.as_bytes(),
                        n,
                        raw(r, 1).map_err(|e| self.err(e))?,
                        r.get(2).map_err(|e| self.err(e))?,
                        r.get(3).map_err(|e| self.err(e))?,
                    );
                    let row = || format!("({session}, {})", String::from_utf8_lossy(n));
                    verify_sum(
                        loc,
                        "session_state",
                        &row,
                        raw_opt(r, 4).map_err(|e| self.err(e))?,
                        &sum,
                    )?;
                    names.push(utf8(loc, "session_state", &row, n)?);
                }
            }
            self.check_count(
                &inner.conn,
                &format!("session_state/{session}"),
                names.len() as u64,
            )?;
            if names.iter().any(|n| n == name) {
                return Err(crate::error::MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "session_state row ({session}, {name}) is missing from its index"
                    ),
                });
            }
        }
        Ok(found)
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
