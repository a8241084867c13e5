//! The statement of one assembly, built from its report: as owned records ([`statement`]) or
//! written straight to its canonical bytes ([`statement_bytes`]) (ADR-0021).

use serde::Serialize;
use strata_agentdef::VerifiedAgent;
use strata_core::format::Authority;
use strata_core::{Layer, RuntimeLayer};

use super::statement::{
    AgentRecord, BreakpointRecord, BudgetRecord, CountsRecord, OfferedTool, OmissionRecord,
    Predicate, RefusedTool, RequestRecord, SectionRecord, Sent, Statement, Subject, ToolsRecord,
};
use super::{sha256_hex, PREDICATE_TYPE, STATEMENT_TYPE, SUBJECT_BODY, SUBJECT_TEXT};
use crate::output::AssembledContext;
use crate::report::{SectionReport, SectionStatus};

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
    Statement {
        statement_type: STATEMENT_TYPE.to_owned(),
        subject: vec![subject],
        predicate_type: PREDICATE_TYPE.to_owned(),
        predicate: Predicate {
            strata_version: env!("CARGO_PKG_VERSION").to_owned(),
            runtime_key_id: runtime_key_id.to_owned(),
            agent: agent_record(agent),
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
            tools: tools_record(ctx),
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

/// The signed agent a statement names.
fn agent_record(agent: &VerifiedAgent) -> AgentRecord {
    AgentRecord {
        id: agent.agent_id().to_owned(),
        version: agent.version(),
        payload_sha256: agent.payload_sha256().to_owned(),
        signers: agent.signers().iter().map(|k| k.to_string()).collect(),
        identity_digest: agent.identity_digest().to_string(),
    }
}

/// The tools an assembly offered (with the digests of their schema and description when it
/// was placed for a provider) and those it refused.
fn tools_record(ctx: &AssembledContext) -> ToolsRecord {
    let r = &ctx.inner.report;
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
    ToolsRecord {
        offered,
        refused: r
            .tools
            .refused
            .iter()
            .map(|t| RefusedTool {
                name: t.name.clone(),
                reason: t.reason.clone(),
            })
            .collect(),
    }
}
