//! Snapshots of a SQLite store handle's in-process indexes (ADR-0029): the int8 codes and the
//! BM25 index, written next to the database as `<file>-index` so that a new handle reads tens
//! or hundreds of megabytes in one pass instead of loading, checking and indexing every row.
//!
//! A snapshot is derived data, never the record: it names the store (`meta.store_id`) and the
//! change-log entry it reflects, and ends with a BLAKE3 hash of everything before it. A snapshot
//! that is missing, of another store, of another dimension, unreadable, or whose hash does not
//! match is ignored (the handle loads from the rows and writes a new one); a valid one is
//! brought up to date from the change log like any cache. What a search returns is still read
//! from the rows and checked against their checksums.
//!
//! The format is little-endian: the magic `STRATAIX`, a format version, the store id, the
//! change-log position, the dimension, then the two indexes as length-prefixed arrays, then
//! the 32-byte hash. It is written to a temporary file in the same folder, synced and renamed
//! into place, so readers see an old snapshot or a new one, never a mix.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"STRATAIX";
const VERSION: u32 = 1;

/// Where the snapshot of the store at `db` lives.
pub(crate) fn snapshot_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-index");
    PathBuf::from(p)
}

/// Why a snapshot was not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    #[error("reading or writing the snapshot failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the snapshot is not valid: {0}")]
    Invalid(&'static str),
}

pub(crate) type SnapResult<T> = std::result::Result<T, SnapshotError>;

/// A writer that hashes what it writes.
pub(crate) struct SnapWriter {
    out: BufWriter<File>,
    hash: blake3::Hasher,
}

impl SnapWriter {
    fn bytes(&mut self, b: &[u8]) -> SnapResult<()> {
        self.hash.update(b);
        self.out.write_all(b)?;
        Ok(())
    }

    pub(crate) fn u32(&mut self, x: u32) -> SnapResult<()> {
        self.bytes(&x.to_le_bytes())
    }

    pub(crate) fn u64(&mut self, x: u64) -> SnapResult<()> {
        self.bytes(&x.to_le_bytes())
    }

    pub(crate) fn i64(&mut self, x: i64) -> SnapResult<()> {
        self.bytes(&x.to_le_bytes())
    }

    /// A length-prefixed byte string.
    pub(crate) fn blob(&mut self, b: &[u8]) -> SnapResult<()> {
        self.u64(b.len() as u64)?;
        self.bytes(b)
    }

    pub(crate) fn i64s(&mut self, v: &[i64]) -> SnapResult<()> {
        self.u64(v.len() as u64)?;
        let buf: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.bytes(&buf)
    }

    pub(crate) fn u32s(&mut self, v: &[u32]) -> SnapResult<()> {
        self.u64(v.len() as u64)?;
        let buf: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.bytes(&buf)
    }

    pub(crate) fn f32s(&mut self, v: &[f32]) -> SnapResult<()> {
        self.u64(v.len() as u64)?;
        let buf: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.bytes(&buf)
    }
}

/// A reader that hashes what it reads and refuses lengths beyond the file.
pub(crate) struct SnapReader {
    input: BufReader<File>,
    hash: blake3::Hasher,
    left: u64,
}

impl SnapReader {
    fn bytes(&mut self, n: u64) -> SnapResult<Vec<u8>> {
        if n > self.left {
            return Err(SnapshotError::Invalid(
                "a length runs past the end of the file",
            ));
        }
        let len = usize::try_from(n).map_err(|_| SnapshotError::Invalid("length too large"))?;
        let mut buf = vec![0u8; len];
        self.input.read_exact(&mut buf)?;
        self.hash.update(&buf);
        self.left -= n;
        Ok(buf)
    }

    fn fixed<const N: usize>(&mut self) -> SnapResult<[u8; N]> {
        let b = self.bytes(N as u64)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&b);
        Ok(out)
    }

    pub(crate) fn u32(&mut self) -> SnapResult<u32> {
        Ok(u32::from_le_bytes(self.fixed()?))
    }

    pub(crate) fn u64(&mut self) -> SnapResult<u64> {
        Ok(u64::from_le_bytes(self.fixed()?))
    }

    pub(crate) fn i64(&mut self) -> SnapResult<i64> {
        Ok(i64::from_le_bytes(self.fixed()?))
    }

    pub(crate) fn blob(&mut self) -> SnapResult<Vec<u8>> {
        let n = self.u64()?;
        self.bytes(n)
    }

    fn array<const N: usize>(&mut self) -> SnapResult<Vec<[u8; N]>> {
        let n = self.u64()?;
        let total = n
            .checked_mul(N as u64)
            .ok_or(SnapshotError::Invalid("array length overflows"))?;
        let b = self.bytes(total)?;
        Ok(b.chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                a
            })
            .collect())
    }

    pub(crate) fn i64s(&mut self) -> SnapResult<Vec<i64>> {
        Ok(self
            .array::<8>()?
            .into_iter()
            .map(i64::from_le_bytes)
            .collect())
    }

    pub(crate) fn u32s(&mut self) -> SnapResult<Vec<u32>> {
        Ok(self
            .array::<4>()?
            .into_iter()
            .map(u32::from_le_bytes)
            .collect())
    }

    pub(crate) fn f32s(&mut self) -> SnapResult<Vec<f32>> {
        Ok(self
            .array::<4>()?
            .into_iter()
            .map(f32::from_le_bytes)
            .collect())
    }
}

/// The header of a snapshot: whose it is and what it reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) store_id: String,
    pub(crate) change_seq: i64,
    pub(crate) dims: u32,
}

/// Write a snapshot to `path` atomically: `body` writes the indexes after the header.
pub(crate) fn write(
    path: &Path,
    header: &Header,
    body: impl FnOnce(&mut SnapWriter) -> SnapResult<()>,
) -> SnapResult<()> {
    let dir = path
        .parent()
        .ok_or(SnapshotError::Invalid("the snapshot path has no folder"))?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut w = SnapWriter {
        out: BufWriter::with_capacity(1 << 20, tmp.reopen()?),
        hash: blake3::Hasher::new(),
    };
    w.bytes(MAGIC)?;
    w.u32(VERSION)?;
    w.blob(header.store_id.as_bytes())?;
    w.i64(header.change_seq)?;
    w.u32(header.dims)?;
    body(&mut w)?;
    let digest = *w.hash.finalize().as_bytes();
    w.out.write_all(&digest)?;
    let file = w
        .out
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)?;
    file.sync_all()?;
    tmp.persist(path).map_err(|e| SnapshotError::Io(e.error))?;
    Ok(())
}

/// Read the snapshot at `path`: its header, then `body` reads the indexes, then the hash is
/// checked. The result of `body` is returned only when the whole file hashes right.
pub(crate) fn read<T>(
    path: &Path,
    body: impl FnOnce(&Header, &mut SnapReader) -> SnapResult<T>,
) -> SnapResult<(Header, T)> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len < 32 {
        return Err(SnapshotError::Invalid("shorter than its hash"));
    }
    let mut r = SnapReader {
        input: BufReader::with_capacity(1 << 20, file),
        hash: blake3::Hasher::new(),
        left: len - 32,
    };
    if &r.fixed::<8>()? != MAGIC {
        return Err(SnapshotError::Invalid("not a strata index snapshot"));
    }
    if r.u32()? != VERSION {
        return Err(SnapshotError::Invalid("another format version"));
    }
    let store_id = String::from_utf8(r.blob()?)
        .map_err(|_| SnapshotError::Invalid("store id is not UTF-8"))?;
    let header = Header {
        store_id,
        change_seq: r.i64()?,
        dims: r.u32()?,
    };
    let value = body(&header, &mut r)?;
    if r.left != 0 {
        return Err(SnapshotError::Invalid("bytes left over after the indexes"));
    }
    let mut digest = [0u8; 32];
    r.input.read_exact(&mut digest)?;
    if digest != *r.hash.finalize().as_bytes() {
        return Err(SnapshotError::Invalid(
            "its hash does not match: the file is damaged",
        ));
    }
    Ok((header, value))
}
