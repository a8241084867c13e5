//! `strata-memory`: the stores behind the runtime layers of an agent's context (ADR-0012).
//!
//! - Layer 3, shared context: facts the platform writes ([`SharedContextWriter`]) and agents
//!   only read ([`SharedContextReader`]).
//! - Layer 5, working memory: the append-only session log ([`WorkingMemory`]), from which the
//!   newest entries that fit a token budget are chosen without ever splitting a tool call from
//!   its result.
//! - Layer 6, long-term memory: persistent memories found by hybrid search
//!   ([`LongTermMemory`]): BM25 and vector similarity fused by reciprocal rank.
//!
//! Everything read from a store is untrusted content: it reaches the assembler as sections
//! with [`strata_core::SourceKind::Store`] provenance and is fenced there (ADR-0006, ADR-0009).
//! Store failures are typed ([`MemoryError`]) and never silently hidden.
//!
//! The paved path: one SQLite file, the built-in embedder, contributors for the registry.
//!
//! ```
//! use std::sync::Arc;
//! use strata_memory::{
//!     LongTermMemory, LongTermMemoryContributor, NewEntry, NewMemory, SearchOptions,
//!     SqliteStore, WorkingMemory,
//! };
//!
//! let dir = tempfile::tempdir()?;
//! let store = Arc::new(SqliteStore::open(dir.path().join("memory.db"))?);
//! store.put(NewMemory::new("ada", "The staging deploy needs the VPN.").with_tags(["ops"]))?;
//! let hits = store.search("how do I deploy to staging?", &SearchOptions::top(3).agent("ada"))?;
//! assert_eq!(hits[0].record.content.as_str(), "The staging deploy needs the VPN.");
//!
//! store.append("session-1", NewEntry::user("Deploy the fix to staging, please."))?;
//! // Register with the runtime's `strata_registry::Registry`:
//! let _layer6 = LongTermMemoryContributor::new(store.clone(), SearchOptions::top(5));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
// Every function fits on one screen for a reader (threshold in clippy.toml); tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod bm25;
pub mod clock;
pub mod contrib;
pub mod embed;
pub mod error;
pub mod filelog;
pub mod inmem;
mod lexical;
pub mod long_term;
pub mod markdown;
pub mod options;
#[cfg(feature = "postgres")]
pub mod pg;
mod quant;
pub mod shared;
mod snapshot;
pub mod sqlite;
pub mod state;
pub mod text;
pub mod working;

pub use clock::{Clock, ManualClock, SystemClock};
pub use contrib::{
    EpisodicContributor, LongTermMemoryContributor, MemoryIndexContributor,
    SessionFilesContributor, SharedFactsContributor, StickyFacts, StoredGoals,
    WorkingMemoryContributor, EPISODE_TAG,
};
#[cfg(feature = "http")]
pub use embed::OpenAiEmbedder;
pub use embed::{
    check_dims, embed_checked, embedder_from_config, embedder_from_config_with, Embedder,
    HashEmbedder, MAX_DIMS,
};
pub use error::{MemoryError, Result};
pub use filelog::FileLog;
pub use inmem::InMemoryStore;
pub use long_term::{
    check_tag, reciprocal_rank_fusion, ListOptions, LongTermMemory, MemoryId, MemoryRecord,
    NewMemory, SearchHit, SearchMode, SearchOptions, RRF_K,
};
pub use markdown::{IndexLimits, MemoryIndex, NoteGraph, WalkOptions};
pub use options::{StoreOptions, DEFAULT_MAX_ENTRY_BYTES};
#[cfg(feature = "postgres")]
pub use pg::PgStore;
pub use shared::{Fact, Scope, SharedContext, SharedContextReader, SharedContextWriter};
pub use sqlite::{IntegrityFinding, IntegrityReport, SqliteStore, VectorCacheStats};
pub use state::{
    record_session_file, record_session_file_once, session_file_operation, session_files,
    FileAction, FileOperation, FileRecorded, SessionFile, SessionState, StateDoc,
};
/// `[memory.embedder]` of `strata.toml`, which [`embedder_from_config`] reads.
pub use strata_registry::EmbedderConfig;
pub use working::{
    check_links, check_operation_key, select_recent, Applied, Batch, Entry, EntryMeta, NewEntry,
    Operation, Tail, WorkingMemory, MAX_META_BYTES, OPERATION_TTL_MS,
};
