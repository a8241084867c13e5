//! Stage 1 of assembly: the frame. The budget and tier, identity (layers 1-2, copied and never
//! trimmed; I1, I2), the tools (narrowed, pinned, stripped of announced free text; I4, I8), the
//! fixed cost of a provider request's framing, and the sections offered, less those claiming
//! the tool catalog's reserved id or key.
//!
//! Hand-off: [`Framed`].

use std::collections::BTreeSet;

use strata_agentdef::VerifiedAgent;
use strata_core::{AssemblyPath, Budget, PromptMode, Section, Tier};

use super::tools::narrow_tools;
use super::{report_of, TOOL_CATALOG_ID, TOOL_CATALOG_KEY};
use crate::assemble::element::Meter;
use crate::error::AssembleError;
use crate::provider::{Provider, ProviderOptions, RequestTool, SystemRole};
use crate::report::{FilterReason, Omission, SectionReport, SectionStatus, ToolsReport};
use crate::request::{AssemblyRequest, BudgetSpec, RenderOptions};

/// What the stages after the frame read of the request: the request itself is read only by
/// the frame, once.
pub(super) struct Settings<'a> {
    pub mode: PromptMode,
    pub path: AssemblyPath,
    /// The provider whose request is placed, or `None` for plain text.
    pub provider: Option<Provider>,
    pub provider_options: &'a ProviderOptions,
    pub render: &'a RenderOptions,
    /// Priorities treated as sticky.
    pub protected_priorities: &'a BTreeSet<u32>,
    /// Whether a cut section's whole form is counted for the report.
    pub count_cut_sections: bool,
    /// Omissions of the gathering step, carried into the report.
    pub omissions: &'a Vec<Omission>,
}

/// What every assembly of a request starts from.
pub(super) struct Framed<'a> {
    /// The request's settings.
    pub settings: Settings<'a>,
    pub budget: Budget,
    pub tier: Tier,
    /// The prompt budget (total less the response reserve).
    pub prompt_budget: u64,
    /// Tokens the request may take: the prompt budget less the estimate margin.
    pub fit_budget: u64,
    /// The margin applied for a provider without a public tokenizer, in percent.
    pub margin: u32,
    pub max_chars: Option<u64>,
    /// Tokens and characters of layers 1-2.
    pub identity: (u64, u64),
    /// Tokens of the system message's framing and reply priming (provider requests).
    pub system_frame: u64,
    /// Tokens of the tool definitions (provider requests).
    pub tool_tokens: u64,
    /// Identity, frames and tools: what the runtime layers cannot use.
    pub base_tokens: u64,
    pub tools_report: ToolsReport,
    pub request_tools: Vec<RequestTool>,
    /// The sections taking part, with the tool catalog section for plain text.
    pub input: Vec<&'a Section>,
    /// Reports of the sections that claimed the catalog's id or key.
    pub reserved: Vec<SectionReport>,
}

/// The budget, the identity's cost and the tools of `req`, checked to fit (ADR-0008,
/// ADR-0015, ADR-0032). `catalog` receives the tool catalog section written for plain text,
/// which the input borrows.
pub(super) fn frame<'a>(
    m: &Meter<'_>,
    agent: &VerifiedAgent,
    req: &'a AssemblyRequest,
    catalog: &'a mut Option<Section>,
) -> Result<Framed<'a>, AssembleError> {
    let (budget, tier) = req
        .budget
        .as_ref()
        .unwrap_or(&BudgetSpec::AgentDefault)
        .resolve(agent.budget());
    budget.validate()?;
    let native = req.provider;
    let prompt_budget = u64::from(budget.prompt_tokens());
    // Without a public tokenizer, the budget is fitted to the count plus the margin.
    let margin = match native {
        Some(p) if !p.tokenizer_is_public() => req.provider_options.estimate_margin_pct,
        _ => 0,
    };
    let fit_budget = prompt_budget * 100 / (100 + u64::from(margin));
    let max_chars = budget.max_total_chars.map(|c| c as u64);
    let identity = identity_cost(m, agent, fit_budget, max_chars)?;

    // Tools: capabilities only narrow (I4, ADR-0007); schemas pinned (ADR-0015).
    let (tools_report, written, request_tools) = narrow_tools(agent, req);
    *catalog = written.filter(|_| native.is_none());
    let catalog: &'a Option<Section> = catalog;
    let (input, reserved) = offered(req, catalog.as_ref());
    let (system_frame, tool_tokens, context_frames) = match native {
        None => (0, 0, 0),
        Some(_) => {
            let role = match req.provider_options.system_role {
                SystemRole::System => "system",
                SystemRole::Developer => "developer",
            };
            let tools: u64 = request_tools.iter().map(|t| m.tool_cost(t)).sum();
            (m.frame_msg(role) + 3, tools, 2 * m.frame_msg("user"))
        }
    };
    let framed_identity = identity.0 + system_frame + context_frames;
    if framed_identity > fit_budget {
        return Err(AssembleError::IdentityExceedsBudget {
            agent: agent.agent_id().to_owned(),
            needed: framed_identity,
            budget: fit_budget,
        });
    }
    // Tool definitions that do not fit are the tools' failure, named as such (ADR-0032).
    if framed_identity + tool_tokens > fit_budget {
        return Err(AssembleError::ToolsExceedBudget {
            tools: request_tools.iter().map(|t| t.name.clone()).collect(),
            needed: tool_tokens,
            available: fit_budget - framed_identity,
            budget: fit_budget,
        });
    }
    Ok(Framed {
        settings: settings_of(req),
        budget,
        tier,
        prompt_budget,
        fit_budget,
        margin,
        max_chars,
        identity,
        system_frame,
        tool_tokens,
        base_tokens: framed_identity + tool_tokens,
        tools_report,
        request_tools,
        input,
        reserved,
    })
}

/// What the later stages read of `req`.
fn settings_of(req: &AssemblyRequest) -> Settings<'_> {
    Settings {
        mode: req.mode,
        path: req.path,
        provider: req.provider,
        provider_options: &req.provider_options,
        render: &req.render,
        protected_priorities: &req.protected_priorities,
        count_cut_sections: req.count_cut_sections,
        omissions: &req.omissions,
    }
}

/// Tokens and characters of layers 1-2, which must fit alone (I1, I2).
fn identity_cost(
    m: &Meter<'_>,
    agent: &VerifiedAgent,
    fit_budget: u64,
    max_chars: Option<u64>,
) -> Result<(u64, u64), AssembleError> {
    // The identity digest is the BLAKE3 of exactly these bytes: no need to hash them again.
    let (tokens, chars) = m.cost_by_hash(agent.identity_digest(), agent.identity_text());
    if tokens > fit_budget {
        return Err(AssembleError::IdentityExceedsBudget {
            agent: agent.agent_id().to_owned(),
            needed: tokens,
            budget: fit_budget,
        });
    }
    if let Some(mc) = max_chars.filter(|mc| chars > *mc) {
        return Err(AssembleError::CharsExceeded {
            needed: chars,
            limit: mc,
        });
    }
    Ok((tokens, chars))
}

/// The sections of `req` that may take part, then the catalog section if one is written; and
/// the reports of those left out for claiming the catalog's id or key, which belong to the
/// assembler whatever a section's priority (I4). For a provider request the tools travel in
/// the request's own field, so no catalog section is written.
fn offered<'a>(
    req: &'a AssemblyRequest,
    catalog: Option<&'a Section>,
) -> (Vec<&'a Section>, Vec<SectionReport>) {
    let mut reserved = Vec::new();
    let mut input: Vec<&Section> = Vec::with_capacity(req.sections.len() + 1);
    for s in &req.sections {
        if s.id().as_str() == TOOL_CATALOG_ID
            || s.key().is_some_and(|k| k.as_str() == TOOL_CATALOG_KEY)
        {
            let status = SectionStatus::Filtered {
                reason: FilterReason::Reserved,
            };
            reserved.push(report_of(s, false, status));
        } else {
            input.push(s);
        }
    }
    input.extend(catalog);
    (input, reserved)
}
