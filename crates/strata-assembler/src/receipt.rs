//! Signed assembly receipts: what the model was shown and why, as an in-toto Statement signed
//! in DSSE by a runtime key (ADR-0021).
//!
//! A receipt is built after an assembly from the [`AssembledContext`], the
//! [`AssemblyRequest`] it came from and the exact bytes the runtime sends. Its subject is the
//! SHA-256 of those bytes: for a provider-native assembly, the request body serialised by
//! [`body_bytes`] (compact `serde_json`, keys sorted, no whitespace); for the plain-text format,
//! the UTF-8 bytes of [`AssembledContext::text`]. Its predicate records the verified definition
//! (payload SHA-256, signer key ids, identity digest), every runtime section of the report with
//! its layer, authority, source, content digest, status and reason, the tools offered and
//! refused, the tokenizer, budget, counts, provider and breakpoints, and the strata version.
//! Content is referenced by digest only: a receipt carries no prompt text.
//!
//! The statement is written in one canonical form (ADR-0021): the JSON value with every
//! object's keys sorted, no insignificant whitespace, integers only. The same assembly gives the
//! same bytes, and a verifier refuses a statement that is not in this form.
//!
//! Verification follows "verify, then read": [`verify`] checks the envelope's signature against
//! a [`TrustStore`] over DSSE's pre-authentication encoding, and only then parses the statement
//! from the exact signed bytes into a [`VerifiedReceipt`], which nothing else can construct.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use ed25519_dalek::Signature;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use strata_agentdef::envelope::{pae, Envelope};
use strata_agentdef::{KeyId, KeyPair, TrustStore, VerifiedAgent};
use strata_core::format::Authority;
use strata_core::{Layer, RuntimeLayer, Tier};

use crate::output::AssembledContext;
use crate::provider::{RequestError, RequestParams};
use crate::report::{Breakpoint, RequestReport, SectionReport, SectionStatus};
use crate::request::AssemblyRequest;
use crate::Assembler;

/// The in-toto Statement type of every receipt.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate type of a strata assembly receipt.
pub const PREDICATE_TYPE: &str = "https://example.invalid/strata/assembly-receipt/v1";
/// The DSSE payload type of an in-toto Statement, as in-toto tooling expects it.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// Subject name of a provider request body.
pub const SUBJECT_BODY: &str = "request-body";
/// Subject name of the plain-text context.
pub const SUBJECT_TEXT: &str = "context-text";

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The exact bytes a runtime sends for a request body, and that a receipt's subject names:
/// compact `serde_json` (object keys sorted, no whitespace) (ADR-0021).
pub fn body_bytes(body: &Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail: its keys are strings and it holds no non-finite float.
    serde_json::to_vec(body).unwrap_or_default()
}

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
    fn sha256(name: &str, bytes: &[u8]) -> Subject {
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

/// Why a section was dropped, filtered or overridden, written on demand.
enum Reason<'a> {
    Named(&'a str),
    Overridden {
        by_layer: Layer,
        by_id: &'a str,
        on: &'a str,
    },
}

impl std::fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Named(r) => f.write_str(r),
            Reason::Overridden {
                by_layer,
                by_id,
                on,
            } => write!(
                f,
                "lost `{on}` to layer {} section `{by_id}`",
                by_layer.number()
            ),
        }
    }
}

fn status_of(s: &SectionStatus) -> (&'static str, Option<Reason<'_>>, Option<u64>) {
    match s {
        SectionStatus::Kept => ("kept", None, None),
        SectionStatus::Cut { full_tokens, .. } => ("cut", None, *full_tokens),
        SectionStatus::Dropped { reason } => ("dropped", Some(Reason::Named(reason)), None),
        SectionStatus::Filtered { reason } => ("filtered", Some(Reason::Named(reason)), None),
        SectionStatus::Overridden {
            by_layer,
            by_id,
            on,
        } => (
            "overridden",
            Some(Reason::Overridden {
                by_layer: *by_layer,
                by_id,
                on,
            }),
            None,
        ),
    }
}

/// The authority a report entry's section was given (ADR-0014): its layer's, and for a turn of
/// working memory the role the assembler reported for this very section.
fn authority_of(r: &SectionReport) -> Authority {
    match r.layer.as_runtime() {
        Some(l) => {
            let role = r.role.filter(|_| l == RuntimeLayer::WorkingMemory);
            Authority::of_runtime(l, role)
        }
        None => Authority::Signed,
    }
}

/// The cut offsets of a report entry: bytes kept from the start and from the end.
fn kept_bytes(s: &SectionStatus) -> (Option<u64>, Option<u64>) {
    match s {
        SectionStatus::Cut {
            head_bytes,
            tail_bytes,
            ..
        } => (Some(*head_bytes), Some(*tail_bytes)),
        _ => (None, None),
    }
}

fn section_record(r: &SectionReport) -> SectionRecord {
    let (status, reason, full_tokens) = status_of(&r.status);
    let (kept_head_bytes, kept_tail_bytes) = kept_bytes(&r.status);
    SectionRecord {
        id: r.id.to_string(),
        layer: r.layer,
        authority: authority_of(r).name().to_owned(),
        source: r.provenance.source.label(),
        producer: r.provenance.name.to_string(),
        record: r.provenance.record.as_deref().map(str::to_owned),
        content_digest: r.provenance.content_hash.to_string(),
        status: status.to_owned(),
        reason: reason.map(|r| r.to_string()),
        tokens: r.tokens,
        full_tokens,
        kept_head_bytes,
        kept_tail_bytes,
        sticky: r.sticky,
    }
}

/// A value written through its `Display`, as a JSON string, without an intermediate `String`.
struct Shown<T>(T);

impl<T: std::fmt::Display> Serialize for Shown<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// A report entry written as its [`SectionRecord`] would be, field for field in the same
/// (canonical) order, straight from the report.
struct SectionView<'a>(&'a SectionReport);

impl Serialize for SectionView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let r = self.0;
        let (status, reason, full_tokens) = status_of(&r.status);
        let (head, tail) = kept_bytes(&r.status);
        let mut st = s.serialize_struct("SectionRecord", 14)?;
        st.serialize_field("authority", authority_of(r).name())?;
        st.serialize_field("content_digest", &Shown(&r.provenance.content_hash))?;
        st.serialize_field("full_tokens", &full_tokens)?;
        st.serialize_field("id", r.id.as_str())?;
        if let Some(head) = head {
            st.serialize_field("kept_head_bytes", &head)?;
        }
        if let Some(tail) = tail {
            st.serialize_field("kept_tail_bytes", &tail)?;
        }
        st.serialize_field("layer", &r.layer)?;
        st.serialize_field("producer", &*r.provenance.name)?;
        st.serialize_field("reason", &reason.map(Shown))?;
        st.serialize_field("record", &r.provenance.record.as_deref())?;
        st.serialize_field("source", &Shown(&r.provenance.source))?;
        st.serialize_field("status", status)?;
        st.serialize_field("sticky", &r.sticky)?;
        st.serialize_field("tokens", &r.tokens)?;
        st.end()
    }
}

/// The report's entries written as the predicate's `sections`.
struct SectionsView<'a>(&'a [SectionReport]);

impl Serialize for SectionsView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(SectionView))
    }
}

/// A [`Statement`] whose sections are written from the report (same fields, same order).
#[derive(Serialize)]
struct StatementView<'a> {
    #[serde(rename = "_type")]
    statement_type: &'a str,
    predicate: PredicateView<'a>,
    #[serde(rename = "predicateType")]
    predicate_type: &'a str,
    subject: &'a [Subject],
}

/// A [`Predicate`] whose sections are written from the report (same fields, same order).
#[derive(Serialize)]
struct PredicateView<'a> {
    agent: &'a AgentRecord,
    breakpoints: &'a [BreakpointRecord],
    budget: &'a BudgetRecord,
    counts: &'a CountsRecord,
    format: &'a str,
    omissions: &'a [OmissionRecord],
    runtime_key_id: &'a str,
    sections: SectionsView<'a>,
    stable_prefix: &'a BreakpointRecord,
    strata_version: &'a str,
    tokenizer: &'a str,
    tools: &'a ToolsRecord,
}

/// The canonical bytes of [`statement`]`(agent, ctx, sent, runtime_key_id)`, written straight
/// from the report: the same bytes, without building an owned record (six to eight strings) for
/// each section first (ADR-0021).
pub fn statement_bytes(
    agent: &VerifiedAgent,
    ctx: &AssembledContext,
    sent: Sent<'_>,
    runtime_key_id: &str,
) -> Vec<u8> {
    let head = statement_without_sections(agent, ctx, sent, runtime_key_id);
    let p = &head.predicate;
    let view = StatementView {
        statement_type: &head.statement_type,
        predicate: PredicateView {
            agent: &p.agent,
            breakpoints: &p.breakpoints,
            budget: &p.budget,
            counts: &p.counts,
            format: &p.format,
            omissions: &p.omissions,
            runtime_key_id: &p.runtime_key_id,
            sections: SectionsView(&ctx.inner.report.sections),
            stable_prefix: &p.stable_prefix,
            strata_version: &p.strata_version,
            tokenizer: &p.tokenizer,
            tools: &p.tools,
        },
        predicate_type: &head.predicate_type,
        subject: &head.subject,
    };
    // Every map key is a string and no float is held, so this cannot fail; should it, no
    // receipt is better than one signed over empty bytes.
    serde_json::to_vec(&view).expect("a statement serialises")
}

/// Build the statement of one assembly (ADR-0021). `sent` must be what the runtime sends for
/// `ctx`; `runtime_key_id` is the id of the key that will sign it.
pub fn statement(
    agent: &VerifiedAgent,
    ctx: &AssembledContext,
    sent: Sent<'_>,
    runtime_key_id: &str,
) -> Statement {
    let mut st = statement_without_sections(agent, ctx, sent, runtime_key_id);
    st.predicate.sections = ctx
        .inner
        .report
        .sections
        .iter()
        .map(section_record)
        .collect();
    st
}

/// The statement of one assembly with an empty section list.
fn statement_without_sections(
    agent: &VerifiedAgent,
    ctx: &AssembledContext,
    sent: Sent<'_>,
    runtime_key_id: &str,
) -> Statement {
    let r = &ctx.inner.report;
    let subject = match sent {
        Sent::Body(b) => Subject::sha256(SUBJECT_BODY, b),
        Sent::Text(t) => Subject::sha256(SUBJECT_TEXT, t.as_bytes()),
    };
    let offered = match &ctx.inner.conversation {
        Some(c) => c
            .tools
            .iter()
            .map(|t| OfferedTool {
                name: t.name.to_string(),
                schema_source: Some(t.schema_source.clone()),
                schema_sha256: Some(sha256_hex(t.parameters.as_json().as_bytes())),
                description_sha256: Some(sha256_hex(t.description.as_bytes())),
            })
            .collect(),
        None => r
            .tools
            .effective
            .iter()
            .map(|t| OfferedTool {
                name: t.to_string(),
                schema_source: None,
                schema_sha256: None,
                description_sha256: None,
            })
            .collect(),
    };
    Statement {
        statement_type: STATEMENT_TYPE.to_owned(),
        subject: vec![subject],
        predicate_type: PREDICATE_TYPE.to_owned(),
        predicate: Predicate {
            strata_version: env!("CARGO_PKG_VERSION").to_owned(),
            runtime_key_id: runtime_key_id.to_owned(),
            agent: AgentRecord {
                id: agent.agent_id().to_owned(),
                version: agent.version(),
                payload_sha256: agent.payload_sha256().to_owned(),
                signers: agent.signers().iter().map(|k| k.to_string()).collect(),
                identity_digest: agent.identity_digest().to_string(),
            },
            format: ctx
                .conversation()
                .map_or("text", |c| c.provider.name())
                .to_owned(),
            tokenizer: r.tokenizer.clone(),
            budget: BudgetRecord {
                tier: r.tier,
                total_tokens: r.total_tokens,
                response_reserve: r.response_reserve,
                prompt_budget: r.prompt_budget,
                max_total_chars: r.max_total_chars,
            },
            counts: CountsRecord {
                used_tokens: r.used_tokens,
                identity_tokens: r.identity_tokens,
                chars: r.chars,
                request: r.request.as_ref().map(RequestRecord::from),
            },
            stable_prefix: BreakpointRecord::from(&r.stable_prefix),
            breakpoints: r.breakpoints.iter().map(BreakpointRecord::from).collect(),
            sections: Vec::new(),
            tools: ToolsRecord {
                offered,
                refused: r
                    .tools
                    .refused
                    .iter()
                    .map(|(name, reason)| RefusedTool {
                        name: name.clone(),
                        reason: reason.clone(),
                    })
                    .collect(),
            },
            omissions: r
                .omissions
                .iter()
                .map(|o| OmissionRecord {
                    id: o.id.clone(),
                    layer: o.layer,
                    reason: o.reason.clone(),
                })
                .collect(),
        },
    }
}

/// A signed receipt: the DSSE envelope over a statement's canonical bytes, and the statement.
///
/// A receipt signed from an assembly ([`SignedReceipt::of_assembly`]) is written straight to
/// its bytes; the [`Statement`] is parsed from them only when [`SignedReceipt::statement`] is
/// first called, so a runtime that only stores or forwards receipts never builds it.
#[derive(Debug, Clone)]
pub struct SignedReceipt {
    envelope: Envelope,
    statement: OnceLock<Statement>,
}

impl SignedReceipt {
    /// Sign `statement` with the runtime key (ADR-0021). The statement must name this key's id.
    pub fn sign(statement: Statement, key: &KeyPair) -> Result<SignedReceipt, ReceiptError> {
        let id = key.key_id().to_string();
        if statement.predicate.runtime_key_id != id {
            return Err(ReceiptError::KeyMismatch {
                recorded: statement.predicate.runtime_key_id.clone(),
                signer: id,
            });
        }
        let mut envelope = Envelope::with_type(PAYLOAD_TYPE, statement.canonical_bytes());
        envelope.sign(key);
        Ok(SignedReceipt {
            envelope,
            statement: OnceLock::from(statement),
        })
    }

    /// Build and sign the receipt of one assembly with the runtime key (ADR-0021): the same
    /// bytes as signing [`statement`]`(agent, ctx, sent, key id)`, written straight from the
    /// report ([`statement_bytes`]). `sent` must be what the runtime sends for `ctx`.
    pub fn of_assembly(
        agent: &VerifiedAgent,
        ctx: &AssembledContext,
        sent: Sent<'_>,
        key: &KeyPair,
    ) -> SignedReceipt {
        let bytes = statement_bytes(agent, ctx, sent, key.key_id().as_str());
        let mut envelope = Envelope::with_type(PAYLOAD_TYPE, bytes);
        envelope.sign(key);
        SignedReceipt {
            envelope,
            statement: OnceLock::new(),
        }
    }

    /// The statement, parsed from the signed bytes the first time it is asked for.
    pub fn statement(&self) -> &Statement {
        self.statement.get_or_init(|| {
            // The payload is private and was written from these very types by this module;
            // a property test reads back the statement of random assemblies.
            serde_json::from_slice(&self.envelope.payload)
                .expect("a receipt's own statement bytes parse as a statement")
        })
    }

    /// The DSSE envelope (payload type [`PAYLOAD_TYPE`]); its payload is the statement's
    /// canonical bytes.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The receipt file's text: the DSSE envelope as JSON.
    pub fn to_json(&self) -> String {
        self.envelope.to_json()
    }
}

/// An assembly with what the runtime sends and its signed receipt.
#[derive(Debug, Clone)]
pub struct Receipted {
    /// The assembly.
    pub context: AssembledContext,
    /// The exact bytes to send: the request body ([`body_bytes`]) or the plain text.
    pub sent: Vec<u8>,
    /// The receipt naming `sent`.
    pub receipt: SignedReceipt,
}

/// Why an assembly with a receipt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptedError {
    /// The assembly failed.
    #[error(transparent)]
    Assemble(#[from] crate::AssembleError),
    /// The request body could not be written.
    #[error(transparent)]
    Request(#[from] RequestError),
}

impl Assembler {
    /// Assemble, write what the runtime sends, and sign a receipt naming it with the runtime
    /// key (ADR-0021). `params` gives the model and other body parameters of a provider-native
    /// request and is ignored for the plain-text format.
    pub fn assemble_with_receipt(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
        params: &RequestParams,
        runtime_key: &KeyPair,
    ) -> Result<Receipted, ReceiptedError> {
        let context = self.assemble(agent, req)?;
        let sent = match &context.inner.conversation {
            Some(c) => body_bytes(&context.request_body(c.provider, params)?),
            None => context.inner.text.as_bytes().to_vec(),
        };
        let s = match &context.inner.conversation {
            Some(_) => Sent::Body(&sent),
            None => Sent::Text(&context.inner.text),
        };
        let receipt = SignedReceipt::of_assembly(agent, &context, s, runtime_key);
        tracing::debug!(
            agent = agent.agent_id(),
            statement_bytes = receipt.envelope().payload.len(),
            "assembly receipt signed"
        );
        Ok(Receipted {
            context,
            sent,
            receipt,
        })
    }
}

/// Why a receipt was refused. Each failure has its own variant (ADR-0021).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The file is not a well-formed DSSE envelope.
    #[error("not a DSSE envelope: {0}; a receipt file is the JSON envelope `strata receipt` wrote, unmodified")]
    MalformedEnvelope(String),
    /// The envelope is not an in-toto statement.
    #[error("payload type is `{found}`, expected `{PAYLOAD_TYPE}`: this envelope is not an assembly receipt")]
    WrongPayloadType {
        /// What the envelope says.
        found: String,
    },
    /// No signature at all.
    #[error("the receipt has no signature; receipts are signed with the runtime key")]
    NoSignatures,
    /// A signature by a trusted key does not verify: the payload or the signature was changed.
    #[error("the signature of key {keyid} does not verify: the receipt was changed after signing")]
    BadSignature {
        /// The key id.
        keyid: String,
    },
    /// The signing key is revoked in the trust store.
    #[error("the receipt is signed by key {keyid}, which the trust store revokes ({reason})")]
    RevokedKey {
        /// The key id.
        keyid: String,
        /// The reason given.
        reason: String,
    },
    /// No signature is by a key in the trust store.
    #[error("the receipt is signed by {keyids}, none of them in the trust store; add the runtime key's public key with `strata keygen --public KEY --trust-entry NAME`")]
    UnknownKey {
        /// The key ids on the envelope.
        keyids: String,
    },
    /// The signed payload is not a statement of this version.
    #[error("the signed payload is not a strata receipt statement: {0}")]
    MalformedStatement(String),
    /// The statement or predicate type is not the expected one.
    #[error("statement type `{found}` is not `{expected}`")]
    WrongStatementType {
        /// What the statement says.
        found: String,
        /// What is expected.
        expected: &'static str,
    },
    /// The signed payload is valid JSON but not in canonical form.
    #[error("the signed statement is not in canonical form (sorted keys, compact, integers); it was not written by strata")]
    NotCanonical,
    /// The statement names a different runtime key than the one that signed it.
    #[error("the statement names runtime key {recorded} but was signed by {signer}")]
    KeyMismatch {
        /// The key id in the predicate.
        recorded: String,
        /// The signer's key id.
        signer: String,
    },
    /// The request body or text does not have the digest the receipt names.
    #[error("the {name} given has SHA-256 {found} but the receipt names {expected}: it is not what was sent")]
    SubjectMismatch {
        /// Subject name.
        name: String,
        /// The receipt's digest.
        expected: String,
        /// The given bytes' digest.
        found: String,
    },
    /// The definition given is not the one the receipt records.
    #[error("the definition's {what} is {found} but the receipt records {expected}: it is not the definition that was assembled from")]
    AgentMismatch {
        /// `payload SHA-256`, `identity digest`, `id`, `version` or `signers`.
        what: &'static str,
        /// Recorded.
        expected: String,
        /// Found.
        found: String,
    },
}

impl ReceiptError {
    /// A stable name of the failure (for logs and verdict lines).
    pub fn cause(&self) -> &'static str {
        match self {
            ReceiptError::MalformedEnvelope(_) => "malformed_envelope",
            ReceiptError::WrongPayloadType { .. } => "wrong_payload_type",
            ReceiptError::NoSignatures => "no_signatures",
            ReceiptError::BadSignature { .. } => "bad_signature",
            ReceiptError::RevokedKey { .. } => "revoked_key",
            ReceiptError::UnknownKey { .. } => "unknown_key",
            ReceiptError::MalformedStatement(_) => "malformed_statement",
            ReceiptError::WrongStatementType { .. } => "wrong_statement_type",
            ReceiptError::NotCanonical => "not_canonical",
            ReceiptError::KeyMismatch { .. } => "key_mismatch",
            ReceiptError::SubjectMismatch { .. } => "subject_mismatch",
            ReceiptError::AgentMismatch { .. } => "agent_mismatch",
        }
    }
}

/// A receipt whose signature verified against a trust store. Only [`verify`] makes one.
#[derive(Debug, Clone)]
pub struct VerifiedReceipt {
    statement: Statement,
    signer: String,
    payload: Vec<u8>,
}

impl VerifiedReceipt {
    /// The statement, parsed from the signed bytes after verification.
    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    /// The key id of the trusted runtime key whose signature verified.
    pub fn signer(&self) -> &str {
        &self.signer
    }

    /// The exact signed statement bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Check that `sent` (a request body file's bytes, or the plain text) is what the receipt
    /// names; returns the subject it matched.
    pub fn check_sent(&self, sent: &[u8]) -> Result<&Subject, ReceiptError> {
        let found = sha256_hex(sent);
        let subject = self
            .statement
            .subject
            .first()
            .ok_or_else(|| ReceiptError::MalformedStatement("no subject".into()))?;
        let expected = subject.digest.get("sha256").cloned().unwrap_or_default();
        if expected != found {
            return Err(ReceiptError::SubjectMismatch {
                name: subject.name.clone(),
                expected,
                found,
            });
        }
        Ok(subject)
    }

    /// Check that `agent` is the definition the receipt records: payload SHA-256, identity
    /// digest, id, version and signers. Returns the record it matched.
    pub fn check_agent(&self, agent: &VerifiedAgent) -> Result<&AgentRecord, ReceiptError> {
        let rec = &self.statement.predicate.agent;
        let signers: Vec<String> = agent.signers().iter().map(|k| k.to_string()).collect();
        let checks: [(&'static str, String, String); 4] = [
            (
                "payload SHA-256",
                rec.payload_sha256.clone(),
                agent.payload_sha256().to_owned(),
            ),
            (
                "identity digest",
                rec.identity_digest.clone(),
                agent.identity_digest().to_string(),
            ),
            ("id", rec.id.clone(), agent.agent_id().to_owned()),
            (
                "version",
                rec.version.to_string(),
                agent.version().to_string(),
            ),
        ];
        for (what, expected, found) in checks {
            if expected != found {
                return Err(ReceiptError::AgentMismatch {
                    what,
                    expected,
                    found,
                });
            }
        }
        // The auditor's trust store may hold other keys than the runtime's: the payload digest
        // already pins the definition, and at least one signer must be one the receipt records.
        if !signers.iter().any(|s| rec.signers.contains(s)) {
            return Err(ReceiptError::AgentMismatch {
                what: "signers",
                expected: rec.signers.join(", "),
                found: signers.join(", "),
            });
        }
        Ok(rec)
    }
}

/// Verify a receipt envelope against the trust store of runtime keys, then parse its statement
/// from the signed bytes (ADR-0021). One valid signature by a trusted, unrevoked key is enough;
/// key validity windows are not checked, because a receipt carries no trusted signing time.
pub fn verify(envelope: &[u8], trust: &TrustStore) -> Result<VerifiedReceipt, ReceiptError> {
    let result = verify_inner(envelope, trust);
    match &result {
        Ok(r) => tracing::info!(signer = r.signer(), "assembly receipt verified"),
        Err(e) => tracing::warn!(cause = e.cause(), error = %e, "assembly receipt refused"),
    }
    result
}

fn verify_inner(bytes: &[u8], trust: &TrustStore) -> Result<VerifiedReceipt, ReceiptError> {
    let env = Envelope::parse(bytes).map_err(|e| ReceiptError::MalformedEnvelope(e.to_string()))?;
    if env.signatures.is_empty() {
        return Err(ReceiptError::NoSignatures);
    }
    let message = pae(&env.payload_type, &env.payload);
    let (mut signer, mut bad, mut revoked, mut unknown) = (None, None, None, Vec::new());
    for s in &env.signatures {
        // Every byte of a receipt counts: only the canonical key id (64 lower-case hex digits)
        // names a key in an envelope, though trust stores accept other spellings.
        if !KeyId::parse(&s.keyid).is_ok_and(|id| id.as_str() == s.keyid) {
            unknown.push(s.keyid.clone());
            continue;
        }
        if let Some(reason) = trust.revoked(&s.keyid) {
            revoked.get_or_insert((s.keyid.clone(), reason.to_owned()));
            continue;
        }
        let Some(key) = trust.key(&s.keyid) else {
            unknown.push(s.keyid.clone());
            continue;
        };
        if key
            .key
            .verify_strict(&message, &Signature::from_bytes(&s.sig))
            .is_ok()
        {
            signer = Some(key.id.to_string());
            break;
        }
        bad.get_or_insert(s.keyid.clone());
    }
    let signer = match (signer, bad, revoked) {
        (Some(s), _, _) => s,
        (None, Some(keyid), _) => return Err(ReceiptError::BadSignature { keyid }),
        (None, None, Some((keyid, reason))) => {
            return Err(ReceiptError::RevokedKey { keyid, reason })
        }
        (None, None, None) => {
            return Err(ReceiptError::UnknownKey {
                keyids: unknown.join(", "),
            })
        }
    };
    // The payload type is signed (it is part of the pre-authentication encoding).
    if env.payload_type != PAYLOAD_TYPE {
        return Err(ReceiptError::WrongPayloadType {
            found: env.payload_type,
        });
    }
    // Verify, then read: parse only the exact verified bytes.
    let statement: Statement = serde_json::from_slice(&env.payload)
        .map_err(|e| ReceiptError::MalformedStatement(e.to_string()))?;
    if statement.statement_type != STATEMENT_TYPE {
        return Err(ReceiptError::WrongStatementType {
            found: statement.statement_type,
            expected: STATEMENT_TYPE,
        });
    }
    if statement.predicate_type != PREDICATE_TYPE {
        return Err(ReceiptError::WrongStatementType {
            found: statement.predicate_type,
            expected: PREDICATE_TYPE,
        });
    }
    if statement.canonical_bytes() != env.payload.as_ref() {
        return Err(ReceiptError::NotCanonical);
    }
    if statement.predicate.runtime_key_id != signer {
        return Err(ReceiptError::KeyMismatch {
            recorded: statement.predicate.runtime_key_id.clone(),
            signer,
        });
    }
    Ok(VerifiedReceipt {
        statement,
        signer,
        payload: env.payload.to_vec(),
    })
}

/// Parse a receipt's statement WITHOUT checking its signature, for display only: nothing in
/// it may be trusted. Use [`verify`] for anything that decides.
pub fn read_unverified(envelope: &[u8]) -> Result<Statement, ReceiptError> {
    let env =
        Envelope::parse(envelope).map_err(|e| ReceiptError::MalformedEnvelope(e.to_string()))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(ReceiptError::WrongPayloadType {
            found: env.payload_type,
        });
    }
    serde_json::from_slice(&env.payload)
        .map_err(|e| ReceiptError::MalformedStatement(e.to_string()))
}

/// A receipt in words: what was sent, from which definition, what came from where, and what
/// was cut, dropped, filtered, overridden or refused and why.
pub fn describe(st: &Statement) -> String {
    let p = &st.predicate;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Assembly receipt (strata {}), signed by runtime key {}",
        p.strata_version, p.runtime_key_id
    );
    for s in &st.subject {
        let _ = writeln!(
            o,
            "Sent: {} ({}), sha256 {}",
            s.name,
            p.format,
            s.digest.get("sha256").map_or("?", String::as_str)
        );
    }
    let _ = writeln!(
        o,
        "Agent: {} version {}, definition payload sha256 {}, signed by {}",
        p.agent.id,
        p.agent.version,
        p.agent.payload_sha256,
        if p.agent.signers.is_empty() {
            "nobody".to_owned()
        } else {
            p.agent.signers.join(", ")
        }
    );
    let _ = writeln!(
        o,
        "Identity (layers 1-2): {}, {} tokens, first in the output and never trimmed",
        p.agent.identity_digest, p.counts.identity_tokens
    );
    let _ = writeln!(
        o,
        "Budget: {} of {} prompt tokens used ({} total, {} reserved for the reply), tokenizer {}",
        p.counts.used_tokens,
        p.budget.prompt_budget,
        p.budget.total_tokens,
        p.budget.response_reserve,
        p.tokenizer
    );
    if let Some(r) = &p.counts.request {
        let _ = writeln!(
            o,
            "Request: {} messages, {} tokens ({}), {} expected from the provider's cache",
            r.messages, r.total_tokens, r.count, r.expected_cached_tokens
        );
    }
    let _ = writeln!(o, "Sections ({}):", p.sections.len());
    for s in &p.sections {
        let what = match (s.status.as_str(), &s.reason, s.full_tokens) {
            ("kept", _, _) => format!("kept whole, {} tokens", s.tokens),
            ("cut", _, full) => {
                let mut w = match full {
                    Some(full) => format!("cut to {} of {full} tokens", s.tokens),
                    None => format!("cut to {} tokens", s.tokens),
                };
                match (s.kept_head_bytes, s.kept_tail_bytes) {
                    (Some(h), Some(0)) => w.push_str(&format!(", the first {h} bytes kept")),
                    (Some(0), Some(t)) => w.push_str(&format!(", the last {t} bytes kept")),
                    (Some(h), Some(t)) => {
                        w.push_str(&format!(", the first {h} and the last {t} bytes kept"));
                    }
                    _ => {}
                }
                w
            }
            (st, Some(r), _) => format!("{st}: {r}"),
            (st, None, _) => st.to_owned(),
        };
        let from = if s.producer == s.source {
            s.source.clone()
        } else {
            format!("{} `{}`", s.source, s.producer)
        };
        let _ = writeln!(
            o,
            "  layer {} `{}` ({} authority) from {from}, {}: {what}",
            s.layer.number(),
            s.id,
            s.authority,
            s.content_digest,
        );
    }
    let offered: Vec<&str> = p.tools.offered.iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(
        o,
        "Tools offered: {}",
        if offered.is_empty() {
            "none".to_owned()
        } else {
            offered.join(", ")
        }
    );
    for t in &p.tools.refused {
        let _ = writeln!(o, "Tool refused: {}: {}", t.name, t.reason);
    }
    for m in &p.omissions {
        let _ = writeln!(
            o,
            "Never reached the assembler: layer {} `{}`: {}",
            m.layer.number(),
            m.id,
            m.reason
        );
    }
    o
}
