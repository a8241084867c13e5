//! The durable file log: working memory (layer 5) in one append-only file.
//!
//! Format (ADR-0012): a 16-byte header (`STRATAWL`, format version as u32 little-endian, four
//! zero bytes), then records. A record is the payload length (u32 little-endian), the BLAKE3
//! hash of the length bytes and the payload (32 bytes), and the payload (one JSON object).
//!
//! Durability: an append returns only after the record is written and `fsync`ed, so an
//! acknowledged entry survives a crash of the process or the machine. A crash in the middle of
//! an append can leave a torn last record; opening the log detects it (short frame, or a hash
//! that does not match in the final record), skips it and truncates the file back to the last
//! whole record. A damaged record followed by more data is not a torn write: that is reported
//! as [`MemoryError::Corrupt`] and nothing is truncated.
//!
//! Damage is never mistaken for a torn write (ADR-0019): when a record cannot be read, the rest
//! of the file is searched for a whole, valid record. If one follows, the damaged record is not
//! the last one and the log is [`MemoryError::Corrupt`]; only a damaged *last* record is cut
//! off, and the cut is reported in [`Recovery::truncated_bytes`] and in a warning.
//!
//! One writer at a time (ADR-0019): opening takes an exclusive advisory lock on the file
//! (`flock` on Unix, `LockFileEx` on Windows) for as long as the [`FileLog`] lives. A second
//! open, from this process or another, fails with [`MemoryError::Locked`] instead of
//! interleaving appends. The store keeps the sessions in memory and replays the file when it
//! opens.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use strata_core::{Content, Role};

use crate::error::{MemoryError, Result};
use crate::options::StoreOptions;
use crate::working::{
    check_batch, check_held, check_operation_key, operation_live, Applied, Batch, Entry, Operation,
    WorkingMemory,
};

const MAGIC: &[u8; 8] = b"STRATAWL";
/// The format version this build writes. Versions 1 (no batch records) and 2 (no entry
/// `meta`) are read too, and the header is raised to 3 when the log opens, so an older build
/// refuses the file rather than misreading a batch (ADR-0031) or dropping the metadata of its
/// entries without a word.
pub const FILE_LOG_VERSION: u32 = 3;
const HEADER_LEN: u64 = 16;
const FRAME_LEN: u64 = 4 + 32;
/// Records larger than this are not records: the length field is damaged.
const MAX_RECORD: u64 = 64 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    Append {
        seq: u64,
        session: String,
        role: Role,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        content: String,
        at_ms: i64,
    },
    Clear {
        session: String,
        at_ms: i64,
    },
    /// One batch (ADR-0031): one frame, so a torn write loses all of it and nothing else.
    Batch {
        session: String,
        clear: bool,
        entries: Vec<BatchEntry>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operation: Option<Operation>,
        at_ms: i64,
    },
}

/// An entry of a batch record.
#[derive(Debug, Serialize, Deserialize)]
struct BatchEntry {
    seq: u64,
    role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    call_id: Option<String>,
    content: String,
    /// The entry's metadata object (format version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<String>,
}

/// Operation records by session, then key.
type Operations = HashMap<Arc<str>, HashMap<String, Operation>>;

/// What opening the log found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Whole records replayed.
    pub records: u64,
    /// Bytes of a torn last record that were cut off (0 after a clean shutdown).
    pub truncated_bytes: u64,
}

#[derive(Debug)]
struct State {
    file: File,
    len: u64,
    next_seq: u64,
    sessions: HashMap<Arc<str>, Vec<Entry>>,
    /// The session number each session's next entry gets (ADR-0036), kept across clears and
    /// rebuilt by the replay, which numbers a session's entries in the order of the log.
    next_session_seq: HashMap<Arc<str>, u64>,
    /// Operation records by session, then key (ADR-0031).
    operations: Operations,
    /// Set when a failed append could not be rolled back: the file's end is unknown.
    poisoned: bool,
}

/// Working memory in a durable append-only file.
#[derive(Debug)]
pub struct FileLog {
    path: PathBuf,
    name: String,
    options: StoreOptions,
    recovery: Recovery,
    state: Mutex<State>,
}

fn frame_hash(len_bytes: &[u8; 4], payload: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(len_bytes);
    h.update(payload);
    *h.finalize().as_bytes()
}

fn header() -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FILE_LOG_VERSION.to_le_bytes());
    h
}

fn sync_dir(path: &Path) {
    // Make the file's directory entry durable too; not every platform can open a directory,
    // and failing here after the file itself is synced is only logged.
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
            tracing::debug!(dir = %dir.display(), error = %e, "could not sync directory");
        }
    }
}

/// Take the exclusive writer lock on the log file, or fail with [`MemoryError::Locked`].
///
/// Implements ADR-0019: one writer per log.
///
/// The lock is tried for a short while before giving up: on Unix a process that is starting
/// another program holds copies of all its open files until the new program starts, so a log
/// closed a moment ago can still look locked for a few milliseconds.
fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(MemoryError::Locked {
                    location: path.display().to_string(),
                    detail: "another FileLog holds the file's exclusive lock".into(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(MemoryError::io("lock", path, e)),
        }
    }
}

/// How long opening a log waits for another writer's lock before reporting
/// [`MemoryError::Locked`].
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(250);

/// The offset of the first whole, valid record that starts at or after `from`, if any.
///
/// A valid record has a plausible length, fits in the file, has a matching BLAKE3 hash and a
/// payload that is a JSON object (every payload starts with `{"op":`); the cheap tests come
/// first so that scanning a damaged file stays fast.
fn next_valid_frame(bytes: &[u8], from: usize) -> Option<usize> {
    const PREFIX: &[u8] = br#"{"op":"#;
    let frame = FRAME_LEN as usize;
    let mut off = from;
    while off + frame + PREFIX.len() <= bytes.len() {
        let body_start = off + frame;
        if bytes[body_start..].starts_with(PREFIX) {
            let mut len_bytes = [0u8; 4];
            len_bytes.copy_from_slice(&bytes[off..off + 4]);
            let len = u32::from_le_bytes(len_bytes) as usize;
            if len as u64 <= MAX_RECORD
                && body_start + len <= bytes.len()
                && frame_hash(&len_bytes, &bytes[body_start..body_start + len])[..]
                    == bytes[off + 4..body_start]
            {
                return Some(off);
            }
        }
        off += 1;
    }
    None
}

/// A [`MemoryError::Corrupt`] of the log at `location`.
fn corrupt(location: &str, detail: String) -> MemoryError {
    MemoryError::Corrupt {
        location: location.to_owned(),
        detail,
    }
}

/// Check the header of the log read into `bytes` and return its format version. A file
/// shorter than a header (new, or torn while it was being created) that starts like one is
/// given a whole header, on disk and in `bytes`.
fn check_header(file: &mut File, path: &Path, location: &str, bytes: &mut Vec<u8>) -> Result<u32> {
    let head = header();
    if (bytes.len() as u64) < HEADER_LEN {
        // A new file, or a header torn while the file was being created.
        if !head.starts_with(bytes) {
            return Err(corrupt(
                location,
                "the file does not start with a strata log header".into(),
            ));
        }
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| file.write_all(&head))
            .and_then(|()| file.sync_all())
            .map_err(|e| MemoryError::io("initialise", path, e))?;
        sync_dir(path);
        *bytes = head.to_vec();
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt(
            location,
            "the file does not start with a strata log header".into(),
        ));
    }
    let mut version = [0u8; 4];
    version.copy_from_slice(&bytes[8..12]);
    let version = u32::from_le_bytes(version);
    if !(1..=FILE_LOG_VERSION).contains(&version) {
        return Err(MemoryError::SchemaVersionMismatch {
            location: location.to_owned(),
            found: i64::from(version),
            expected: i64::from(FILE_LOG_VERSION),
        });
    }
    Ok(version)
}

/// The payload of the record at byte `pos` of the log read into `bytes`. `None` when it cannot
/// be read and no whole record follows it: a torn last record, warned about, where the log is
/// to be cut. [`MemoryError::Corrupt`] when it is damaged and is not the last record.
fn read_frame<'a>(
    path: &Path,
    location: &str,
    bytes: &'a [u8],
    pos: u64,
) -> Result<Option<&'a [u8]>> {
    let total = bytes.len() as u64;
    let rest = total - pos;
    let torn = |why: &str| {
        tracing::warn!(
            path = %path.display(),
            offset = pos,
            bytes = rest,
            why,
            "cutting off a torn last record of the working-memory log"
        );
    };
    let p = usize::try_from(pos).map_err(|_| corrupt(location, "file too large".into()))?;
    // A record that cannot be read is a torn write only when no whole record follows
    // it; otherwise it is damage, and cutting it off would delete intact records.
    let unreadable = |why: &str| -> Result<()> {
        if let Some(next) = next_valid_frame(bytes, p + 1) {
            return Err(corrupt(location, format!(
                "record at byte {pos} is damaged ({why}) and is followed by a valid record at byte {next}; nothing was truncated"
            )));
        }
        torn(why);
        Ok(())
    };
    if rest < FRAME_LEN {
        unreadable("short frame")?;
        return Ok(None);
    }
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(&bytes[p..p + 4]);
    let len = u64::from(u32::from_le_bytes(len_bytes));
    if len > MAX_RECORD || FRAME_LEN + len > rest {
        unreadable("record runs past the end of the file")?;
        return Ok(None);
    }
    let body = &bytes[p + 36..p + 36 + len as usize];
    if frame_hash(&len_bytes, body)[..] != bytes[p + 4..p + 36] {
        if FRAME_LEN + len == rest {
            unreadable("checksum mismatch in the last record")?;
            return Ok(None);
        }
        return Err(corrupt(location, format!(
            "record at byte {pos} fails its checksum and is followed by more records; nothing was truncated"
        )));
    }
    Ok(Some(body))
}

/// What the records of a log replay into: the sessions' entries, the number of the next
/// entry of each session, the operations recorded, the last sequence number.
#[derive(Default)]
struct Replay {
    next_seq: u64,
    sessions: HashMap<Arc<str>, Vec<Entry>>,
    operations: Operations,
    next_session_seq: HashMap<Arc<str>, u64>,
}

impl Replay {
    /// The number of the next entry of `session` (from 1), counted.
    fn number(&mut self, session: &Arc<str>) -> u64 {
        let next = self.next_session_seq.entry(session.clone()).or_insert(1);
        *next += 1;
        *next - 1
    }

    /// Replay the record read at byte `pos` of the log at `location`; its sequence numbers must
    /// follow the last one.
    fn apply(&mut self, rec: Record, pos: u64, location: &str) -> Result<()> {
        match rec {
            Record::Append {
                seq,
                session,
                role,
                call_id,
                content,
                at_ms,
            } => {
                let session: Arc<str> = Arc::from(session);
                self.push(pos, location, &session, seq, |session, session_seq| Entry {
                    seq,
                    session,
                    session_seq,
                    role,
                    call_id: call_id.map(|c| Arc::from(c.as_str())),
                    content: Content::from(content),
                    at_ms,
                    meta: None,
                })?;
            }
            Record::Clear { session, .. } => {
                self.sessions.remove(session.as_str());
            }
            Record::Batch {
                session,
                clear,
                entries,
                operation,
                at_ms,
            } => {
                let session: Arc<str> = Arc::from(session);
                if clear {
                    self.sessions.remove(&session);
                }
                for e in entries {
                    self.push(pos, location, &session, e.seq, |session, session_seq| {
                        Entry {
                            seq: e.seq,
                            session,
                            session_seq,
                            role: e.role,
                            call_id: e.call_id.map(|c| Arc::from(c.as_str())),
                            content: Content::from(e.content),
                            at_ms,
                            meta: e.meta.map(Arc::from),
                        }
                    })?;
                }
                if let Some(op) = operation {
                    self.operations
                        .entry(session)
                        .or_default()
                        .insert(op.key.clone(), op);
                }
            }
        }
        Ok(())
    }

    /// Add to `session` the entry of sequence number `seq` that `entry` builds from the session
    /// and the entry's number in it; `seq` must follow the last sequence number.
    fn push(
        &mut self,
        pos: u64,
        location: &str,
        session: &Arc<str>,
        seq: u64,
        entry: impl FnOnce(Arc<str>, u64) -> Entry,
    ) -> Result<()> {
        let next_seq = self.next_seq;
        if seq <= next_seq {
            return Err(corrupt(
                location,
                format!("record at byte {pos} has sequence {seq} after {next_seq}"),
            ));
        }
        self.next_seq = seq;
        let session_seq = self.number(session);
        self.sessions
            .entry(session.clone())
            .or_default()
            .push(entry(session.clone(), session_seq));
        Ok(())
    }
}

impl FileLog {
    /// Open (or create) the log at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<FileLog> {
        FileLog::open_with(path, StoreOptions::default())
    }

    /// Open (or create) the log at `path`, replaying it and cutting off a torn last record.
    ///
    /// Errors: [`MemoryError::Locked`] while another [`FileLog`] (in any process) has the file
    /// open; [`MemoryError::Corrupt`] when a record other than the last is damaged (the file
    /// is left untouched).
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<FileLog> {
        let path = path.as_ref().to_path_buf();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| MemoryError::io("open", &path, e))?;
        lock_exclusive(&file, &path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| MemoryError::io("read", &path, e))?;
        let location = path.display().to_string();
        let version = check_header(&mut file, &path, &location, &mut bytes)?;

        let total = bytes.len() as u64;
        let mut pos = HEADER_LEN;
        let mut recovery = Recovery::default();
        let mut replay = Replay::default();
        while pos < total {
            let Some(body) = read_frame(&path, &location, &bytes, pos)? else {
                break;
            };
            let rec: Record = serde_json::from_slice(body).map_err(|e| {
                corrupt(
                    &location,
                    format!("record at byte {pos} has a valid checksum but cannot be read: {e}"),
                )
            })?;
            replay.apply(rec, pos, &location)?;
            recovery.records += 1;
            pos += FRAME_LEN + body.len() as u64;
        }
        if pos < total {
            recovery.truncated_bytes = total - pos;
            file.set_len(pos)
                .and_then(|()| file.sync_all())
                .map_err(|e| MemoryError::io("truncate the torn end of", &path, e))?;
        }
        if version != FILE_LOG_VERSION {
            // The version field alone is rewritten in place (four bytes of one sector).
            file.seek(SeekFrom::Start(8))
                .and_then(|_| file.write_all(&FILE_LOG_VERSION.to_le_bytes()))
                .and_then(|()| file.sync_all())
                .map_err(|e| MemoryError::io("upgrade the header of", &path, e))?;
        }
        Ok(FileLog {
            name: options.name_or(|| format!("file:{}", path.display())),
            path,
            options,
            recovery,
            state: Mutex::new(State {
                file,
                len: pos,
                next_seq: replay.next_seq,
                sessions: replay.sessions,
                next_session_seq: replay.next_session_seq,
                operations: replay.operations,
                poisoned: false,
            }),
        })
    }

    /// What opening the log found.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Write one record durably at the end of the file; on failure, cut the file back.
    fn write_record(&self, st: &mut State, rec: &Record) -> Result<()> {
        if st.poisoned {
            return Err(MemoryError::Corrupt {
                location: self.path.display().to_string(),
                detail: "an earlier append failed and could not be rolled back; reopen the log"
                    .into(),
            });
        }
        let payload = serde_json::to_vec(rec).map_err(|e| MemoryError::Database {
            location: self.path.display().to_string(),
            detail: format!("could not encode a record: {e}"),
        })?;
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|l| u64::from(*l) <= MAX_RECORD)
            .ok_or(MemoryError::EntryTooLarge {
                what: "working-memory record",
                size: payload.len(),
                limit: MAX_RECORD as usize,
            })?;
        let len_bytes = len.to_le_bytes();
        let mut frame = Vec::with_capacity(payload.len() + FRAME_LEN as usize);
        frame.extend_from_slice(&len_bytes);
        frame.extend_from_slice(&frame_hash(&len_bytes, &payload));
        frame.extend_from_slice(&payload);
        let start = st.len;
        let res = st
            .file
            .seek(SeekFrom::Start(start))
            .and_then(|_| st.file.write_all(&frame))
            .and_then(|()| st.file.sync_data());
        match res {
            Ok(()) => {
                st.len = start + frame.len() as u64;
                Ok(())
            }
            Err(e) => {
                if st
                    .file
                    .set_len(start)
                    .and_then(|()| st.file.sync_data())
                    .is_err()
                {
                    st.poisoned = true;
                }
                Err(MemoryError::io("append to", &self.path, e))
            }
        }
    }
}

/// Refused before anything changes: the log keeps no session state to remove.
fn no_state_to_remove(batch: &Batch) -> Result<()> {
    if batch.remove_state.is_empty() {
        return Ok(());
    }
    Err(MemoryError::invalid(
        "batch",
        "the file log keeps no session state, so it has no state documents to remove",
    ))
}

impl WorkingMemory for FileLog {
    fn store_name(&self) -> &str {
        &self.name
    }

    fn apply(&self, session: &str, batch: Batch) -> Result<Applied> {
        check_batch(&self.options, session, &batch)?;
        no_state_to_remove(&batch)?;
        let now = self.options.now_ms();
        let mut st = self.lock();
        let held = st.sessions.get(session).map_or(&[][..], Vec::as_slice);
        check_held(session, &batch, held, st.operations.get(session), now)?;
        let cleared = if batch.clear { held.len() } else { 0 };
        if batch.entries.is_empty() && batch.operation.is_none() && cleared == 0 {
            return Ok(Applied::default());
        }
        let first = st.next_seq + 1;
        let entries: Vec<BatchEntry> = batch
            .entries
            .into_iter()
            .zip(first..)
            .map(|(e, seq)| BatchEntry {
                seq,
                role: e.role,
                call_id: e.call_id,
                content: e.content,
                meta: e.meta,
            })
            .collect();
        let operation = batch.operation.map(|mut op| {
            op.at_ms = now;
            op
        });
        let rec = Record::Batch {
            session: session.to_owned(),
            clear: batch.clear,
            entries,
            operation,
            at_ms: now,
        };
        // Written and synced before memory changes: a failed write leaves both as they were.
        self.write_record(&mut st, &rec)?;
        let Record::Batch {
            entries, operation, ..
        } = rec
        else {
            unreachable!("the record written above is a batch")
        };
        let key: Arc<str> = Arc::from(session);
        if batch.clear {
            st.sessions.remove(session);
        }
        let mut applied = Applied {
            cleared,
            entries: Vec::with_capacity(entries.len()),
        };
        for e in entries {
            st.next_seq = e.seq;
            let next = st.next_session_seq.entry(key.clone()).or_insert(1);
            let session_seq = *next;
            *next += 1;
            let stored = Entry {
                seq: e.seq,
                session: key.clone(),
                session_seq,
                role: e.role,
                call_id: e.call_id.map(|c| Arc::from(c.as_str())),
                content: Content::from(e.content),
                at_ms: now,
                meta: e.meta.map(Arc::from),
            };
            st.sessions
                .entry(key.clone())
                .or_default()
                .push(stored.clone());
            applied.entries.push(stored);
        }
        if let Some(op) = operation {
            let ops = st.operations.entry(key).or_default();
            ops.retain(|_, o| operation_live(o.at_ms, now));
            ops.insert(op.key.clone(), op);
        }
        Ok(applied)
    }

    fn operation(&self, session: &str, key: &str) -> Result<Option<Operation>> {
        check_operation_key(key)?;
        let now = self.options.now_ms();
        Ok(self
            .lock()
            .operations
            .get(session)
            .and_then(|ops| ops.get(key))
            .filter(|o| operation_live(o.at_ms, now))
            .cloned())
    }

    fn entries(&self, session: &str) -> Result<Vec<Entry>> {
        Ok(self
            .lock()
            .sessions
            .get(session)
            .cloned()
            .unwrap_or_default())
    }

    fn has_session(&self, session: &str) -> Result<bool> {
        Ok(self
            .lock()
            .sessions
            .get(session)
            .is_some_and(|v| !v.is_empty()))
    }

    fn current_exchange(&self, session: &str) -> Result<Vec<Entry>> {
        let held = self.lock();
        let all = held.sessions.get(session).map_or(&[][..], Vec::as_slice);
        Ok(all
            .iter()
            .rposition(|e| e.role == Role::User)
            .map_or_else(Vec::new, |i| all[i..].to_vec()))
    }
}
