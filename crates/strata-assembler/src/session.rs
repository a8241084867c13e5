//! The session API: from a user message to the request a provider takes (ADR-0016).
//!
//! A [`Runtime`] is built once from a verified agent, an optional `strata.toml`, a memory store
//! (a SQLite file by default, PostgreSQL by URL), a tokenizer and a registry with its section
//! cache, the built-in contributors and the memory contributors. Per conversation a [`Session`]
//! then runs the loop every runtime needs:
//!
//! 1. [`Session::prepare`] appends the user's message to working memory, gathers layers 3-6 for
//!    the turn's mode, path and tier (chosen once, used by gathering and assembly alike),
//!    assembles, and returns a [`PreparedTurn`]: the request body, the report and the identity
//!    digest;
//! 2. [`Session::record_reply`] stores the model's reply (text and tool calls) and applies its
//!    goal markers;
//! 3. [`Session::record_tool_result`] stores a tool's output; [`Session::continue_turn`]
//!    prepares the next request without a new user message.
//!
//! Working memory lives in the store, so a session survives a restart of the process.
//!
//! Every operation is atomic (ADR-0031): what it would write is held back until everything that
//! can refuse it has run (a turn is assembled with its message pending), then written in one
//! store transaction. A refused operation leaves the session as it was. The `_once` forms take
//! an [`OperationId`]: a repeat gets the first answer and writes nothing.
//!
//! Architecture invariant: the session does I/O (the store, contributors); assembly itself
//! stays the pure function of [`crate::assemble::Assembler`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use strata_agentdef::VerifiedAgent;
use strata_core::{
    AnnouncedTool, AssemblyPath, ContentHash, Keep, OperationalMode, PromptMode, Role,
    RuntimeLayer, Section, Tier, Tokenizer, ToolName, ToolPolicy, Turn,
};
use strata_memory::{
    Applied, Batch, Embedder, Entry, EntryMeta, EpisodicContributor, FileAction, LongTermMemory,
    LongTermMemoryContributor, MemoryError, MemoryIndexContributor, NewEntry, NewMemory, Operation,
    SearchOptions, SessionFilesContributor, SessionState, SharedContext, SharedContextReader,
    SharedFactsContributor, SqliteStore, StoredGoals, Tail, WorkingMemory,
    WorkingMemoryContributor,
};
use strata_registry::{
    builtins::WorkspaceHints, Builtins, ContributionContext, Contributor, ContributorMeta,
    RequestInputs, StandardSection, SystemClock,
};

pub use strata_registry::{
    ActiveSkill, AssistantOutput, Config, GoalManager, GoalPriority, Inbound, InputError,
    MarkerReport, Registry, RegistryEvent, ThinkingLevel, TimeZone, UnknownThinkingLevel,
};

use crate::assemble::Assembler;
use crate::error::AssembleError;
use crate::output::AssembledContext;
use crate::provider::{Provider, ProviderOptions, RequestError, RequestParams};
use crate::report::{Omission, Report};
use crate::request::{AssemblyRequest, BudgetSpec};

/// Why a session step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The memory store failed or refused the operation.
    #[error("memory store: {0}")]
    Store(#[from] strata_memory::MemoryError),
    /// `strata.toml` could not be read.
    #[error("configuration: {0}")]
    Config(#[from] strata_registry::ConfigError),
    /// Registering or running contributors failed.
    #[error("contributors: {0}")]
    Registry(String),
    /// Assembly failed (budget, history).
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    /// The request body could not be written.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The receipt could not be signed.
    #[error("receipt: {0}")]
    Receipt(#[from] crate::receipt::ReceiptedError),
    /// Goal markers could not be applied.
    #[error("goals: {0}")]
    Goals(#[from] strata_registry::GoalError),
    /// A caller's input is invalid.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// A per-turn input (skill, time zone, sender...) is invalid; the message is the same in
    /// every interface.
    #[error(transparent)]
    Input(#[from] strata_registry::InputError),
    /// A reply calls a tool the signed definition does not allowlist; nothing was recorded.
    #[error("the reply calls tool `{name}` (call `{call}`), which is not on the agent's signed allowlist; nothing was recorded. Send only the tools a prepared turn offered, and record replies that call those")]
    ToolNotAllowed {
        /// The tool the call names.
        name: String,
        /// The call id.
        call: String,
    },
    /// A recorded tool call cannot be run (ADR-0041): the session's last prepared turn did not
    /// offer its tool, or no connected server offers it as the signed definition pins it now.
    /// Nothing was run or recorded.
    #[error("tool call `{call}` names tool `{name}`, which {why}; nothing was run or recorded")]
    ToolNotOffered {
        /// The tool the call names.
        name: String,
        /// The call id.
        call: String,
        /// Why it cannot be run, in words.
        why: String,
    },
    /// An operation key was used before for a different request (ADR-0031).
    #[error("operation key `{key}` was already used for a different request on this session; use a new key for a new request")]
    KeyReused {
        /// The key.
        key: String,
    },
    /// The MCP server of a tool did not complete a call (ADR-0041); nothing was recorded.
    #[error("{0}; nothing was recorded. The server may have run the tool before the call failed: run it again only if that is safe")]
    ToolCallFailed(String),
    /// A signed operational-mode template is longer than its tier's prompt budget (the seeds'
    /// 200, 500, 1,000 and 1,500 tokens).
    #[error("the `{mode}` template for tier {tier} of the agent definition holds {tokens} tokens, over the tier's prompt budget of {budget}; shorten it and sign the definition again")]
    TierPrompt {
        /// The operational mode.
        mode: OperationalMode,
        /// The tier number.
        tier: u8,
        /// Its tokens.
        tokens: usize,
        /// The tier's prompt budget.
        budget: u32,
    },
}

#[path = "session_builder.rs"]
mod builder;
use builder::StoreHandle;
pub use builder::{RuntimeBuilder, StoreSpec};

/// A runtime: one verified agent with its store, registry and assembler, shared by sessions.
pub struct Runtime {
    agent: Arc<VerifiedAgent>,
    assembler: Assembler,
    registry: Registry,
    tokenizer: Arc<dyn Tokenizer>,
    store: Arc<dyn StoreHandle>,
    config: Config,
    /// Whether a `strata.toml` was given: its budget then wins over the definition's.
    configured: bool,
    hydrated: usize,
    provider: Provider,
    params: RequestParams,
    options: ProviderOptions,
    tools: Vec<AnnouncedTool>,
    /// Per session, what its last published turn stood on (standing prompt, mode, skills,
    /// tools), to tell subscribers when it changes (ADR-0045, ADR-0049).
    prompts: std::sync::Mutex<std::collections::HashMap<Arc<str>, Standing>>,
    receipt_key: Option<Arc<strata_agentdef::KeyPair>>,
    /// The conversation-history contributor, which also renders the entries a turn holds back
    /// until it is stored (ADR-0031).
    history: Arc<WorkingMemoryContributor>,
    /// Why the agent is refused since the last [`Runtime::recheck`] failed (ADR-0034).
    refused: std::sync::Mutex<Option<String>>,
    /// Live MCP servers (ADR-0041), and the generation of each whose prompts are registered.
    live: Option<Arc<dyn strata_registry::LiveSource>>,
    live_seen: std::sync::Mutex<std::collections::BTreeMap<Arc<str>, u64>>,
    /// The embedder of the store and of the hydration path's tool retrieval (ADR-0046).
    embedder: Arc<dyn Embedder>,
    /// The vectors of the tools' texts the hydration path has ranked, by text.
    tool_vectors: std::sync::Mutex<std::collections::HashMap<String, Vec<f32>>>,
    /// Where the runtime reads the time.
    clock: Arc<dyn strata_registry::Clock>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("agent", &self.agent.agent_id())
            .field("provider", &self.provider)
            .field("model", &self.params.model)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Start building a runtime for `agent` (the only way to obtain one is to verify a signed
    /// definition). Defaults: memory in `./.strata/memory.db`, Anthropic requests.
    pub fn builder(agent: VerifiedAgent) -> RuntimeBuilder {
        RuntimeBuilder {
            agent,
            config: None,
            store: None,
            tokenizer: None,
            provider: Provider::Anthropic,
            params: RequestParams::default(),
            options: ProviderOptions::default(),
            tools: Vec::new(),
            workspace: None,
            history_tokens: 8_000,
            memories: 5,
            hydrated: 5,
            receipt_key: None,
            live: None,
            embedder: None,
            clock: None,
        }
    }

    /// The time on the runtime's clock, Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.clock.unix_ms()
    }

    /// The embedder of this runtime's store and of its tool retrieval (ADR-0046).
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// The verified agent.
    pub fn agent(&self) -> &VerifiedAgent {
        &self.agent
    }

    /// Check the agent's signers against `trust` as it is now (ADR-0034): a runtime that keeps
    /// running while its trust store changes calls this whenever it does (and on a bounded
    /// interval). When the signers no longer verify (a key revoked, too few valid), every turn
    /// of this runtime is refused with [`AssembleError::AgentNotValid`] until a later call
    /// succeeds.
    pub fn recheck(&self, trust: &strata_agentdef::TrustStore) -> Result<(), SessionError> {
        let verdict = self.agent.check_signers(trust, strata_agentdef::now_unix());
        let mut refused = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match verdict {
            Ok(()) => {
                *refused = None;
                Ok(())
            }
            Err(e) => {
                *refused = Some(e.to_string());
                Err(AssembleError::AgentNotValid(e.to_string()).into())
            }
        }
    }

    /// The refusal of the last failed [`Runtime::recheck`], if it still stands.
    fn check_refused(&self) -> Result<(), SessionError> {
        match &*self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(why) => Err(AssembleError::AgentNotValid(why.clone()).into()),
            None => Ok(()),
        }
    }

    /// The tokenizer every count of this runtime uses.
    pub fn tokenizer(&self) -> &Arc<dyn Tokenizer> {
        &self.tokenizer
    }

    /// The registry, to add contributors of your own.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Long-term memory, to search memories (add them with [`Runtime::remember`], which also
    /// drops the memory search's kept hits).
    pub fn memory(&self) -> Arc<dyn LongTermMemory> {
        self.store.long_term()
    }

    /// Add a long-term memory. The hits the memory search keeps for a query (30 seconds, as
    /// DevClaw) are dropped, so the next turn in this runtime can find it; other runtimes on the
    /// same store find it once their kept hits expire.
    pub fn remember(&self, memory: NewMemory) -> Result<strata_memory::MemoryId, SessionError> {
        let id = self.store.long_term().put(memory)?.id;
        if let Some(cache) = self.registry.cache() {
            cache.invalidate_contributor(MEMORY_SEARCH_ID);
        }
        Ok(id)
    }

    /// A session by id; its history is whatever the store holds for that id.
    pub fn session(&self, id: impl Into<Arc<str>>) -> Session<'_> {
        Session {
            rt: self,
            id: id.into(),
        }
    }
}

/// Per-turn choices: mode, path, context window and extra sections. One value is used by
/// gathering and assembly alike.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// Prompt mode (default: `strata.toml`'s, else the definition's).
    pub mode: Option<PromptMode>,
    /// Assembly path (default: soul).
    pub path: Option<AssemblyPath>,
    /// The model's context window; budget, reserve and tier follow from it. Default:
    /// `strata.toml`'s budget, else the definition's.
    pub context_window: Option<u32>,
    /// Extra runtime sections for this turn only (a delegated task, retrieved documents...).
    pub sections: Vec<Section>,
    /// Tools announced for this turn (default: the runtime's).
    pub tools: Option<Vec<AnnouncedTool>>,
    /// The time of the turn, Unix milliseconds (default: now).
    pub now_ms: Option<i64>,
    /// The operational mode (assistant, developer...), which picks the signed template with
    /// the tier (default: the definition's).
    pub operational_mode: Option<OperationalMode>,
    /// What the delegating caller permits of the tools (only narrows the signed allowlist).
    pub tool_policy: ToolPolicy,
    /// The hydration path's input: the tools semantic retrieval found for this turn. On that
    /// path they are the turn's tools; without them the runtime retrieves its own tools that
    /// best match the user's message. Other paths ignore it.
    pub retrieved_tools: Option<Vec<AnnouncedTool>>,
    /// The context path's input: the context the runtime resolved for this turn (documents,
    /// records, a delegated task...). The context path requires it and it takes part on that
    /// path only.
    pub resolved_context: Vec<Section>,
    /// Skills activated for this turn: each becomes a `skill/<id>` section of layer 4.
    pub skills: Vec<ActiveSkill>,
    /// How much explicit reasoning to ask for (default: none asked).
    pub thinking: Option<ThinkingLevel>,
    /// Who sent the message, through which channel.
    pub inbound: Option<Inbound>,
    /// The answer will be spoken rather than read.
    pub voice: bool,
    /// The language to answer in (a name or a BCP 47 tag).
    pub language: Option<String>,
    /// The model this turn goes to: named in the runtime section, given to templates as
    /// `model`, and written into the request body (default: the runtime's model).
    pub model: Option<String>,
    /// The caller's time zone for dates and times (default: UTC).
    pub time_zone: Option<TimeZone>,
    /// What the agent did most recently (commands run, files touched, their outcome), one
    /// line each, oldest first: a `recent-footprint` section of layer 5. At most 50 lines of
    /// up to 500 bytes.
    pub recent_footprint: Vec<String>,
    /// The business or project context the platform keeps for this session: a
    /// `business-context` section of layer 3 (stable). Up to 32 KiB.
    pub business_context: Option<String>,
    /// Whether the registered sanity-check prompts take part (default: yes).
    pub sanity_checks: Option<bool>,
}

impl TurnOptions {
    /// The per-turn inputs the built-in contributors and templates read, with the runtime's
    /// model when the turn names none; checked, with the same messages in every interface.
    fn request_inputs(&self, runtime_model: &str) -> Result<RequestInputs, SessionError> {
        let model = self
            .model
            .clone()
            .or_else(|| (!runtime_model.is_empty()).then(|| runtime_model.to_owned()));
        let inputs = RequestInputs {
            active_skills: self.skills.clone(),
            inbound: self.inbound.clone(),
            voice: self.voice,
            language: self.language.as_deref().map(Arc::from),
            thinking: self.thinking,
            model: model.as_deref().map(Arc::from),
            time_zone: self.time_zone.clone(),
            recent_footprint: self
                .recent_footprint
                .iter()
                .map(|e| Arc::from(e.as_str()))
                .collect(),
            business_context: self
                .business_context
                .as_deref()
                .map(strata_core::Content::from),
            skip_sanity_checks: self.sanity_checks == Some(false),
            ..RequestInputs::default()
        };
        inputs.check()?;
        Ok(inputs)
    }
}

/// A tool call in a model's reply.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// Call id, as the provider gave it.
    pub id: String,
    /// Tool name.
    pub name: ToolName,
    /// Arguments (a JSON object).
    pub arguments: Value,
}

/// A tool's output as the runtime records it for a call (ADR-0039).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolOutput {
    /// The call it answers.
    pub call_id: String,
    /// What the tool returned (untrusted: fenced when sent).
    pub output: String,
    /// The tool failed: sent as Anthropic's `is_error` with the result.
    #[serde(default)]
    pub is_error: bool,
    /// Which end to keep when the output is cut to fit: `head` (the default), `tail` (a log's
    /// newest lines) or `both`.
    #[serde(default)]
    pub keep: Keep,
}

impl ToolOutput {
    /// The output of the call `call_id`, kept from its head when cut.
    pub fn new(call_id: impl Into<String>, output: impl Into<String>) -> ToolOutput {
        ToolOutput {
            call_id: call_id.into(),
            output: output.into(),
            is_error: false,
            keep: Keep::Head,
        }
    }

    /// The same output, from a tool that failed.
    pub fn failed(mut self) -> ToolOutput {
        self.is_error = true;
        self
    }

    /// The same output, keeping `keep` when cut.
    pub fn keeping(mut self, keep: Keep) -> ToolOutput {
        self.keep = keep;
        self
    }
}

/// The model's reply: its text and its tool calls.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    /// Text (may be empty when the reply only calls tools).
    #[serde(default)]
    pub text: String,
    /// Tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// The model's reasoning before the text and calls, in the runtime's provider's form
    /// (Anthropic `thinking` / `redacted_thinking` blocks, OpenAI Responses `reasoning`
    /// items), stored with the reply and sent back unchanged while the reply's tool loop lasts
    /// (ADR-0043).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<strata_core::Reasoning>,
}

impl Reply {
    /// A reply with text only.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            tool_calls: Vec::new(),
            reasoning: Vec::new(),
        }
    }

    /// A reply calling one tool.
    pub fn tool_call(id: impl Into<String>, name: ToolName, arguments: Value) -> Reply {
        Reply {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name,
                arguments,
            }],
            reasoning: Vec::new(),
        }
    }

    /// The same reply with the model's reasoning before it.
    pub fn with_reasoning(mut self, reasoning: Vec<strata_core::Reasoning>) -> Reply {
        self.reasoning = reasoning;
        self
    }
}

/// A retry-safe operation (ADR-0031): the caller's key and a fingerprint of what was asked.
/// A repeat of the operation (same key, same request) gets the first answer and writes
/// nothing; the same key with another request is refused with [`SessionError::KeyReused`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationId {
    key: String,
    fingerprint: String,
}

impl OperationId {
    /// An operation keyed `key` (1 to 255 bytes of printable ASCII) for the request whose
    /// bytes are `request` (what the caller considers the request: for a service, the method,
    /// path and body).
    pub fn new(key: impl Into<String>, request: &[u8]) -> Result<OperationId, SessionError> {
        let key = key.into();
        strata_memory::check_operation_key(&key)?;
        Ok(OperationId {
            key,
            fingerprint: ContentHash::of_bytes(request).to_hex(),
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// What an operation given an [`OperationId`] did.
#[derive(Debug, Clone)]
pub enum Outcome<T> {
    /// It ran now, and this is its result.
    Done(T),
    /// It had run before: this is the answer recorded then. Nothing was written now.
    Repeated(String),
}

/// An operation id with the function making a repeat's answer from the result.
type Keyed<'a, T> = (
    &'a OperationId,
    &'a dyn Fn(&T) -> Result<String, SessionError>,
);

/// The name of the document holding a session's tools.
const TOOLS_DOC: &str = "tools";

/// A session's tools between turns (ADR-0031): those the last turn that named tools offered,
/// the definition of every tool a call of the session named, and the names of the tools the
/// last prepared turn's request offered (what a tool call may run, ADR-0041).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct SessionTools {
    #[serde(default)]
    offered: Option<Vec<AnnouncedTool>>,
    #[serde(default)]
    called: std::collections::BTreeMap<String, AnnouncedTool>,
    #[serde(default)]
    last_turn: Option<Vec<ToolName>>,
}

/// What applying a session's batch came to.
enum Committed {
    Applied(Applied),
    Repeated(String),
}

/// A prepared turn: what to send, and what was decided.
#[derive(Debug, Clone)]
pub struct PreparedTurn {
    /// The request body for the runtime's provider.
    pub body: Value,
    /// The exact bytes to send (compact JSON, keys sorted): what a receipt names.
    pub sent: Vec<u8>,
    /// The assembly (report, conversation, identity digest).
    pub context: AssembledContext,
    /// The signed receipt of this turn, when the runtime has a receipt key (ADR-0021).
    pub receipt: Option<crate::receipt::SignedReceipt>,
    /// What changed for the session with this turn (ADR-0045, ADR-0049): its stable prefix,
    /// its operational mode, its active skills, the tools it offers. Published to the
    /// registry's subscribers once the turn is stored.
    pub events: Vec<TurnEvent>,
    /// What the turn stands on, remembered once published.
    seen: Standing,
}

/// What a session's turn stands on, compared from turn to turn to tell what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Standing {
    /// The standing prompt's digest (ADR-0045).
    prompt: ContentHash,
    /// The operational mode.
    mode: OperationalMode,
    /// The ids of the skills the turn activated, sorted, each once.
    skills: Vec<Arc<str>>,
    /// The names of the tools the turn's request offers, sorted, each once.
    tools: Vec<ToolName>,
}

/// A change a turn brings to its session (ADR-0045), in the turn's answer and, as
/// [`RegistryEvent`]s, to the registry's subscribers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnEvent {
    /// The stable prefix differs from the session's previous turn (or this is its first turn
    /// in this runtime): the system channel, the tool definitions or the stable context
    /// (identity, tools, goals, the operational template). A provider's prompt cache misses.
    PromptUpdated {
        /// The new prefix's digest.
        digest: String,
    },
    /// The operational mode differs from the session's previous turn.
    ModeChanged {
        /// The previous turn's mode.
        from: OperationalMode,
        /// This turn's mode.
        to: OperationalMode,
    },
    /// The skills the turn activates differ from the session's previous turn (or this is its
    /// first turn in this runtime), ADR-0049. An MCP server's skill prompt takes part through
    /// the skill of its id, so it follows this set.
    SkillsUpdated {
        /// The ids of the active skills, sorted.
        skills: Vec<Arc<str>>,
    },
    /// The tools the turn's request offers the model (after narrowing to the signed allowlist,
    /// the caller's policy and, on the hydration path, retrieval) differ from the session's
    /// previous turn (or this is its first turn in this runtime), ADR-0049.
    ToolsUpdated {
        /// The names of the offered tools, sorted.
        tools: Vec<ToolName>,
    },
}

impl PreparedTurn {
    /// The report.
    pub fn report(&self) -> &Report {
        &self.context.inner.report
    }

    /// The identity digest the request was built from.
    pub fn identity_digest(&self) -> ContentHash {
        self.context.inner.identity_digest
    }

    /// The sequence numbers of the conversation's entries this turn's request left out for
    /// lack of room (the whole budget or the history layer's): what a runtime may summarise
    /// with [`Session::compact`] (ADR-0047).
    pub fn dropped_turns(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = self
            .report()
            .sections
            .iter()
            .filter(|s| s.role.is_some() && s.layer == strata_core::Layer::WorkingMemory)
            .filter(|s| {
                matches!(
                    s.status,
                    crate::report::SectionStatus::Dropped {
                        reason: crate::report::DropReason::Budget
                            | crate::report::DropReason::LayerBudget
                    }
                )
            })
            .filter_map(|s| s.provenance.record.as_deref()?.parse().ok())
            .collect();
        seqs.sort_unstable();
        seqs
    }

    /// The tools announced for this turn that the request does not offer, with the reason of
    /// each (not in the signed allowlist, definition changed, restricted by the caller...).
    pub fn refused_tools(&self) -> Vec<crate::report::RefusedTool> {
        self.context.inner.report.tools.refused_tools()
    }
}

/// One conversation of a [`Runtime`].
#[derive(Debug)]
pub struct Session<'a> {
    rt: &'a Runtime,
    id: Arc<str>,
}

impl Session<'_> {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Prepare the request for the user's message and record the message with it: the message
    /// is stored only if the turn could be prepared (ADR-0031).
    pub fn prepare(
        &self,
        user_message: &str,
        opts: &TurnOptions,
    ) -> Result<PreparedTurn, SessionError> {
        match self.prepare_with(user_message, opts, None)? {
            Outcome::Done(turn) => Ok(turn),
            Outcome::Repeated(_) => Err(SessionError::Invalid(
                "a turn prepared without an operation key was reported as a repeat".into(),
            )),
        }
    }

    /// [`Session::prepare`] as a retry-safe operation: `answer` makes the answer a repeat will
    /// get from the prepared turn (a service's response body); it is stored with the message.
    pub fn prepare_once(
        &self,
        op: &OperationId,
        user_message: &str,
        opts: &TurnOptions,
        answer: &dyn Fn(&PreparedTurn) -> Result<String, SessionError>,
    ) -> Result<Outcome<PreparedTurn>, SessionError> {
        self.prepare_with(user_message, opts, Some((op, answer)))
    }

    fn prepare_with(
        &self,
        user_message: &str,
        opts: &TurnOptions,
        op: Option<Keyed<'_, PreparedTurn>>,
    ) -> Result<Outcome<PreparedTurn>, SessionError> {
        if user_message.trim().is_empty() {
            return Err(SessionError::Invalid(
                "the user message is empty; to prepare a request without a new message, continue the turn (`strata session prepare --continue`, or a turn request without `message` to the service)"
                    .into(),
            ));
        }
        if let Some(answer) = self.repeated(op.map(|o| o.0))? {
            return Ok(Outcome::Repeated(answer));
        }
        let wm = self.rt.store.working();
        // Another writer may append to this session between the read of its tail and the
        // write: the turn is then assembled again from what the session holds now.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = wm.last_seq(&self.id)?;
            let pending = Entry {
                seq: last.map_or(1, |l| l + 1),
                session: self.id.clone(),
                role: Role::User,
                call_id: None,
                content: user_message.into(),
                at_ms: opts.now_ms.unwrap_or_else(|| self.rt.now_ms()),
                meta: None,
                // Given by the store when the batch is applied; nothing here reads it.
                session_seq: 0,
            };
            let turn = self.assemble(Some(user_message), opts, std::slice::from_ref(&pending))?;
            let operation = match op {
                Some((id, answer)) => Some((id, answer(&turn)?)),
                None => None,
            };
            let batch = Batch {
                tail: Tail::At(last),
                entries: vec![NewEntry::user(user_message)],
                ..Batch::default()
            };
            match self.commit(batch, operation) {
                Ok(Committed::Applied(_)) => {
                    self.keep_offered(opts, &turn)?;
                    self.publish(&turn);
                    return Ok(Outcome::Done(turn));
                }
                Ok(Committed::Repeated(answer)) => return Ok(Outcome::Repeated(answer)),
                Err(SessionError::Store(MemoryError::SessionChanged { .. })) if attempt < 3 => {
                    tracing::debug!(
                        session = &*self.id,
                        attempt,
                        "session changed meanwhile; preparing again"
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Prepare the next request without a new user message (after tool results). Nothing is
    /// written. A session with no user message yet has nothing to continue and is refused.
    pub fn continue_turn(&self, opts: &TurnOptions) -> Result<PreparedTurn, SessionError> {
        // The exchange in progress starts with the newest user entry.
        let Some(query) = self
            .rt
            .store
            .working()
            .current_exchange(&self.id)?
            .into_iter()
            .next()
            .map(|e| e.content)
        else {
            return Err(SessionError::Invalid(format!(
                "session `{}` has no user message yet, so there is no turn to continue; prepare a turn with the user's message first",
                self.id
            )));
        };
        let turn = self.assemble(Some(query.as_str()), opts, &[])?;
        self.keep_offered(opts, &turn)?;
        self.publish(&turn);
        Ok(turn)
    }

    /// What a turn standing on `seen` changes for this session, against its previous turn in
    /// this runtime. A first turn there announces its prompt, skills and tools (there is no
    /// previous mode to change from).
    fn events_of(&self, seen: &Standing) -> Vec<TurnEvent> {
        let before = self
            .rt
            .prompts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&self.id)
            .cloned();
        let before = before.as_ref();
        let mut events = Vec::new();
        if before.map(|b| b.prompt) != Some(seen.prompt) {
            events.push(TurnEvent::PromptUpdated {
                digest: seen.prompt.to_string(),
            });
        }
        if let Some(b) = before.filter(|b| b.mode != seen.mode) {
            events.push(TurnEvent::ModeChanged {
                from: b.mode,
                to: seen.mode,
            });
        }
        if before.map(|b| &b.skills) != Some(&seen.skills) {
            events.push(TurnEvent::SkillsUpdated {
                skills: seen.skills.clone(),
            });
        }
        if before.map(|b| &b.tools) != Some(&seen.tools) {
            events.push(TurnEvent::ToolsUpdated {
                tools: seen.tools.clone(),
            });
        }
        events
    }

    /// Remember a turn that was stored (or, continued, sent) and tell the registry's
    /// subscribers what it changed.
    fn publish(&self, turn: &PreparedTurn) {
        self.rt
            .prompts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.id.clone(), turn.seen.clone());
        for e in &turn.events {
            match e {
                TurnEvent::PromptUpdated { .. } => {
                    self.rt
                        .registry
                        .system_prompt_updated(&self.id, turn.seen.prompt);
                }
                TurnEvent::ModeChanged { from, to } => {
                    self.rt.registry.session_mode_changed(&self.id, *from, *to);
                }
                TurnEvent::SkillsUpdated { skills } => {
                    self.rt
                        .registry
                        .session_skills_updated(&self.id, skills.clone());
                }
                TurnEvent::ToolsUpdated { tools } => {
                    self.rt
                        .registry
                        .session_tools_updated(&self.id, tools.clone());
                }
            }
        }
    }

    /// Record the model's reply: its text, then its tool calls, all or nothing; goal markers in
    /// the text are applied once every check of the reply has passed (the goal manager decides
    /// what the model's own words may change).
    pub fn record_reply(&self, reply: &Reply) -> Result<MarkerReport, SessionError> {
        match self.record_reply_with(reply, None)? {
            Outcome::Done(report) => Ok(report),
            Outcome::Repeated(_) => Err(SessionError::Invalid(
                "a reply recorded without an operation key was reported as a repeat".into(),
            )),
        }
    }

    /// [`Session::record_reply`] as a retry-safe operation; `answer` makes a repeat's answer
    /// from the marker report.
    pub fn record_reply_once(
        &self,
        op: &OperationId,
        reply: &Reply,
        answer: &dyn Fn(&MarkerReport) -> Result<String, SessionError>,
    ) -> Result<Outcome<MarkerReport>, SessionError> {
        self.record_reply_with(reply, Some((op, answer)))
    }

    fn record_reply_with(
        &self,
        reply: &Reply,
        op: Option<Keyed<'_, MarkerReport>>,
    ) -> Result<Outcome<MarkerReport>, SessionError> {
        if reply.text.trim().is_empty() && reply.tool_calls.is_empty() {
            return Err(SessionError::Invalid(
                "a reply has text, tool calls, or both; this one has neither".into(),
            ));
        }
        if let Some(answer) = self.repeated(op.map(|o| o.0))? {
            return Ok(Outcome::Repeated(answer));
        }
        Self::check_reasoning(&reply.reasoning)?;
        let mut entries = Vec::with_capacity(reply.tool_calls.len() + 1);
        if !reply.text.trim().is_empty() {
            entries.push(NewEntry::assistant(reply.text.clone()));
        }
        for c in &reply.tool_calls {
            if !c.arguments.is_object() {
                return Err(SessionError::Invalid(format!(
                    "tool call `{}`: arguments must be a JSON object",
                    c.id
                )));
            }
            // Only the signed allowlist may be called (I4): a call of any other tool is refused
            // before anything is written.
            if !self.rt.agent.identity().allows(&c.name) {
                return Err(SessionError::ToolNotAllowed {
                    name: c.name.to_string(),
                    call: c.id.clone(),
                });
            }
            // Working memory keeps the tool's name with its arguments (ADR-0016).
            let stored = serde_json::json!({ "name": c.name, "arguments": c.arguments });
            entries.push(NewEntry::tool_call(c.id.clone(), stored.to_string()));
        }
        // The reasoning goes with the entry that opens the reply, which is sent first.
        let opening = EntryMeta {
            reasoning: reply.reasoning.clone(),
            ..EntryMeta::default()
        };
        if let (Some(first), Some(meta)) = (entries.first_mut(), opening.to_json()) {
            first.meta = Some(meta);
        }
        // Every check the store would make, before the goal markers change anything.
        if !reply.tool_calls.is_empty() {
            let held = self.rt.store.working().entries(&self.id)?;
            strata_memory::check_links(&self.id, &held, &entries)?;
        }
        let report = self
            .goals()?
            .apply(&AssistantOutput::new(reply.text.as_str()))?;
        let operation = match op {
            Some((id, answer)) => Some((id, answer(&report)?)),
            None => None,
        };
        let batch = Batch {
            entries,
            ..Batch::default()
        };
        Ok(match self.commit(batch, operation)? {
            Committed::Applied(_) => {
                self.keep_called(reply)?;
                Outcome::Done(report)
            }
            Committed::Repeated(answer) => Outcome::Repeated(answer),
        })
    }

    /// Refuse reasoning no request can send back unchanged: blocks of two providers in one
    /// reply, or a block holding a form of the wire format (ADR-0043). Whether the blocks are
    /// the provider's of the request is checked when a request is assembled.
    fn check_reasoning(reasoning: &[strata_core::Reasoning]) -> Result<(), SessionError> {
        let Some(first) = reasoning.first() else {
            return Ok(());
        };
        for (i, r) in reasoning.iter().enumerate() {
            if r.format() != first.format() {
                return Err(SessionError::Invalid(format!(
                    "reasoning block {i} is a `{}` block ({}), after a `{}` block ({}); a reply's reasoning comes from one provider",
                    r.type_name(),
                    r.format().provider_name(),
                    first.type_name(),
                    first.format().provider_name()
                )));
            }
            if r.holds_wire_form() {
                return Err(SessionError::Invalid(format!(
                    "reasoning block {i} (`{}`) holds a form of strata's wire format, which a native message may not carry and which cannot be changed without breaking the provider's check; record the reply without it",
                    r.type_name()
                )));
            }
        }
        Ok(())
    }

    /// The names of the tools the session's last prepared turn offered (none before its first).
    pub(crate) fn last_turn_tools(&self) -> Result<Vec<ToolName>, SessionError> {
        Ok(self.session_tools()?.last_turn.unwrap_or_default())
    }

    /// The tools this session keeps between turns.
    fn session_tools(&self) -> Result<SessionTools, SessionError> {
        match self.rt.store.state().state(&self.id, TOOLS_DOC)? {
            None => Ok(SessionTools::default()),
            Some(doc) => serde_json::from_str(&doc.value).map_err(|e| {
                SessionError::Invalid(format!(
                    "the stored tools of session `{}` are not valid ({e}); reset the session",
                    self.id
                ))
            }),
        }
    }

    /// Change this session's kept tools with `f` (read, change, write if unchanged meanwhile).
    fn update_tools(&self, f: impl Fn(&mut SessionTools) -> bool) -> Result<(), SessionError> {
        let state = self.rt.store.state();
        for _ in 0..16 {
            let doc = state.state(&self.id, TOOLS_DOC)?;
            let mut tools: SessionTools = match &doc {
                Some(d) => serde_json::from_str(&d.value).unwrap_or_default(),
                None => SessionTools::default(),
            };
            if !f(&mut tools) {
                return Ok(());
            }
            let json = serde_json::to_string(&tools)
                .map_err(|e| SessionError::Invalid(format!("session tools: {e}")))?;
            if state
                .put_state(&self.id, TOOLS_DOC, &json, doc.map(|d| d.version))?
                .is_some()
            {
                return Ok(());
            }
        }
        Err(SessionError::Invalid(
            "the session's tools kept changing while they were written; retry".into(),
        ))
    }

    /// Keep the tools a turn named as the session's, until a turn names others, and the names
    /// of the tools `turn`'s request offers, until the next turn is prepared.
    fn keep_offered(&self, opts: &TurnOptions, turn: &PreparedTurn) -> Result<(), SessionError> {
        let offered = turn.context.tools();
        self.update_tools(|kept| {
            let mut changed = false;
            if let Some(tools) = &opts.tools {
                changed |= kept.offered.as_ref() != Some(tools);
                kept.offered = Some(tools.clone());
            }
            if kept.last_turn.as_deref() != Some(offered) {
                kept.last_turn = Some(offered.to_vec());
                changed = true;
            }
            changed
        })
    }

    /// Remember the definitions of the tools a reply called, as they were offered.
    fn keep_called(&self, reply: &Reply) -> Result<(), SessionError> {
        if reply.tool_calls.is_empty() {
            return Ok(());
        }
        let kept = self.session_tools()?;
        let offered = kept.offered.unwrap_or_else(|| self.rt.tools.clone());
        let new: Vec<AnnouncedTool> = reply
            .tool_calls
            .iter()
            .filter(|c| !kept.called.contains_key(c.name.as_str()))
            .filter_map(|c| offered.iter().find(|t| t.name == c.name).cloned())
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        self.update_tools(|k| {
            let mut changed = false;
            for t in &new {
                changed |= k
                    .called
                    .insert(t.name.as_str().to_owned(), t.clone())
                    .is_none();
            }
            changed
        })
    }

    /// This session's goals, kept in the runtime's store: a restarted process, or another
    /// process on the same PostgreSQL database, sees the same goals (ADR-0016). Goals are
    /// created by the caller; markers in replies update them.
    pub fn goals(&self) -> Result<GoalManager, SessionError> {
        let store = StoredGoals::new(self.rt.store.state(), self.rt.store.name(), self.id.clone());
        Ok(GoalManager::in_store(
            Arc::new(store),
            self.rt.clock.clone(),
        )?)
    }

    /// Change this session's goals with the caller's authority (the runtime or its operator;
    /// a model's marker only proposes a lock, ADR-0011); the goal as it is after the change.
    /// A refused change writes nothing.
    pub fn change_goals(
        &self,
        change: &strata_registry::GoalChange,
    ) -> Result<strata_registry::Goal, SessionError> {
        Ok(self.goals()?.change(change)?)
    }

    /// [`Session::change_goals`] as a retry-safe operation (ADR-0031): the change and its
    /// record are one write of the session's goal document; `answer` makes a repeat's answer.
    pub fn change_goals_once(
        &self,
        op: &OperationId,
        change: &strata_registry::GoalChange,
        answer: &dyn Fn(&strata_registry::Goal) -> Result<String, SessionError>,
    ) -> Result<Outcome<strata_registry::Goal>, SessionError> {
        // One key names one request whatever it was used for (ADR-0042).
        if let Some(done) = self.repeated_answer(op)? {
            return Ok(Outcome::Repeated(done));
        }
        // The answer's own error, kept to be returned as it was.
        let failed = std::cell::RefCell::new(None::<SessionError>);
        let made = |g: &strata_registry::Goal| {
            answer(g).map_err(|e| {
                let text = e.to_string();
                *failed.borrow_mut() = Some(e);
                strata_registry::GoalError::Invalid(text)
            })
        };
        match self
            .goals()?
            .change_once(&op.key, &op.fingerprint, change, &made)
        {
            Ok(strata_registry::ChangeOutcome::Done(g)) => Ok(Outcome::Done(g)),
            Ok(strata_registry::ChangeOutcome::Repeated(a)) => Ok(Outcome::Repeated(a)),
            Err(strata_registry::GoalError::KeyReused { key }) => {
                Err(SessionError::KeyReused { key })
            }
            Err(e) => Err(failed.take().unwrap_or(SessionError::Goals(e))),
        }
    }

    /// [`Session::record_file`] as a retry-safe operation (ADR-0031): the file and the
    /// operation's record are one write of the session's files document; `answer` is what a
    /// repeat gets.
    pub fn record_file_once(
        &self,
        op: &OperationId,
        path: &str,
        action: FileAction,
        answer: &str,
    ) -> Result<Outcome<()>, SessionError> {
        // One key names one request whatever it was used for (ADR-0042).
        if let Some(done) = self.repeated_answer(op)? {
            return Ok(Outcome::Repeated(done));
        }
        match strata_memory::record_session_file_once(
            &*self.rt.store.state(),
            &self.id,
            path,
            action,
            self.rt.now_ms(),
            Some((&op.key, &op.fingerprint, answer)),
        ) {
            Ok(strata_memory::FileRecorded::Recorded) => Ok(Outcome::Done(())),
            Ok(strata_memory::FileRecorded::Repeated(a)) => Ok(Outcome::Repeated(a)),
            Err(MemoryError::OperationExists { key, .. }) => Err(SessionError::KeyReused { key }),
            Err(e) => Err(e.into()),
        }
    }

    /// Note that a tool of this session read, changed or deleted the file at `path`; the
    /// session-files section lists what the session touched, newest first.
    pub fn record_file(&self, path: &str, action: FileAction) -> Result<(), SessionError> {
        strata_memory::record_session_file(
            &*self.rt.store.state(),
            &self.id,
            path,
            action,
            self.rt.now_ms(),
        )?;
        Ok(())
    }

    /// Keep a summary of this session's run as an episode of the agent's long-term memory;
    /// later sessions show the newest episodes (the episodic-summaries section).
    pub fn record_episode(&self, summary: &str) -> Result<strata_memory::MemoryId, SessionError> {
        if summary.trim().is_empty() {
            return Err(SessionError::Invalid(
                "the episode summary is empty; give a few sentences on what the run did".into(),
            ));
        }
        let memory = NewMemory::new(self.rt.agent.agent_id(), summary).with_tags([
            strata_memory::EPISODE_TAG.to_owned(),
            format!("session:{}", self.id),
        ]);
        self.rt.remember(memory)
    }

    /// Record a tool's output for the call `call_id`.
    pub fn record_tool_result(&self, call_id: &str, output: &str) -> Result<(), SessionError> {
        self.record_output(&ToolOutput::new(call_id, output))
    }

    /// Record a tool's output with its failure flag and the end to keep when it is cut
    /// (ADR-0039).
    pub fn record_output(&self, output: &ToolOutput) -> Result<(), SessionError> {
        self.record_output_with(output, None).map(|_| ())
    }

    /// [`Session::record_tool_result`] as a retry-safe operation; `answer` is what a repeat
    /// gets.
    pub fn record_tool_result_once(
        &self,
        op: &OperationId,
        call_id: &str,
        output: &str,
        answer: &str,
    ) -> Result<Outcome<()>, SessionError> {
        self.record_output_once(op, &ToolOutput::new(call_id, output), answer)
    }

    /// [`Session::record_output`] as a retry-safe operation; `answer` is what a repeat gets.
    pub fn record_output_once(
        &self,
        op: &OperationId,
        output: &ToolOutput,
        answer: &str,
    ) -> Result<Outcome<()>, SessionError> {
        self.record_output_with(output, Some((op, answer)))
    }

    fn record_output_with(
        &self,
        output: &ToolOutput,
        op: Option<(&OperationId, &str)>,
    ) -> Result<Outcome<()>, SessionError> {
        if let Some(answer) = self.repeated(op.map(|o| o.0))? {
            return Ok(Outcome::Repeated(answer));
        }
        let mut entry = NewEntry::tool_result(&output.call_id, &output.output);
        let meta = EntryMeta {
            is_error: output.is_error,
            keep: output.keep,
            ..EntryMeta::default()
        };
        if let Some(meta) = meta.to_json() {
            entry = entry.with_meta(meta);
        }
        let batch = Batch {
            entries: vec![entry],
            ..Batch::default()
        };
        Ok(
            match self.commit(batch, op.map(|(id, a)| (id, a.to_owned())))? {
                Committed::Applied(_) => Outcome::Done(()),
                Committed::Repeated(answer) => Outcome::Repeated(answer),
            },
        )
    }

    /// Forget this session's conversation and the files it touched; returns the conversation
    /// entries removed. The session's goals stay (the seeds never drop a goal; complete or
    /// pause it instead). The registry's section cache is cleared and subscribers are told.
    pub fn reset(&self) -> Result<usize, SessionError> {
        match self.reset_with(None)? {
            Outcome::Done(n) => Ok(n),
            Outcome::Repeated(_) => Err(SessionError::Invalid(
                "a reset without an operation key was reported as a repeat".into(),
            )),
        }
    }

    /// [`Session::reset`] as a retry-safe operation; `answer` makes a repeat's answer from the
    /// number of entries removed.
    pub fn reset_once(
        &self,
        op: &OperationId,
        answer: &dyn Fn(&usize) -> Result<String, SessionError>,
    ) -> Result<Outcome<usize>, SessionError> {
        self.reset_with(Some((op, answer)))
    }

    fn reset_with(&self, op: Option<Keyed<'_, usize>>) -> Result<Outcome<usize>, SessionError> {
        if let Some(answer) = self.repeated(op.map(|o| o.0))? {
            return Ok(Outcome::Repeated(answer));
        }
        // The count the answer names is the count the batch removes: the batch expects the
        // session's tail as read here.
        let held = self.rt.store.working().entries(&self.id)?;
        let operation = match op {
            Some((id, answer)) => Some((id, answer(&held.len())?)),
            None => None,
        };
        // The conversation, the files, the offered tools and the compactions go in one
        // transaction with the operation's record: a failed reset changed nothing (ADR-0031).
        let batch = Batch {
            tail: Tail::At(held.last().map(|e| e.seq)),
            clear: true,
            remove_state: [
                strata_memory::state::FILES_DOC,
                TOOLS_DOC,
                compact::COMPACTIONS_DOC,
            ]
            .map(String::from)
            .to_vec(),
            ..Batch::default()
        };
        let n = match self.commit(batch, operation)? {
            Committed::Applied(a) => a.cleared,
            Committed::Repeated(answer) => return Ok(Outcome::Repeated(answer)),
        };
        self.rt.registry.session_reset(&self.id);
        self.rt
            .prompts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
        Ok(Outcome::Done(n))
    }

    /// The answer recorded for `op` on this session if it ran before (and its record has not
    /// expired); [`SessionError::KeyReused`] when its key was used for another request. A
    /// service asks this first, so that a repeat is answered before any check of the session's
    /// state (a reset session no longer exists, yet its reset repeats).
    pub fn repeated_answer(&self, op: &OperationId) -> Result<Option<String>, SessionError> {
        if let Some(done) = self.repeated(Some(op))? {
            return Ok(Some(done));
        }
        // Goal changes and file recordings keep their records with what they changed; one key
        // names one request whichever of them it was used for.
        if let Some(done) = self.compaction_answer(op)? {
            return Ok(Some(done));
        }
        match self.goals()?.repeated(&op.key, &op.fingerprint) {
            Ok(Some(done)) => return Ok(Some(done)),
            Ok(None) => {}
            Err(strata_registry::GoalError::KeyReused { key }) => {
                return Err(SessionError::KeyReused { key })
            }
            Err(e) => return Err(e.into()),
        }
        match strata_memory::session_file_operation(
            &*self.rt.store.state(),
            &self.id,
            &op.key,
            self.rt.now_ms(),
        )? {
            Some(rec) if rec.fingerprint == op.fingerprint => Ok(Some(rec.answer)),
            Some(_) => Err(SessionError::KeyReused {
                key: op.key.clone(),
            }),
            None => Ok(None),
        }
    }

    /// [`Session::repeated_answer`] for an optional operation.
    fn repeated(&self, op: Option<&OperationId>) -> Result<Option<String>, SessionError> {
        let Some(op) = op else {
            return Ok(None);
        };
        match self.rt.store.working().operation(&self.id, &op.key)? {
            None => Ok(None),
            Some(rec) if rec.fingerprint == op.fingerprint => Ok(Some(rec.answer)),
            Some(_) => Err(SessionError::KeyReused {
                key: op.key.clone(),
            }),
        }
    }

    /// Apply `batch` with the record of `operation`, if any. A concurrent run of the same
    /// operation that got there first makes this one a repeat.
    fn commit(
        &self,
        mut batch: Batch,
        operation: Option<(&OperationId, String)>,
    ) -> Result<Committed, SessionError> {
        let id = operation.as_ref().map(|(id, _)| *id);
        batch.operation = operation
            .map(|(id, answer)| Operation::new(id.key.clone(), id.fingerprint.clone(), answer));
        match self.rt.store.working().apply(&self.id, batch) {
            Ok(applied) => Ok(Committed::Applied(applied)),
            Err(MemoryError::OperationExists { .. }) => match self.repeated(id)? {
                Some(answer) => Ok(Committed::Repeated(answer)),
                None => Err(SessionError::Invalid(
                    "the operation's record vanished while it was written; retry".into(),
                )),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Gather and assemble a turn; `pending` are entries the turn will store once it is
    /// prepared, shown as the store will show them (ADR-0031).
    fn assemble(
        &self,
        query: Option<&str>,
        opts: &TurnOptions,
        pending: &[Entry],
    ) -> Result<PreparedTurn, SessionError> {
        let rt = self.rt;
        rt.check_refused()?;
        let inputs = opts.request_inputs(&rt.params.model)?;
        let agent = &rt.agent;
        // Default mode: strata.toml's when one was given, else the signed definition's.
        let mode = opts.mode.unwrap_or(if rt.configured {
            rt.config.prompt.default_mode
        } else {
            agent.default_prompt_mode()
        });
        let path = opts.path.unwrap_or_default();
        let operational = opts
            .operational_mode
            .unwrap_or_else(|| agent.default_mode());
        // One budget, one tier: used by gathering and assembly alike (ADR-0044).
        let budget = turn_budget(rt, opts.context_window);
        let (_, tier) = budget.resolve(agent.budget());
        let resolved_context = match path {
            AssemblyPath::Context if opts.resolved_context.is_empty() => {
                return Err(SessionError::Invalid(
                    "the context path assembles a resolved context: give the turn's \
                     `resolved_context` sections, or choose another path"
                        .into(),
                ))
            }
            // The resolved context takes part on the context path only.
            AssemblyPath::Context => opts.resolved_context.clone(),
            _ => Vec::new(),
        };
        let (announced, live_omissions) = self.turn_tools(path, query, opts)?;
        let tools = crate::assemble::narrowed_tools(agent, &announced, &opts.tool_policy);
        let now_ms = opts.now_ms.unwrap_or_else(|| rt.now_ms());
        let (mut sections, mut omissions) = rt.gather_turn(&Gathering {
            session: &self.id,
            query,
            mode,
            path,
            tier,
            operational,
            tools: &tools,
            now_ms,
            inputs,
        })?;
        sections.extend(self.conversation(mode, path, pending)?);
        omissions.extend(live_omissions);
        sections.extend(opts.sections.iter().cloned());
        sections.extend(resolved_context);
        let req = AssemblyRequest {
            sections,
            // Everything announced: the assembler narrows it again and reports each refusal.
            tools: announced,
            tool_policy: opts.tool_policy.clone(),
            mode,
            path,
            budget: Some(budget),
            protected_priorities: rt
                .config
                .prompt
                .protected_priorities
                .iter()
                .copied()
                .collect(),
            omissions,
            provider: Some(rt.provider),
            provider_options: ProviderOptions {
                model: opts.model.clone().or_else(|| rt.options.model.clone()),
                ..rt.options.clone()
            },
            now_ms: Some(now_ms),
            ..AssemblyRequest::default()
        };
        self.finish(&req, opts, operational)
    }

    /// The tools a turn announces (ADR-0031, ADR-0041), and an omission for each live server
    /// that is unavailable. The turn's tools, else the session's (kept from the last turn that
    /// named some), else the runtime's; the live servers' current tools; and every tool a call
    /// of the session named, so that a body holding a call always defines its tool. The
    /// hydration path announces the tools retrieved for this turn instead.
    fn turn_tools(
        &self,
        path: AssemblyPath,
        query: Option<&str>,
        opts: &TurnOptions,
    ) -> Result<(Vec<AnnouncedTool>, Vec<Omission>), SessionError> {
        let rt = self.rt;
        let kept = self.session_tools()?;
        let mut offered = opts
            .tools
            .clone()
            .or_else(|| kept.offered.clone())
            .unwrap_or_else(|| rt.tools.clone());
        // The live servers' current tools, before the session's called ones: a called tool is
        // checked against its pin as the server announces it now (ADR-0041).
        let (live_tools, live_omissions) = rt.sync_live();
        for t in live_tools {
            if !offered.iter().any(|o| o.name == t.name) {
                offered.push(t);
            }
        }
        for t in kept.called.values() {
            if !offered.iter().any(|o| o.name == t.name) {
                offered.push(t.clone());
            }
        }
        // The hydration path announces the tools retrieved for this turn, not the whole set.
        let announced = match path {
            AssemblyPath::Hydration => match &opts.retrieved_tools {
                Some(retrieved) => retrieved.clone(),
                None => rt.retrieve_tools(&offered, query.unwrap_or_default())?,
            },
            _ => offered,
        };
        Ok((announced, live_omissions))
    }

    /// The conversation a turn carries besides what gathering found: where the seeds leave
    /// the conversation out (minimal and scheduled modes, the basic and cached paths), the
    /// current exchange (the newest user message and what followed it, ADR-0016); otherwise
    /// the `pending` entries as the history contributor shows stored ones.
    fn conversation(
        &self,
        mode: PromptMode,
        path: AssemblyPath,
        pending: &[Entry],
    ) -> Result<Vec<Section>, SessionError> {
        let rt = self.rt;
        let mut sections = Vec::new();
        // Where the seeds leave the conversation out (minimal and scheduled modes, the basic and
        // cached paths), the request still carries the current exchange: the newest user
        // message and what followed it (ADR-0016).
        let history = StandardSection::ConversationHistory;
        if !history.in_mode(mode) || !history.on_path(path) {
            sections.extend(self.current_exchange(pending)?);
        } else {
            for e in pending {
                let s = rt
                    .history
                    .section_of(e)
                    .map_err(|err| SessionError::Registry(err.to_string()))?;
                sections.push(native_tool_call(s)?);
            }
        }
        Ok(sections)
    }

    /// Assemble `req` (with a receipt when the runtime has a key) and write the request body
    /// for the runtime's provider and the turn's model.
    fn finish(
        &self,
        req: &AssemblyRequest,
        opts: &TurnOptions,
        operational: OperationalMode,
    ) -> Result<PreparedTurn, SessionError> {
        let rt = self.rt;
        let agent = &rt.agent;
        // A turn that names its model is written for it.
        let params = match &opts.model {
            Some(m) => std::borrow::Cow::Owned(RequestParams {
                model: m.clone(),
                ..rt.params.clone()
            }),
            None => std::borrow::Cow::Borrowed(&rt.params),
        };
        // Without a receipt the body is written once and serialised once; with one, the
        // receipted bytes are what is sent, and the body is read back from exactly them.
        let (context, body, sent, receipt) = match &rt.receipt_key {
            Some(key) => {
                let r = rt
                    .assembler
                    .assemble_with_receipt(agent, req, &params, key)?;
                let body: Value = serde_json::from_slice(&r.sent)
                    .map_err(|e| SessionError::Invalid(format!("request body: {e}")))?;
                (r.context, body, r.sent, Some(r.receipt))
            }
            None => {
                let context = rt.assembler.assemble(agent, req)?;
                let body = context.request_body(rt.provider, &params)?;
                let sent = crate::receipt::body_bytes(&body);
                (context, body, sent, None)
            }
        };
        let seen = Standing {
            prompt: stable_digest(&context, &req.sections),
            mode: operational,
            skills: sorted(opts.skills.iter().map(|s| s.id.clone())),
            tools: sorted(context.tools().iter().cloned()),
        };
        let events = self.events_of(&seen);
        live::log_changed_definitions(&self.id, &context.inner.report);
        tracing::debug!(
            session = &*self.id,
            tokens = context.inner.report.used_tokens,
            "prepared a turn"
        );
        Ok(PreparedTurn {
            body,
            sent,
            context,
            receipt,
            events,
            seen,
        })
    }
}

#[path = "session_compact.rs"]
mod compact;
pub use compact::{Compaction, CompactionRecord, MAX_SUMMARY_BYTES};

#[path = "session_live.rs"]
mod live;

#[path = "session_hydrate.rs"]
mod hydrate;
pub use live::ToolRun;

/// What one gathering is for.
struct Gathering<'a> {
    session: &'a str,
    query: Option<&'a str>,
    mode: PromptMode,
    path: AssemblyPath,
    tier: Tier,
    operational: OperationalMode,
    /// Already narrowed to what the model may see.
    tools: &'a [AnnouncedTool],
    now_ms: i64,
    /// The turn's inputs (skills, inbound, model...); tools and hints are set from `tools`.
    inputs: RequestInputs,
}

impl Runtime {
    /// Run the contributors for one turn: sections (tool calls turned native, the template
    /// within its tier budget) and the omissions to report.
    fn gather_turn(
        &self,
        t: &Gathering<'_>,
    ) -> Result<(Vec<Section>, Vec<Omission>), SessionError> {
        let agent = &self.agent;
        // Contributors see only what the model may see: the narrowed tools and the signed
        // usage hints of those tools, so no built-in can name a refused tool (I4, ADR-0007).
        let tool_hints = agent
            .identity()
            .tools()
            .iter()
            .filter(|a| t.tools.iter().any(|x| x.name == a.name))
            .map(|a| (a.name.clone(), a.usage.clone()))
            .collect();
        let mut ctx = ContributionContext::new(
            agent.agent_id_arc(),
            agent.identity_digest(),
            t.session,
            t.now_ms,
        );
        ctx.mode = t.mode;
        ctx.path = t.path;
        ctx.tier = t.tier;
        ctx.operational_mode = t.operational;
        ctx.query = t.query.map(Arc::from);
        ctx.inputs = Arc::new(RequestInputs {
            tools: t.tools.to_vec(),
            tool_hints,
            ..t.inputs.clone()
        });
        let gathered = self
            .registry
            .gather(&ctx)
            .map_err(|e| SessionError::Registry(e.to_string()))?;
        let mut omissions: Vec<Omission> = gathered
            .omissions
            .iter()
            .map(|o| Omission {
                id: o.contributor.to_string(),
                layer: o.layer.into(),
                reason: format!("{:?}", o.reason),
            })
            .collect();
        let mut sections: Vec<Section> = Vec::with_capacity(gathered.sections.len() + 4);
        for s in gathered.sections {
            let s = native_tool_call(s)?;
            sections.push(self.within_tier_prompt(s, t.tier, &mut omissions)?);
        }
        Ok((sections, omissions))
    }

    /// The operational-mode template within the tier's prompt budget (200, 500, 1,000 or 1,500
    /// tokens, from the seeds): a rendering over it is cut to the budget, marked, and the cut
    /// is reported among the omissions (ADR-0016). Other sections pass unchanged.
    fn within_tier_prompt(
        &self,
        s: Section,
        tier: Tier,
        omissions: &mut Vec<Omission>,
    ) -> Result<Section, SessionError> {
        if &*s.provenance().name != strata_registry::OperationalTemplate::ID {
            return Ok(s);
        }
        let budget = tier.prompt_budget() as usize;
        let text = s.content().as_str();
        let tokens = self.tokenizer.count(text);
        if tokens <= budget {
            return Ok(s);
        }
        let marker = format!(
            "\n[cut to the tier-{} prompt budget of {budget} tokens]",
            tier.number()
        );
        let room = budget.saturating_sub(self.tokenizer.count(&marker));
        let keep = self.tokenizer.prefix(text, room).len;
        let cut = format!("{}{marker}", &text[..keep]);
        omissions.push(Omission {
            id: s.id().as_str().to_owned(),
            layer: s.layer().into(),
            reason: format!(
                "cut to the tier-{} prompt budget: {tokens} tokens, {budget} allowed",
                tier.number()
            ),
        });
        tracing::warn!(
            section = s.id().as_str(),
            tokens,
            budget,
            "operational template over the tier's prompt budget; cut"
        );
        Ok(s.with_content(cut))
    }

    /// Assemble one request that keeps no conversation (what `strata assemble` does): the
    /// runtime's contributors gather for `req`'s mode, path and tier (memory searched with
    /// `query`, shared facts, the built-ins, the goals and files of `session`), their sections
    /// join the caller's, and the whole is assembled. Tools are narrowed before contributors
    /// see them, as in a session.
    pub fn assemble_request(
        &self,
        session: &str,
        query: Option<&str>,
        mut req: AssemblyRequest,
    ) -> Result<AssembledContext, SessionError> {
        let agent = &self.agent;
        let budget = req.budget.clone().unwrap_or(BudgetSpec::AgentDefault);
        let (_, tier) = budget.resolve(agent.budget());
        let tools = crate::assemble::narrowed_tools(agent, &req.tools, &req.tool_policy);
        let now_ms = req.now_ms.unwrap_or_else(|| self.now_ms());
        let (mut sections, omissions) = self.gather_turn(&Gathering {
            session,
            query,
            mode: req.mode,
            path: req.path,
            tier,
            operational: agent.default_mode(),
            tools: &tools,
            now_ms,
            inputs: TurnOptions::default().request_inputs(&self.params.model)?,
        })?;
        sections.append(&mut req.sections);
        req.sections = sections;
        req.omissions.extend(omissions);
        req.now_ms = Some(now_ms);
        Ok(self.assembler.assemble(agent, &req)?)
    }
}

impl Session<'_> {
    /// The newest user entry and every entry after it, as sticky working-memory sections;
    /// with `pending` entries after them (a pending user entry starts a new exchange).
    fn current_exchange(&self, pending: &[Entry]) -> Result<Vec<Section>, SessionError> {
        let mut entries = if pending.iter().any(|e| e.role == Role::User) {
            Vec::new()
        } else {
            self.rt.store.working().current_exchange(&self.id)?
        };
        entries.extend(pending.iter().cloned());
        let mut out = Vec::new();
        for e in &entries {
            let s = Section::builder(
                RuntimeLayer::WorkingMemory,
                format!("turn/{}", e.seq),
                e.content.as_str(),
            )
            .map_err(|err| SessionError::Invalid(err.to_string()))?
            .phase(strata_core::Phase::History)
            .sticky(true)
            .turn(e.turn())
            .keep(e.keep())
            .source(strata_core::SourceKind::Store, "session")
            .build();
            out.push(native_tool_call(s)?);
        }
        Ok(out)
    }
}

/// A stored tool call keeps `{"name", "arguments"}` as its content; the assembler wants the
/// arguments as content and the name on the turn.
fn native_tool_call(s: Section) -> Result<Section, SessionError> {
    let Some(turn) = s
        .turn()
        .filter(|t| t.role == Role::ToolCall && s.layer() == RuntimeLayer::WorkingMemory)
        .cloned()
    else {
        return Ok(s);
    };
    let stored: Value = serde_json::from_str(s.content().as_str()).map_err(|e| {
        SessionError::Invalid(format!(
            "stored tool call `{}` is not the JSON the session writes: {e}",
            s.id()
        ))
    })?;
    let name = stored["name"]
        .as_str()
        .and_then(|n| ToolName::new(n).ok())
        .ok_or_else(|| {
            SessionError::Invalid(format!("stored tool call `{}` has no tool name", s.id()))
        })?;
    let args = stored["arguments"].to_string();
    Ok(s.with_content(args).with_turn(Turn {
        name: Some(name),
        is_error: false,
        ..turn
    }))
}

/// The digest of a session's standing prompt (ADR-0045): what stays byte-identical at the
/// start of a request (the system channel, the tool definitions, the stable context), and the
/// goal and the operational template wherever they are placed.
fn stable_digest(context: &AssembledContext, sections: &[Section]) -> ContentHash {
    let mut text = match context.conversation() {
        Some(conv) => {
            let stable: Vec<&crate::provider::Message> = conv
                .messages
                .iter()
                .filter(|m| m.kind == crate::provider::MessageKind::StableContext)
                .collect();
            let tools = serde_json::to_string(&conv.tools).unwrap_or_default();
            let stable = serde_json::to_string(&stable).unwrap_or_default();
            format!("{}\u{0}{tools}\u{0}{stable}", conv.system)
        }
        None => context.stable_prefix().to_owned(),
    };
    // The sections the goal manager and the operational template write.
    let standing = |id: &str| id == "goal" || id.starts_with("template/");
    for s in sections.iter().filter(|s| standing(s.id().as_str())) {
        text.push('\u{0}');
        text.push_str(s.id().as_str());
        text.push('\u{0}');
        text.push_str(&s.content_hash().to_string());
    }
    ContentHash::of(&text)
}

/// `items` sorted, each once.
fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The id of the runtime's memory search contributor.
const MEMORY_SEARCH_ID: &str = "memory.search";

/// The budget of a turn (ADR-0044): a context window sets the total, the response reserve (at
/// least an eighth of the window) and the tier; the per-layer budgets, the section cap and the
/// character cap come from `strata.toml` when the runtime has one, else from the definition,
/// whatever the window.
fn turn_budget(rt: &Runtime, context_window: Option<u32>) -> BudgetSpec {
    match (context_window, rt.configured) {
        (Some(w), true) => {
            let base = rt.config.to_budget();
            BudgetSpec::Explicit(BudgetSpec::ContextWindow(w).resolve(&base).0)
        }
        (Some(w), false) => BudgetSpec::ContextWindow(w),
        (None, true) => BudgetSpec::Explicit(rt.config.to_budget()),
        (None, false) => BudgetSpec::AgentDefault,
    }
}

/// Refuse a definition whose signed template for a mode and tier is over the tier's prompt
/// budget (the seeds' 200, 500, 1,000 and 1,500 tokens; ADR-0016). The fallback template, which
/// serves every tier, is checked at render time instead.
fn check_tier_prompts(
    agent: &VerifiedAgent,
    tokenizer: &dyn Tokenizer,
) -> Result<(), SessionError> {
    for mode in OperationalMode::ALL.iter().copied() {
        for tier in Tier::ALL {
            let Some(text) = agent.templates().get(mode, tier) else {
                continue;
            };
            let budget = tier.prompt_budget();
            let tokens = tokenizer.count(text);
            if tokens > budget as usize {
                return Err(SessionError::TierPrompt {
                    mode,
                    tier: tier.number(),
                    tokens,
                    budget,
                });
            }
        }
    }
    Ok(())
}

/// The goal contributor of a runtime: the active goal of the gathering's session, read from
/// the store, sticky in layer 4 (ADR-0016).
struct SessionGoals {
    state: Arc<dyn SessionState>,
    store: String,
    clock: Arc<dyn strata_registry::Clock>,
}

impl Contributor for SessionGoals {
    fn id(&self) -> &str {
        GoalManager::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        GoalManager::in_memory().meta()
    }
    /// Each session's goals: never cached (the cache's keys name no session).
    fn cache_policy(&self) -> strata_registry::CachePolicy {
        strata_registry::CachePolicy::Never
    }
    fn contribute(
        &self,
        ctx: &ContributionContext,
    ) -> Result<Vec<Section>, strata_registry::ContributorError> {
        let store = StoredGoals::new(
            self.state.clone(),
            self.store.clone(),
            ctx.session_id.clone(),
        );
        GoalManager::in_store(Arc::new(store), self.clock.clone())
            .map_err(|e| strata_registry::ContributorError::Source(e.to_string()))?
            .contribute(ctx)
    }
}

/// Reading a session as a whole, for services that expose sessions by id.
impl Session<'_> {
    /// Every recorded entry of this session, oldest first; empty for a session never used (or
    /// reset).
    pub fn turns(&self) -> Result<Vec<strata_memory::Entry>, SessionError> {
        Ok(self.rt.store.working().entries(&self.id)?)
    }

    /// Whether this session has any recorded entry, without reading them.
    pub fn exists(&self) -> Result<bool, SessionError> {
        Ok(self.rt.store.working().has_session(&self.id)?)
    }
}

/// Counters for services that export metrics.
impl Runtime {
    /// The assembler's section-cache counters.
    pub fn cache_stats(&self) -> crate::assemble::CacheStats {
        self.assembler.cache_stats()
    }
}
