//! The PostgreSQL adapter: working memory, long-term memory and shared context in one database
//! schema that many runtimes share (ADR-0012).
//!
//! Long-term memory keeps vectors as `real[]` at unit length (so cosine similarity is a dot
//! product) and a generated `tsvector` column with a GIN index. No extension is needed
//! (ADR-0019): next to each vector a narrow table, `memory_codes`, holds its int8 code (256
//! bytes for 256 dimensions) and the transaction that wrote it. Each store handle keeps the
//! codes and an in-process BM25 index of the texts (ADR-0029) in memory, loaded at its first
//! search and brought up to date at every search from the rows written (and the memories
//! deleted) by transactions its last snapshot did not see. The lexical ranking is BM25 as
//! SQLite FTS5 computes it; the vector ranking scores the codes in Rust, keeps a pool of the
//! best, and ranks the pool exactly by the real vectors read back by key. Scoring every
//! `real[]` in SQL took 6-8 s per query at 100,000 memories, and ternary codes scanned in SQL
//! with `bit_count` reached only 0.31 recall@10 (see ADR-0019).
//!
//! The schema is versioned in `<schema>.schema_version` and migrated forward in one
//! transaction under an advisory lock, so runtimes starting together do not race. A lost
//! connection is reported as [`MemoryError::ConnectionLost`]; the next call reconnects.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use postgres::fallible_iterator::FallibleIterator as _;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls};
use strata_core::{Content, Role};

use crate::embed::{embed_checked, Embedder, HashEmbedder};
use crate::error::{MemoryError, Result};
use crate::lexical::LexicalIndex;
use crate::long_term::{
    check_tags, dot, fuse, prepare_batch, top_by_similarity, ListOptions, LongTermMemory, MemoryId,
    MemoryRecord, NewMemory, SearchHit, SearchMode, SearchOptions,
};
use crate::options::StoreOptions;
use crate::quant::{top_positions, CodeCache};
use crate::shared::{check_fact_key, Fact, Scope, SharedContext, SharedContextWriter};
use crate::text::{query_terms, MAX_QUERY_TERMS};
use crate::working::{
    check_batch, check_batch_links, check_exchange, check_operation_key, check_page, check_span,
    check_tail, confirm_no_call, inconsistent, operation_live, Applied, Batch, CallState, Entry,
    NewEntry, Operation, SessionSpan, SpanPart, WorkingMemory, OPERATION_TTL_MS,
};

/// The schema version this build writes.
pub const PG_SCHEMA_VERSION: i64 = 6;

/// The default PostgreSQL schema (namespace) holding the tables.
pub const DEFAULT_PG_SCHEMA: &str = "strata";

/// Forward migrations: `(version reached, SQL with {s} for the quoted schema name)`.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        r"
CREATE TABLE {s}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE {s}.wm_entries (
    seq     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session text NOT NULL,
    role    text NOT NULL CHECK (role IN ('user', 'assistant', 'tool_call', 'tool_result')),
    call_id text,
    content text NOT NULL,
    at_ms   bigint NOT NULL
);
CREATE INDEX wm_entries_session ON {s}.wm_entries (session, seq);
CREATE UNIQUE INDEX wm_entries_call ON {s}.wm_entries (session, call_id, role)
    WHERE call_id IS NOT NULL;
CREATE TABLE {s}.memories (
    key        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    agent_id   text NOT NULL,
    content    text NOT NULL,
    tags       text[] NOT NULL,
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    embedding  real[] NOT NULL,
    tsv        tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED
);
CREATE INDEX memories_tsv ON {s}.memories USING gin (tsv);
CREATE INDEX memories_tags ON {s}.memories USING gin (tags);
CREATE INDEX memories_agent ON {s}.memories (agent_id, created_ms);
CREATE INDEX memories_created ON {s}.memories (created_ms, id);
CREATE TABLE {s}.shared_facts (
    scope      text NOT NULL,
    key        text NOT NULL,
    value      text NOT NULL,
    updated_ms bigint NOT NULL,
    PRIMARY KEY (scope, key)
);
",
    ),
    // Version 2 (ADR-0019): quantised codes for the vector ranking; `fill_codes` computes
    // them for rows of version 1 in the same transaction.
    (
        2,
        r"
CREATE TABLE {s}.memory_codes (
    key   bigint PRIMARY KEY REFERENCES {s}.memories (key) ON DELETE CASCADE,
    scale real NOT NULL,
    code  bytea NOT NULL,
    xid   xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX memory_codes_xid ON {s}.memory_codes (xid);
CREATE TABLE {s}.memory_deletions (
    key bigint NOT NULL,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX memory_deletions_xid ON {s}.memory_deletions (xid);
CREATE FUNCTION {s}.note_memory_deletion() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {s}.memory_deletions (key) VALUES (OLD.key);
    RETURN OLD;
END
$fn$;
CREATE TRIGGER memories_deleted AFTER DELETE ON {s}.memories
    FOR EACH ROW EXECUTE FUNCTION {s}.note_memory_deletion();
",
    ),
    // Version 3: versioned per-session documents (the session's goals).
    (
        3,
        r"
CREATE TABLE {s}.session_state (
    session    text NOT NULL,
    name       text NOT NULL,
    value      text NOT NULL,
    version    bigint NOT NULL,
    updated_ms bigint NOT NULL,
    PRIMARY KEY (session, name)
);
",
    ),
    // Version 4 (ADR-0031): records of retry-safe operations, kept with their session.
    (
        4,
        r"
CREATE TABLE {s}.wm_operations (
    session     text NOT NULL,
    key         text NOT NULL,
    fingerprint text NOT NULL,
    answer      text NOT NULL,
    at_ms       bigint NOT NULL,
    PRIMARY KEY (session, key)
);
CREATE INDEX wm_operations_at ON {s}.wm_operations (at_ms);
",
    ),
    // Version 5: an opaque metadata object per working-memory entry, kept as text (not
    // jsonb, which would rewrite it) so it reads back byte for byte; NULL for older rows.
    (
        5,
        r"
ALTER TABLE {s}.wm_entries ADD COLUMN meta text;
",
    ),
    // Version 6 (ADR-0036): each entry's number within its session, and each session's first
    // live and next number, so a read that misses an entry sees the gap.
    (
        6,
        r"
ALTER TABLE {s}.wm_entries ADD COLUMN session_seq bigint;
UPDATE {s}.wm_entries e SET session_seq = n.rn
    FROM (SELECT seq, row_number() OVER (PARTITION BY session ORDER BY seq) AS rn
          FROM {s}.wm_entries) n
    WHERE e.seq = n.seq;
ALTER TABLE {s}.wm_entries ALTER COLUMN session_seq SET NOT NULL;
CREATE UNIQUE INDEX wm_entries_session_seq ON {s}.wm_entries (session, session_seq);
CREATE TABLE {s}.wm_sessions (
    session   text PRIMARY KEY,
    first_seq bigint NOT NULL,
    next_seq  bigint NOT NULL,
    CHECK (first_seq >= 1 AND first_seq <= next_seq)
);
INSERT INTO {s}.wm_sessions (session, first_seq, next_seq)
    SELECT session, 1, count(*) + 1 FROM {s}.wm_entries GROUP BY session;
",
    ),
];

/// Working memory, long-term memory and shared context in a PostgreSQL schema.
pub struct PgStore {
    params: String,
    location: String,
    schema: String,
    name: String,
    options: StoreOptions,
    embedder: Arc<dyn Embedder>,
    client: Mutex<Option<Client>>,
    /// The int8 codes of the store's memories and the snapshot `xmin` they reflect.
    codes: Mutex<Option<PgCache>>,
}

/// What one handle keeps of the store's memories in process (ADR-0019, ADR-0029).
#[derive(Debug, Default)]
struct PgCache {
    /// The int8 codes of the vectors.
    codes: CodeCache,
    /// The texts, for the lexical ranking.
    lexical: LexicalIndex,
    /// The `xmin` of the snapshot of the last refresh.
    horizon: String,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.location)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Classify a client error: a closed socket, an I/O failure, a connection exception (class
/// 08) or an operator intervention such as a shutdown (class 57P) means the connection is lost.
fn pg_err(location: &str, e: postgres::Error) -> MemoryError {
    let code = e.code().map(|c| c.code().to_owned());
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    let lost = e.is_closed()
        || io
        || code
            .as_deref()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P"));
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    if lost {
        MemoryError::ConnectionLost {
            location: location.to_owned(),
            detail,
        }
    } else {
        MemoryError::Database {
            location: location.to_owned(),
            detail,
        }
    }
}

/// Describe the server without the password.
fn describe(params: &str, schema: &str) -> String {
    match params.parse::<postgres::Config>() {
        Ok(c) => {
            let host = c
                .get_hosts()
                .first()
                .map(|h| match h {
                    postgres::config::Host::Tcp(s) => s.clone(),
                    postgres::config::Host::Unix(p) => p.display().to_string(),
                })
                .unwrap_or_else(|| "localhost".into());
            let port = c.get_ports().first().copied().unwrap_or(5432);
            format!(
                "postgres://{}@{host}:{port}/{} (schema {schema})",
                c.get_user().unwrap_or("?"),
                c.get_dbname().unwrap_or("?"),
            )
        }
        Err(_) => format!("postgres (unparsable connection parameters, schema {schema})"),
    }
}

fn check_schema_name(schema: &str) -> Result<()> {
    if strata_core::sql::is_plain_identifier(schema) {
        Ok(())
    } else {
        Err(MemoryError::invalid(
            "PostgreSQL schema name",
            format!(
                "`{schema}` must be {}",
                strata_core::sql::PLAIN_IDENTIFIER_RULE
            ),
        ))
    }
}

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

impl PgStore {
    /// Connect with libpq-style parameters (`host=... port=... user=... dbname=...` or a
    /// `postgres://` URL), the default schema, the built-in embedder and default options.
    pub fn connect(params: &str) -> Result<PgStore> {
        PgStore::connect_with(
            params,
            DEFAULT_PG_SCHEMA,
            Arc::new(HashEmbedder::default()),
            StoreOptions::default(),
        )
    }

    /// Connect, create or migrate the tables in `schema`, and check the embedder's dimension
    /// against the store's.
    pub fn connect_with(
        params: &str,
        schema: &str,
        embedder: Arc<dyn Embedder>,
        options: StoreOptions,
    ) -> Result<PgStore> {
        check_schema_name(schema)?;
        crate::embed::check_dims(embedder.as_ref())?;
        let location = describe(params, schema);
        let store = PgStore {
            params: params.to_owned(),
            name: options.name_or(|| format!("postgres:{schema}")),
            location,
            schema: schema.to_owned(),
            options,
            embedder,
            client: Mutex::new(None),
            codes: Mutex::new(None),
        };
        store.with_client(|c| store.migrate(c))?;
        store.with_client(|c| store.check_embedder(c))?;
        Ok(store)
    }

    fn s(&self) -> String {
        format!("\"{}\"", self.schema)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Client>> {
        self.client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `f` on a live connection, connecting first when there is none. A lost connection
    /// is dropped so the next call connects again.
    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut guard = self.lock();
        if guard.as_ref().is_none_or(Client::is_closed) {
            let client = Client::connect(&self.params, NoTls).map_err(|e| {
                let mut err = pg_err(&self.location, e);
                if let MemoryError::Database { location, detail } = err {
                    // Failing to connect at all is a connection problem, whatever the cause.
                    err = MemoryError::ConnectionLost { location, detail };
                }
                err
            })?;
            *guard = Some(client);
        }
        let client = guard.as_mut().ok_or_else(|| MemoryError::ConnectionLost {
            location: self.location.clone(),
            detail: "no connection".into(),
        })?;
        let out = f(client);
        if matches!(out, Err(MemoryError::ConnectionLost { .. })) {
            *guard = None;
        }
        out
    }

    fn err(&self, e: postgres::Error) -> MemoryError {
        pg_err(&self.location, e)
    }

    fn migrate(&self, c: &mut Client) -> Result<()> {
        let s = self.s();
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('strata-memory:' || $1))",
            &[&self.schema],
        )
        .map_err(|e| self.err(e))?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {s};
             CREATE TABLE IF NOT EXISTS {s}.schema_version (
                 id integer PRIMARY KEY CHECK (id = 1),
                 version bigint NOT NULL
             );
             INSERT INTO {s}.schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;"
        ))
        .map_err(|e| self.err(e))?;
        let found: i64 = tx
            .query_one(
                &format!("SELECT version FROM {s}.schema_version WHERE id = 1"),
                &[],
            )
            .map_err(|e| self.err(e))?
            .get(0);
        if !(0..=PG_SCHEMA_VERSION).contains(&found) {
            return Err(MemoryError::SchemaVersionMismatch {
                location: self.location.clone(),
                found,
                expected: PG_SCHEMA_VERSION,
            });
        }
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
            tracing::info!(store = %self.location, version, "migrating PostgreSQL memory store");
            tx.batch_execute(&sql.replace("{s}", &s))
                .map_err(|e| self.err(e))?;
            if *version == 2 {
                self.fill_codes(&mut tx)?;
            }
            tx.execute(
                &format!("UPDATE {s}.schema_version SET version = $1 WHERE id = 1"),
                &[version],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Compute the codes of memories stored before schema version 2.
    fn fill_codes(&self, tx: &mut postgres::Transaction<'_>) -> Result<()> {
        let s = self.s();
        let rows = tx
            .query(&format!("SELECT key, embedding FROM {s}.memories"), &[])
            .map_err(|e| self.err(e))?;
        let stmt = tx
            .prepare(&format!(
                "INSERT INTO {s}.memory_codes (key, scale, code) VALUES ($1, $2, $3)"
            ))
            .map_err(|e| self.err(e))?;
        for r in rows {
            let key: i64 = r.get(0);
            let v: Vec<f32> = r.get(1);
            let (code, scale) = crate::quant::code_bytes(&v);
            tx.execute(&stmt, &[&key, &scale, &code])
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Bring this handle's code cache up to the snapshot of `tx` (ADR-0019): load everything
    /// the first time; afterwards read only the codes written, and the memories deleted, by
    /// transactions at or after the oldest one the previous snapshot could not see. Reading a
    /// few rows twice is harmless; missing one is impossible, since every transaction invisible
    /// to a snapshot has an id at or above that snapshot's `xmin`.
    fn refresh_codes(
        &self,
        tx: &mut postgres::Transaction<'_>,
        slot: &mut Option<PgCache>,
    ) -> Result<()> {
        let s = self.s();
        let dims = self.embedder.dims();
        let horizon: String = tx
            .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
            .map_err(|e| self.err(e))?
            .get(0);
        let columns = format!(
            "SELECT m.id, c.key, c.scale, c.code, m.content FROM {s}.memory_codes c JOIN {s}.memories m ON m.key = c.key"
        );
        let since: Option<String> = slot.as_ref().map(|c| c.horizon.clone());
        let deleted: Vec<i64> = match &since {
            None => Vec::new(),
            Some(since) => tx
                .query(
                    &format!("SELECT key FROM {s}.memory_deletions WHERE xid >= $1::text::xid8"),
                    &[since],
                )
                .map_err(|e| self.err(e))?
                .iter()
                .map(|r| r.get(0))
                .collect(),
        };
        let mut cache = slot.take().unwrap_or_default();
        for k in &deleted {
            cache.codes.remove(dims, *k);
            cache.lexical.remove(*k);
        }
        // Rows are streamed: a first load of a million memories never holds them all at once.
        let mut rows = match &since {
            None => tx.query_raw(&columns, std::iter::empty::<&str>()),
            Some(since) => tx.query_raw(
                &format!("{columns} WHERE c.xid >= $1::text::xid8"),
                std::iter::once(since),
            ),
        }
        .map_err(|e| self.err(e))?;
        let mut read = 0usize;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let id = self.id_of(&r)?;
            let key: i64 = r.get(1);
            let scale: f32 = r.get(2);
            let code: &[u8] = r.get(3);
            if code.len() != dims {
                return Err(MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "the code of memory `{id}` has {} bytes, not {dims}",
                        code.len()
                    ),
                });
            }
            cache.codes.upsert_code(dims, key, &id, code, scale);
            cache.lexical.upsert(key, r.get::<_, &str>(4));
            read += 1;
        }
        tracing::debug!(store = %self.name, read, deleted = deleted.len(), total = cache.codes.len(), "refreshed code cache");
        cache.horizon = horizon;
        *slot = Some(cache);
        Ok(())
    }

    fn check_embedder(&self, c: &mut Client) -> Result<()> {
        let s = self.s();
        let dims = i64::try_from(self.embedder.dims())
            .unwrap_or(i64::MAX)
            .to_string();
        c.execute(
            &format!(
                "INSERT INTO {s}.meta (key, value) VALUES ('dims', $1), ('embedder', $2) ON CONFLICT (key) DO NOTHING"
            ),
            &[&dims, &self.embedder.name()],
        )
        .map_err(|e| self.err(e))?;
        let rows = c
            .query(
                &format!("SELECT key, value FROM {s}.meta WHERE key IN ('dims', 'embedder')"),
                &[],
            )
            .map_err(|e| self.err(e))?;
        let get = |k: &str| {
            rows.iter()
                .find(|r| r.get::<_, &str>(0) == k)
                .map(|r| r.get::<_, String>(1))
                .unwrap_or_default()
        };
        let stored: usize = get("dims").parse().map_err(|_| MemoryError::Corrupt {
            location: self.location.clone(),
            detail: format!("meta.dims is `{}`, not a number", get("dims")),
        })?;
        crate::embed::check_recorded(&self.location, &get("embedder"), stored, &*self.embedder)
    }

    fn record(&self, row: &postgres::Row) -> Result<MemoryRecord> {
        let id: String = row.get("id");
        let tags: Vec<String> = row.get("tags");
        Ok(MemoryRecord {
            id: MemoryId::new(&id).map_err(|_| MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!("invalid memory id `{id}` in memories"),
            })?,
            agent_id: Arc::from(row.get::<_, String>("agent_id")),
            content: Content::from(row.get::<_, String>("content")),
            tags: tags.into_iter().map(Arc::from).collect(),
            created_ms: row.get("created_ms"),
            updated_ms: row.get("updated_ms"),
        })
    }
}

/// A `WHERE` fragment restricting `m` to an agent and to all `tags`, numbering parameters from
/// `first`; the values are appended to `params`.
fn filter_sql(
    agent: Option<&str>,
    tags: &[Arc<str>],
    first: usize,
    params: &mut Vec<Box<dyn ToSql + Sync>>,
) -> String {
    let mut sql = String::new();
    let mut n = first;
    if let Some(a) = agent {
        let _ = write!(sql, " AND m.agent_id = ${n}");
        params.push(Box::new(a.to_owned()));
        n += 1;
    }
    if !tags.is_empty() {
        let _ = write!(sql, " AND m.tags @> ${n}::text[]");
        params.push(Box::new(
            tags.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        ));
    }
    sql
}

fn refs(params: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|b| b.as_ref()).collect()
}

const RECORD_COLUMNS: &str = "m.id, m.agent_id, m.content, m.tags, m.created_ms, m.updated_ms";

impl PgStore {
    /// Entries from rows with the columns of `entries`.
    fn entries_of(&self, session: &str, rows: &[postgres::Row]) -> Result<Vec<Entry>> {
        let session: Arc<str> = Arc::from(session);
        rows.iter()
            .map(|r| {
                Ok(Entry {
                    seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                    session: session.clone(),
                    session_seq: u64::try_from(r.get::<_, i64>(6)).unwrap_or(0),
                    role: role_from(&self.location, r.get(1))?,
                    call_id: r.get::<_, Option<String>>(2).map(Arc::from),
                    content: Content::from(r.get::<_, String>(3)),
                    at_ms: r.get(4),
                    meta: r.get::<_, Option<String>>(5).map(Arc::from),
                })
            })
            .collect()
    }
}

impl PgStore {
    /// The span of `session` from `wm_sessions` (ADR-0036). A session without a row must have
    /// no entries.
    fn span_pg(&self, c: &mut impl GenericClient, session: &str) -> Result<SessionSpan> {
        let s = self.s();
        let row = c
            .query_opt(
                &format!("SELECT first_seq, next_seq FROM {s}.wm_sessions WHERE session = $1"),
                &[&session],
            )
            .map_err(|e| self.err(e))?;
        let Some(row) = row else {
            let orphans: bool = c
                .query_one(
                    &format!("SELECT EXISTS (SELECT 1 FROM {s}.wm_entries WHERE session = $1)"),
                    &[&session],
                )
                .map_err(|e| self.err(e))?
                .get(0);
            if orphans {
                return Err(MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!("session `{session}` has entries but no wm_sessions row"),
                });
            }
            return Ok(SessionSpan::NEW);
        };
        let (first, next): (i64, i64) = (row.get(0), row.get(1));
        match (u64::try_from(first), u64::try_from(next)) {
            (Ok(first), Ok(next)) if first >= 1 && first <= next => Ok(SessionSpan { first, next }),
            _ => Err(MemoryError::Corrupt {
                location: self.location.clone(),
                detail: format!("wm_sessions row `{session}` holds the span {first}..{next}"),
            }),
        }
    }

    /// The newest entry of a session with span `span`, found by its number.
    fn newest_pg(
        &self,
        c: &mut impl GenericClient,
        session: &str,
        span: SessionSpan,
    ) -> Result<Option<Entry>> {
        if span.len() == 0 {
            return Ok(None);
        }
        let s = self.s();
        let number = i64::try_from(span.next - 1).unwrap_or(i64::MAX);
        let rows = c
            .query(
                &format!(
                    "SELECT {PG_ENTRY_COLUMNS} FROM {s}.wm_entries WHERE session = $1 AND session_seq = $2"
                ),
                &[&session, &number],
            )
            .map_err(|e| self.err(e))?;
        let found = self.entries_of(session, &rows)?;
        check_span(&self.location, session, span, &found, SpanPart::Newest)?;
        Ok(found.into_iter().next())
    }

    /// Every entry of `session`, checked whole against its span.
    fn session_pg(&self, c: &mut impl GenericClient, session: &str) -> Result<Vec<Entry>> {
        let s = self.s();
        let span = self.span_pg(c, session)?;
        let rows = c
            .query(
                &format!(
                    "SELECT {PG_ENTRY_COLUMNS} FROM {s}.wm_entries WHERE session = $1 ORDER BY seq"
                ),
                &[&session],
            )
            .map_err(|e| self.err(e))?;
        let all = self.entries_of(session, &rows)?;
        check_span(&self.location, session, span, &all, SpanPart::Whole)?;
        Ok(all)
    }

    /// A read-only transaction that sees one snapshot.
    fn snapshot<'c>(&self, c: &'c mut Client) -> Result<postgres::Transaction<'c>> {
        c.build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(|e| self.err(e))
    }
}

impl PgStore {
    /// Refuse a batch whose operation `key` is already recorded for `session` and still live
    /// at `now` (ADR-0031).
    fn check_operation_free_pg(
        &self,
        tx: &mut impl GenericClient,
        session: &str,
        key: &str,
        now: i64,
    ) -> Result<()> {
        let s = self.s();
        let found: Option<i64> = tx
            .query_opt(
                &format!("SELECT at_ms FROM {s}.wm_operations WHERE session = $1 AND key = $2"),
                &[&session, &key],
            )
            .map_err(|e| self.err(e))?
            .map(|r| r.get(0));
        if found.is_some_and(|at| operation_live(at, now)) {
            return Err(MemoryError::OperationExists {
                session: session.to_owned(),
                key: key.to_owned(),
            });
        }
        Ok(())
    }

    /// Check the tool calls and results of `batch` against those `session` holds (none, when
    /// the batch clears it first).
    fn check_links_pg(
        &self,
        tx: &mut impl GenericClient,
        session: &str,
        batch: &Batch,
    ) -> Result<()> {
        let s = self.s();
        let links = format!("SELECT role FROM {s}.wm_entries WHERE session = $1 AND call_id = $2");
        check_batch_links(session, &batch.entries, |id| {
            let mut state = CallState::default();
            if batch.clear {
                return Ok(state);
            }
            for row in tx
                .query(&links, &[&session, &id])
                .map_err(|e| self.err(e))?
            {
                match row.get::<_, &str>(0) {
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
    fn clear_pg(
        &self,
        tx: &mut impl GenericClient,
        session: &str,
        span: SessionSpan,
    ) -> Result<usize> {
        let s = self.s();
        let n = tx
            .execute(
                &format!("DELETE FROM {s}.wm_entries WHERE session = $1"),
                &[&session],
            )
            .map_err(|e| self.err(e))?;
        if n != span.len() {
            return Err(inconsistent(
                &self.location,
                session,
                &format!(
                    "a clear found {n} entries where the session holds {}",
                    span.len()
                ),
            ));
        }
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Insert `entries` into `session`, numbered from `next` and stamped `now`: the entries as
    /// stored, and the number the entry after them gets.
    fn insert_entries_pg(
        &self,
        tx: &mut impl GenericClient,
        session: &str,
        entries: Vec<NewEntry>,
        mut next: u64,
        now: i64,
    ) -> Result<(Vec<Entry>, u64)> {
        let s = self.s();
        let insert = format!(
            "INSERT INTO {s}.wm_entries (session, role, call_id, content, at_ms, meta, session_seq) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq"
        );
        let key: Arc<str> = Arc::from(session);
        let mut stored = Vec::with_capacity(entries.len());
        for entry in entries {
            let number = i64::try_from(next).unwrap_or(i64::MAX);
            let seq: i64 = tx
                .query_one(
                    &insert,
                    &[
                        &session,
                        &entry.role.name(),
                        &entry.call_id,
                        &entry.content,
                        &now,
                        &entry.meta,
                        &number,
                    ],
                )
                .map_err(|e| self.err(e))?
                .get(0);
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

    /// Record that `session` now spans the numbers `first..next` (ADR-0036).
    fn record_span_pg(
        &self,
        tx: &mut impl GenericClient,
        session: &str,
        first: u64,
        next: u64,
    ) -> Result<()> {
        let s = self.s();
        let (f, n) = (
            i64::try_from(first).unwrap_or(i64::MAX),
            i64::try_from(next).unwrap_or(i64::MAX),
        );
        tx.execute(
            &format!(
                "INSERT INTO {s}.wm_sessions (session, first_seq, next_seq) VALUES ($1, $2, $3) \
                 ON CONFLICT (session) DO UPDATE SET first_seq = excluded.first_seq, next_seq = excluded.next_seq"
            ),
            &[&session, &f, &n],
        )
        .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Record the operation `op` of `session` at `now`, after deleting the operations that
    /// are no longer live.
    fn record_operation_pg(
        &self,
        tx: &mut impl GenericClient,
        session: &str,
        op: &Operation,
        now: i64,
    ) -> Result<()> {
        let s = self.s();
        tx.execute(
            &format!("DELETE FROM {s}.wm_operations WHERE at_ms <= $1"),
            &[&now.saturating_sub(OPERATION_TTL_MS)],
        )
        .map_err(|e| self.err(e))?;
        tx.execute(
            &format!(
                "INSERT INTO {s}.wm_operations (session, key, fingerprint, answer, at_ms) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session, key) DO UPDATE SET \
                 fingerprint = excluded.fingerprint, answer = excluded.answer, at_ms = excluded.at_ms"
            ),
            &[&session, &op.key, &op.fingerprint, &op.answer, &now],
        )
        .map_err(|e| self.err(e))?;
        Ok(())
    }
}

/// The columns every read of entries selects, in the order `entries_of` reads them.
const PG_ENTRY_COLUMNS: &str = "seq, role, call_id, content, at_ms, meta, session_seq";

impl WorkingMemory for PgStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn apply(&self, session: &str, batch: Batch) -> Result<Applied> {
        check_batch(&self.options, session, &batch)?;
        let now = self.options.now_ms();
        self.with_client(|c| {
            let mut tx = c.transaction().map_err(|e| self.err(e))?;
            // Writers of one session take turns, so the tail read below stays the tail until
            // this transaction ends (ADR-0031); other sessions are not held up.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('strata-session:' || $1 || ':' || $2))",
                &[&self.schema, &session],
            )
            .map_err(|e| self.err(e))?;
            let span = self.span_pg(&mut tx, session)?;
            let last = self.newest_pg(&mut tx, session, span)?.map(|e| e.seq);
            check_tail(session, batch.tail, last)?;
            if let Some(op) = &batch.operation {
                self.check_operation_free_pg(&mut tx, session, &op.key, now)?;
            }
            self.check_links_pg(&mut tx, session, &batch)?;
            let mut applied = Applied::default();
            let mut first = span.first;
            if batch.clear {
                applied.cleared = self.clear_pg(&mut tx, session, span)?;
                first = span.next;
            }
            let (entries, next) =
                self.insert_entries_pg(&mut tx, session, batch.entries, span.next, now)?;
            applied.entries = entries;
            if (first, next) != (span.first, span.next) {
                self.record_span_pg(&mut tx, session, first, next)?;
            }
            if let Some(op) = &batch.operation {
                self.record_operation_pg(&mut tx, session, op, now)?;
            }
            let remove = format!(
                "DELETE FROM {}.session_state WHERE session = $1 AND name = $2",
                self.s()
            );
            for name in &batch.remove_state {
                tx.execute(&remove, &[&session, &name.as_str()])
                    .map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))?;
            Ok(applied)
        })
    }

    fn operation(&self, session: &str, key: &str) -> Result<Option<Operation>> {
        crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
        check_operation_key(key)?;
        let s = self.s();
        let now = self.options.now_ms();
        self.with_client(|c| {
            c.query_opt(
                &format!(
                    "SELECT fingerprint, answer, at_ms FROM {s}.wm_operations WHERE session = $1 AND key = $2"
                ),
                &[&session, &key],
            )
            .map_err(|e| self.err(e))
        })
        .map(|row| {
            row.map(|r| Operation {
                key: key.to_owned(),
                fingerprint: r.get(0),
                answer: r.get(1),
                at_ms: r.get(2),
            })
            .filter(|o| operation_live(o.at_ms, now))
        })
    }

    fn last_seq(&self, session: &str) -> Result<Option<u64>> {
        crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
        self.with_client(|c| {
            let mut tx = self.snapshot(c)?;
            let span = self.span_pg(&mut tx, session)?;
            let newest = self.newest_pg(&mut tx, session, span)?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(newest.map(|e| e.seq))
        })
    }

    fn entries(&self, session: &str) -> Result<Vec<Entry>> {
        crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
        self.with_client(|c| {
            let mut tx = self.snapshot(c)?;
            let all = self.session_pg(&mut tx, session)?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(all)
        })
    }

    fn has_session(&self, session: &str) -> Result<bool> {
        crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
        self.with_client(|c| Ok(self.span_pg(c, session)?.len() > 0))
    }

    fn current_exchange(&self, session: &str) -> Result<Vec<Entry>> {
        crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
        // The inner query walks the (session, seq) index backwards to the newest user entry; a
        // session without one compares with NULL and selects nothing.
        let s = self.s();
        let sql = format!(
            "SELECT {PG_ENTRY_COLUMNS} FROM {s}.wm_entries WHERE session = $1 \
             AND seq >= (SELECT seq FROM {s}.wm_entries WHERE session = $1 AND role = 'user' \
             ORDER BY seq DESC LIMIT 1) ORDER BY seq"
        );
        self.with_client(|c| {
            let mut tx = self.snapshot(c)?;
            let span = self.span_pg(&mut tx, session)?;
            let rows = tx.query(&sql, &[&session]).map_err(|e| self.err(e))?;
            let found = self.entries_of(session, &rows)?;
            check_exchange(&self.location, session, span, &found, || {
                self.session_pg(&mut tx, session)
            })?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(found)
        })
    }

    fn recent_within(
        &self,
        session: &str,
        token_budget: usize,
        tokenizer: &dyn strata_core::Tokenizer,
    ) -> Result<Vec<Entry>> {
        crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
        let s = self.s();
        let page = format!(
            "SELECT {PG_ENTRY_COLUMNS} FROM {s}.wm_entries \
             WHERE session = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
        );
        let call = format!(
            "SELECT EXISTS (SELECT 1 FROM {s}.wm_entries WHERE session = $1 \
             AND call_id = $2 AND role = 'tool_call')"
        );
        self.with_client(|c| {
            // One read-only snapshot over every page and lookup, whatever other runtimes
            // append or clear meanwhile.
            let mut tx = self.snapshot(c)?;
            let span = self.span_pg(&mut tx, session)?;
            let expect = std::cell::Cell::new(span.next.saturating_sub(1));
            let tx = std::cell::RefCell::new(tx);
            let chosen = crate::working::select_recent_paged(
                token_budget,
                tokenizer,
                crate::working::FIRST_PAGE,
                |before, limit| {
                    let rows = tx
                        .borrow_mut()
                        .query(&page, &[&session, &before, &limit])
                        .map_err(|e| self.err(e))?;
                    let found = self.entries_of(session, &rows)?;
                    let complete = i64::try_from(found.len()).unwrap_or(i64::MAX) < limit;
                    expect.set(check_page(
                        &self.location,
                        session,
                        span,
                        expect.get(),
                        &found,
                        complete,
                    )?);
                    Ok(found)
                },
                |id| {
                    let found: bool = tx
                        .borrow_mut()
                        .query_one(&call, &[&session, &id])
                        .map(|row| row.get(0))
                        .map_err(|e| self.err(e))?;
                    if found {
                        return Ok(true);
                    }
                    // A result always follows its call: look in the whole session before
                    // taking the result as an orphan.
                    let all = self.session_pg(&mut *tx.borrow_mut(), session)?;
                    confirm_no_call(&self.location, session, id, &all)
                },
            )?;
            tx.into_inner().commit().map_err(|e| self.err(e))?;
            Ok(chosen)
        })
    }
}

impl LongTermMemory for PgStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn dims(&self) -> usize {
        self.embedder.dims()
    }

    fn put_many(&self, memories: Vec<NewMemory>) -> Result<Vec<MemoryRecord>> {
        let (tags, vectors) = prepare_batch(&self.options, self.embedder.as_ref(), &memories)?;
        let s = self.s();
        let sql = format!(
            "INSERT INTO {s}.memories AS m (id, agent_id, content, tags, created_ms, updated_ms, embedding) \
             VALUES ($1, $2, $3, $4, $5, $5, $6) \
             ON CONFLICT (id) DO UPDATE SET agent_id = excluded.agent_id, content = excluded.content, \
             tags = excluded.tags, updated_ms = excluded.updated_ms, embedding = excluded.embedding \
             RETURNING {RECORD_COLUMNS}, m.key"
        );
        let code_sql = format!(
            "INSERT INTO {s}.memory_codes (key, scale, code) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET scale = excluded.scale, code = excluded.code, \
             xid = pg_current_xact_id()"
        );
        let now = self.options.now_ms();
        let ids: Vec<MemoryId> = memories
            .iter()
            .map(|m| m.id.clone().unwrap_or_else(|| MemoryId::generate(now)))
            .collect();
        let distinct = ids.iter().collect::<HashSet<_>>().len() == ids.len();
        if distinct && memories.len() > 1 {
            return self.put_batch(&memories, &ids, &tags, &vectors, now);
        }
        self.with_client(|c| {
            let mut tx = c.transaction().map_err(|e| self.err(e))?;
            let stmt = tx.prepare(&sql).map_err(|e| self.err(e))?;
            let code_stmt = tx.prepare(&code_sql).map_err(|e| self.err(e))?;
            let mut out = Vec::with_capacity(memories.len());
            for ((m, t), v) in memories.iter().zip(&tags).zip(&vectors) {
                let now = self.options.now_ms();
                let id = m.id.clone().unwrap_or_else(|| MemoryId::generate(now));
                let t: Vec<String> = t.iter().map(|x| x.to_string()).collect();
                let row = tx
                    .query_one(&stmt, &[&id.as_str(), &m.agent_id, &m.content, &t, &now, v])
                    .map_err(|e| self.err(e))?;
                let key: i64 = row.get("key");
                let (code, scale) = crate::quant::code_bytes(v);
                tx.execute(&code_stmt, &[&key, &scale, &code])
                    .map_err(|e| self.err(e))?;
                out.push(self.record(&row)?);
            }
            tx.commit().map_err(|e| self.err(e))?;
            Ok(out)
        })
    }

    fn get(&self, id: &MemoryId) -> Result<Option<MemoryRecord>> {
        let s = self.s();
        let row = self.with_client(|c| {
            c.query_opt(
                &format!("SELECT {RECORD_COLUMNS} FROM {s}.memories m WHERE m.id = $1"),
                &[&id.as_str()],
            )
            .map_err(|e| self.err(e))
        })?;
        row.map(|r| self.record(&r)).transpose()
    }

    fn delete(&self, id: &MemoryId) -> Result<bool> {
        let s = self.s();
        self.with_client(|c| {
            c.execute(
                &format!("DELETE FROM {s}.memories WHERE id = $1"),
                &[&id.as_str()],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
        })
    }

    fn list(&self, options: &ListOptions) -> Result<Vec<MemoryRecord>> {
        options.check()?;
        let tags = check_tags(&options.tags)?;
        let s = self.s();
        let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::new();
        let filter = filter_sql(options.agent_id.as_deref(), &tags, 1, &mut params);
        let limit = options
            .limit
            .map_or_else(|| "ALL".to_owned(), |l| l.to_string());
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM {s}.memories m WHERE TRUE{filter} \
             ORDER BY m.created_ms, m.id COLLATE \"C\" LIMIT {limit} OFFSET {}",
            options.offset
        );
        let rows = self.with_client(|c| c.query(&sql, &refs(&params)).map_err(|e| self.err(e)))?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    fn count(&self, agent_id: Option<&str>) -> Result<usize> {
        if let Some(a) = agent_id {
            crate::options::check_label("agent id", a, crate::working::MAX_LABEL_BYTES)?;
        }
        let s = self.s();
        let n: i64 = self.with_client(|c| {
            c.query_one(
                &format!(
                    "SELECT count(*) FROM {s}.memories WHERE $1::text IS NULL OR agent_id = $1"
                ),
                &[&agent_id],
            )
            .map(|r| r.get(0))
            .map_err(|e| self.err(e))
        })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>> {
        options.check()?;
        let tags = check_tags(&options.tags)?;
        let terms = query_terms(query, MAX_QUERY_TERMS);
        if terms.is_empty() || options.top_k == 0 {
            return Ok(Vec::new());
        }
        let n = i64::try_from(options.candidate_count()).unwrap_or(i64::MAX);
        let qv = if options.mode == SearchMode::Lexical {
            None
        } else {
            Some(embed_checked(self.embedder.as_ref(), &[query])?.remove(0))
        };
        let agent = options.agent_id.as_deref();
        let (lexical, vector, records) = self.with_client(|c| {
            let mut tx = c
                .build_transaction()
                .read_only(true)
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .start()
                .map_err(|e| self.err(e))?;
            let dims = self.embedder.dims();
            let mut slot = self
                .codes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.refresh_codes(&mut tx, &mut slot)?;
            let Some(cache) = slot.as_ref() else {
                return Err(MemoryError::Database {
                    location: self.location.clone(),
                    detail: "code cache missing after load".into(),
                });
            };
            let allowed = self.allowed_keys_pg(&mut tx, agent, &tags)?;
            let n_usize = usize::try_from(n).unwrap_or(usize::MAX);
            let mut lexical: Vec<MemoryId> = Vec::new();
            if options.mode != SearchMode::Vector {
                lexical = lexical_ranking(cache, &terms, allowed.as_ref(), n_usize);
            }
            let mut vector: Vec<MemoryId> = Vec::new();
            if let Some(q) = &qv {
                // ADR-0019: int8 codes in memory choose a pool, exact vectors rank it.
                let cache = &cache.codes;
                let pool =
                    cache.candidates(dims, q, allowed.as_ref(), crate::quant::pool_size(n_usize));
                let keys: Vec<i64> = pool.iter().map(|i| cache.keys[*i]).collect();
                drop(slot);
                vector = self.rank_pool_pg(&mut tx, q, &keys, options, n)?;
            }
            let records = self.fused_records_pg(&mut tx, &lexical, &vector, options)?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok((lexical, vector, records))
        })?;
        Ok(fuse(&lexical, &vector, options)
            .into_iter()
            .filter_map(|(id, score, lr, vr)| {
                let record = records.iter().find(|r| r.id == id)?.clone();
                Some(SearchHit {
                    record,
                    score,
                    lexical_rank: lr,
                    vector_rank: vr,
                })
            })
            .collect())
    }
}

/// The BM25 ranking of `terms` from the handle's in-process index (ADR-0029): the best `n`
/// memories among those `allowed` (all when `None`).
fn lexical_ranking(
    cache: &PgCache,
    terms: &[String],
    allowed: Option<&HashSet<i64>>,
    n: usize,
) -> Vec<MemoryId> {
    let scored: Vec<(usize, f64)> = cache
        .lexical
        .best(terms, |k| allowed.is_none_or(|a| a.contains(&k)), n)
        .into_iter()
        .filter_map(|(k, sc)| cache.codes.position(k).map(|p| (p, sc)))
        .collect();
    top_positions(scored, n, &cache.codes.ids)
        .into_iter()
        .map(|p| cache.codes.ids[p].clone())
        .collect()
}

impl PgStore {
    /// The keys of the memories of `agent` that carry all `tags`; `None` when neither
    /// restricts the search.
    fn allowed_keys_pg(
        &self,
        tx: &mut impl GenericClient,
        agent: Option<&str>,
        tags: &[Arc<str>],
    ) -> Result<Option<HashSet<i64>>> {
        if agent.is_none() && tags.is_empty() {
            return Ok(None);
        }
        let s = self.s();
        let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::new();
        let filter = filter_sql(agent, tags, 1, &mut params);
        let rows = tx
            .query(
                &format!("SELECT m.key FROM {s}.memories m WHERE TRUE{filter}"),
                &refs(&params),
            )
            .map_err(|e| self.err(e))?;
        Ok(Some(
            rows.iter()
                .map(|r| r.get::<_, i64>(0))
                .collect::<HashSet<i64>>(),
        ))
    }

    /// The vector ranking of the pool of memories `keys` by their exact vectors' similarity
    /// to the query vector `q`: the best `n` of those `options` keeps.
    fn rank_pool_pg(
        &self,
        tx: &mut impl GenericClient,
        q: &[f32],
        keys: &[i64],
        options: &SearchOptions,
        n: i64,
    ) -> Result<Vec<MemoryId>> {
        let s = self.s();
        let rows = tx
            .query(
                &format!("SELECT m.id, m.embedding FROM {s}.memories m WHERE m.key = ANY($1)"),
                &[&keys],
            )
            .map_err(|e| self.err(e))?;
        let mut scored: Vec<(MemoryId, f32)> = Vec::with_capacity(rows.len());
        for row in rows {
            let id = self.id_of(&row)?;
            let v: Vec<f32> = row.get(1);
            if v.len() != q.len() {
                return Err(MemoryError::Corrupt {
                    location: self.location.clone(),
                    detail: format!(
                        "memory `{id}` has a vector of {} dimensions, the store {}",
                        v.len(),
                        q.len()
                    ),
                });
            }
            let sim = dot(q, &v);
            if options.keeps_similarity(sim) {
                scored.push((id, sim));
            }
        }
        Ok(top_by_similarity(
            scored,
            usize::try_from(n).unwrap_or(usize::MAX),
        ))
    }

    /// The records of the memories the fusion of the two rankings keeps.
    fn fused_records_pg(
        &self,
        tx: &mut impl GenericClient,
        lexical: &[MemoryId],
        vector: &[MemoryId],
        options: &SearchOptions,
    ) -> Result<Vec<MemoryRecord>> {
        let s = self.s();
        let fused = fuse(lexical, vector, options);
        let ids: Vec<String> = fused.iter().map(|(id, ..)| id.to_string()).collect();
        let rows = tx
            .query(
                &format!("SELECT {RECORD_COLUMNS} FROM {s}.memories m WHERE m.id = ANY($1)"),
                &[&ids],
            )
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| self.record(r))
            .collect::<Result<Vec<_>>>()
    }
}

impl PgStore {
    /// Store memories with distinct ids in two statements: one `INSERT ... SELECT FROM
    /// unnest(...)` for the rows and one for their codes, instead of two round trips per
    /// memory.
    fn put_batch(
        &self,
        memories: &[NewMemory],
        ids: &[MemoryId],
        tags: &[Vec<Arc<str>>],
        vectors: &[Vec<f32>],
        now: i64,
    ) -> Result<Vec<MemoryRecord>> {
        let s = self.s();
        let dims = i64::try_from(self.embedder.dims()).unwrap_or(i64::MAX);
        let id_text: Vec<&str> = ids.iter().map(MemoryId::as_str).collect();
        let agents: Vec<&str> = memories.iter().map(|m| m.agent_id.as_str()).collect();
        let contents: Vec<&str> = memories.iter().map(|m| m.content.as_str()).collect();
        // Tags are names without commas (`check_tags`), so one string per memory carries them.
        let tag_text: Vec<String> = tags
            .iter()
            .map(|t| t.iter().map(|x| &**x).collect::<Vec<_>>().join(","))
            .collect();
        let flat: Vec<f32> = vectors.iter().flatten().copied().collect();
        let sql = format!(
            "INSERT INTO {s}.memories AS m (id, agent_id, content, tags, created_ms, updated_ms, embedding) \
             SELECT t.id, t.agent_id, t.content, string_to_array(t.tags, ','), $5, $5, \
                    ($6::real[])[(t.ord - 1) * $7 + 1 : t.ord * $7] \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) \
                  WITH ORDINALITY AS t(id, agent_id, content, tags, ord) \
             ON CONFLICT (id) DO UPDATE SET agent_id = excluded.agent_id, content = excluded.content, \
             tags = excluded.tags, updated_ms = excluded.updated_ms, embedding = excluded.embedding \
             RETURNING {RECORD_COLUMNS}, m.key"
        );
        let code_sql = format!(
            "INSERT INTO {s}.memory_codes (key, scale, code) \
             SELECT * FROM unnest($1::bigint[], $2::real[], $3::bytea[]) \
             ON CONFLICT (key) DO UPDATE SET scale = excluded.scale, code = excluded.code, \
             xid = pg_current_xact_id()"
        );
        self.with_client(|c| {
            let mut tx = c.transaction().map_err(|e| self.err(e))?;
            let rows = tx
                .query(
                    &sql,
                    &[&id_text, &agents, &contents, &tag_text, &now, &flat, &dims],
                )
                .map_err(|e| self.err(e))?;
            let mut by_id: HashMap<String, (i64, MemoryRecord)> = HashMap::new();
            for row in &rows {
                let rec = self.record(row)?;
                by_id.insert(rec.id.to_string(), (row.get("key"), rec));
            }
            let mut keys = Vec::with_capacity(ids.len());
            let mut scales = Vec::with_capacity(ids.len());
            let mut codes = Vec::with_capacity(ids.len());
            let mut out = Vec::with_capacity(ids.len());
            for (id, v) in ids.iter().zip(vectors) {
                let Some((key, rec)) = by_id.remove(id.as_str()) else {
                    return Err(MemoryError::Database {
                        location: self.location.clone(),
                        detail: format!("the insert returned no row for memory `{id}`"),
                    });
                };
                let (code, scale) = crate::quant::code_bytes(v);
                keys.push(key);
                scales.push(scale);
                codes.push(code);
                out.push(rec);
            }
            tx.execute(&code_sql, &[&keys, &scales, &codes])
                .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(out)
        })
    }

    fn id_of(&self, row: &postgres::Row) -> Result<MemoryId> {
        let id: String = row.get(0);
        MemoryId::new(&id).map_err(|_| MemoryError::Corrupt {
            location: self.location.clone(),
            detail: format!("invalid memory id `{id}` in memories"),
        })
    }
}

impl SharedContext for PgStore {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn fact(&self, scope: &Scope, key: &str) -> Result<Option<Fact>> {
        let s = self.s();
        let row = self.with_client(|c| {
            c.query_opt(
                &format!(
                    "SELECT value, updated_ms FROM {s}.shared_facts WHERE scope = $1 AND key = $2"
                ),
                &[&scope.as_str(), &key],
            )
            .map_err(|e| self.err(e))
        })?;
        Ok(row.map(|r| Fact {
            scope: scope.clone(),
            key: Arc::from(key),
            value: Content::from(r.get::<_, String>(0)),
            updated_ms: r.get(1),
        }))
    }

    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>> {
        let s = self.s();
        let names: Vec<&str> = scopes.iter().map(Scope::as_str).collect();
        let rows = self.with_client(|c| {
            c.query(
                &format!(
                    "SELECT scope, key, value, updated_ms FROM {s}.shared_facts WHERE scope = ANY($1) \
                     ORDER BY array_position($1, scope), key COLLATE \"C\""
                ),
                &[&names],
            )
            .map_err(|e| self.err(e))
        })?;
        rows.iter()
            .map(|r| {
                Ok(Fact {
                    scope: Scope::new(r.get::<_, &str>(0)).map_err(|_| MemoryError::Corrupt {
                        location: self.location.clone(),
                        detail: "invalid scope in shared_facts".into(),
                    })?,
                    key: Arc::from(r.get::<_, String>(1)),
                    value: Content::from(r.get::<_, String>(2)),
                    updated_ms: r.get(3),
                })
            })
            .collect()
    }
}

impl SharedContextWriter for PgStore {
    fn set_fact(&self, scope: &Scope, key: &str, value: &str) -> Result<Fact> {
        check_fact_key(key)?;
        self.options.check_size("shared fact", value)?;
        let now = self.options.now_ms();
        let s = self.s();
        self.with_client(|c| {
            c.execute(
                &format!(
                    "INSERT INTO {s}.shared_facts (scope, key, value, updated_ms) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms"
                ),
                &[&scope.as_str(), &key, &value, &now],
            )
            .map_err(|e| self.err(e))
        })?;
        Ok(Fact {
            scope: scope.clone(),
            key: Arc::from(key),
            value: Content::from(value),
            updated_ms: now,
        })
    }

    fn remove_fact(&self, scope: &Scope, key: &str) -> Result<bool> {
        let s = self.s();
        self.with_client(|c| {
            c.execute(
                &format!("DELETE FROM {s}.shared_facts WHERE scope = $1 AND key = $2"),
                &[&scope.as_str(), &key],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
        })
    }
}

impl crate::state::SessionState for PgStore {
    fn state(&self, session: &str, name: &str) -> Result<Option<crate::state::StateDoc>> {
        crate::state::check_state_key(session, name)?;
        let s = self.s();
        let row = self.with_client(|c| {
            c.query_opt(
                &format!(
                    "SELECT value, version, updated_ms FROM {s}.session_state WHERE session = $1 AND name = $2"
                ),
                &[&session, &name],
            )
            .map_err(|e| self.err(e))
        })?;
        Ok(row.map(|r| crate::state::StateDoc {
            value: r.get(0),
            version: crate::state::version_of(r.get(1)),
            updated_ms: r.get(2),
        }))
    }

    /// One statement each way, so concurrent writers from many processes serialise on the row:
    /// an insert that finds the row, or an update that finds another version, changes nothing.
    fn put_state(
        &self,
        session: &str,
        name: &str,
        value: &str,
        expected: Option<u64>,
    ) -> Result<Option<u64>> {
        crate::state::check_state_key(session, name)?;
        self.options.check_size("session state", value)?;
        let now = self.options.now_ms();
        let s = self.s();
        let n = self.with_client(|c| match expected {
            None => c
                .execute(
                    &format!(
                        "INSERT INTO {s}.session_state (session, name, value, version, updated_ms) \
                         VALUES ($1, $2, $3, 1, $4) ON CONFLICT (session, name) DO NOTHING"
                    ),
                    &[&session, &name, &value, &now],
                )
                .map_err(|e| self.err(e)),
            Some(v) => c
                .execute(
                    &format!(
                        "UPDATE {s}.session_state SET value = $3, version = version + 1, updated_ms = $4 \
                         WHERE session = $1 AND name = $2 AND version = $5"
                    ),
                    &[&session, &name, &value, &now, &crate::state::stored_version(v)],
                )
                .map_err(|e| self.err(e)),
        })?;
        Ok((n == 1).then(|| expected.map_or(1, |v| v.saturating_add(1))))
    }

    fn remove_state(&self, session: &str, name: &str) -> Result<bool> {
        crate::state::check_state_key(session, name)?;
        let s = self.s();
        self.with_client(|c| {
            c.execute(
                &format!("DELETE FROM {s}.session_state WHERE session = $1 AND name = $2"),
                &[&session, &name],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
        })
    }
}
