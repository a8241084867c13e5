//! `strata-assembler`: the facade platform teams depend on. A [`Runtime`] holds one verified
//! agent, its memory stores and its contributors; a [`Session`] turns each user message into
//! the request a provider takes, through the Context Assembler, the single enforcement point
//! for layer priority, identity immutability, exact token budgets and fencing of untrusted
//! content (ADR-0006).
//!
//! ```no_run
//! use strata_assembler::prelude::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let trust = TrustStore::read("trust.toml".as_ref())?;
//! let agent = Loader::new(&trust, &RollbackGuard::open("rollback.json")?)
//!     .load_file("agent.signed.json".as_ref())?;
//! let runtime = Runtime::builder(agent)
//!     .provider(Provider::Anthropic, "claude-sonnet-4-5")
//!     .sqlite(".strata/memory.db")
//!     .build()?;
//! let session = runtime.session("s1");
//! let turn = session.prepare("What does notes.txt say?", &TurnOptions::default())?;
//! // Send `turn.body` with the provider's SDK, then record what the model said:
//! session.record_reply(&Reply::text("It says deploys freeze on Fridays."))?;
//! # let _ = turn;
//! # Ok(()) }
//! ```
//!
//! The rest is grouped by what it is for:
//!
//! - [`session`]: the session API ([`Runtime`], [`Session`], turns, replies, tool results,
//!   goals and the registry's events);
//! - [`agent`]: loading and verifying signed agent definitions;
//! - [`assemble`]: the assembler itself, for callers that gather their own sections: the
//!   request, the sections and their layers, the report and the provider formats;
//! - [`receipt`]: signed receipts of what was sent, and their logs;
//! - [`memory`]: the memory stores' types a runtime hands in or reads back.
//!
//! [`prelude`] holds the names of a first turn; they are also at the crate root.
//!
//! Architecture invariants: assembly is pure (no I/O, no clock, no randomness); identity is
//! taken only from a [`VerifiedAgent`]; runtime sections are always fenced and escaped.
#![forbid(unsafe_code)]
// Every function fits on a screen (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod assemble;
mod error;
mod input;
mod output;
mod per_layer;
mod provider;
pub mod receipt;
mod report;
mod request;
pub mod session;

/// Loading and verifying signed agent definitions (ADR-0017): the only way to a
/// [`VerifiedAgent`].
pub mod agent {
    pub use strata_agentdef::{
        AgentDefError, Expiry, KeyPair, Loader, RollbackGuard, TrustStore, VerifiedAgent,
    };
}

/// The memory stores' types a runtime hands in or reads back (ADR-0016).
pub mod memory {
    pub use strata_memory::{
        Entry, FileAction, LongTermMemory, MemoryId, NewMemory, SearchOptions, SessionFile,
        SqliteStore,
    };
}

/// The names of a first turn: a runtime, a session, a turn and a reply, and the agent they
/// are built from.
pub mod prelude {
    pub use crate::agent::{Loader, RollbackGuard, TrustStore, VerifiedAgent};
    pub use crate::assemble::{AnnouncedTool, Provider, ToolName};
    pub use crate::session::{
        PreparedTurn, Reply, Runtime, RuntimeBuilder, Session, SessionError, ToolCall, ToolOutput,
        TurnOptions,
    };
}

pub use prelude::*;
