//! The receipt log in PostgreSQL, for several runtimes that share one chained log (ADR-0021).
//!
//! One row per entry in `<schema>.receipt_log`, with the same fields and the same chain as the
//! file log ([`crate::receipt::log`]): `seq` counts from 0, `prev` is the previous entry's
//! digest, `digest` is the SHA-256 of `"<seq> <unix_ms> <len> <prev>\n"` and the envelope bytes.
//! An audit reads the rows in `seq` order and checks them with [`audit_entries`], so a deleted,
//! edited or re-numbered row is refused with the same typed errors as a damaged file.
//!
//! Appending is one transaction that takes the table's `EXCLUSIVE` lock (readers are not
//! blocked, other appenders wait), reads the newest entry, checks its digest, and inserts the
//! next one. Runtimes on many machines therefore extend one chain without gaps or forks, and an
//! append returns only after PostgreSQL committed it. The table is created by
//! [`PgReceiptLog::init`], an explicit one-time step; [`PgReceiptLog::open`] refuses a schema
//! without it, so a dropped table is not silently replaced by an empty log.

use strata_agentdef::TrustStore;

use crate::receipt::log::{
    audit_entries, check_size, entry_digest, unix_ms_now, Appended, Audit, Entry, LogError,
    GENESIS, MAX_ENTRY_BYTES,
};

/// A receipt log in PostgreSQL, open for appending. Any number of runtimes may hold one on the
/// same schema.
pub struct PgReceiptLog {
    params: String,
    schema: String,
    client: Option<postgres::Client>,
    /// Entries this handle knows the log holds, and the digest of the last of them
    /// ([`GENESIS`] for none): the newest entry it wrote or audited. The log must still hold
    /// that entry, unchanged, when it appends again (ADR-0021).
    known: (u64, String),
}

impl std::fmt::Debug for PgReceiptLog {
    // The parameters may hold a password: only the schema is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgReceiptLog")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

fn check_schema_name(schema: &str) -> Result<(), LogError> {
    if strata_core::sql::is_plain_identifier(schema) {
        Ok(())
    } else {
        Err(LogError::Database {
            schema: schema.to_owned(),
            why: format!(
                "the schema name must be {}",
                strata_core::sql::PLAIN_IDENTIFIER_RULE
            ),
        })
    }
}

fn db(schema: &str, e: &postgres::Error) -> LogError {
    let why = match e.as_db_error() {
        Some(d) => format!(
            "PostgreSQL refused the statement: {} (SQLSTATE {})",
            d.message(),
            d.code().code()
        ),
        None => format!("PostgreSQL: {e}; check that the server is reachable"),
    };
    LogError::Database {
        schema: schema.to_owned(),
        why,
    }
}

/// How an append attempt failed: refused (nothing to retry), before the commit was sent (safe
/// to retry), or at the commit (the entry may be in the log).
enum Failed {
    Refused(LogError),
    BeforeCommit(LogError),
    AtCommit(LogError, Appended),
}

fn damaged(schema: &str, why: String) -> LogError {
    LogError::Database {
        schema: schema.to_owned(),
        why,
    }
}

/// One row as an [`Entry`]. A row the file format could not hold (a negative sequence number,
/// a NULL or a changed column type) is refused as malformed: it was written by hand.
fn entry(row: &postgres::Row) -> Result<Entry, LogError> {
    let bad = |why: String| LogError::Malformed { offset: 0, why };
    let get_err = |e: postgres::Error| bad(format!("a receipt-log row does not read back: {e}"));
    let seq: i64 = row.try_get(0).map_err(get_err)?;
    Ok(Entry {
        seq: u64::try_from(seq).map_err(|_| bad(format!("a row has sequence number {seq}")))?,
        unix_ms: row.try_get(1).map_err(get_err)?,
        prev: row.try_get(2).map_err(get_err)?,
        digest: row.try_get(3).map_err(get_err)?,
        body: row.try_get(4).map_err(get_err)?,
        offset: 0,
    })
}

fn table_exists(c: &mut postgres::Client, schema: &str) -> Result<bool, LogError> {
    c.query_one(
        "SELECT to_regclass(format('%I.receipt_log', $1::text)) IS NOT NULL",
        &[&schema],
    )
    .and_then(|r| r.try_get(0))
    .map_err(|e| db(schema, &e))
}

/// Limits that keep one stalled runtime from holding the table lock, and so every other
/// runtime's turns, for longer than this (ADR-0021).
const SESSION_LIMITS: &str = "SET lock_timeout = '10s'; SET statement_timeout = '30s'; \
                              SET idle_in_transaction_session_timeout = '30s'";

fn connect(params: &str, schema: &str) -> Result<postgres::Client, LogError> {
    let mut config: postgres::Config = params.parse().map_err(|e| db(schema, &e))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    config.keepalives(true);
    let mut c = config
        .connect(postgres::NoTls)
        .map_err(|e| db(schema, &e))?;
    c.batch_execute(SESSION_LIMITS)
        .map_err(|e| db(schema, &e))?;
    Ok(c)
}

/// Every entry of the log in `schema`, in sequence order.
fn read_all(c: &mut postgres::Client, schema: &str) -> Result<Vec<Entry>, LogError> {
    c.query(
        &format!(
            "SELECT seq, unix_ms, prev, digest, body FROM \"{schema}\".receipt_log ORDER BY seq"
        ),
        &[],
    )
    .map_err(|e| db(schema, &e))?
    .iter()
    .map(entry)
    .collect()
}

impl PgReceiptLog {
    /// Create the receipt log table in `schema` (`params`: libpq key=value parameters or a
    /// `postgres://` URL) and open it. Refuses when the table exists, so that no script can
    /// start a second chain over the first.
    pub fn init(params: &str, schema: &str) -> Result<PgReceiptLog, LogError> {
        check_schema_name(schema)?;
        let mut c = connect(params, schema)?;
        if table_exists(&mut c, schema)? {
            return Err(damaged(
                schema,
                "a receipt log already exists here; open it instead of creating it again".into(),
            ));
        }
        c.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
             CREATE TABLE \"{schema}\".receipt_log (
                 seq bigint PRIMARY KEY CHECK (seq >= 0),
                 unix_ms bigint NOT NULL,
                 prev text NOT NULL CHECK (prev ~ '^[0-9a-f]{{64}}$'),
                 digest text NOT NULL UNIQUE CHECK (digest ~ '^[0-9a-f]{{64}}$'),
                 body bytea NOT NULL CHECK (octet_length(body) <= {MAX_ENTRY_BYTES})
             );"
        ))
        .map_err(|e| db(schema, &e))?;
        tracing::warn!(schema, "PostgreSQL receipt log created (empty)");
        Ok(PgReceiptLog {
            params: params.to_owned(),
            schema: schema.to_owned(),
            client: Some(c),
            known: (0, GENESIS.to_owned()),
        })
    }

    /// Open the receipt log in `schema`. Its chain is audited first (signatures are not
    /// checked here), so nothing is appended to a tampered log; a schema without the table is
    /// refused with [`LogError::NotInitialised`].
    pub fn open(params: &str, schema: &str) -> Result<PgReceiptLog, LogError> {
        check_schema_name(schema)?;
        let mut c = connect(params, schema)?;
        if !table_exists(&mut c, schema)? {
            return Err(LogError::NotInitialised {
                schema: schema.to_owned(),
            });
        }
        let a = audit_entries(read_all(&mut c, schema)?, None, None)?;
        tracing::info!(schema, entries = a.entries.len(), head = %a.head, "PostgreSQL receipt log open");
        Ok(PgReceiptLog {
            params: params.to_owned(),
            schema: schema.to_owned(),
            client: Some(c),
            known: (a.entries.len() as u64, a.head),
        })
    }

    fn client(&mut self) -> Result<&mut postgres::Client, LogError> {
        if self.client.as_ref().is_none_or(postgres::Client::is_closed) {
            self.client = Some(connect(&self.params, &self.schema)?);
        }
        self.client.as_mut().ok_or_else(|| LogError::Database {
            schema: self.schema.clone(),
            why: "no connection".into(),
        })
    }

    /// Append one receipt envelope; returns once PostgreSQL has committed it, with the entry's
    /// sequence number and the new head. Appends from many runtimes are serialised by the
    /// table lock, so each extends the chain the previous one left.
    pub fn append(&mut self, envelope: &[u8]) -> Result<Appended, LogError> {
        self.append_at(envelope, unix_ms_now())
    }

    /// [`PgReceiptLog::append`] with the entry time given.
    ///
    /// A connection found closed is opened again and the append tried once more. When the
    /// answer to the commit is lost, the log is read again: the entry's digest is unique, so an
    /// entry that was in fact committed is reported as appended rather than as a failure.
    pub fn append_at(&mut self, envelope: &[u8], unix_ms: i64) -> Result<Appended, LogError> {
        check_size(envelope)?;
        let first = self.try_append(envelope, unix_ms);
        let result = match first {
            Err(Failed::BeforeCommit(e))
                if self.client.as_ref().is_none_or(postgres::Client::is_closed) =>
            {
                tracing::warn!(schema = %self.schema, error = %e, "receipt log connection lost; appending again on a new one");
                self.try_append(envelope, unix_ms)
            }
            other => other,
        };
        let appended = match result {
            Ok(a) => a,
            Err(Failed::Refused(e) | Failed::BeforeCommit(e)) => return Err(e),
            Err(Failed::AtCommit(e, a)) => {
                if !self.committed(&a.digest)? {
                    return Err(e);
                }
                tracing::warn!(schema = %self.schema, seq = a.seq, "the commit's answer was lost but the entry is in the log");
                a
            }
        };
        self.known = (appended.seq + 1, appended.digest.clone());
        tracing::debug!(seq = appended.seq, head = %appended.digest, "receipt appended to PostgreSQL");
        Ok(appended)
    }

    /// True when an entry with `digest` is in the log (read on a new connection if needed).
    fn committed(&mut self, digest: &str) -> Result<bool, LogError> {
        let schema = self.schema.clone();
        self.client()?
            .query_opt(
                &format!("SELECT 1 FROM \"{schema}\".receipt_log WHERE digest = $1"),
                &[&digest],
            )
            .map(|r| r.is_some())
            .map_err(|e| db(&schema, &e))
    }

    fn try_append(&mut self, envelope: &[u8], unix_ms: i64) -> Result<Appended, Failed> {
        let schema = self.schema.clone();
        let (known_len, known_head) = self.known.clone();
        let pre = |e: postgres::Error| Failed::BeforeCommit(db(&schema, &e));
        let c = self.client().map_err(Failed::BeforeCommit)?;
        let mut tx = c.transaction().map_err(pre)?;
        tx.batch_execute(&format!(
            "LOCK TABLE \"{schema}\".receipt_log IN EXCLUSIVE MODE"
        ))
        .map_err(pre)?;
        let select =
            format!("SELECT seq, unix_ms, prev, digest, body FROM \"{schema}\".receipt_log");
        let newest = tx
            .query_opt(&format!("{select} ORDER BY seq DESC LIMIT 1"), &[])
            .map_err(pre)?
            .map(|row| entry(&row))
            .transpose()
            .map_err(Failed::Refused)?;
        // The newest entry this handle wrote or audited must still be there, unchanged: other
        // runtimes may have appended after it, nobody may have removed or replaced it.
        let newest_len = newest.as_ref().map_or(0, |e| e.seq + 1);
        if known_len > 0 {
            let mismatch = |found: String| {
                Failed::Refused(LogError::HeadMismatch {
                    expected: known_head.clone(),
                    found,
                    entries: newest_len,
                })
            };
            if newest_len < known_len {
                let found = newest
                    .as_ref()
                    .map_or(GENESIS.to_owned(), |e| e.digest.clone());
                return Err(mismatch(found));
            }
            let at = i64::try_from(known_len - 1).unwrap_or(i64::MAX);
            let row = tx
                .query_opt(&format!("{select} WHERE seq = $1"), &[&at])
                .map_err(pre)?;
            match row
                .map(|r| entry(&r))
                .transpose()
                .map_err(Failed::Refused)?
            {
                Some(e) if e.digest == known_head => {}
                Some(e) => return Err(mismatch(e.digest)),
                None => return Err(mismatch(GENESIS.to_owned())),
            }
        }
        let (seq, prev) = match newest {
            None => (0, GENESIS.to_owned()),
            Some(e) => {
                // The entry this one will follow must still be the one that was written.
                let found = entry_digest(e.seq, e.unix_ms, &e.body, &e.prev);
                if found != e.digest {
                    return Err(Failed::Refused(LogError::Edited {
                        seq: e.seq,
                        recorded: e.digest,
                        found,
                    }));
                }
                (e.seq + 1, e.digest)
            }
        };
        let digest = entry_digest(seq, unix_ms, envelope, &prev);
        let seq_i = i64::try_from(seq).map_err(|_| {
            Failed::Refused(damaged(
                &schema,
                "the log is full (sequence past 2^63)".into(),
            ))
        })?;
        tx.execute(
            &format!(
                "INSERT INTO \"{schema}\".receipt_log (seq, unix_ms, prev, digest, body) \
                 VALUES ($1, $2, $3, $4, $5)"
            ),
            &[&seq_i, &unix_ms, &prev, &digest, &envelope],
        )
        .map_err(pre)?;
        let appended = Appended { seq, digest };
        match tx.commit() {
            Ok(()) => Ok(appended),
            Err(e) => Err(Failed::AtCommit(db(&schema, &e), appended)),
        }
    }

    /// Entries in the log and its head digest, as PostgreSQL holds them now.
    pub fn head(&mut self) -> Result<(u64, String), LogError> {
        let schema = self.schema.clone();
        let row = self
            .client()?
            .query_opt(
                &format!(
                    "SELECT seq, digest FROM \"{schema}\".receipt_log ORDER BY seq DESC LIMIT 1"
                ),
                &[],
            )
            .map_err(|e| db(&schema, &e))?;
        Ok(match row {
            None => (0, GENESIS.to_owned()),
            Some(r) => {
                let seq: i64 = r.try_get(0).map_err(|e| db(&schema, &e))?;
                let seq = u64::try_from(seq).map_err(|_| LogError::Malformed {
                    offset: 0,
                    why: format!("a row has sequence number {seq}"),
                })?;
                (seq + 1, r.try_get(1).map_err(|e| db(&schema, &e))?)
            }
        })
    }

    /// The schema holding the log.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

/// Audit the receipt log in `schema`: the same checks as [`crate::receipt::log::audit`] on a file
/// (ADR-0021).
pub fn audit(
    params: &str,
    schema: &str,
    trust: Option<&TrustStore>,
    expected_head: Option<&str>,
) -> Result<Audit, LogError> {
    check_schema_name(schema)?;
    let mut c = connect(params, schema)?;
    if !table_exists(&mut c, schema)? {
        return Err(LogError::NotInitialised {
            schema: schema.to_owned(),
        });
    }
    audit_entries(read_all(&mut c, schema)?, trust, expected_head)
}
