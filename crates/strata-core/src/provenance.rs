//! Provenance: who produced a section, from which source, with which content hash.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::content::ContentHash;

/// The kind of source a runtime section came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "server")]
pub enum SourceKind {
    /// Built into the runtime (a built-in contributor).
    Static,
    /// From operator configuration (`strata.toml`, workspace files).
    Config,
    /// Announced by an MCP server; the server's name is kept so its sections can be cleared
    /// when it disconnects.
    Mcp(Arc<str>),
    /// Read from a memory or shared-context store.
    Store,
    /// Passed by the caller (task payload, user message).
    Caller,
}

impl SourceKind {
    /// A short stable label (`static`, `config`, `mcp:<server>`, `store`, `caller`).
    pub fn label(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for SourceKind {
    /// The label (see [`SourceKind::label`]), written without allocating.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceKind::Static => f.write_str("static"),
            SourceKind::Config => f.write_str("config"),
            SourceKind::Mcp(s) => write!(f, "mcp:{s}"),
            SourceKind::Store => f.write_str("store"),
            SourceKind::Caller => f.write_str("caller"),
        }
    }
}

/// Where a section came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The kind of source.
    pub source: SourceKind,
    /// The producer's name (a contributor id, a store name, a file path...): held inline up to
    /// 23 bytes, shared beyond (a report entry copies it per section).
    pub name: SmolStr,
    /// Hash of the content the section carries.
    pub content_hash: ContentHash,
    /// Record id inside the source, when there is one (memory id, log sequence...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<SmolStr>,
    /// When the source recorded it (Unix milliseconds), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<i64>,
    /// A retrieval score (search rank fusion), when the section came from a search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}
