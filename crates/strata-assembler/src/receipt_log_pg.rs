//! The receipt log in PostgreSQL, for several runtimes that share one chained log (ADR-0021).
//!
//! One row per entry in `<schema>.receipt_log`, with the same fields and the same chain as the
//! file log ([`crate::receipt_log`]): `seq` counts from 0, `prev` is the previous entry's
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

use crate::receipt_log::{
    audit_entries, check_size, entry_digest, unix_ms_now, Appended, Audit, Entry, LogError,
    GENESIS, MAX_ENTRY_BYTES,
};

/// A receipt log in PostgreSQL, open for appending. Any number of runtimes may hold one on the
/// same schema.
pub struct PgReceiptLog {
    params: String,
    schema: String,
    client: Option<postgres::Client>,
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
    LogError::Database {
        schema: schema.to_owned(),
        why: format!("PostgreSQL: {e}; check that the server is reachable"),
    }
}

fn damaged(schema: &str, why: String) -> LogError {
    LogError::Database {
        schema: schema.to_owned(),
        why,
    }
}

/// One row as an [`Entry`]; values the file format could not hold are refused.
fn entry(schema: &str, row: &postgres::Row) -> Result<Entry, LogError> {
    let seq: i64 = row.get(0);
    let seq =
        u64::try_from(seq).map_err(|_| damaged(schema, format!("entry has sequence {seq}")))?;
    Ok(Entry {
        seq,
        unix_ms: row.get(1),
        prev: row.get(2),
        digest: row.get(3),
        body: row.get(4),
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

fn connect(params: &str, schema: &str) -> Result<postgres::Client, LogError> {
    postgres::Client::connect(params, postgres::NoTls).map_err(|e| db(schema, &e))
}

/// Every entry of the log in `schema`, in sequence order.
fn read_all(c: &mut postgres::Client, schema: &str) -> Result<Vec<Entry>, LogError> {
    c.query(
        &format!("SELECT seq, unix_ms, prev, digest, body FROM {schema}.receipt_log ORDER BY seq"),
        &[],
    )
    .map_err(|e| db(schema, &e))?
    .iter()
    .map(|r| entry(schema, r))
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
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE {schema}.receipt_log (
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
    pub fn append_at(&mut self, envelope: &[u8], unix_ms: i64) -> Result<Appended, LogError> {
        check_size(envelope)?;
        let schema = self.schema.clone();
        let c = self.client()?;
        let mut tx = c.transaction().map_err(|e| db(&schema, &e))?;
        tx.batch_execute(&format!(
            "LOCK TABLE {schema}.receipt_log IN EXCLUSIVE MODE"
        ))
        .map_err(|e| db(&schema, &e))?;
        let last = tx
            .query_opt(
                &format!(
                    "SELECT seq, unix_ms, prev, digest, body FROM {schema}.receipt_log \
                     ORDER BY seq DESC LIMIT 1"
                ),
                &[],
            )
            .map_err(|e| db(&schema, &e))?;
        let (seq, prev) = match last {
            None => (0, GENESIS.to_owned()),
            Some(row) => {
                let e = entry(&schema, &row)?;
                // The entry this one will follow must still be the one that was written.
                let found = entry_digest(e.seq, e.unix_ms, &e.body, &e.prev);
                if found != e.digest {
                    return Err(LogError::Edited {
                        seq: e.seq,
                        recorded: e.digest,
                        found,
                    });
                }
                (e.seq + 1, e.digest)
            }
        };
        let digest = entry_digest(seq, unix_ms, envelope, &prev);
        let seq_i = i64::try_from(seq)
            .map_err(|_| damaged(&schema, "the log is full (sequence past 2^63)".into()))?;
        tx.execute(
            &format!(
                "INSERT INTO {schema}.receipt_log (seq, unix_ms, prev, digest, body) \
                 VALUES ($1, $2, $3, $4, $5)"
            ),
            &[&seq_i, &unix_ms, &prev, &digest, &envelope],
        )
        .map_err(|e| db(&schema, &e))?;
        tx.commit().map_err(|e| db(&schema, &e))?;
        tracing::debug!(seq, head = %digest, "receipt appended to PostgreSQL");
        Ok(Appended { seq, digest })
    }

    /// Entries in the log and its head digest, as PostgreSQL holds them now.
    pub fn head(&mut self) -> Result<(u64, String), LogError> {
        let schema = self.schema.clone();
        let row = self
            .client()?
            .query_opt(
                &format!("SELECT seq, digest FROM {schema}.receipt_log ORDER BY seq DESC LIMIT 1"),
                &[],
            )
            .map_err(|e| db(&schema, &e))?;
        Ok(match row {
            None => (0, GENESIS.to_owned()),
            Some(r) => {
                let seq: i64 = r.get(0);
                (u64::try_from(seq).unwrap_or(0) + 1, r.get(1))
            }
        })
    }

    /// The schema holding the log.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

/// Audit the receipt log in `schema`: the same checks as [`crate::receipt_log::audit`] on a file
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
