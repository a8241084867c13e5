//! Row counts in a SQLite store (ADR-0036): `row_counts` holds how many rows each table has,
//! and each group of rows a read selects through an index (a session's operation records and
//! state documents, a scope's facts, an agent's memories, a tag's memories). Triggers keep
//! it in the writing transaction. A read that answers from an index compares what it found
//! with the count, so a row the index lost is reported as damage, not left out in silence.

use rusqlite::{Connection, OptionalExtension};

use super::SqliteStore;
use crate::error::{MemoryError, Result};

impl SqliteStore {
    /// The count kept under `name` (0 when there is none).
    pub(super) fn kept_count(&self, conn: &Connection, name: &str) -> Result<u64> {
        let n: Option<i64> = conn
            .prepare_cached("SELECT n FROM row_counts WHERE name = ?1")
            .and_then(|mut st| st.query_row([name], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))?;
        let n = n.unwrap_or(0);
        u64::try_from(n).map_err(|_| MemoryError::Corrupt {
            location: self.location.clone(),
            detail: format!("row_counts row `{name}` holds {n}"),
        })
    }

    /// Compare `found`, what a read found of the rows counted under `name`, with the count.
    pub(super) fn check_count(&self, conn: &Connection, name: &str, found: u64) -> Result<()> {
        let kept = self.kept_count(conn, name)?;
        if kept == found {
            return Ok(());
        }
        Err(MemoryError::Corrupt {
            location: self.location.clone(),
            detail: format!(
                "a read found {found} rows of `{name}` but the store counted {kept}; rows or an index were damaged on disk"
            ),
        })
    }

    /// Count the rows `sql` counts (one integer) and compare with the count under `name`.
    pub(super) fn check_counted(
        &self,
        conn: &Connection,
        name: &str,
        sql: &str,
        param: Option<&str>,
    ) -> Result<u64> {
        let n: i64 = conn
            .prepare_cached(sql)
            .and_then(|mut st| match param {
                Some(p) => st.query_row([p], |r| r.get(0)),
                None => st.query_row([], |r| r.get(0)),
            })
            .map_err(|e| self.err(e))?;
        let n = u64::try_from(n).unwrap_or(0);
        self.check_count(conn, name, n)?;
        Ok(n)
    }

    /// The text column a query with one parameter selects: the keys of a group, read to
    /// confirm a lookup that missed.
    pub(super) fn texts(&self, conn: &Connection, sql: &str, param: &str) -> Result<Vec<String>> {
        let mut st = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map([param], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e));
        rows
    }
}
