//! The assembler, for callers that gather their own sections: an [`AssemblyRequest`] of
//! [`Section`]s and announced tools in, an [`AssembledContext`] out, with its [`Report`] and,
//! for a provider, the request body ([`AssembledContext::request_body`]).
//!
//! Inside, it is a plain kernel under a memoisation engine (ADR-0037): `kernel` is the assembly
//! as plain functions with typed hand-offs, the enforcement point of I1-I9 (ARCHITECTURE.md);
//! `element` renders, counts and cuts one section for it; `engine` holds everything an
//! [`Assembler`] keeps from one call to the next (the last whole assembly, the element cache,
//! where sorts start, the last report's entries) and answers the kernel's lookups. Its contract
//! is that an assembly through it equals the kernel's alone, byte for byte and report for
//! report.
//!
//! Architecture invariant: this module does no I/O and reads no clock; the same inputs give the
//! same bytes (I6, ADR-0013).

use std::collections::HashMap;
use std::sync::Arc;

use strata_agentdef::VerifiedAgent;

mod element;
mod engine;
mod kernel;
mod native;
mod schema;

pub use engine::CacheStats;

// What a caller of the assembler writes and reads: the request and its sections, the output
// and its report, the provider formats.
pub use crate::error::AssembleError;
pub use crate::input::{RuntimeInput, SectionSpec, TurnSpec};
pub use crate::output::AssembledContext;
pub use crate::provider::{
    min_cacheable_tokens, AnthropicBreakpoints, Block, Conversation, Message, MessageKind,
    MessageRole, PairPolicy, Provider, ProviderOptions, RequestError, RequestParams, RequestTool,
    SystemRole, ToolDescriptions,
};
pub use crate::report::*;
pub use crate::request::{AssemblyRequest, BudgetSpec, Invisible, RenderOptions};
pub use strata_core::format::{parse, Encoding, Parsed};
#[cfg(feature = "tiktoken")]
pub use strata_core::TiktokenTokenizer;
pub use strata_core::{
    AnnouncedTool, AssemblyPath, Budget, Content, Keep, Layer, LayerBudgets, ModeSet,
    OperationalMode, PathSet, Phase, PromptMode, Reasoning, Role, RuntimeLayer, Section,
    SectionBuilder, SourceKind, Stability, Tier, Tokenizer, ToolName, ToolPolicy, ToolSchema, Turn,
    Weight,
};

use element::{Meter, WALK_WINDOW_BYTES_PER_TOKEN};
use engine::Engine;

/// Hash maps keyed by caller-chosen strings on the per-call path: a fast keyed hash that is
/// still seeded per process, so crafted ids cannot force collisions.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The tools of `announced` that an assembly of `agent` under `policy` keeps: in layer 1's
/// allowlist, permitted by the delegated policy, announced once, with a schema and description
/// that match a pinned signed entry (I4, ADR-0007), and with only identifiers for names in a
/// schema that is not pinned (under the default description policy; ADR-0032). The same
/// narrowing as assembly itself, for callers that must hand contributors only what the model
/// may see. The tools are returned as announced: contributors write what they take from them
/// into sections, which are fenced as data.
pub fn narrowed_tools(
    agent: &VerifiedAgent,
    announced: &[strata_core::AnnouncedTool],
    policy: &strata_core::ToolPolicy,
) -> Vec<strata_core::AnnouncedTool> {
    let req = AssemblyRequest {
        tools: announced.to_vec(),
        tool_policy: policy.clone(),
        ..AssemblyRequest::default()
    };
    let (report, _, _) = kernel::narrow_tools(agent, &req);
    let mut seen = std::collections::BTreeSet::new();
    announced
        .iter()
        .filter(|t| report.effective.contains(&t.name) && seen.insert(t.name.clone()))
        .cloned()
        .collect()
}

/// The id of the tool catalog section the assembler writes from announced tools.
pub const TOOL_CATALOG_ID: &str = "strata.tools";
/// The conflict key of the tool catalog; other catalogs claiming it lose to the assembler's.
pub const TOOL_CATALOG_KEY: &str = "tool_catalog";
/// Bytes the element cache may hold by default before it is cleared (ADR-0008).
pub const DEFAULT_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The Context Assembler: the single enforcement point for priority, immutability, budgets and
/// fencing (ADR-0006). Share one per tokenizer across sessions: its engine keeps rendered
/// elements and their token counts, and the last assembly, for the calls that follow.
pub struct Assembler {
    tokenizer: Arc<dyn Tokenizer>,
    /// Bytes of content per token of the budget in a head cut's first window.
    walk_window: usize,
    engine: Engine,
}

impl std::fmt::Debug for Assembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembler")
            .field("tokenizer", &self.tokenizer.name())
            .finish_non_exhaustive()
    }
}

impl Assembler {
    /// An assembler counting with `tokenizer`.
    pub fn new(tokenizer: Arc<dyn Tokenizer>) -> Assembler {
        Assembler {
            tokenizer,
            walk_window: WALK_WINDOW_BYTES_PER_TOKEN,
            engine: Engine::new(DEFAULT_CACHE_BYTES),
        }
    }

    /// Bytes of content per token of the budget in the first window a head cut of a long escaped or
    /// datamarked section walks (default 8; ADR-0037). The cut is the same for any value
    /// (a window too small for the prefix is walked again four times larger, up to the walk's
    /// bound); only the work changes. Tests set it low to exercise regrown windows and high to walk
    /// up to the bound at once.
    pub fn with_walk_window(mut self, bytes_per_token: usize) -> Assembler {
        self.walk_window = bytes_per_token.max(1);
        self
    }

    /// Bound the element cache to `bytes` (default [`DEFAULT_CACHE_BYTES`]): when an insertion
    /// would pass it, the cache is emptied first, so memory stays bounded whatever sections
    /// arrive. Counts stay exact; only speed changes.
    pub fn with_cache_limit(mut self, bytes: usize) -> Assembler {
        self.engine = Engine::new(bytes);
        self
    }

    /// An assembler with exact `o200k_base` counts.
    #[cfg(feature = "tiktoken")]
    pub fn o200k() -> Assembler {
        Assembler::new(Arc::new(strata_core::TiktokenTokenizer::o200k()))
    }

    /// The tokenizer's name.
    pub fn tokenizer_name(&self) -> &str {
        self.tokenizer.name()
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.engine.stats()
    }

    /// Assemble the context of one request (ADR-0006, ADR-0007, ADR-0008, ADR-0009, ADR-0013):
    /// the kernel's answer, through the engine, which answers a request exactly the same as the
    /// last one with that one's result and lets the kernel use what earlier calls measured.
    pub fn assemble(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
    ) -> Result<AssembledContext, AssembleError> {
        let span = tracing::debug_span!(
            "assemble",
            agent = agent.agent_id(),
            sections = req.sections.len()
        );
        let _g = span.enter();
        kernel::check_valid(agent, req)?;
        let fingerprint = match self.engine.recall(agent, req) {
            Ok(out) => return Ok(out),
            Err(fingerprint) => fingerprint,
        };
        let meter = Meter::new(&*self.tokenizer, self.walk_window, Some(&self.engine));
        let out = kernel::assemble(&meter, agent, req)?;
        self.engine.remember(agent, req, fingerprint, &out);
        Ok(out)
    }

    /// The same assembly by the plain kernel alone, with this assembler's tokenizer and walk
    /// window and none of what its engine keeps: what [`Assembler::assemble`] must equal, byte
    /// for byte and report for report (ADR-0037). For tests and reviews; it measures every
    /// section afresh on every call.
    pub fn assemble_plain(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
    ) -> Result<AssembledContext, AssembleError> {
        kernel::check_valid(agent, req)?;
        let meter = Meter::new(&*self.tokenizer, self.walk_window, None);
        kernel::assemble(&meter, agent, req)
    }
}
