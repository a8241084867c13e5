//! The check of a whole SQLite store (ADR-0019, ADR-0036): every table is covered, by row
//! checksums where the rows carry them and by structural checks where they cannot (the change
//! log, written by triggers; `meta`; the row counts), together with SQLite's own
//! `integrity_check` (pages, and every index against its table) and the full-text index's own
//! check. [`SqliteStore::integrity_report`] runs every check and lists what each found;
//! [`SqliteStore::check_integrity`] answers with the first finding.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::integrity::{raw, raw_opt, run_quick_check, state_sum, verify_sum};
use super::schema::{COUNTS_FROM_TABLES, SQLITE_SCHEMA_VERSION};
use super::SqliteStore;
use crate::error::{MemoryError, Result};
use crate::long_term::{ListOptions, LongTermMemory};
use crate::shared::Scope;

/// What one check of [`SqliteStore::integrity_report`] found wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntegrityFinding {
    /// The check (one of [`IntegrityReport::checks`]).
    pub check: &'static str,
    /// What was wrong.
    pub detail: String,
}

/// The result of checking a whole store: the checks that ran and what they found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IntegrityReport {
    /// The file.
    pub location: String,
    /// The checks that ran, in order.
    pub checks: Vec<&'static str>,
    /// Checks that could not run on this handle, with the reason.
    pub skipped: Vec<(&'static str, &'static str)>,
    /// What was found wrong; empty for an undamaged store.
    pub findings: Vec<IntegrityFinding>,
}

impl IntegrityReport {
    /// Whether no check found anything wrong.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// The value a trigger stores beside each change-log key (schema version 6).
fn change_check(key: i64) -> i64 {
    (key.rem_euclid(2_147_483_629)) * 1_103_515_245 % 2_147_483_629
}

impl SqliteStore {
    /// Check the whole store and answer with the first damage found, as
    /// [`MemoryError::Corrupt`] (see [`SqliteStore::integrity_report`]). Reads the whole file.
    pub fn check_integrity(&self) -> Result<()> {
        let report = self.integrity_report();
        match report.findings.first() {
            None => Ok(()),
            Some(f) => Err(MemoryError::Corrupt {
                location: self.location.clone(),
                detail: if report.findings.len() > 1 {
                    format!(
                        "{}: {} (and {} more findings)",
                        f.check,
                        f.detail,
                        report.findings.len() - 1
                    )
                } else {
                    format!("{}: {}", f.check, f.detail)
                },
            }),
        }
    }

    /// Run every check over the whole store (ADR-0019, ADR-0036) and list what each found:
    /// SQLite's `integrity_check`, the full-text index (on a writable handle: FTS5's check runs
    /// as a statement that needs one), the checksum of every row of every checksummed table
    /// (memories, vectors, entries, sessions, facts, state documents, operation records),
    /// every session against its span, the tags against the memories, the change log's
    /// structure, `meta`, the schema version and the row counts against the tables. Any error
    /// a check meets is a finding: in a damaged file, an error is how damage shows.
    pub fn integrity_report(&self) -> IntegrityReport {
        let mut report = IntegrityReport {
            location: self.location.clone(),
            ..IntegrityReport::default()
        };
        let mut run = |name: &'static str, f: &dyn Fn() -> Result<()>| {
            report.checks.push(name);
            if let Err(e) = f() {
                report.findings.push(IntegrityFinding {
                    check: name,
                    detail: match e {
                        MemoryError::Corrupt { detail, .. } => detail,
                        other => other.to_string(),
                    },
                });
            }
        };
        run("integrity_check", &|| {
            let inner = self.lock();
            run_quick_check(&inner.conn, &self.location, "PRAGMA integrity_check")
        });
        if !self.read_only {
            run("full_text_index", &|| self.check_fts());
        }
        run("schema_version", &|| self.check_schema_version());
        run("meta", &|| self.check_meta());
        run("memories", &|| self.list(&ListOptions::all()).map(drop));
        run("memory_vectors", &|| {
            let mut inner = self.lock();
            inner.vectors = None;
            self.fresh_vectors(&mut inner).map(drop)
        });
        run("memory_tags", &|| self.check_tags());
        run("memory_changes", &|| self.check_changes());
        run("wm_entries", &|| self.check_sessions());
        run("shared_facts", &|| self.check_facts());
        run("session_state", &|| self.check_state());
        run("wm_operations", &|| self.check_operations());
        run("row_counts", &|| self.check_row_counts());
        if self.read_only {
            report.skipped.push((
                "full_text_index",
                "FTS5 checks its index with a write statement; open the store writable to run it",
            ));
        }
        report
    }

    fn corrupt(&self, detail: String) -> MemoryError {
        MemoryError::Corrupt {
            location: self.location.clone(),
            detail,
        }
    }

    /// Rows of a query of one or two text columns.
    fn strings(&self, sql: &str) -> Result<Vec<(String, String)>> {
        let inner = self.lock();
        let mut stmt = inner.conn.prepare(sql).map_err(|e| self.err(e))?;
        let cols = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, if cols > 1 { r.get(1)? } else { String::new() }))
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e));
        rows
    }

    fn check_fts(&self) -> Result<()> {
        let inner = self.lock();
        inner
            .conn
            .execute(
                "INSERT INTO memories_fts (memories_fts, rank) VALUES ('integrity-check', 1)",
                [],
            )
            .map(drop)
            .map_err(|e| {
                self.corrupt(format!(
                    "the full-text index does not match the memories: {e}"
                ))
            })
    }

    fn check_schema_version(&self) -> Result<()> {
        let inner = self.lock();
        let (rows, version): (i64, i64) = inner
            .conn
            .query_row(
                "SELECT count(*), max(version) FROM schema_version",
                [],
                |r| Ok((r.get(0)?, r.get::<_, Option<i64>>(1)?.unwrap_or(-1))),
            )
            .map_err(|e| self.err(e))?;
        if rows != 1 || version != SQLITE_SCHEMA_VERSION {
            return Err(self.corrupt(format!(
                "schema_version holds {rows} rows and version {version}, not one row of version {SQLITE_SCHEMA_VERSION}"
            )));
        }
        Ok(())
    }

    /// `meta` is written by SQL alone, so it is checked for shape: the keys a store has and
    /// nothing else, each with a value of its kind.
    fn check_meta(&self) -> Result<()> {
        let rows: BTreeMap<String, String> = self
            .strings("SELECT key, value FROM meta")?
            .into_iter()
            .collect();
        let int = |k: &str| -> Result<i64> {
            rows.get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    self.corrupt(format!("meta `{k}` is {:?}, not a count", rows.get(k)))
                })
        };
        int("commits")?;
        int("changes_pruned_through")?;
        let dims = int("dims")?;
        if usize::try_from(dims).ok() != Some(self.embedder.dims()) {
            return Err(self.corrupt(format!(
                "meta `dims` is {dims}, the embedder has {}",
                self.embedder.dims()
            )));
        }
        match rows.get("store_id") {
            Some(id) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {}
            other => return Err(self.corrupt(format!("meta `store_id` is {other:?}"))),
        }
        if rows.get("embedder").is_none_or(|e| e.is_empty()) {
            return Err(self.corrupt("meta has no `embedder`".into()));
        }
        let known = [
            "commits",
            "changes_pruned_through",
            "dims",
            "store_id",
            "embedder",
        ];
        if let Some(k) = rows.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(self.corrupt(format!("meta holds an unknown key `{k}`")));
        }
        Ok(())
    }

    /// `memory_tags` is the index of the tags each memory's checksummed row lists: exactly
    /// those pairs.
    fn check_tags(&self) -> Result<()> {
        let inner = self.lock();
        let mut want: BTreeSet<(String, i64)> = BTreeSet::new();
        {
            let mut stmt = inner
                .conn
                .prepare("SELECT key, tags FROM memories")
                .map_err(|e| self.err(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let key: i64 = r.get(0).map_err(|e| self.err(e))?;
                let tags: String = r.get(1).map_err(|e| self.err(e))?;
                for t in tags.split(' ').filter(|t| !t.is_empty()) {
                    want.insert((t.to_owned(), key));
                }
            }
        }
        let mut stmt = inner
            .conn
            .prepare("SELECT tag, key FROM memory_tags")
            .map_err(|e| self.err(e))?;
        let have: BTreeSet<(String, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e))?;
        if let Some((t, k)) = want.difference(&have).next() {
            return Err(self.corrupt(format!(
                "memory {k} lists tag `{t}` but memory_tags lacks it"
            )));
        }
        if let Some((t, k)) = have.difference(&want).next() {
            return Err(self.corrupt(format!(
                "memory_tags pairs tag `{t}` with memory {k}, whose row does not list it"
            )));
        }
        Ok(())
    }

    /// The change log (written by triggers, so without a row checksum): its numbers run
    /// without a gap from just after the pruned part to the last one the table handed out,
    /// and every key carries the check value its trigger computed.
    fn check_changes(&self) -> Result<()> {
        let inner = self.lock();
        let pruned: i64 = inner
            .conn
            .query_row(
                "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'changes_pruned_through'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let handed_out: i64 = inner
            .conn
            .query_row(
                "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memory_changes'), 0)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let mut stmt = inner
            .conn
            .prepare("SELECT seq, key, chk FROM memory_changes ORDER BY seq")
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut want = pruned + 1;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let (seq, key, chk): (i64, i64, Option<i64>) = (
                r.get(0).map_err(|e| self.err(e))?,
                r.get(1).map_err(|e| self.err(e))?,
                r.get(2).map_err(|e| self.err(e))?,
            );
            if seq != want {
                return Err(self.corrupt(format!(
                    "memory_changes holds change {seq} where change {want} was expected"
                )));
            }
            if key < 1 || chk != Some(change_check(key)) {
                return Err(self.corrupt(format!(
                    "memory_changes row {seq} (key {key}) fails its check value"
                )));
            }
            want += 1;
        }
        if want - 1 != handed_out.max(pruned) {
            return Err(self.corrupt(format!(
                "memory_changes ends at change {} but {handed_out} were handed out",
                want - 1
            )));
        }
        Ok(())
    }

    /// Every session, recorded or holding entries, read whole against its span; and the
    /// spans add up to the rows.
    fn check_sessions(&self) -> Result<()> {
        let sessions: BTreeSet<String> = self
            .strings(
                "SELECT session FROM wm_sessions UNION SELECT DISTINCT session FROM wm_entries",
            )?
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        let inner = self.lock();
        let mut total = 0u64;
        for s in &sessions {
            total += self.session_on(&inner.conn, s)?.len() as u64;
        }
        self.check_counted(
            &inner.conn,
            "wm_entries",
            "SELECT count(*) FROM wm_entries",
            None,
        )?;
        self.check_count(&inner.conn, "wm_entries", total)
    }

    fn check_facts(&self) -> Result<()> {
        let scopes = self.strings("SELECT DISTINCT scope FROM shared_facts")?;
        let inner = self.lock();
        let mut total = 0u64;
        for (s, _) in scopes {
            let scope = Scope::new(&s)
                .map_err(|_| self.corrupt(format!("invalid scope `{s}` in shared_facts")))?;
            total += self.facts_on(&inner.conn, &scope)?.len() as u64;
        }
        self.check_count(&inner.conn, "shared_facts", total)
    }

    fn check_state(&self) -> Result<()> {
        let inner = self.lock();
        let loc = self.location.as_str();
        let mut stmt = inner
            .conn
            .prepare(
                "SELECT session, name, value, version, updated_ms, checksum FROM session_state",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut per: BTreeMap<String, u64> = BTreeMap::new();
        let mut total = 0u64;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let session = raw(r, 0).map_err(|e| self.err(e))?;
            let name = raw(r, 1).map_err(|e| self.err(e))?;
            let sum = state_sum(
                session,
                name,
                raw(r, 2).map_err(|e| self.err(e))?,
                r.get(3).map_err(|e| self.err(e))?,
                r.get(4).map_err(|e| self.err(e))?,
            );
            let row = || {
                format!(
                    "({}, {})",
                    String::from_utf8_lossy(session),
                    String::from_utf8_lossy(name)
                )
            };
            verify_sum(
                loc,
                "session_state",
                &row,
                raw_opt(r, 5).map_err(|e| self.err(e))?,
                &sum,
            )?;
            *per.entry(String::from_utf8_lossy(session).into_owned())
                .or_default() += 1;
            total += 1;
        }
        drop(rows);
        drop(stmt);
        for (s, n) in &per {
            self.check_count(&inner.conn, &format!("session_state/{s}"), *n)?;
        }
        self.check_count(&inner.conn, "session_state", total)
    }

    fn check_operations(&self) -> Result<()> {
        let sessions = self.strings("SELECT DISTINCT session FROM wm_operations")?;
        let inner = self.lock();
        let mut total = 0u64;
        for (s, _) in sessions {
            total += self.operations_on(&inner.conn, &s, None)?.len() as u64;
        }
        self.check_count(&inner.conn, "wm_operations", total)
    }

    /// `row_counts` says exactly what the tables hold (groups of no rows have no row).
    fn check_row_counts(&self) -> Result<()> {
        let inner = self.lock();
        let read = |sql: &str| -> Result<BTreeMap<String, i64>> {
            let mut stmt = inner.conn.prepare(sql).map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .map_err(|e| self.err(e))?
                .filter(|r| !matches!(r, Ok((_, 0))))
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| self.err(e));
            rows
        };
        let kept = read("SELECT name, n FROM row_counts")?;
        let real = read(COUNTS_FROM_TABLES)?;
        if kept == real {
            return Ok(());
        }
        let name = kept
            .keys()
            .chain(real.keys())
            .find(|k| kept.get(*k) != real.get(*k))
            .cloned()
            .unwrap_or_default();
        Err(self.corrupt(format!(
            "row_counts says `{name}` has {:?} rows but the table holds {:?}",
            kept.get(&name),
            real.get(&name)
        )))
    }
}
