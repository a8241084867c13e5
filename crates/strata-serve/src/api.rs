//! The JSON shapes of the service's requests and responses (ADR-0022). They are the OpenAPI
//! document's schemas too: the document is generated from these types and the handlers.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Status {
    /// `ok` (alive) or `ready` (the agent is loaded and valid now).
    pub status: String,
}

/// `GET /v1/agent`: the loaded agent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentInfo {
    /// The definition's id.
    pub agent_id: String,
    /// The definition's version.
    pub version: u64,
    /// BLAKE3 digest of the rendered identity (layers 1-2).
    pub identity_digest: String,
    /// SHA-256 of the signed payload.
    pub payload_sha256: String,
    /// Key ids of the signatures that verified.
    pub signers: Vec<String>,
    /// Start of the validity window, Unix seconds.
    pub not_before: Option<i64>,
    /// End of the validity window, Unix seconds.
    pub not_after: Option<i64>,
    /// The provider requests are written for.
    pub provider: String,
    /// The model named in requests.
    pub model: String,
    /// When this definition was loaded, Unix milliseconds.
    pub loaded_at_ms: i64,
    /// The last reload attempt, if any.
    pub last_reload: Option<ReloadInfo>,
}

/// The outcome of a reload attempt.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReloadInfo {
    /// When, Unix milliseconds.
    pub at_ms: i64,
    /// Whether the new definition was verified and swapped in.
    pub ok: bool,
    /// Why it was refused (the running agent was kept).
    pub error: Option<String>,
}

/// A tool the runtime offers the model this turn.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The tool's name; only tools the signed definition allows are offered.
    pub name: String,
    /// Its description (the signed one is used when the definition pins it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// The MCP server announcing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// `POST /v1/sessions/{session_id}/turns`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    /// The user's message. Without it, the request continues after tool results.
    #[serde(default)]
    pub message: Option<String>,
    /// Prompt mode: `full`, `compact`, `minimal`, `scheduled`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Assembly path: `soul`, `hydration`, `context`, `basic`, `cached`.
    #[serde(default)]
    pub path: Option<String>,
    /// The model's context window in tokens (sets budget and tier).
    #[serde(default)]
    pub context_window: Option<u32>,
    /// Tools announced this turn (default: none beyond the server's).
    #[serde(default)]
    pub tools: Option<Vec<ToolSpec>>,
    /// Extra runtime sections for this turn only (layers 3-6; the runtime input format).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub sections: Option<Vec<Value>>,
    /// Operational mode: `assistant`, `developer`, `planning`, `debugger` or `user` (default:
    /// the signed definition's).
    #[serde(default)]
    pub operational_mode: Option<String>,
    /// The resolved context the `context` path assembles (sections in the runtime input
    /// format); required on that path and used on no other.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub resolved_context: Option<Vec<Value>>,
    /// The tools retrieved for this turn on the `hydration` path (default: retrieved from the
    /// offered tools by the message's words); used on no other path.
    #[serde(default)]
    pub retrieved_tools: Option<Vec<ToolSpec>>,
    /// Skills activated for this turn; each becomes a `skill/<id>` section of layer 4.
    #[serde(default)]
    pub skills: Option<Vec<SkillSpec>>,
    /// How much explicit reasoning to ask for: `off`, `low`, `medium` or `high`.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Who sent the message, through which channel.
    #[serde(default)]
    pub inbound: Option<InboundSpec>,
    /// The answer will be spoken rather than read.
    #[serde(default)]
    pub voice: Option<bool>,
    /// The language to answer in (a name or a BCP 47 tag).
    #[serde(default)]
    pub language: Option<String>,
    /// The model this turn goes to (default: the server's): named in the runtime section,
    /// given to templates as `model` and written into the request body.
    #[serde(default)]
    pub model: Option<String>,
    /// The caller's time zone: `UTC`, an offset such as `+01:00`, or a name and an offset
    /// such as `Europe/Paris +01:00` (default: UTC).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// What the agent did most recently (commands run, files touched, their outcome), one
    /// line each, oldest first; shown as the `recent-footprint` section of layer 5. At most
    /// 50 lines of up to 500 bytes.
    #[serde(default)]
    pub recent_footprint: Option<Vec<String>>,
    /// The business or project context the platform keeps for this session; shown as the
    /// `business-context` section of layer 3. Up to 32 KiB.
    #[serde(default)]
    pub business_context: Option<String>,
    /// Whether the registered sanity-check prompts take part (default: true).
    #[serde(default)]
    pub sanity_checks: Option<bool>,
}

/// A skill activated for a turn.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillSpec {
    /// The skill's id: 1-100 characters of `[A-Za-z0-9._:/-]`.
    pub id: String,
    /// What the skill tells the agent to do (data from the caller, fenced when sent).
    pub instructions: String,
}

/// The inbound message's origin.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InboundSpec {
    /// Who sent it (a user name, an address, another agent's id).
    #[serde(default)]
    pub sender: Option<String>,
    /// The channel it came through (`cli`, `slack`, `email`...).
    #[serde(default)]
    pub channel: Option<String>,
    /// Further metadata, shown in key order.
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// A prepared turn.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnResponse {
    /// The session.
    pub session_id: String,
    /// The provider the request is written for.
    pub provider: String,
    /// The complete request body: hand it to the provider's SDK or API as is.
    #[schema(value_type = Object)]
    pub request: Value,
    /// The assembly report: what was kept, cut, dropped and why.
    #[schema(value_type = Object)]
    pub report: Value,
    /// The identity digest the request was built from.
    pub identity_digest: String,
    /// The signed receipt of this turn, when the server signs receipts.
    #[schema(value_type = Option<Object>)]
    pub receipt: Option<Value>,
    /// The tools announced for this turn that the request does not offer, with the reason of
    /// each (not in the signed allowlist, definition changed, restricted by the caller...).
    pub refused_tools: Vec<RefusedToolView>,
    /// The `seq` of each of the session's entries this request left out for lack of room:
    /// what a runtime may summarise (`POST .../compactions`).
    pub dropped_turns: Vec<u64>,
    /// What this turn changed for the session: `{"type": "prompt_updated", "digest": ...}` when
    /// its standing prompt (system channel, tool definitions, stable context, goal, operational
    /// template) differs from the previous turn's, so a provider's prompt cache misses;
    /// `{"type": "mode_changed", "from": ..., "to": ...}` when its operational mode does;
    /// `{"type": "skills_updated", "skills": [...]}` when the ids of its active skills do, and
    /// `{"type": "tools_updated", "tools": [...]}` when the names of the tools its request
    /// offers do (sorted). A session's first turn on a server tells its prompt, skills and
    /// tools.
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
}

/// A tool the request does not offer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RefusedToolView {
    /// The tool's name as announced.
    pub name: String,
    /// Why it was refused.
    pub reason: String,
    /// Why it was refused, as a stable code: `not_allowlisted`, `restricted`,
    /// `definition_changed` (its announced description, schema or server differs from the
    /// signed pin, ADR-0041), `duplicate` or `schema_not_identifier`.
    pub cause: String,
}

/// A tool call run through its live MCP server, and recorded as the call's result.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolRunView {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The server's result: untrusted data, recorded as the tool's result.
    pub output: String,
    /// Whether the server marked the result as an error.
    pub is_error: bool,
}

/// A tool call in the model's reply.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// The call id, as the provider gave it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments (a JSON object).
    #[schema(value_type = Object)]
    pub arguments: Value,
}

/// `POST /v1/sessions/{session_id}/replies`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyRequest {
    /// The reply's text (may be empty when it only calls tools).
    #[serde(default)]
    pub text: String,
    /// Tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallSpec>,
    /// The model's reasoning before the text and calls, exactly as the provider returned it:
    /// Anthropic `thinking` / `redacted_thinking` blocks or OpenAI Responses `reasoning` items,
    /// for the server's provider only. They are sent back unchanged while the reply's tool loop
    /// lasts.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub reasoning: Vec<Value>,
}

/// The reply was recorded.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplyResponse {
    /// What the goal markers in the reply did.
    #[schema(value_type = Object)]
    pub goals: Value,
}

/// `POST /v1/sessions/{session_id}/tool-results`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultRequest {
    /// The call this is the result of.
    pub call_id: String,
    /// The tool's output (data: it is fenced, never followed as instructions).
    pub output: String,
    /// The tool failed: sent as Anthropic's `is_error` with the result.
    #[serde(default)]
    pub is_error: bool,
    /// Which end of the output to keep when it is cut (the head by default).
    #[serde(default)]
    pub keep: Option<KeepEnd>,
}

/// Which end of a tool's output is kept when it is cut to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeepEnd {
    /// The beginning.
    Head,
    /// The end: a log's newest lines.
    Tail,
    /// Both ends, the middle left out.
    Both,
}

impl From<KeepEnd> for strata_core::Keep {
    fn from(k: KeepEnd) -> strata_core::Keep {
        match k {
            KeepEnd::Head => strata_core::Keep::Head,
            KeepEnd::Tail => strata_core::Keep::Tail,
            KeepEnd::Both => strata_core::Keep::Both,
        }
    }
}

/// The tool result was recorded.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Recorded {
    /// Always true.
    pub recorded: bool,
}

/// One recorded entry of a session.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnEntry {
    /// Sequence number (grows, never reused).
    pub seq: u64,
    /// `user`, `assistant`, `tool_call` or `tool_result`.
    pub role: String,
    /// The text (a tool call's is `{"name", "arguments"}` as JSON).
    pub content: String,
    /// The call id of a tool call or result.
    pub call_id: Option<String>,
}

/// `GET /v1/sessions/{session_id}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    /// The session.
    pub session_id: String,
    /// Its entries, oldest first.
    pub turns: Vec<TurnEntry>,
}

/// A session was reset or deleted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Removed {
    /// Entries removed.
    pub removed: usize,
}

/// `POST /v1/memories`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryRequest {
    /// The memory's text (layer 6: data, fenced when used).
    pub content: String,
    /// Tags: 1-64 characters of `[A-Za-z0-9._:/-]` each.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A stored memory's id.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoryCreated {
    /// The id.
    pub id: String,
}

/// `POST /v1/memories/search`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The query.
    pub query: String,
    /// At most this many results (1-100, default 5).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A search result.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoryHit {
    /// The memory's id.
    pub id: String,
    /// Its text.
    pub content: String,
    /// The fused rank score.
    pub score: f64,
    /// Its tags.
    pub tags: Vec<String>,
}

/// Search results, best first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    /// The results.
    pub results: Vec<MemoryHit>,
}

/// `GET /v1/sessions/{session_id}/goals`: the session's goals.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GoalsView {
    /// The session.
    pub session_id: String,
    /// Every goal, oldest first (at most one is active).
    pub goals: Vec<GoalView>,
    /// Decisions of the active goal whose lock the model proposed and nobody confirmed or
    /// refused yet.
    pub pending_locks: Vec<PendingLock>,
}

/// A decision waiting for the caller to confirm or refuse its lock.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PendingLock {
    /// The goal.
    pub goal: String,
    /// The decision's number within it.
    pub decision: u32,
    /// What was decided.
    pub description: String,
}

/// A goal.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GoalView {
    /// Its id (`goal-1`...).
    pub id: String,
    /// What it is.
    pub description: String,
    /// `high`, `medium` or `low`.
    pub priority: String,
    /// `active`, `paused` or `completed`.
    pub status: String,
    /// Completed checkpoints.
    pub completed: usize,
    /// All checkpoints.
    pub total: usize,
    /// Its checkpoints.
    pub checkpoints: Vec<CheckpointView>,
    /// Its decisions.
    pub decisions: Vec<DecisionView>,
    /// Its artifacts.
    pub artifacts: Vec<ArtifactView>,
    /// The next step, if one was named.
    pub next: Option<String>,
}

/// A checkpoint of a goal.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CheckpointView {
    /// Its number within the goal.
    pub id: u32,
    /// What it is.
    pub description: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// A decision of a goal.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DecisionView {
    /// Its number within the goal.
    pub id: u32,
    /// What was decided.
    pub description: String,
    /// Why.
    pub rationale: String,
    /// Locked: it can no longer change. Only the caller locks.
    pub locked: bool,
    /// The model proposed the lock; it waits for the caller to confirm or refuse it.
    pub lock_proposed: bool,
}

/// An artifact of a goal.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ArtifactView {
    /// `file`, `test` or `documentation`.
    pub kind: String,
    /// Its path.
    pub path: String,
    /// `created`, `modified` or `deleted`.
    pub action: String,
}

/// `POST /v1/sessions/{session_id}/goals`: a new goal, made the active one.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalRequest {
    /// What it is.
    pub description: String,
    /// `high`, `medium` (the default) or `low`.
    #[serde(default)]
    pub priority: Option<String>,
}

/// `POST /v1/sessions/{session_id}/goals/checkpoints`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequest {
    /// The goal (default: the active one).
    #[serde(default)]
    pub goal: Option<String>,
    /// What the step is.
    pub description: String,
    /// `pending` (the default), `in_progress` or `completed`.
    #[serde(default)]
    pub status: Option<String>,
}

/// `POST /v1/sessions/{session_id}/goals/artifacts`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRequest {
    /// The goal (default: the active one).
    #[serde(default)]
    pub goal: Option<String>,
    /// Its path.
    pub path: String,
    /// `created`, `modified` or `deleted`.
    pub action: String,
    /// `file` (the default), `test` or `documentation`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// `POST /v1/sessions/{session_id}/goals/decisions`: an unlocked decision.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// The goal (default: the active one).
    #[serde(default)]
    pub goal: Option<String>,
    /// What was decided (text before a `:` is its subject).
    pub description: String,
    /// Why.
    #[serde(default)]
    pub rationale: String,
}

/// `POST /v1/sessions/{session_id}/goals/locks`: the caller's answer to a lock the model
/// proposed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LockRequest {
    /// The goal (default: the active one).
    #[serde(default)]
    pub goal: Option<String>,
    /// The decision's number.
    pub decision: u32,
    /// `true` locks the decision for good; `false` refuses the lock and leaves it unlocked.
    pub confirm: bool,
}

/// `POST /v1/sessions/{session_id}/files`: a file a tool of the session touched.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRequest {
    /// The path (1-4096 bytes, no control characters).
    pub path: String,
    /// `read`, `modified` or `deleted`.
    pub action: String,
}

/// `POST /v1/sessions/{session_id}/compactions`: a summary of a range of the session's entries,
/// to stand in for them on later turns (ADR-0047).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactionRequest {
    /// The first entry of the range (its `seq`).
    pub first_seq: u64,
    /// The last entry of the range; it ends before the newest user message.
    pub last_seq: u64,
    /// The summary (at most 64 KiB).
    pub summary: String,
    /// The model that wrote it (1-128 printable characters), if a model did.
    #[serde(default)]
    pub model: Option<String>,
}

/// A stored summary and where it came from.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CompactionView {
    /// The first entry it stands in for.
    pub first_seq: u64,
    /// The last entry it stands in for.
    pub last_seq: u64,
    /// How many entries of the log the range holds.
    pub entries: usize,
    /// The summary.
    pub summary: String,
    /// The model that wrote it, if a model did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When it was stored, Unix milliseconds.
    pub at_ms: i64,
}

/// A session's summaries, oldest range first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CompactionsView {
    /// The session.
    pub session_id: String,
    /// Its summaries.
    pub compactions: Vec<CompactionView>,
}
