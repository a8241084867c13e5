//! The agent's lifecycle in a long-running service (ADR-0022).
//!
//! The signed definition is verified at start. A reload (SIGHUP, or a change of the definition
//! or trust store file seen by the watcher) verifies the files again, against the trust store as
//! it is now and the same rollback guard, and swaps the runtime atomically only if that
//! succeeds; a refused reload keeps the running agent and is reported (log, metrics,
//! `GET /v1/agent`). Validity is re-checked on every request, so an agent that expires while
//! the service runs is refused from that moment. The running agent's signers are re-checked
//! against the trust store whenever it changes and on every watcher tick (ADR-0034), a reload
//! may not change the agent's id, and the trust store may be pinned by its SHA-256.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use strata_agentdef::{AgentDefError, Expiry, Loader, RollbackGuard, TrustStore, VerifiedAgent};

/// Seconds since the Unix epoch, now.
fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Where the rollback guard keeps its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackSpec {
    /// In this process only (rollback across restarts is not caught).
    InMemory,
    /// A state file (`strata rollback-state` format).
    File(PathBuf),
    /// A PostgreSQL schema, shared by every service on the database.
    Postgres {
        /// Connection string or URL.
        url: String,
        /// Schema name.
        schema: String,
    },
}

/// Why the agent could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Reading the trust store or verifying the definition failed.
    #[error("{0}")]
    Refused(#[from] AgentDefError),
    /// The definition file is missing or unreadable.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The signed definition, its trust store and the rollback guard that outlives reloads.
pub struct AgentSource {
    agent: PathBuf,
    trust: PathBuf,
    trust_pin: Option<String>,
    guard: RollbackGuard,
    expiry: Expiry,
}

impl std::fmt::Debug for AgentSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSource")
            .field("agent", &self.agent)
            .field("trust", &self.trust)
            .finish_non_exhaustive()
    }
}

impl AgentSource {
    /// Open the rollback guard; the files are read by [`AgentSource::load`].
    pub fn new(
        agent: impl Into<PathBuf>,
        trust: impl Into<PathBuf>,
        rollback: &RollbackSpec,
    ) -> Result<AgentSource, LoadError> {
        let guard = match rollback {
            RollbackSpec::InMemory => RollbackGuard::in_memory(),
            RollbackSpec::File(path) => RollbackGuard::open(path)?,
            RollbackSpec::Postgres { url, schema } => RollbackGuard::postgres(url, schema)?,
        };
        Ok(AgentSource {
            agent: agent.into(),
            trust: trust.into(),
            trust_pin: None,
            guard,
            expiry: Expiry::Enforce,
        })
    }

    /// Refuse the trust store, at start and on every reload and re-check, unless the SHA-256
    /// of its exact bytes is `pin` (`sha256:<hex>` or bare hex): a truncated or edited store is
    /// then detected, not parsed (ADR-0034).
    pub fn trust_pin(mut self, pin: &str) -> Result<AgentSource, LoadError> {
        self.trust_pin = Some(strata_agentdef::parse_pin(pin)?);
        Ok(self)
    }

    /// The trust store as it is now (checked against the pin, if any).
    pub fn trust(&self) -> Result<TrustStore, LoadError> {
        Ok(match &self.trust_pin {
            Some(pin) => TrustStore::read_pinned(&self.trust, pin)?,
            None => TrustStore::read(&self.trust)?,
        })
    }

    /// Check the running `agent`'s signers against the trust store as it is now (ADR-0034).
    pub fn recheck(&self, agent: &VerifiedAgent) -> Result<(), LoadError> {
        let trust = self.trust()?;
        Ok(agent.check_signers(&trust, now_secs())?)
    }

    /// The expiry policy (default: enforce).
    #[must_use]
    pub fn expiry(mut self, expiry: Expiry) -> AgentSource {
        self.expiry = expiry;
        self
    }

    /// The definition file.
    pub fn agent_path(&self) -> &Path {
        &self.agent
    }

    /// Read the trust store and verify the definition, now.
    pub fn load(&self) -> Result<VerifiedAgent, LoadError> {
        let trust = self.trust()?;
        if !self.agent.is_file() {
            return Err(LoadError::Io {
                path: self.agent.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file; pass the signed definition (DSSE envelope) with --agent",
                ),
            });
        }
        Ok(Loader::new(&trust, &self.guard)
            .expiry(self.expiry)
            .load_file(&self.agent)?)
    }

    /// What the watcher compares: size and modification time of both files.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint([stamp(&self.agent), stamp(&self.trust)])
    }
}

/// Size and modification time of the definition and the trust store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint([Option<(u64, SystemTime)>; 2]);

fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}
