//! The assembly report: what was kept, cut and dropped, and why.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_core::{Layer, Provenance, Role, SectionId, Tier, ToolName};

/// What happened to one runtime section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum SectionStatus {
    /// Rendered whole.
    Kept,
    /// Rendered, truncated to fit. What was kept is `head_bytes` from the start of the content
    /// (as offered, `bytes` long) and `tail_bytes` from its end; the bytes between were left
    /// out. A head cut (the default) keeps no tail, so `head_bytes` is the cut offset.
    Cut {
        /// Tokens of the whole rendered section, when they were counted: a section cut to
        /// make sticky sections fit was measured whole first; otherwise only on request
        /// (`AssemblyRequest::count_cut_sections`), because the part left out is not
        /// tokenized by default (ADR-0037). `head_bytes` and `tail_bytes` against `bytes`
        /// always say how much was left out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        full_tokens: Option<u64>,
        /// Bytes kept from the start of the content.
        #[serde(default)]
        head_bytes: u64,
        /// Bytes kept from the end of the content.
        #[serde(default)]
        tail_bytes: u64,
    },
    /// Left out to fit the budget.
    Dropped {
        /// Which limit left it out (serialized as `budget`, `layer_budget`, ...).
        reason: DropReason,
    },
    /// Not taking part in this mode or path.
    Filtered {
        /// Which rule left it out (serialized as `mode`, `path`, ...).
        reason: FilterReason,
    },
    /// Lost a conflict to a higher layer (I4).
    Overridden {
        /// The winner's layer.
        by_layer: Layer,
        /// The winner's id.
        by_id: String,
        /// The contested key or id.
        on: String,
    },
}

/// Why fitting left a section out: which limit it did not fit. Serialized as the snake_case
/// name of the variant (`"budget"`, `"layer_budget"`, ...), the strings reports carried before
/// the reasons were typed, so report JSON reads the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DropReason {
    /// The prompt budget was used up (ADR-0008, ADR-0037).
    Budget,
    /// Its layer's soft budget was used up.
    LayerBudget,
    /// The character cap of the whole prompt was reached.
    MaxTotalChars,
    /// Larger than the per-section cap and could not be cut to it.
    SectionCap,
    /// A history turn before the first user turn of a provider request with no stable context
    /// (providers want a conversation to open with the user; ADR-0015).
    HistoryStart,
}

/// Why a section took no part in an assembly, by design rather than for lack of room.
/// Serialized as the snake_case name of the variant, as [`DropReason`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FilterReason {
    /// Not in the request's prompt mode.
    Mode,
    /// Not in the request's assembly path.
    Path,
    /// Its id or key belongs to the tool catalog the assembler writes (I4).
    Reserved,
    /// An empty user or assistant turn.
    Empty,
    /// A tool call without its result, or a result without its call, under `PairPolicy::Drop`.
    Unpaired,
}

impl DropReason {
    /// The name the report's JSON gives it.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::Budget => "budget",
            DropReason::LayerBudget => "layer_budget",
            DropReason::MaxTotalChars => "max_total_chars",
            DropReason::SectionCap => "section_cap",
            DropReason::HistoryStart => "history_start",
        }
    }
}

impl FilterReason {
    /// The name the report's JSON gives it.
    pub const fn as_str(self) -> &'static str {
        match self {
            FilterReason::Mode => "mode",
            FilterReason::Path => "path",
            FilterReason::Reserved => "reserved",
            FilterReason::Empty => "empty",
            FilterReason::Unpaired => "unpaired",
        }
    }
}

/// A reason reads as the name it is serialized as, so views that print or match the names
/// keep working.
macro_rules! reason_as_name {
    ($t:ty) => {
        impl std::ops::Deref for $t {
            type Target = str;
            fn deref(&self) -> &str {
                self.as_str()
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
    };
}
reason_as_name!(DropReason);
reason_as_name!(FilterReason);

/// One runtime section in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SectionReport {
    /// Id: the section's own, shared rather than copied (serialized as a string).
    pub id: SectionId,
    /// Layer.
    pub layer: Layer,
    /// Tokens it takes in the output (0 unless kept or cut). A dropped section's tokens are
    /// not known: the assembler does not count what it leaves out (ADR-0037); see `bytes`.
    pub tokens: u64,
    /// Characters it takes in the output.
    pub chars: u64,
    /// Bytes of its content as offered (UTF-8), whatever happened to it: the size of a dropped
    /// section that can be known without tokenizing it (ADR-0037).
    #[serde(default)]
    pub bytes: u64,
    /// Kept (whole or cut) in budget left over after a more important unit was dropped because
    /// it did not fit: a smaller, less important section filling the budget (ADR-0037).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub filled: bool,
    /// The role of a working-memory turn (user, assistant, tool call or tool result): what
    /// gives the turn its authority in a receipt (ADR-0021). None for every other section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Sticky or protected.
    pub sticky: bool,
    /// Stable.
    pub stable: bool,
    /// Outcome.
    #[serde(flatten)]
    pub status: SectionStatus,
    /// Provenance: the section's own, shared rather than copied (serialized as its fields).
    pub provenance: Arc<Provenance>,
}

/// Totals per layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerReport {
    /// Layer.
    pub layer: Layer,
    /// Tokens in the output, including its omission marker.
    pub tokens: u64,
    /// Soft budget of the layer, if any.
    pub budget: Option<u64>,
    /// Sections kept whole.
    pub kept: usize,
    /// Sections cut.
    pub cut: usize,
    /// Sections dropped for budget.
    pub dropped: usize,
    /// Bytes of content of the dropped sections (ADR-0037).
    #[serde(default)]
    pub dropped_bytes: u64,
}

/// A conflict resolved in favour of the higher layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// The contested key (or `id:<id>` for a duplicate id).
    pub on: String,
    /// Winner.
    pub winner: (Layer, String),
    /// Loser.
    pub loser: (Layer, String),
}

/// A section that never reached the assembler (a failed or slow contributor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omission {
    /// Contributor or section id.
    pub id: String,
    /// Layer.
    pub layer: Layer,
    /// Why.
    pub reason: String,
}

/// The tool set after narrowing (I4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsReport {
    /// Tools the model may use: allowlisted, permitted by the caller, announced.
    pub effective: Vec<ToolName>,
    /// Announced or requested tools refused, each with its reason in words and its cause as a
    /// code, both decided where the tool was refused.
    pub refused: Vec<RefusedTool>,
    /// Offered tools whose announced schema lost free text before it was offered (ADR-0032),
    /// by tool name; absent when nothing was removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_text_removed: Vec<SchemaTextRemoved>,
}

/// What was removed from one tool's announced schema before it was offered: its structure is
/// kept, and every value that can carry words is removed (ADR-0032).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaTextRemoved {
    /// The tool.
    pub tool: ToolName,
    /// JSON Pointers (RFC 6901) into the announced schema of the values removed.
    pub paths: Vec<String>,
}

impl ToolsReport {
    /// The refused tools.
    pub fn refused_tools(&self) -> Vec<RefusedTool> {
        self.refused.clone()
    }
}

/// A tool the request does not offer, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedTool {
    /// The tool's name as announced.
    pub name: String,
    /// Why it was refused, in words.
    pub reason: String,
    /// Why it was refused, as a stable code.
    pub cause: RefusalCause,
}

/// Why a tool was refused, as a stable code a program can act on (the reason says it in words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalCause {
    /// Not on layer 1's allowlist.
    NotAllowlisted,
    /// Left out by the delegated tool policy.
    Restricted,
    /// Its announced description, schema or server differs from what the signed definition
    /// pins (ADR-0015, ADR-0041).
    DefinitionChanged,
    /// Announced more than once; the first announcement is used.
    Duplicate,
    /// Its announced schema has a name that is not an identifier (ADR-0032).
    SchemaNotIdentifier,
}

impl RefusalCause {
    /// The code, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCause::NotAllowlisted => "not_allowlisted",
            RefusalCause::Restricted => "restricted",
            RefusalCause::DefinitionChanged => "definition_changed",
            RefusalCause::Duplicate => "duplicate",
            RefusalCause::SchemaNotIdentifier => "schema_not_identifier",
        }
    }
}

/// A cache breakpoint for providers that cache prompt prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breakpoint {
    /// Byte offset in the text where a cacheable prefix ends.
    pub byte: usize,
    /// Token offset.
    pub token: u64,
    /// The last layer in the prefix.
    pub after_layer: Layer,
}

/// The report of one assembly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Agent id.
    pub agent_id: String,
    /// Identity digest (BLAKE3 of the rendered layers 1-2).
    pub identity_digest: String,
    /// Tokenizer.
    pub tokenizer: String,
    /// Tier (from the context window, or from the total budget).
    pub tier: Tier,
    /// Total budget.
    pub total_tokens: u64,
    /// Response reserve.
    pub response_reserve: u64,
    /// Prompt budget: total less reserve.
    pub prompt_budget: u64,
    /// Tokens used by the output.
    pub used_tokens: u64,
    /// Tokens of the prompt budget left unused while content was dropped: 0 when nothing was
    /// dropped. Room that no dropped unit could use whole (each needed more), after the first
    /// one that did not fit was cut into it where that was possible (ADR-0037).
    #[serde(default)]
    pub idle_tokens: u64,
    /// Characters of the output.
    pub chars: u64,
    /// Character cap, if any.
    pub max_total_chars: Option<u64>,
    /// Tokens of layers 1-2.
    pub identity_tokens: u64,
    /// Where the stable prefix ends.
    pub stable_prefix: Breakpoint,
    /// Cache breakpoints (at most 4).
    pub breakpoints: Vec<Breakpoint>,
    /// Per layer (3-6).
    pub layers: Vec<LayerReport>,
    /// Per runtime section, in output order then the rest.
    pub sections: Vec<SectionReport>,
    /// Conflicts resolved.
    pub conflicts: Vec<Conflict>,
    /// Tools.
    pub tools: ToolsReport,
    /// The provider request: its count and caching (absent for the plain-text format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestReport>,
    /// Omissions from gathering.
    pub omissions: Vec<Omission>,
}

/// The provider request of a provider-native assembly (ADR-0015).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestReport {
    /// `openai-chat`, `openai-responses` or `anthropic`.
    pub provider: String,
    /// `exact` where every part is counted with the provider's public encoding and published
    /// message framing, `estimate` otherwise (tool definitions, tool calls, or a provider with
    /// no public tokenizer).
    pub count: String,
    /// Tokens of the system message with its framing and the reply priming.
    pub system_tokens: u64,
    /// Tokens of the tool definitions (an estimate).
    pub tool_tokens: u64,
    /// Tokens of the messages with their framing.
    pub message_tokens: u64,
    /// Margin added for providers without a public tokenizer, in percent.
    pub margin_pct: u32,
    /// The total, margin included; never above the prompt budget.
    pub total_tokens: u64,
    /// Messages placed.
    pub messages: usize,
    /// Tokens of the prefix that stays byte-identical on the next turn.
    pub stable_prefix_tokens: u64,
    /// Tokens the provider can be expected to serve from its cache on the next turn.
    pub expected_cached_tokens: u64,
    /// The provider's minimum cacheable prefix for the model.
    pub min_cacheable_tokens: u64,
}
