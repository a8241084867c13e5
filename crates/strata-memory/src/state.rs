//! Per-session state documents: small named texts a runtime keeps beside a session's
//! conversation (the session's goals, for example), versioned for optimistic concurrency.
//!
//! A document is read with its version and written only if the stored version is still the one
//! the writer read ([`SessionState::put_state`]), so two processes sharing one store never lose
//! each other's updates: the loser is told and reads again. The session API keeps each session's
//! goals and touched files here (ADR-0016). The store never interprets the text (ADR-0012);
//! whoever reads it treats it as untrusted data like everything else in a store.

use crate::error::Result;

/// Longest document name, in bytes.
pub const MAX_STATE_NAME_BYTES: usize = 100;

/// A stored document and its version (1 for the first write, then one more per write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDoc {
    /// The text.
    pub value: String,
    /// The version.
    pub version: u64,
    /// When it was written, Unix milliseconds.
    pub updated_ms: i64,
}

/// Versioned per-session documents.
pub trait SessionState: Send + Sync {
    /// The document `name` of `session`, if any.
    fn state(&self, session: &str, name: &str) -> Result<Option<StateDoc>>;

    /// Write `value` as the document `name` of `session` if its stored version is `expected`
    /// (`None`: the document must not exist yet). Returns the new version, or `None` when another
    /// writer got there first (read again and retry).
    fn put_state(
        &self,
        session: &str,
        name: &str,
        value: &str,
        expected: Option<u64>,
    ) -> Result<Option<u64>>;

    /// Remove the document; whether it existed.
    fn remove_state(&self, session: &str, name: &str) -> Result<bool>;
}

/// Check a session id and document name before they reach a store.
pub(crate) fn check_state_key(session: &str, name: &str) -> Result<()> {
    crate::options::check_label("session id", session, crate::working::MAX_LABEL_BYTES)?;
    crate::options::check_name("session state name", name, MAX_STATE_NAME_BYTES)
}

/// Version arithmetic shared by the adapters: a stored version as `u64`.
pub(crate) fn version_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// `expected` as the signed integer stores keep.
pub(crate) fn stored_version(expected: u64) -> i64 {
    i64::try_from(expected).unwrap_or(i64::MAX)
}

/// The name of the document holding a session's goal book.
pub const GOALS_DOC: &str = "goals";
/// The name of the document holding the files a session read or changed.
pub const FILES_DOC: &str = "files";
/// Most files a session remembers; the oldest are forgotten first.
pub const MAX_SESSION_FILES: usize = 200;
/// How many times a read-modify-write of a document is tried when other writers interleave.
const ATTEMPTS: u32 = 16;

/// What a session did with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileAction {
    /// The file was read.
    Read,
    /// The file was created or changed.
    Modified,
    /// The file was deleted.
    Deleted,
}

impl FileAction {
    /// The lower-case word shown to the model.
    pub const fn label(self) -> &'static str {
        match self {
            FileAction::Read => "read",
            FileAction::Modified => "modified",
            FileAction::Deleted => "deleted",
        }
    }
}

/// A file a session touched: its path as the runtime gave it, the last action and when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionFile {
    /// The path (untrusted text; it is fenced like every store content).
    pub path: String,
    /// The last thing done with it.
    pub action: FileAction,
    /// When, Unix milliseconds.
    pub at_ms: i64,
}

/// The files a session read or changed, newest last (the seeds' session-files section).
pub fn session_files(state: &dyn SessionState, session: &str) -> Result<Vec<SessionFile>> {
    match state.state(session, FILES_DOC)? {
        None => Ok(Vec::new()),
        Some(doc) => Ok(parse_files(session, &doc.value)?.files),
    }
}

/// A retried recording of a file (ADR-0031, ADR-0042): the caller's key, a fingerprint of what was
/// asked, and the answer a repeat gets. Kept in the files document itself, so that the file
/// and the record of its recording are written in one compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileOperation {
    /// The fingerprint of the request.
    pub fingerprint: String,
    /// The first answer.
    pub answer: String,
    /// When it ran, Unix milliseconds (records older than [`crate::OPERATION_TTL_MS`] are
    /// dropped).
    pub at_ms: i64,
}

/// What [`record_session_file_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRecorded {
    /// The file was recorded now.
    Recorded,
    /// The operation ran before: its first answer; nothing was written.
    Repeated(String),
}

/// The live record of the keyed file recording `key` on `session`, if any.
pub fn session_file_operation(
    state: &dyn SessionState,
    session: &str,
    key: &str,
    now_ms: i64,
) -> Result<Option<FileOperation>> {
    match state.state(session, FILES_DOC)? {
        None => Ok(None),
        Some(doc) => Ok(parse_files(session, &doc.value)?
            .operations
            .remove(key)
            .filter(|r| now_ms.saturating_sub(r.at_ms) < crate::OPERATION_TTL_MS)),
    }
}

/// Most operation records a files document keeps; the oldest go first.
const MAX_FILE_OPERATIONS: usize = 256;

/// The files document: a bare list (what every build writes when no keyed recording happened),
/// or the list with the records of keyed recordings.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct FilesDoc {
    files: Vec<SessionFile>,
    #[serde(default)]
    operations: std::collections::BTreeMap<String, FileOperation>,
}

fn parse_files(session: &str, json: &str) -> Result<FilesDoc> {
    let bad = |e: serde_json::Error| {
        crate::error::MemoryError::invalid(
            "session files",
            format!(
                "the stored list of session `{session}` is not valid JSON ({e}); remove the `{FILES_DOC}` document of the session to start afresh"
            ),
        )
    };
    if json.trim_start().starts_with('[') {
        Ok(FilesDoc {
            files: serde_json::from_str(json).map_err(bad)?,
            operations: Default::default(),
        })
    } else {
        serde_json::from_str(json).map_err(bad)
    }
}

/// Note that `session` did `action` with the file at `path` (a later action on the same path
/// replaces the earlier one; at most [`MAX_SESSION_FILES`] are kept). Safe against other
/// processes writing the same session at once.
pub fn record_session_file(
    state: &dyn SessionState,
    session: &str,
    path: &str,
    action: FileAction,
    at_ms: i64,
) -> Result<()> {
    record_session_file_once(state, session, path, action, at_ms, None).map(|_| ())
}

/// [`record_session_file`] as a retry-safe operation: `op` is `(key, fingerprint, answer)`.
/// A repeat of the key with the same fingerprint answers the first answer and writes nothing;
/// with another fingerprint it is refused ([`crate::MemoryError::OperationExists`]) and
/// nothing changes. The file and the operation's record are one write.
pub fn record_session_file_once(
    state: &dyn SessionState,
    session: &str,
    path: &str,
    action: FileAction,
    at_ms: i64,
    op: Option<(&str, &str, &str)>,
) -> Result<FileRecorded> {
    let path = path.trim();
    if path.is_empty() || path.len() > 4096 || path.chars().any(char::is_control) {
        return Err(crate::error::MemoryError::invalid(
            "session file",
            "give a path of 1-4096 bytes without control characters".to_owned(),
        ));
    }
    if let Some((key, _, _)) = op {
        crate::working::check_operation_key(key)?;
    }
    for _ in 0..ATTEMPTS {
        let doc = state.state(session, FILES_DOC)?;
        let mut files = match &doc {
            None => FilesDoc::default(),
            Some(d) => parse_files(session, &d.value)?,
        };
        if let Some((key, fingerprint, _)) = op {
            if let Some(rec) = files
                .operations
                .get(key)
                .filter(|r| at_ms.saturating_sub(r.at_ms) < crate::OPERATION_TTL_MS)
            {
                return if rec.fingerprint == fingerprint {
                    Ok(FileRecorded::Repeated(rec.answer.clone()))
                } else {
                    Err(crate::error::MemoryError::OperationExists {
                        session: session.to_owned(),
                        key: key.to_owned(),
                    })
                };
            }
        }
        files.files.retain(|f| f.path != path);
        files.files.push(SessionFile {
            path: path.to_owned(),
            action,
            at_ms,
        });
        let excess = files.files.len().saturating_sub(MAX_SESSION_FILES);
        files.files.drain(..excess);
        files
            .operations
            .retain(|_, r| at_ms.saturating_sub(r.at_ms) < crate::OPERATION_TTL_MS);
        if let Some((key, fingerprint, answer)) = op {
            files.operations.insert(
                key.to_owned(),
                FileOperation {
                    fingerprint: fingerprint.to_owned(),
                    answer: answer.to_owned(),
                    at_ms,
                },
            );
            while files.operations.len() > MAX_FILE_OPERATIONS {
                let oldest = files
                    .operations
                    .iter()
                    .min_by_key(|(_, r)| r.at_ms)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    files.operations.remove(&k);
                }
            }
        }
        // Without operation records the document stays the bare list older builds wrote.
        let json = if files.operations.is_empty() {
            serde_json::to_string(&files.files)
        } else {
            serde_json::to_string(&files)
        }
        .map_err(|e| crate::error::MemoryError::invalid("session files", e.to_string()))?;
        if state
            .put_state(session, FILES_DOC, &json, doc.map(|d| d.version))?
            .is_some()
        {
            return Ok(FileRecorded::Recorded);
        }
    }
    Err(crate::error::MemoryError::invalid(
        "session files",
        format!("session `{session}` changed {ATTEMPTS} times while a file was recorded; retry"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InMemoryStore;

    /// Verifies ADR-0042: a keyed file recording and its record are one write; a repeat writes
    /// nothing, the key with another request changes nothing, and a store that never saw a key
    /// keeps the bare list older builds wrote.
    #[test]
    fn a_keyed_file_recording_is_one_write_and_repeats_write_nothing() {
        let store = InMemoryStore::new();
        record_session_file(&store, "s", "a.rs", FileAction::Read, 1).unwrap();
        let bare = store.state("s", FILES_DOC).unwrap().unwrap();
        assert!(bare.value.starts_with('['), "{}", bare.value);

        let op = Some(("k1", "fp", "answer"));
        let first = record_session_file_once(&store, "s", "b.rs", FileAction::Modified, 2, op);
        assert_eq!(first.unwrap(), FileRecorded::Recorded);
        let doc = store.state("s", FILES_DOC).unwrap().unwrap();
        let again = record_session_file_once(&store, "s", "b.rs", FileAction::Modified, 3, op);
        assert_eq!(again.unwrap(), FileRecorded::Repeated("answer".into()));
        let other = Some(("k1", "other", "x"));
        let reused = record_session_file_once(&store, "s", "c.rs", FileAction::Read, 4, other);
        assert!(matches!(
            reused,
            Err(crate::MemoryError::OperationExists { .. })
        ));
        assert_eq!(store.state("s", FILES_DOC).unwrap().unwrap(), doc);
        let paths: Vec<String> = session_files(&store, "s")
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(paths, ["a.rs", "b.rs"]);
        assert!(session_file_operation(&store, "s", "k1", 5)
            .unwrap()
            .is_some());
        // A day later the record has expired.
        let later = 2 + crate::OPERATION_TTL_MS;
        assert!(session_file_operation(&store, "s", "k1", later)
            .unwrap()
            .is_none());
    }
}
