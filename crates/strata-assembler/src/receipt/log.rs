//! The receipt log: a durable, append-only file of signed receipts, each entry chained to the
//! previous one by SHA-256 so that a deleted, reordered or edited entry is detected (ADR-0021).
//!
//! This is the one module of the crate that touches files; assembly itself stays pure. A
//! runtime appends each receipt after it sends the request.
//!
//! Format (text framing around opaque entry bytes):
//!
//! ```text
//! strata-receipt-log v1\n
//! <seq> <unix_ms> <len> <prev> <digest>\n<len bytes: the receipt envelope>\n
//! ...
//! ```
//!
//! `seq` counts from 0; `prev` is the previous entry's `digest` (64 zeros for the first);
//! `digest` is the hex SHA-256 of the line's first four fields as written
//! (`"<seq> <unix_ms> <len> <prev>"`), a newline, then the entry bytes. An entry's digest thus
//! covers its position, time, length, body and everything before it. Deleting the newest
//! entries is the one change a hash chain cannot show by itself: keep the head digest
//! [`ReceiptLog::append`] returns somewhere else and pass it to [`audit`] as `expected_head`.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use strata_agentdef::TrustStore;

use crate::receipt::{self, sha256_hex, ReceiptError, VerifiedReceipt};

/// The first line of every receipt log.
pub const LOG_HEADER: &str = "strata-receipt-log v1\n";
/// The `prev` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Largest entry accepted (a receipt envelope).
pub const MAX_ENTRY_BYTES: u64 = 1024 * 1024;

/// Why a receipt log could not be opened, appended to or audited. Each kind of tampering has
/// its own variant (ADR-0021).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// Reading or writing the file failed.
    #[error("{}: {why}; check the path and its permissions", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        why: String,
    },
    /// The file does not start with [`LOG_HEADER`].
    #[error("not a strata receipt log (the first line is not `strata-receipt-log v1`)")]
    BadHeader,
    /// An entry's framing is broken: a header line that does not parse, or a body shorter than
    /// its length.
    #[error("entry at byte {offset} is malformed: {why}; the file was cut short or edited")]
    Malformed {
        /// Byte offset of the entry.
        offset: u64,
        /// What is wrong.
        why: String,
    },
    /// An entry's bytes do not have the digest its header records.
    #[error("entry {seq} was edited: its digest is {found} but the log records {recorded}")]
    Edited {
        /// Sequence number.
        seq: u64,
        /// Recorded digest.
        recorded: String,
        /// Digest of the bytes found.
        found: String,
    },
    /// Entries are missing: a sequence number is skipped and never appears.
    #[error("entry {expected} was deleted: the entry at position {expected} is {found}")]
    Deleted {
        /// The missing sequence number.
        expected: u64,
        /// The sequence number found in its place.
        found: u64,
    },
    /// Entries are out of order (or one was copied): the expected entry appears elsewhere.
    #[error("entries were reordered: position {position} holds entry {found}, entry {position} is elsewhere in the log")]
    Reordered {
        /// Position in the file (counting from 0).
        position: u64,
        /// The sequence number found there.
        found: u64,
    },
    /// An entry does not point at the digest of the one before it.
    #[error("the chain is broken at entry {seq}: it follows {recorded} but the entry before it has digest {previous}")]
    ChainBroken {
        /// Sequence number.
        seq: u64,
        /// The `prev` it records.
        recorded: String,
        /// The previous entry's digest.
        previous: String,
    },
    /// A receipt in the log does not verify against the trust store.
    #[error("entry {seq}: {source}")]
    Receipt {
        /// Sequence number.
        seq: u64,
        /// Why the receipt was refused.
        #[source]
        source: ReceiptError,
    },
    /// The log does not end at the head digest kept elsewhere: entries were deleted from its
    /// end, or another log was given.
    #[error("the log ends at entry {entries} with digest {found}, not at the expected head {expected}: entries were removed from its end or this is another log")]
    HeadMismatch {
        /// Expected head digest.
        expected: String,
        /// Head found.
        found: String,
        /// Entries found.
        entries: u64,
    },
    /// Another process holds the log open for appending: two writers would interleave their
    /// entries and break the chain.
    #[error("{} is open for appending by another process; one writer per log (give each runtime its own log)", path.display())]
    Locked {
        /// The log.
        path: PathBuf,
    },
    /// The PostgreSQL receipt log could not be reached, read or written.
    #[error("receipt log in PostgreSQL schema {schema}: {why}")]
    Database {
        /// The schema holding the log.
        schema: String,
        /// What went wrong and what to do.
        why: String,
    },
    /// The PostgreSQL schema has no receipt log: it is created once, explicitly.
    #[error("PostgreSQL schema {schema} has no receipt log; create it once with `strata serve --init-receipt-log`")]
    NotInitialised {
        /// The schema.
        schema: String,
    },
    /// An entry is larger than [`MAX_ENTRY_BYTES`].
    #[error("entry of {size} bytes is larger than the {MAX_ENTRY_BYTES} bytes a receipt may take")]
    TooLarge {
        /// Its size.
        size: u64,
    },
}

impl LogError {
    /// A stable name of the failure.
    pub fn cause(&self) -> &'static str {
        match self {
            LogError::Io { .. } => "io",
            LogError::BadHeader => "bad_header",
            LogError::Malformed { .. } => "malformed",
            LogError::Edited { .. } => "edited",
            LogError::Deleted { .. } => "deleted",
            LogError::Reordered { .. } => "reordered",
            LogError::ChainBroken { .. } => "chain_broken",
            LogError::Receipt { .. } => "receipt",
            LogError::HeadMismatch { .. } => "head_mismatch",
            LogError::TooLarge { .. } => "too_large",
            LogError::Locked { .. } => "locked",
            LogError::Database { .. } => "database",
            LogError::NotInitialised { .. } => "not_initialised",
        }
    }
}

fn io(path: &Path, e: &std::io::Error) -> LogError {
    LogError::Io {
        path: path.to_owned(),
        why: e.to_string(),
    }
}

/// One framed entry, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Sequence number.
    pub seq: u64,
    /// When it was appended, Unix milliseconds (as the appending runtime's clock said).
    pub unix_ms: i64,
    /// The previous entry's digest.
    pub prev: String,
    /// This entry's recorded digest.
    pub digest: String,
    /// The receipt envelope bytes.
    pub body: Vec<u8>,
    /// Byte offset of the entry in the file (0 for entries read from PostgreSQL).
    pub offset: u64,
}

/// Refuse an entry larger than [`MAX_ENTRY_BYTES`].
pub(crate) fn check_size(envelope: &[u8]) -> Result<(), LogError> {
    match envelope.len() as u64 {
        size if size > MAX_ENTRY_BYTES => Err(LogError::TooLarge { size }),
        _ => Ok(()),
    }
}

pub(crate) fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) fn entry_digest(seq: u64, unix_ms: i64, body: &[u8], prev: &str) -> String {
    let mut m = format!("{seq} {unix_ms} {} {prev}\n", body.len()).into_bytes();
    m.extend_from_slice(body);
    sha256_hex(&m)
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Split a log's bytes into framed entries without checking the chain.
pub fn parse_entries(bytes: &[u8]) -> Result<Vec<Entry>, LogError> {
    let rest = bytes
        .strip_prefix(LOG_HEADER.as_bytes())
        .ok_or(LogError::BadHeader)?;
    let mut entries = Vec::new();
    let mut pos = LOG_HEADER.len();
    let mut rest = rest;
    while !rest.is_empty() {
        let offset = pos as u64;
        let bad = |why: &str| LogError::Malformed {
            offset,
            why: why.to_owned(),
        };
        let nl = rest
            .iter()
            .take(256)
            .position(|b| *b == b'\n')
            .ok_or_else(|| bad("no complete header line"))?;
        let line = std::str::from_utf8(&rest[..nl]).map_err(|_| bad("header is not UTF-8"))?;
        let f: Vec<&str> = line.split(' ').collect();
        let [seq, ms, len, prev, digest] = f[..] else {
            return Err(bad("a header line has five fields"));
        };
        let seq: u64 = seq.parse().map_err(|_| bad("sequence is not a number"))?;
        let unix_ms: i64 = ms.parse().map_err(|_| bad("time is not a number"))?;
        let len: u64 = len.parse().map_err(|_| bad("length is not a number"))?;
        if len > MAX_ENTRY_BYTES {
            return Err(LogError::TooLarge { size: len });
        }
        if !is_hex64(prev) || !is_hex64(digest) {
            return Err(bad("digests are 64 lower-case hex digits"));
        }
        let body_start = nl + 1;
        let body_end = body_start + len as usize;
        if rest.len() < body_end + 1 {
            return Err(bad("the entry is shorter than its length"));
        }
        if rest[body_end] != b'\n' {
            return Err(bad("the entry does not end where its length says"));
        }
        entries.push(Entry {
            seq,
            unix_ms,
            prev: prev.to_owned(),
            digest: digest.to_owned(),
            body: rest[body_start..body_end].to_vec(),
            offset,
        });
        pos += body_end + 1;
        rest = &rest[body_end + 1..];
    }
    Ok(entries)
}

/// What an audit found.
#[derive(Debug, Clone)]
pub struct Audit {
    /// Entries, all chained.
    pub entries: Vec<Entry>,
    /// Digest of the last entry ([`GENESIS`] for an empty log).
    pub head: String,
    /// The verified receipts, in order, when a trust store was given.
    pub receipts: Vec<VerifiedReceipt>,
}

/// Check a log's chain: sequence numbers, digests and links; with `trust`, every receipt's
/// signature; with `expected_head`, that the log ends there (ADR-0021).
pub fn audit_bytes(
    bytes: &[u8],
    trust: Option<&TrustStore>,
    expected_head: Option<&str>,
) -> Result<Audit, LogError> {
    audit_entries(parse_entries(bytes)?, trust, expected_head)
}

/// Check a chain of entries, however they were stored (the file log, or the PostgreSQL log of
/// `receipt_log_pg`): sequence numbers, digests and links; with `trust`, every receipt's
/// signature; with `expected_head`, that the chain ends there (ADR-0021).
pub fn audit_entries(
    entries: Vec<Entry>,
    trust: Option<&TrustStore>,
    expected_head: Option<&str>,
) -> Result<Audit, LogError> {
    let mut prev = GENESIS.to_owned();
    let mut receipts = Vec::new();
    for (pos, e) in entries.iter().enumerate() {
        let pos = pos as u64;
        if e.seq != pos {
            // The entry that belongs here is elsewhere (reordered, or a copy), or nowhere.
            return Err(if entries.iter().any(|o| o.seq == pos) || e.seq < pos {
                LogError::Reordered {
                    position: pos,
                    found: e.seq,
                }
            } else {
                LogError::Deleted {
                    expected: pos,
                    found: e.seq,
                }
            });
        }
        let found = entry_digest(e.seq, e.unix_ms, &e.body, &e.prev);
        if found != e.digest {
            return Err(LogError::Edited {
                seq: e.seq,
                recorded: e.digest.clone(),
                found,
            });
        }
        if e.prev != prev {
            return Err(LogError::ChainBroken {
                seq: e.seq,
                recorded: e.prev.clone(),
                previous: prev,
            });
        }
        if let Some(t) = trust {
            receipts.push(
                receipt::verify(&e.body, t)
                    .map_err(|source| LogError::Receipt { seq: e.seq, source })?,
            );
        }
        prev = e.digest.clone();
    }
    if let Some(h) = expected_head.filter(|h| *h != prev) {
        return Err(LogError::HeadMismatch {
            expected: h.to_owned(),
            found: prev,
            entries: entries.len() as u64,
        });
    }
    tracing::info!(entries = entries.len(), head = %prev, "receipt log audited");
    Ok(Audit {
        entries,
        head: prev,
        receipts,
    })
}

/// [`audit_bytes`] on a file.
pub fn audit(
    path: &Path,
    trust: Option<&TrustStore>,
    expected_head: Option<&str>,
) -> Result<Audit, LogError> {
    let bytes = std::fs::read(path).map_err(|e| io(path, &e))?;
    audit_bytes(&bytes, trust, expected_head)
}

/// Where a log's torn final record starts, if the log is intact up to a final record that is
/// an incomplete prefix of a record (a write cut short by a crash). `None` for a log that parses,
/// and for any other damage, which must be refused, not repaired.
fn torn_tail(bytes: &[u8]) -> Option<u64> {
    let Err(LogError::Malformed { offset, .. }) = parse_entries(bytes) else {
        return None;
    };
    let start = usize::try_from(offset).ok()?;
    parse_entries(&bytes[..start]).ok()?;
    let tail = &bytes[start..];
    let Some(nl) = tail.iter().position(|b| *b == b'\n') else {
        // An incomplete header line: only digits, spaces and hex may be there.
        return tail
            .iter()
            .all(|b| b.is_ascii_hexdigit() || *b == b' ' || *b == b'-')
            .then_some(offset);
    };
    let line = std::str::from_utf8(&tail[..nl]).ok()?;
    let f: Vec<&str> = line.split(' ').collect();
    let [_, _, len, prev, digest] = f[..] else {
        return None;
    };
    let len: usize = len.parse().ok()?;
    let complete = nl + 1 + len + 1;
    (is_hex64(prev) && is_hex64(digest) && tail.len() < complete).then_some(offset)
}

/// A receipt log open for appending.
#[derive(Debug)]
pub struct ReceiptLog {
    path: PathBuf,
    file: File,
    next_seq: u64,
    head: String,
}

/// Where an appended entry landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Its sequence number.
    pub seq: u64,
    /// Its digest: the new head of the log.
    pub digest: String,
}

impl ReceiptLog {
    /// Open a log for appending, creating it if missing. An existing log's chain is audited
    /// first (signatures are not checked here), so nothing is appended to a tampered log.
    ///
    /// The writer holds an exclusive lock on the file while the log is open: a second writer,
    /// in this process or another, is refused with [`LogError::Locked`].
    pub fn open(path: &Path) -> Result<ReceiptLog, LogError> {
        ReceiptLog::open_inner(path, false).map(|(log, _)| log)
    }

    /// [`ReceiptLog::open`] after a crash: a final record that a crash cut short (its header
    /// line or body incomplete, everything before it intact) is removed, and the number of
    /// bytes removed is returned. Such a record was never acknowledged: [`ReceiptLog::append`]
    /// returns only after the whole record is on disk. Any other damage is refused as by
    /// [`ReceiptLog::open`].
    pub fn open_after_crash(path: &Path) -> Result<(ReceiptLog, u64), LogError> {
        ReceiptLog::open_inner(path, true)
    }

    fn open_inner(path: &Path, repair_tail: bool) -> Result<(ReceiptLog, u64), LogError> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)
            .map_err(|e| io(path, &e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LogError::Locked {
                    path: path.to_owned(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(path, &e)),
        }
        let mut removed = 0;
        if repair_tail {
            let bytes = std::fs::read(path).map_err(|e| io(path, &e))?;
            if let Some(cut) = torn_tail(&bytes) {
                removed = bytes.len() as u64 - cut;
                tracing::warn!(path = %path.display(), bytes = removed, "removing a receipt-log record a crash cut short (it was never acknowledged)");
                file.set_len(cut)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io(path, &e))?;
            }
        }
        let len = file.metadata().map_err(|e| io(path, &e))?.len();
        let (next_seq, head) = if len == 0 {
            file.write_all(LOG_HEADER.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| io(path, &e))?;
            (0, GENESIS.to_owned())
        } else {
            let a = audit(path, None, None)?;
            (a.entries.len() as u64, a.head)
        };
        Ok((
            ReceiptLog {
                path: path.to_owned(),
                file,
                next_seq,
                head,
            },
            removed,
        ))
    }

    /// Append one receipt envelope (the bytes of [`crate::receipt::SignedReceipt::to_json`]) and sync
    /// it to disk. Returns the entry's sequence number and the new head digest.
    pub fn append(&mut self, envelope: &[u8]) -> Result<Appended, LogError> {
        self.append_at(envelope, unix_ms_now())
    }

    /// [`ReceiptLog::append`] with the entry time given (imports of older receipts, fixtures).
    pub fn append_at(&mut self, envelope: &[u8], unix_ms: i64) -> Result<Appended, LogError> {
        check_size(envelope)?;
        let seq = self.next_seq;
        let digest = entry_digest(seq, unix_ms, envelope, &self.head);
        let mut rec = format!(
            "{seq} {unix_ms} {} {} {digest}\n",
            envelope.len(),
            self.head
        )
        .into_bytes();
        rec.extend_from_slice(envelope);
        rec.push(b'\n');
        // One write of the whole record, then a sync: a crash leaves a short tail that the
        // next open refuses rather than a silently half-written entry.
        self.file
            .write_all(&rec)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io(&self.path, &e))?;
        self.next_seq += 1;
        self.head = digest.clone();
        tracing::debug!(seq, head = %digest, "receipt appended");
        Ok(Appended { seq, digest })
    }

    /// The current head digest.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// Entries in the log.
    pub fn len(&self) -> u64 {
        self.next_seq
    }

    /// True when no entry was appended yet.
    pub fn is_empty(&self) -> bool {
        self.next_seq == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_with(dir: &Path, n: usize) -> (PathBuf, Vec<u64>) {
        let path = dir.join("receipts.log");
        let mut log = ReceiptLog::open(&path).expect("open");
        let mut ends = Vec::new();
        for i in 0..n {
            log.append_at(format!("{{\"entry\":{i}}}").as_bytes(), 1_700_000_000_000)
                .expect("append");
            ends.push(std::fs::metadata(&path).expect("meta").len());
        }
        (path, ends)
    }

    /// One writer per log: a second open for appending is refused while the first is open.
    /// Verifies ADR-0021.
    #[test]
    fn a_second_writer_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("r.log");
        let first = ReceiptLog::open(&path).expect("open");
        let second = ReceiptLog::open(&path).expect_err("a second writer");
        assert_eq!(second.cause(), "locked", "{second}");
        drop(first);
        ReceiptLog::open(&path).expect("free again");
    }

    /// Every way a crash can cut the final record short is repaired by `open_after_crash`
    /// (and refused by `open`); damage anywhere else is never repaired. Verifies ADR-0021.
    #[test]
    fn a_torn_final_record_is_removed_and_nothing_else_is_repaired() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, ends) = log_with(dir.path(), 3);
        let full = std::fs::read(&path).expect("read");
        let torn_from = ends[1] as usize;
        for cut in torn_from + 1..full.len() {
            let p = dir.path().join(format!("cut-{cut}.log"));
            std::fs::write(&p, &full[..cut]).expect("write");
            assert!(
                ReceiptLog::open(&p).is_err(),
                "strict open accepted a cut at {cut}"
            );
            let (log, removed) = ReceiptLog::open_after_crash(&p).expect("repaired");
            assert_eq!(log.len(), 2, "cut at {cut}");
            assert_eq!(removed, (cut - torn_from) as u64);
            assert_eq!(std::fs::read(&p).expect("read"), full[..torn_from]);
        }
        // An edited byte in an earlier entry is not a torn tail.
        let mut edited = full.clone();
        edited[ends[0] as usize + 3] ^= 0x01;
        let p = dir.path().join("edited.log");
        std::fs::write(&p, &edited).expect("write");
        assert!(ReceiptLog::open_after_crash(&p).is_err());
        assert_eq!(std::fs::read(&p).expect("read"), edited, "nothing was cut");
        // A whole log is opened as it is.
        let (log, removed) = ReceiptLog::open_after_crash(&path).expect("open");
        assert_eq!((log.len(), removed), (3, 0));
    }
}
