//! The one error type of every memory store, embedder and reader in this crate.
//!
//! Each message says what was wrong and what to do about it. Store failures are never
//! papered over: a corrupt file, a schema from another version or a lost connection is an
//! error the caller sees, never an empty result or a silently recreated store (ADR-0012).

use std::path::PathBuf;

/// Shorthand for results of this crate.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// Something a memory store, embedder or Markdown reader could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The store's file or database is damaged or is not a store at all.
    #[error("the memory store at {location} is corrupt or not a strata store ({detail}); restore it from a backup or move it aside; strata never recreates a damaged store by itself")]
    Corrupt {
        /// The file path or connection description.
        location: String,
        /// What was found.
        detail: String,
    },
    /// The store was written with a schema version this build does not know.
    #[error("the memory store at {location} has schema version {found}, but this build of strata expects version {expected}; use a strata release that matches the store, or migrate the store with a newer release")]
    SchemaVersionMismatch {
        /// The file path or connection description.
        location: String,
        /// The version recorded in the store.
        found: i64,
        /// The version this build writes.
        expected: i64,
    },
    /// The connection to a database server was lost or could not be made.
    #[error("lost the connection to the memory store at {location} ({detail}); check that the server is running and reachable, then retry; the operation may not have been applied")]
    ConnectionLost {
        /// The server description (never contains a password).
        location: String,
        /// What the client reported.
        detail: String,
    },
    /// An entry, memory or fact is larger than the configured limit.
    #[error("{what} is {size} bytes, over the limit of {limit} bytes; store a summary or a reference instead, or raise the store's entry size limit")]
    EntryTooLarge {
        /// What was too large (`working-memory entry`, `memory`, `shared fact`).
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// Vectors of different lengths met: an embedder and a store, or a store and a query.
    #[error("embedding dimension mismatch: {context} has {expected} dimensions but {found} were given; use the embedder the store was created with, or create a new store for the new embedder")]
    DimensionMismatch {
        /// Where the mismatch was found.
        context: String,
        /// The dimension the store or request expects.
        expected: usize,
        /// The dimension that was given.
        found: usize,
    },
    /// The store was created with another embedder (another model, or another dimension):
    /// its vectors and the given embedder's cannot be ranked together, so the store is not
    /// opened and nothing is written (ADR-0046).
    #[error("the memory store at {location} was created with the embedder `{stored}` ({stored_dims} dimensions) and cannot be used with `{given}` ({given_dims} dimensions): vectors of two embedders are not comparable, so nothing was written; set [memory.embedder] in strata.toml back to the store's embedder, or use a new store for the new one and import the memories into it")]
    EmbedderMismatch {
        /// The file path or connection description.
        location: String,
        /// The embedder the store was created with.
        stored: String,
        /// Its dimension.
        stored_dims: usize,
        /// The embedder it was opened with.
        given: String,
        /// Its dimension.
        given_dims: usize,
    },
    /// An argument that is not valid (an empty session id, a bad tag, a tool result without
    /// its call...).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// Why, and what is accepted.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("could not {action} {}: {source}; check that the path exists and is writable", path.display())]
    Io {
        /// What was being done (`open`, `append to`, `read`...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Any other failure reported by a database.
    #[error("the memory store at {location} reported an error: {detail}")]
    Database {
        /// The file path or connection description.
        location: String,
        /// The database's message.
        detail: String,
    },
    /// Another handle (in this process or another one) is writing to the store, and the store
    /// allows one writer at a time (ADR-0012).
    #[error("the memory store at {location} is already open for writing by another handle or process ({detail}); close the other writer first, or give each writer its own file")]
    Locked {
        /// The file path.
        location: String,
        /// What the operating system reported.
        detail: String,
    },
    /// A batch expected the session's newest entry to be another one: someone else changed the
    /// session meanwhile (ADR-0031). Nothing was written.
    #[error("session `{session}` changed while this operation was prepared (expected newest entry {}, found {}); read the session again and retry", seq_name(*expected), seq_name(*found))]
    SessionChanged {
        /// The session.
        session: String,
        /// The newest entry the batch expected.
        expected: Option<u64>,
        /// The newest entry found.
        found: Option<u64>,
    },
    /// The session already holds a record of an operation under this key (ADR-0031). Nothing
    /// was written; read the record with `WorkingMemory::operation`.
    #[error("session `{session}` already recorded an operation under key `{key}`; a repeat gets the first answer, another operation needs another key")]
    OperationExists {
        /// The session.
        session: String,
        /// The key.
        key: String,
    },
    /// An embedder failed to produce vectors.
    #[error("the embedder `{embedder}` failed: {detail}")]
    Embedder {
        /// The embedder's name.
        embedder: String,
        /// What went wrong and what to check.
        detail: String,
    },
}

/// A sequence number for a message: `none` for an empty session.
fn seq_name(seq: Option<u64>) -> String {
    seq.map_or_else(|| "none".to_owned(), |s| s.to_string())
}

impl MemoryError {
    /// An [`MemoryError::Invalid`] error.
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> MemoryError {
        MemoryError::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// An [`MemoryError::Io`] error.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> MemoryError {
        MemoryError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// True when the error says the store's connection was lost (the operation may be retried
    /// once the server is back).
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, MemoryError::ConnectionLost { .. })
    }
}
