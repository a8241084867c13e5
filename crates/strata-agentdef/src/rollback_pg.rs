//! The rollback guard in PostgreSQL, for fleets of runtimes that share no file system
//! (ADR-0017).
//!
//! One row per agent in `<schema>.rollback_state`. The check-and-record is a single
//! `INSERT ... ON CONFLICT DO UPDATE ... WHERE stored.version < new.version`, which PostgreSQL
//! runs atomically under the row's lock, so concurrent runtimes can neither lose a version nor
//! accept an older one. When the statement changes nothing, the stored row is read and the
//! refusal (rolled back, version reused) is decided as for the file guard; since stored
//! versions only grow, that read can only strengthen the refusal.
//!
//! The table is created only by [`RollbackGuard::postgres_init`] (an explicit operator step);
//! [`RollbackGuard::postgres`] refuses a schema without it, as the file guard refuses a missing
//! file. CHECK constraints keep the stored values well-formed.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::error::AgentDefError;
use crate::rollback::{decide, Decision, RollbackGuard, Seen};

/// A connection to the shared state.
pub(crate) struct PgGuard {
    params: String,
    schema: String,
    client: Mutex<Option<postgres::Client>>,
}

impl std::fmt::Debug for PgGuard {
    // The parameters may hold a password: only the schema is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgGuard")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

fn where_(schema: &str) -> PathBuf {
    PathBuf::from(format!("postgres schema {schema}, table rollback_state"))
}

fn check_schema_name(schema: &str) -> Result<(), AgentDefError> {
    if strata_core::sql::is_plain_identifier(schema) {
        Ok(())
    } else {
        Err(AgentDefError::RollbackState {
            path: where_(schema),
            reason: format!(
                "the schema name must be {}",
                strata_core::sql::PLAIN_IDENTIFIER_RULE
            ),
        })
    }
}

impl PgGuard {
    fn err(&self, e: &postgres::Error) -> AgentDefError {
        AgentDefError::RollbackState {
            path: where_(&self.schema),
            reason: format!(
                "PostgreSQL: {e}; check that the server is reachable (loads are refused meanwhile)"
            ),
        }
    }

    fn connect(params: &str, schema: &str) -> Result<PgGuard, AgentDefError> {
        check_schema_name(schema)?;
        let g = PgGuard {
            params: params.to_owned(),
            schema: schema.to_owned(),
            client: Mutex::new(None),
        };
        g.with(|_, _| Ok(()))?;
        Ok(g)
    }

    /// Run `f` on a live connection, reconnecting once if the previous one was closed.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut postgres::Client, &str) -> Result<T, postgres::Error>,
    ) -> Result<T, AgentDefError> {
        let mut slot = self
            .client
            .lock()
            .map_err(|_| AgentDefError::RollbackState {
                path: where_(&self.schema),
                reason: "a previous check panicked while holding the connection".into(),
            })?;
        if slot.as_ref().is_none_or(postgres::Client::is_closed) {
            *slot = Some(
                postgres::Client::connect(&self.params, postgres::NoTls)
                    .map_err(|e| self.err(&e))?,
            );
        }
        let Some(client) = slot.as_mut() else {
            return Err(AgentDefError::RollbackState {
                path: where_(&self.schema),
                reason: "no connection".into(),
            });
        };
        f(client, &self.schema).map_err(|e| self.err(&e))
    }

    fn table_exists(&self) -> Result<bool, AgentDefError> {
        self.with(|c, s| {
            let row = c.query_one(
                "SELECT to_regclass(format('%I.rollback_state', $1::text)) IS NOT NULL",
                &[&s],
            )?;
            row.try_get(0)
        })
    }

    pub(crate) fn seen(&self, agent: &str) -> Result<Option<Seen>, AgentDefError> {
        let row = self.with(|c, s| {
            c.query_opt(
                &format!(
                    "SELECT version, payload_sha256 FROM {s}.rollback_state WHERE agent_id = $1"
                ),
                &[&agent],
            )
        })?;
        row.map(|r| {
            let version: i64 = r.get(0);
            Ok(Seen {
                version: u64::try_from(version).map_err(|_| {
                    AgentDefError::RollbackStateDamaged {
                        path: where_(&self.schema),
                        reason: format!("agent {agent} has a negative version {version}"),
                    }
                })?,
                payload_sha256: r.get(1),
            })
        })
        .transpose()
    }

    pub(crate) fn check_and_record(
        &self,
        agent: &str,
        version: u64,
        payload_sha256: &str,
    ) -> Result<(), AgentDefError> {
        let v = i64::try_from(version).map_err(|_| AgentDefError::RollbackState {
            path: where_(&self.schema),
            reason: format!("version {version} does not fit PostgreSQL's bigint; versions up to {} are supported", i64::MAX),
        })?;
        let recorded = self.with(|c, s| {
            c.query_opt(
                &format!(
                    "INSERT INTO {s}.rollback_state AS t (agent_id, version, payload_sha256) \
                     VALUES ($1, $2, $3) \
                     ON CONFLICT (agent_id) DO UPDATE \
                       SET version = EXCLUDED.version, payload_sha256 = EXCLUDED.payload_sha256, \
                           updated_at = now() \
                       WHERE t.version < EXCLUDED.version \
                     RETURNING version"
                ),
                &[&agent, &v, &payload_sha256],
            )
        })?;
        if recorded.is_some() {
            return Ok(());
        }
        let stored = self.seen(agent)?;
        match decide(stored.as_ref(), agent, version, payload_sha256)? {
            Decision::Same => Ok(()),
            Decision::Record => Err(AgentDefError::RollbackState {
                path: where_(&self.schema),
                reason: format!(
                    "agent {agent} version {version} was neither recorded nor refused; refusing"
                ),
            }),
        }
    }
}

impl RollbackGuard {
    /// A guard kept in PostgreSQL (`params`: libpq key=value parameters or a `postgres://`
    /// URL) in `schema`, which [`RollbackGuard::postgres_init`] must have prepared. Any number of
    /// runtimes may share it. Refuses a schema without the table
    /// ([`AgentDefError::RollbackStateMissing`]).
    pub fn postgres(params: &str, schema: &str) -> Result<RollbackGuard, AgentDefError> {
        let g = PgGuard::connect(params, schema)?;
        if !g.table_exists()? {
            return Err(AgentDefError::RollbackStateMissing {
                path: where_(schema),
            });
        }
        Ok(RollbackGuard::from_pg(g))
    }

    /// Create the schema's `rollback_state` table (an explicit, one-time operator step) and
    /// open it. Refuses when the table already exists, so that a script cannot reset it.
    pub fn postgres_init(params: &str, schema: &str) -> Result<RollbackGuard, AgentDefError> {
        let g = PgGuard::connect(params, schema)?;
        if g.table_exists()? {
            return Err(AgentDefError::RollbackState {
                path: where_(schema),
                reason: "already exists; initialising would erase the versions it records, so \
                         open it instead"
                    .into(),
            });
        }
        g.with(|c, s| {
            c.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {s};
                 CREATE TABLE {s}.rollback_state (
                     agent_id text PRIMARY KEY CHECK (length(agent_id) BETWEEN 1 AND 256),
                     version bigint NOT NULL CHECK (version >= 0),
                     payload_sha256 text NOT NULL CHECK (payload_sha256 ~ '^[0-9a-f]{{64}}$'),
                     updated_at timestamptz NOT NULL DEFAULT now()
                 );"
            ))
        })?;
        tracing::info!(schema, "PostgreSQL rollback state initialised (empty)");
        Ok(RollbackGuard::from_pg(g))
    }
}
