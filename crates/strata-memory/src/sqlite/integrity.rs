//! Damage detection in a SQLite store (ADR-0019): the 128-bit checksum every row carries,
//! computed on write and verified on every read, and SQLite's own `quick_check` and
//! `integrity_check`. The check of a whole store is in `check.rs`.

use rusqlite::Connection;

use super::db_err;
use crate::error::{MemoryError, Result};

/// Run `PRAGMA quick_check` or `PRAGMA integrity_check`: [`MemoryError::Corrupt`] unless it
/// answers `ok`.
pub(super) fn run_quick_check(conn: &Connection, location: &str, pragma: &str) -> Result<()> {
    let mut stmt = conn.prepare(pragma).map_err(|e| db_err(location, e))?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .map_err(|e| db_err(location, e))?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| db_err(location, e))?;
    if rows.len() == 1 && rows[0] == "ok" {
        Ok(())
    } else {
        Err(MemoryError::Corrupt {
            location: location.to_owned(),
            detail: format!("{pragma}: {}", rows.join("; ")),
        })
    }
}

/// A row checksum: BLAKE3 over the table name and each field, length-prefixed, cut to 128
/// bits. Implements ADR-0019.
struct RowSum(blake3::Hasher);

impl RowSum {
    fn new(table: &str) -> RowSum {
        let mut h = blake3::Hasher::new();
        h.update(b"strata-sqlite-row-v1\0");
        h.update(table.as_bytes());
        h.update(b"\0");
        RowSum(h)
    }

    fn bytes(mut self, b: &[u8]) -> RowSum {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    fn opt(mut self, b: Option<&[u8]>) -> RowSum {
        match b {
            None => {
                self.0.update(&[0]);
                self
            }
            Some(b) => {
                self.0.update(&[1]);
                self.bytes(b)
            }
        }
    }

    fn int(mut self, i: i64) -> RowSum {
        self.0.update(&i.to_le_bytes());
        self
    }

    fn finish(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.0.finalize().as_bytes()[..16]);
        out
    }
}

pub(super) fn memory_sum(
    key: i64,
    id: &[u8],
    agent: &[u8],
    content: &[u8],
    tags: &[u8],
    created: i64,
    updated: i64,
) -> [u8; 16] {
    RowSum::new("memories")
        .int(key)
        .bytes(id)
        .bytes(agent)
        .bytes(content)
        .bytes(tags)
        .int(created)
        .int(updated)
        .finish()
}

pub(super) fn vector_sum(key: i64, blob: &[u8]) -> [u8; 16] {
    RowSum::new("memory_vectors").int(key).bytes(blob).finish()
}

/// The fields of a `wm_entries` row, as stored.
pub(super) struct EntryRow<'a> {
    pub seq: i64,
    pub session: &'a [u8],
    pub role: &'a [u8],
    pub call_id: Option<&'a [u8]>,
    pub content: &'a [u8],
    pub at_ms: i64,
    pub meta: Option<&'a [u8]>,
    /// The number within the session (schema version 6); `None` for the checksum of a row
    /// written before, which the migration to version 6 checks.
    pub session_seq: Option<i64>,
}

impl EntryRow<'_> {
    /// The row's checksum. Rows of schema versions before 6 hash as they did (an entry without
    /// `meta` as before version 5), so the migration can check them; a row of version 6 hashes
    /// `meta` (present or not) and its number within the session last.
    pub(super) fn sum(&self) -> [u8; 16] {
        let sum = RowSum::new("wm_entries")
            .int(self.seq)
            .bytes(self.session)
            .bytes(self.role)
            .opt(self.call_id)
            .bytes(self.content)
            .int(self.at_ms);
        match (self.session_seq, self.meta) {
            (None, None) => sum.finish(),
            (None, Some(m)) => sum.opt(Some(m)).finish(),
            (Some(n), meta) => sum.opt(meta).int(n).finish(),
        }
    }
}

/// The checksum of a `wm_sessions` row (ADR-0036).
pub(super) fn session_sum(session: &[u8], first: i64, next: i64) -> [u8; 16] {
    RowSum::new("wm_sessions")
        .bytes(session)
        .int(first)
        .int(next)
        .finish()
}

pub(super) fn fact_sum(scope: &[u8], key: &[u8], value: &[u8], updated: i64) -> [u8; 16] {
    RowSum::new("shared_facts")
        .bytes(scope)
        .bytes(key)
        .bytes(value)
        .int(updated)
        .finish()
}

/// The checksum of a `wm_operations` row (ADR-0031).
pub(super) fn operation_sum(
    session: &[u8],
    key: &[u8],
    fingerprint: &[u8],
    answer: &[u8],
    at_ms: i64,
) -> [u8; 16] {
    RowSum::new("wm_operations")
        .bytes(session)
        .bytes(key)
        .bytes(fingerprint)
        .bytes(answer)
        .int(at_ms)
        .finish()
}

pub(super) fn state_sum(
    session: &[u8],
    name: &[u8],
    value: &[u8],
    version: i64,
    updated: i64,
) -> [u8; 16] {
    RowSum::new("session_state")
        .bytes(session)
        .bytes(name)
        .bytes(value)
        .int(version)
        .int(updated)
        .finish()
}

/// The raw bytes of a text column (no UTF-8 conversion yet: the checksum is over the bytes).
pub(super) fn raw<'r>(row: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<&'r [u8]> {
    match row.get_ref(i)? {
        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => Ok(b),
        other => Err(rusqlite::Error::InvalidColumnType(
            i,
            format!("column {i}"),
            other.data_type(),
        )),
    }
}

pub(super) fn raw_opt<'r>(
    row: &'r rusqlite::Row<'_>,
    i: usize,
) -> rusqlite::Result<Option<&'r [u8]>> {
    match row.get_ref(i)? {
        rusqlite::types::ValueRef::Null => Ok(None),
        _ => raw(row, i).map(Some),
    }
}

/// Check a row's stored checksum against the one computed from its fields.
pub(super) fn verify_sum(
    location: &str,
    table: &str,
    row_name: &dyn Fn() -> String,
    stored: Option<&[u8]>,
    computed: &[u8; 16],
) -> Result<()> {
    if stored == Some(&computed[..]) {
        return Ok(());
    }
    Err(MemoryError::Corrupt {
        location: location.to_owned(),
        detail: format!(
            "{table} row {} fails its checksum ({}); the row was damaged on disk",
            row_name(),
            if stored.is_none() {
                "no checksum stored"
            } else {
                "its fields changed"
            }
        ),
    })
}

/// Text of a verified row: not UTF-8 is damage.
pub(super) fn utf8(
    location: &str,
    table: &str,
    row_name: &dyn Fn() -> String,
    b: &[u8],
) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| MemoryError::Corrupt {
        location: location.to_owned(),
        detail: format!(
            "{table} row {} holds text that is not valid UTF-8",
            row_name()
        ),
    })
}
