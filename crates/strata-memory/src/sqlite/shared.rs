//! Shared context (layer 3) in a SQLite store: facts in `shared_facts`, one checksummed row
//! per scope and key.

use std::sync::Arc;

use rusqlite::{params, OptionalExtension};
use strata_core::Content;

use super::integrity::{fact_sum, raw, raw_opt, utf8, verify_sum};
use super::SqliteStore;
use crate::error::Result;
use crate::shared::{check_fact_key, Fact, Scope, SharedContext, SharedContextWriter};

impl SqliteStore {
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
}

impl SqliteStore {
    /// Every fact of `scope`, checked row by row and counted against the scope's count
    /// (ADR-0036).
    pub(super) fn facts_on(&self, conn: &rusqlite::Connection, scope: &Scope) -> Result<Vec<Fact>> {
        let mut stmt = conn
            .prepare_cached(
                "SELECT value, updated_ms, checksum, key FROM shared_facts WHERE scope = ?1 ORDER BY key",
            )
            .map_err(|e| self.err(e))?;
        let loc = self.location.as_str();
        let rows = stmt
            .query_map([scope.as_str()], |r| {
                let key = raw(r, 3)?;
                let key = std::str::from_utf8(key).map_err(rusqlite::Error::Utf8Error)?;
                Ok(self.verified_fact(loc, scope, key, r))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(|e| self.err(e))??);
        }
        if out.windows(2).any(|w| w[0].key >= w[1].key) {
            return Err(crate::error::MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!(
                    "the facts of scope `{}` were not read once each in key order; a page was damaged on disk",
                    scope.as_str()
                ),
            });
        }
        self.check_count(
            conn,
            &format!("shared_facts/{}", scope.as_str()),
            out.len() as u64,
        )?;
        Ok(out)
    }
}

impl SharedContext for SqliteStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn fact(&self, scope: &Scope, key: &str) -> Result<Option<Fact>> {
        let inner = self.lock();
        let loc = self.location.as_str();
        let found = inner
            .conn
            .query_row(
                "SELECT value, updated_ms, checksum FROM shared_facts WHERE scope = ?1 AND key = ?2",
                [scope.as_str(), key],
                |r| Ok(self.verified_fact(loc, scope, key, r)),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .transpose()?;
        if found.is_none() {
            // A miss is checked (ADR-0036): the scope, read whole and counted, must not hold
            // the key.
            let all = self.facts_on(&inner.conn, scope)?;
            if all.iter().any(|f| &*f.key == key) {
                return Err(crate::error::MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "shared_facts row ({}, {key}) was not found by its key; the table was damaged on disk",
                        scope.as_str()
                    ),
                });
            }
        }
        Ok(found)
    }

    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>> {
        let inner = self.lock();
        let mut out = Vec::new();
        for scope in scopes {
            out.extend(self.facts_on(&inner.conn, scope)?);
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
