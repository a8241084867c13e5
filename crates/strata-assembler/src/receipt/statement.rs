//! The receipt's in-toto Statement and its strata predicate, field for field, in the
//! canonical order of their names (ADR-0021).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_core::{Layer, Tier};

use super::sha256_hex;
#[cfg(doc)]
use super::{body_bytes, PREDICATE_TYPE, STATEMENT_TYPE, SUBJECT_BODY, SUBJECT_TEXT};
#[cfg(doc)]
use crate::output::AssembledContext;
use crate::report::{Breakpoint, RequestReport};

/// One subject of the statement: a name and its digests (`sha256` only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// Algorithm to lower-case hex digest.
    pub digest: BTreeMap<String, String>,
    /// [`SUBJECT_BODY`] or [`SUBJECT_TEXT`].
    pub name: String,
}

impl Subject {
    pub(super) fn sha256(name: &str, bytes: &[u8]) -> Subject {
        Subject {
            name: name.to_owned(),
            digest: BTreeMap::from([("sha256".to_owned(), sha256_hex(bytes))]),
        }
    }
}

/// The verified definition the assembly took layers 1-2 from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRecord {
    /// Agent id.
    pub id: String,
    /// BLAKE3 of the rendered layers 1-2 (`blake3:<hex>`).
    pub identity_digest: String,
    /// SHA-256 (hex) of the signed definition payload.
    pub payload_sha256: String,
    /// Key ids of the trusted signers of the definition, sorted.
    pub signers: Vec<String>,
    /// Definition version.
    pub version: u64,
}

/// Budget of the assembly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetRecord {
    /// Character cap, if any.
    pub max_total_chars: Option<u64>,
    /// Total less reserve.
    pub prompt_budget: u64,
    /// Response reserve.
    pub response_reserve: u64,
    /// Tier.
    pub tier: Tier,
    /// Total tokens.
    pub total_tokens: u64,
}

/// What the output used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountsRecord {
    /// Characters of the output.
    pub chars: u64,
    /// Tokens of layers 1-2.
    pub identity_tokens: u64,
    /// The provider request's counts and caching, for a provider-native assembly.
    pub request: Option<RequestRecord>,
    /// Tokens used by the output.
    pub used_tokens: u64,
}

/// One runtime section of the report, by digest (ADR-0021).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SectionRecord {
    /// Authority it was given: `caller`, `user`, `agent` or `data` (ADR-0014).
    pub authority: String,
    /// Content digest as the report gives it (`blake3:<hex>`).
    pub content_digest: String,
    /// For a cut section: tokens of the whole rendered section (the cut is at `tokens`), when
    /// they were counted (sections cut to fit sticky ones, or on request; ADR-0037).
    pub full_tokens: Option<u64>,
    /// Section id.
    pub id: String,
    /// For a cut section: bytes of its content kept from the start (the cut offset). Absent
    /// otherwise, and in receipts signed before it was recorded, which keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_head_bytes: Option<u64>,
    /// For a cut section: bytes of its content kept from the end (0 for a head cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_tail_bytes: Option<u64>,
    /// Layer (3-6).
    pub layer: Layer,
    /// The producer's name (contributor, store, file).
    pub producer: String,
    /// Why it was dropped, filtered or overridden.
    pub reason: Option<String>,
    /// Record id inside the source, when there is one.
    pub record: Option<String>,
    /// Source kind (`static`, `config`, `mcp:<server>`, `store`, `caller`).
    pub source: String,
    /// `kept`, `cut`, `dropped`, `filtered` or `overridden`.
    pub status: String,
    /// Sticky or protected.
    pub sticky: bool,
    /// Tokens it takes in the output (0 unless kept or cut).
    pub tokens: u64,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfferedTool {
    /// SHA-256 of the description written into the request.
    pub description_sha256: Option<String>,
    /// Tool name.
    pub name: String,
    /// SHA-256 of the schema JSON written into the request.
    pub schema_sha256: Option<String>,
    /// Where its schema came from (`signed`, `announced`, `none`); absent in the plain-text
    /// format, which carries no schemas.
    pub schema_source: Option<String>,
}

/// A tool that was announced or requested and refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusedTool {
    /// Tool name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// Tools of the assembly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsRecord {
    /// Offered.
    pub offered: Vec<OfferedTool>,
    /// Refused.
    pub refused: Vec<RefusedTool>,
}

/// The strata predicate of a receipt (ADR-0021).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    /// The definition.
    pub agent: AgentRecord,
    /// Cache breakpoints.
    pub breakpoints: Vec<BreakpointRecord>,
    /// Budget.
    pub budget: BudgetRecord,
    /// Counts.
    pub counts: CountsRecord,
    /// `text` for the plain-text format, else the provider (`openai-chat`, ...).
    pub format: String,
    /// Sections that never reached the assembler.
    pub omissions: Vec<OmissionRecord>,
    /// Key id of the runtime key that signs the receipt.
    pub runtime_key_id: String,
    /// Every runtime section of the report, in the report's order.
    pub sections: Vec<SectionRecord>,
    /// Where the stable prefix ends.
    pub stable_prefix: BreakpointRecord,
    /// Version of strata that assembled.
    pub strata_version: String,
    /// Tokenizer.
    pub tokenizer: String,
    /// Tools.
    pub tools: ToolsRecord,
}

/// A cache breakpoint as recorded (fields in canonical order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakpointRecord {
    /// The last layer in the prefix.
    pub after_layer: Layer,
    /// Byte offset in the text where the prefix ends.
    pub byte: u64,
    /// Token offset.
    pub token: u64,
}

impl From<&Breakpoint> for BreakpointRecord {
    fn from(b: &Breakpoint) -> Self {
        BreakpointRecord {
            after_layer: b.after_layer,
            byte: b.byte as u64,
            token: b.token,
        }
    }
}

/// The provider request's counts and caching as recorded (see [`RequestReport`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRecord {
    /// `exact` or `estimate`.
    pub count: String,
    /// Tokens expected from the provider's cache on the next turn.
    pub expected_cached_tokens: u64,
    /// Margin added for providers without a public tokenizer, in percent.
    pub margin_pct: u32,
    /// Tokens of the messages with their framing.
    pub message_tokens: u64,
    /// Messages placed.
    pub messages: u64,
    /// The provider's minimum cacheable prefix.
    pub min_cacheable_tokens: u64,
    /// Provider.
    pub provider: String,
    /// Tokens of the prefix that stays byte-identical on the next turn.
    pub stable_prefix_tokens: u64,
    /// Tokens of the system message.
    pub system_tokens: u64,
    /// Tokens of the tool definitions (an estimate).
    pub tool_tokens: u64,
    /// The total, margin included.
    pub total_tokens: u64,
}

impl From<&RequestReport> for RequestRecord {
    fn from(r: &RequestReport) -> Self {
        RequestRecord {
            count: r.count.clone(),
            expected_cached_tokens: r.expected_cached_tokens,
            margin_pct: r.margin_pct,
            message_tokens: r.message_tokens,
            messages: r.messages as u64,
            min_cacheable_tokens: r.min_cacheable_tokens,
            provider: r.provider.clone(),
            stable_prefix_tokens: r.stable_prefix_tokens,
            system_tokens: r.system_tokens,
            tool_tokens: r.tool_tokens,
            total_tokens: r.total_tokens,
        }
    }
}

/// A section that never reached the assembler, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OmissionRecord {
    /// Contributor or section id.
    pub id: String,
    /// Layer.
    pub layer: Layer,
    /// Why.
    pub reason: String,
}

/// An in-toto Statement v1 with the strata predicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The predicate.
    pub predicate: Predicate,
    /// [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// What was sent.
    pub subject: Vec<Subject>,
}

impl Statement {
    /// The canonical bytes (ADR-0021): keys sorted, compact, integers only.
    ///
    /// Every struct of the statement declares its fields in the byte order of their names and
    /// its only map is a `BTreeMap`, so serialising it directly gives the same bytes as sorting
    /// the keys of its JSON value (a test checks it), at a fraction of the cost.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Serialising these types cannot fail: every map key is a string, no float is held.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// What the runtime sends, which the receipt's subject names.
#[derive(Debug, Clone, Copy)]
pub enum Sent<'a> {
    /// A provider request body, as [`body_bytes`] wrote it.
    Body(&'a [u8]),
    /// The plain-text context ([`AssembledContext::text`]).
    Text(&'a str),
}
