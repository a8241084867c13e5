//! `strata-assembler`: the Context Assembler, the single enforcement point for layer priority,
//! identity immutability, exact token budgets and fencing of untrusted content (ADR-0006).
//!
//! This is the crate platform teams depend on; it re-exports the paved path.
//!
//! ```no_run
//! use strata_assembler::{Assembler, AssemblyRequest, Loader, RollbackGuard, RuntimeLayer, Section, TrustStore};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let trust = TrustStore::read("trust.toml".as_ref())?;
//! let guard = RollbackGuard::open("rollback.json")?;
//! let agent = Loader::new(&trust, &guard).load_file("agent.signed.json".as_ref())?;
//! let assembler = Assembler::o200k();
//! let memory = Section::builder(RuntimeLayer::LongTermMemory, "memory.1", "The user prefers metric units.")?.build();
//! let ctx = assembler.assemble(&agent, &AssemblyRequest { sections: vec![memory], ..Default::default() })?;
//! assert!(ctx.text().starts_with(agent.identity_text()));
//! # Ok(()) }
//! ```
//!
//! Architecture invariants: assembly is pure (no I/O, no clock, no randomness); identity is
//! taken only from a [`VerifiedAgent`]; runtime sections are always fenced and escaped.
#![forbid(unsafe_code)]

mod assemble;
pub mod error;
pub mod input;
pub mod output;
mod per_layer;
pub mod provider;
pub mod receipt;
pub mod receipt_log;
#[cfg(feature = "postgres")]
pub mod receipt_log_pg;
pub mod receipt_signer;
pub mod report;
pub mod request;
pub mod session;

pub use assemble::{narrowed_tools, Assembler, CacheStats, TOOL_CATALOG_ID, TOOL_CATALOG_KEY};
pub use error::AssembleError;
pub use input::{RuntimeInput, SectionSpec, TurnSpec};
pub use output::AssembledContext;
pub use provider::{
    Block, Conversation, Message, MessageKind, MessageRole, PairPolicy, Provider, ProviderOptions,
    RequestError, RequestParams, RequestTool, SystemRole, ToolDescriptions,
};
pub use receipt::{
    body_bytes, ReceiptError, Receipted, ReceiptedError, SignedReceipt, Statement, VerifiedReceipt,
};
pub use receipt_log::{Audit, LogError, ReceiptLog};
#[cfg(feature = "postgres")]
pub use receipt_log_pg::PgReceiptLog;
pub use receipt_signer::{ReceiptSigner, ReceiptSink, SignerError};
pub use report::{
    DropReason, FilterReason, RefusalCause, RefusedTool, Report, SchemaTextRemoved, SectionReport,
    SectionStatus,
};
pub use request::{AssemblyRequest, BudgetSpec, Invisible, RenderOptions};
pub use session::{
    OperationId, Outcome, PreparedTurn, Reply, Runtime, RuntimeBuilder, Session, SessionError,
    StoreSpec, ToolCall, ToolOutput, ToolRun, TurnOptions,
};
pub use strata_memory::{
    FileAction, LongTermMemory, MemoryId, NewMemory, SearchOptions, SessionFile, SqliteStore,
};
pub use strata_registry::{
    AssistantOutput, Config, GoalManager, GoalPriority, MarkerReport, Registry, RegistryEvent,
};

pub use strata_agentdef::{
    AgentDefError, Expiry, KeyPair, Loader, RollbackGuard, TrustStore, VerifiedAgent,
};
pub use strata_core::format::{parse, Encoding, Parsed};
#[cfg(feature = "tiktoken")]
pub use strata_core::TiktokenTokenizer;
pub use strata_core::{
    AnnouncedTool, AssemblyPath, Budget, Content, Keep, Layer, ModeSet, OperationalMode, PathSet,
    Phase, PromptMode, Role, RuntimeLayer, Section, SourceKind, Stability, Tier, Tokenizer,
    ToolName, ToolPolicy, ToolSchema, Turn, Weight,
};
