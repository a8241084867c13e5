//! Where a goal book is kept: a JSON file written atomically, or a versioned [`GoalStore`]
//! shared by processes, and the reading of a stored book.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::error::GoalError;
use super::model::{GoalBook, BOOK_VERSION};

/// A versioned store of one scope's goal book (for example a session's, in the runtime's
/// database), so that every process sharing it sees the same goals (ADR-0016).
///
/// The book travels as JSON text; a write succeeds only if the stored version is still the one
/// that was read, which is how concurrent writers in different processes keep each other's
/// updates.
pub trait GoalStore: Send + Sync {
    /// A name for messages (the store and the scope).
    fn describe(&self) -> String;
    /// The stored book and its version, if any.
    fn load(&self) -> Result<Option<(String, u64)>, GoalError>;
    /// Store `json` if the stored version is `expected` (`None`: nothing stored yet); the new
    /// version, or `None` when another writer came first.
    fn save(&self, json: &str, expected: Option<u64>) -> Result<Option<u64>, GoalError>;
}

/// A goal store and the version of the book last read from it.
pub(super) type StoreLink = (Arc<dyn GoalStore>, Mutex<Option<u64>>);

/// How many times an update is retried against a [`GoalStore`] that other writers change.
pub(super) const STORE_ATTEMPTS: u32 = 16;

/// A goal book from its JSON text, of the supported version.
pub(super) fn parse_book(json: &str) -> Result<GoalBook, String> {
    let book: GoalBook = serde_json::from_str(json).map_err(|e| e.to_string())?;
    if book.version != BOOK_VERSION {
        return Err(format!(
            "version {} is not the supported version {BOOK_VERSION}",
            book.version
        ));
    }
    Ok(book)
}

/// Write `book` to `path` through a temporary file in the same folder, flushed to disk, then
/// renamed over the old file, so a crash leaves either the old or the new file, never half.
pub(super) fn save_atomically(path: &Path, book: &GoalBook) -> Result<(), GoalError> {
    use std::io::Write;
    let io = |source| GoalError::Io {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec_pretty(book).map_err(|e| GoalError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "goals.json".into());
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}
