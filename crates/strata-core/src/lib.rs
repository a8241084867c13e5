//! `strata-core`: the vocabulary every strata crate speaks.
//!
//! This crate defines the six authority layers of an agent's context (ADR-0006), the
//! [`Section`] that runtime layers 3-6 contribute, the inert identity data of layers 1-2,
//! the rendered wire format with its escaping and parser (ADR-0009), tokenizers and budgets.
//!
//! Architecture invariants kept here:
//! - Runtime content is typed by [`RuntimeLayer`], which has no variant for layer 1 or 2, so
//!   code that produces runtime sections cannot even name the identity layers (I7, ADR-0004).
//! - Identity data ([`IdentitySection`]) is plain immutable data with no authority of its own:
//!   only `strata-agentdef`'s `VerifiedAgent` carries identity into an assembly (I5, ADR-0004).
//! - No I/O happens in this crate.
#![forbid(unsafe_code)]
// Every function fits on one screen for a reader (threshold in clippy.toml); tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod budget;
mod confusables;
pub mod content;
pub mod error;
pub mod format;
pub mod identity;
pub mod layer;
pub mod mode;
pub mod provenance;
pub mod reasoning;
#[cfg(feature = "schema")]
mod schema;
pub mod section;
pub mod sql;
pub mod tokenizer;
pub mod tools;

pub use budget::{Budget, LayerBudgets, Tier};
pub use content::{Content, ContentHash};
pub use error::CoreError;
pub use identity::{IdentityLayers, IdentitySection};
pub use layer::{IdentityLayer, Layer, RuntimeLayer};
pub use mode::{AssemblyPath, ModeSet, OperationalMode, PathSet, PromptMode};
pub use provenance::{Provenance, SourceKind};
pub use reasoning::{Reasoning, ReasoningFormat};
pub use section::{
    id_digest, Keep, Phase, Role, Section, SectionBuilder, SectionId, SectionKey, Stability, Turn,
    Weight,
};
/// The small string type of section ids and keys and of provenance names and record ids.
pub use smol_str::SmolStr;
#[cfg(feature = "tiktoken")]
pub use tokenizer::TiktokenTokenizer;
pub use tokenizer::{
    separate_ascii_words, CountedSuffix, EstimateTokenizer, Prefix, ResumableTokenizer,
    ResumePoint, Tokenizer, Walked,
};
pub use tools::{AnnouncedTool, ToolName, ToolPolicy, ToolSchema, ToolUsageHint};
