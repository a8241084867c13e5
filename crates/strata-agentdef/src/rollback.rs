//! The rollback guard: the highest accepted version per agent id, persisted (ADR-0010).
//!
//! A definition with a lower version than one already accepted is refused, and so is the same
//! version with different content (a version number must never be reused).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::AgentDefError;

/// What the guard remembers of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seen {
    /// Highest accepted version.
    pub version: u64,
    /// SHA-256 (hex) of the payload accepted at that version.
    pub payload_sha256: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    agents: BTreeMap<String, Seen>,
}

/// Where the highest accepted versions are kept.
#[derive(Debug)]
pub struct RollbackGuard {
    path: Option<PathBuf>,
    state: Mutex<State>,
}

impl RollbackGuard {
    /// A guard persisted in `path` (a JSON file; created on first accept). The directory must
    /// exist. Writes go to a temporary file that is synced and renamed over the old one.
    pub fn open(path: impl Into<PathBuf>) -> Result<RollbackGuard, AgentDefError> {
        let path = path.into();
        let state = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| AgentDefError::RollbackState {
                    path: path.clone(),
                    reason: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(AgentDefError::io(&path, e)),
        };
        Ok(RollbackGuard {
            path: Some(path),
            state: Mutex::new(state),
        })
    }

    /// A guard that lives only in memory (tests, one-shot tools). It still refuses rollbacks
    /// within the process.
    pub fn in_memory() -> RollbackGuard {
        RollbackGuard {
            path: None,
            state: Mutex::new(State::default()),
        }
    }

    /// What the guard remembers of `agent`.
    pub fn seen(&self, agent: &str) -> Option<Seen> {
        self.state.lock().ok()?.agents.get(agent).cloned()
    }

    /// Check `version` of `agent` and, if acceptable, record it. Fails closed.
    pub(crate) fn check_and_record(
        &self,
        agent: &str,
        version: u64,
        payload_sha256: &str,
    ) -> Result<(), AgentDefError> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| AgentDefError::RollbackState {
                path: self.path.clone().unwrap_or_default(),
                reason: "a previous writer panicked".into(),
            })?;
        if let Some(seen) = state.agents.get(agent) {
            if version < seen.version {
                return Err(AgentDefError::RolledBack {
                    agent: agent.to_owned(),
                    version,
                    seen: seen.version,
                });
            }
            if version == seen.version {
                if seen.payload_sha256 != payload_sha256 {
                    return Err(AgentDefError::VersionReused {
                        agent: agent.to_owned(),
                        version,
                    });
                }
                return Ok(());
            }
        }
        let mut next = state.clone();
        next.agents.insert(
            agent.to_owned(),
            Seen {
                version,
                payload_sha256: payload_sha256.to_owned(),
            },
        );
        if let Some(path) = &self.path {
            persist(path, &next)?;
        }
        *state = next;
        Ok(())
    }
}

fn persist(path: &Path, state: &State) -> Result<(), AgentDefError> {
    let tmp = path.with_extension("tmp");
    let json = serde_json::to_vec_pretty(state).map_err(|e| AgentDefError::RollbackState {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let mut f = std::fs::File::create(&tmp).map_err(|e| AgentDefError::io(&tmp, e))?;
    f.write_all(&json)
        .and_then(|()| f.sync_all())
        .map_err(|e| AgentDefError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| AgentDefError::io(path, e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
