//! The rollback guard: the highest accepted version per agent id, persisted (ADR-0010, ADR-0017).
//!
//! A definition with a lower version than one already accepted is refused, and so is the same
//! version with different content (a version number must never be reused).
//!
//! ADR-0017 makes the guard's state safe to share:
//!
//! - **One writer at a time.** Every check takes an exclusive lock on a sibling lock file
//!   (`<state>.lock`, `flock` on Unix), then reads the state file again under that lock, decides,
//!   and writes the new state before the lock is released. Guards in other threads and other
//!   processes therefore never decide on a stale copy, and the last writer cannot erase what
//!   another one recorded.
//! - **Atomic, durable writes.** The new state goes to a uniquely named temporary file in the
//!   same directory, is synced, renamed over the old file, and the directory is synced. A crash
//!   (even `kill -9`) leaves either the old or the new state, never half a file.
//! - **Integrity.** The file starts with a format line and the SHA-256 of the body; any change
//!   to any byte is refused as [`AgentDefError::RollbackStateDamaged`]. This detects damage, not
//!   a local attacker who can write the file (that attacker can also recompute the digest); for
//!   that, keep the file writable only by the runtime's user or use the PostgreSQL guard.
//! - **Explicit initialisation.** A missing state file is refused
//!   ([`AgentDefError::RollbackStateMissing`]): deleting the file must not silently reset the
//!   protection. Operators create it once with [`RollbackGuard::init`]
//!   (`strata verify --init-rollback-state`).
//!
//! Fleets that share no file system use the PostgreSQL guard (`RollbackGuard::postgres`, with
//! the `postgres` feature), where the same check is one atomic statement.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::AgentDefError;

/// The first line of a state file.
const HEADER: &str = "strata-rollback-state v2";
/// Largest state file read.
const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;

/// What the guard remembers of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seen {
    /// Highest accepted version.
    pub version: u64,
    /// SHA-256 (hex) of the payload accepted at that version.
    pub payload_sha256: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    agents: BTreeMap<String, Seen>,
}

/// Where the highest accepted versions are kept.
#[derive(Debug)]
pub struct RollbackGuard {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Memory(Mutex<State>),
    File(FileGuard),
    #[cfg(feature = "postgres")]
    Postgres(Box<crate::rollback_pg::PgGuard>),
}

#[derive(Debug)]
struct FileGuard {
    path: PathBuf,
    lock_path: PathBuf,
    /// Serialises the threads sharing this guard; the file lock serialises everyone else.
    local: Mutex<()>,
}

/// The outcome of checking one version against what was seen.
pub(crate) enum Decision {
    /// Already recorded with the same content.
    Same,
    /// New: record it.
    Record,
}

/// Decide on `version` of `agent` given what was seen. Shared by every backend.
pub(crate) fn decide(
    seen: Option<&Seen>,
    agent: &str,
    version: u64,
    payload_sha256: &str,
) -> Result<Decision, AgentDefError> {
    let Some(seen) = seen else {
        return Ok(Decision::Record);
    };
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
        return Ok(Decision::Same);
    }
    Ok(Decision::Record)
}

/// The kind of an I/O error without the temporary file's path that `tempfile` adds to it.
fn without_path(e: std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::from(e.kind()),
    }
}

impl RollbackGuard {
    /// A guard persisted in `path`, which must have been created with [`RollbackGuard::init`].
    ///
    /// Refuses a missing file ([`AgentDefError::RollbackStateMissing`]) and a damaged one
    /// ([`AgentDefError::RollbackStateDamaged`]). The state is read again under an exclusive
    /// lock on every check, so any number of guards in any number of processes may share it.
    pub fn open(path: impl Into<PathBuf>) -> Result<RollbackGuard, AgentDefError> {
        let g = FileGuard::new(path.into());
        {
            let _lock = g.lock()?;
            g.read()?;
            g.remove_stale_temporaries();
        }
        Ok(RollbackGuard {
            backend: Backend::File(g),
        })
    }

    /// Create an empty state file at `path` and open it. Refuses to replace an existing file
    /// (ADR-0017: initialisation is an explicit, one-time operator step).
    pub fn init(path: impl Into<PathBuf>) -> Result<RollbackGuard, AgentDefError> {
        let g = FileGuard::new(path.into());
        {
            let _lock = g.lock()?;
            match std::fs::symlink_metadata(&g.path) {
                Ok(_) => {
                    return Err(AgentDefError::RollbackState {
                        path: g.path.clone(),
                        reason: "already exists; initialising would erase the versions it \
                                 records, so open it instead (or move it away first if you \
                                 really mean to start over)"
                            .into(),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(AgentDefError::io(&g.path, e)),
            }
            g.write(&State::default())?;
        }
        // Only an explicit call creates a state, and it refuses to replace one: what the
        // caller asked for, not a warning.
        tracing::info!(path = %g.path.display(), "rollback state initialised (empty)");
        Ok(RollbackGuard {
            backend: Backend::File(g),
        })
    }

    /// A guard that lives only in memory (tests, one-shot tools). It still refuses rollbacks
    /// within the process.
    pub fn in_memory() -> RollbackGuard {
        RollbackGuard {
            backend: Backend::Memory(Mutex::new(State::default())),
        }
    }

    #[cfg(feature = "postgres")]
    pub(crate) fn from_pg(pg: crate::rollback_pg::PgGuard) -> RollbackGuard {
        RollbackGuard {
            backend: Backend::Postgres(Box::new(pg)),
        }
    }

    /// What the guard currently records of `agent` (read afresh from its store).
    pub fn seen(&self, agent: &str) -> Result<Option<Seen>, AgentDefError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m
                .lock()
                .map_err(|_| poisoned(Path::new("<memory>")))?
                .agents
                .get(agent)
                .cloned()),
            Backend::File(g) => {
                let _lock = g.lock()?;
                Ok(g.read()?.agents.get(agent).cloned())
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.seen(agent),
        }
    }

    /// Check `version` of `agent` and, if acceptable, record it. Fails closed.
    pub(crate) fn check_and_record(
        &self,
        agent: &str,
        version: u64,
        payload_sha256: &str,
    ) -> Result<(), AgentDefError> {
        match &self.backend {
            Backend::Memory(m) => {
                let mut state = m.lock().map_err(|_| poisoned(Path::new("<memory>")))?;
                if let Decision::Record =
                    decide(state.agents.get(agent), agent, version, payload_sha256)?
                {
                    state
                        .agents
                        .insert(agent.to_owned(), seen(version, payload_sha256));
                }
                Ok(())
            }
            Backend::File(g) => g.check_and_record(agent, version, payload_sha256),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.check_and_record(agent, version, payload_sha256),
        }
    }
}

fn seen(version: u64, payload_sha256: &str) -> Seen {
    Seen {
        version,
        payload_sha256: payload_sha256.to_owned(),
    }
}

fn poisoned(path: &Path) -> AgentDefError {
    AgentDefError::RollbackState {
        path: path.to_owned(),
        reason: "a previous check panicked while holding the guard; restart the process".into(),
    }
}

/// An exclusive lock on the lock file, released when dropped (closing the file releases it).
struct Held<'a> {
    _local: std::sync::MutexGuard<'a, ()>,
    _file: File,
}

impl FileGuard {
    fn new(path: PathBuf) -> FileGuard {
        let mut lock_name = path.file_name().unwrap_or_default().to_os_string();
        lock_name.push(".lock");
        FileGuard {
            lock_path: path.with_file_name(lock_name),
            path,
            local: Mutex::new(()),
        }
    }

    fn lock(&self) -> Result<Held<'_>, AgentDefError> {
        let local = self.local.lock().map_err(|_| poisoned(&self.path))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.lock_path)
            .map_err(|e| AgentDefError::io(&self.lock_path, e))?;
        file.lock()
            .map_err(|e| AgentDefError::io(&self.lock_path, e))?;
        Ok(Held {
            _local: local,
            _file: file,
        })
    }

    /// Read and check the state file. Call with the lock held.
    fn read(&self) -> Result<State, AgentDefError> {
        let bytes = match crate::read_limited(&self.path, MAX_STATE_BYTES, "rollback state") {
            Ok(b) => b,
            Err(AgentDefError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(AgentDefError::RollbackStateMissing {
                    path: self.path.clone(),
                })
            }
            Err(e) => return Err(e),
        };
        decode_state(&bytes).map_err(|reason| AgentDefError::RollbackStateDamaged {
            path: self.path.clone(),
            reason,
        })
    }

    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    fn temp_prefix(&self) -> std::ffi::OsString {
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(self.path.file_name().unwrap_or_default());
        prefix.push(".");
        prefix
    }

    /// Remove temporary files left by writers that died before renaming them. Call with the
    /// lock held: only a lock holder writes temporaries, so any found now are stale.
    fn remove_stale_temporaries(&self) {
        let prefix = self.temp_prefix();
        let prefix = prefix.to_string_lossy();
        let Ok(entries) = std::fs::read_dir(self.dir()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(prefix.as_ref()) && name.ends_with(".tmp") {
                tracing::debug!(file = %e.path().display(), "removing a stale temporary file");
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Replace the state file atomically and durably. Call with the lock held.
    fn write(&self, state: &State) -> Result<(), AgentDefError> {
        let dir = self.dir();
        let prefix = self.temp_prefix();
        // Errors name the state file, never the temporary one beside it: that is the file the
        // operator knows and can act on (its folder must be writable).
        let mut tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(|e| AgentDefError::io(&self.path, without_path(e)))?;
        let bytes = encode_state(state);
        tmp.write_all(&bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| AgentDefError::io(&self.path, without_path(e)))?;
        tmp.persist(&self.path)
            .map_err(|e| AgentDefError::io(&self.path, e.error))?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| AgentDefError::io(&dir, e))?;
        Ok(())
    }

    fn check_and_record(
        &self,
        agent: &str,
        version: u64,
        payload_sha256: &str,
    ) -> Result<(), AgentDefError> {
        let _lock = self.lock()?;
        // Read again under the lock: another guard may have recorded something since.
        let mut state = self.read()?;
        if let Decision::Record = decide(state.agents.get(agent), agent, version, payload_sha256)? {
            state
                .agents
                .insert(agent.to_owned(), seen(version, payload_sha256));
            self.write(&state)?;
        }
        Ok(())
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The bytes of a state file: the header line, `sha256:<hex of the body>`, then the body (one
/// line of JSON).
fn encode_state(state: &State) -> Vec<u8> {
    let body = serde_json::to_string(state).unwrap_or_else(|_| String::from("{\"agents\":{}}"));
    format!("{HEADER}\nsha256:{}\n{body}\n", sha256_hex(body.as_bytes())).into_bytes()
}

/// Parse and check a state file; the error says what is damaged.
fn decode_state(bytes: &[u8]) -> Result<State, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the file is not UTF-8".to_owned())?;
    let rest = text.strip_prefix(HEADER).and_then(|r| r.strip_prefix('\n')).ok_or_else(|| {
        format!("the first line is not `{HEADER}` (a damaged file, a file written by an older strata, or not a rollback state file)")
    })?;
    let (digest_line, body) = rest
        .split_once('\n')
        .ok_or_else(|| "the digest line is missing".to_owned())?;
    let digest = digest_line
        .strip_prefix("sha256:")
        .filter(|d| is_sha256_hex(d))
        .ok_or_else(|| "the second line is not `sha256:<64 lower-case hex digits>`".to_owned())?;
    let body = body
        .strip_suffix('\n')
        .filter(|b| !b.contains('\n'))
        .ok_or_else(|| "the body is not exactly one line".to_owned())?;
    let found = sha256_hex(body.as_bytes());
    if found != digest {
        return Err(format!(
            "the body's SHA-256 is {found}, the file says {digest}: the file was changed or damaged"
        ));
    }
    let state: State =
        serde_json::from_str(body).map_err(|e| format!("the body is not a rollback state: {e}"))?;
    for (agent, s) in &state.agents {
        if !is_sha256_hex(&s.payload_sha256) {
            return Err(format!(
                "agent {agent}: payload_sha256 is not 64 lower-case hex digits"
            ));
        }
    }
    Ok(state)
}

/// The text of a state file recording exactly `agents` (for migration tools and fixtures).
pub fn state_file_bytes(agents: &BTreeMap<String, Seen>) -> Vec<u8> {
    encode_state(&State {
        agents: agents.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        let mut agents = BTreeMap::new();
        for (i, name) in ["ada", "bob", "research-assistant"].iter().enumerate() {
            agents.insert(
                (*name).to_owned(),
                seen(10 + i as u64 * 7, &sha256_hex(name.as_bytes())),
            );
        }
        State { agents }
    }

    #[test]
    fn state_round_trips() {
        let s = sample();
        assert_eq!(decode_state(&encode_state(&s)).unwrap(), s);
        assert_eq!(
            decode_state(&encode_state(&State::default())).unwrap(),
            State::default()
        );
    }

    /// Verifies ADR-0017: every single-byte change of a state file, to every other byte value,
    /// is refused as damaged; none yields a different (or even the same) state silently.
    #[test]
    fn every_single_byte_change_is_refused_as_damaged() {
        let good = encode_state(&sample());
        let mut trials = 0u64;
        for i in 0..good.len() {
            for v in 0..=255u8 {
                if v == good[i] {
                    continue;
                }
                let mut bad = good.clone();
                bad[i] = v;
                trials += 1;
                assert!(
                    decode_state(&bad).is_err(),
                    "changing byte {i} from {:#04x} to {v:#04x} was accepted",
                    good[i]
                );
            }
        }
        assert_eq!(trials, good.len() as u64 * 255);
        eprintln!(
            "{trials} single-byte variants of a {}-byte state file refused",
            good.len()
        );
    }

    #[test]
    fn truncations_and_old_format_are_refused() {
        let good = encode_state(&sample());
        for n in 0..good.len() {
            assert!(decode_state(&good[..n]).is_err(), "truncated to {n} bytes");
        }
        let old = br#"{"agents":{"ada":{"version":5,"payload_sha256":"00"}}}"#;
        assert!(decode_state(old).unwrap_err().contains("first line"));
    }
}
