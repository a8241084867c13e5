//! Stage 6 of assembly: the report. What happened to every section offered (kept, cut,
//! dropped and why, filtered, overridden), per layer, and for a provider request the request's
//! count, in report order: the kept sections in output order, then the other candidates in the
//! canonical order of selection, then the sections left out before them, by layer and id.
//!
//! Hand-off: the [`AssembledContext`].

use std::sync::Arc;

use strata_agentdef::VerifiedAgent;
use strata_core::{Layer, Section, Stability};

use super::fit::Fitted;
use super::frame::Framed;
use super::place::Laid;
use super::{history_turn, Cand, Unit};
use crate::assemble::element::Meter;
use crate::output::{AssembledContext, Contents};
use crate::per_layer::PerLayer;
use crate::provider::{Block, Conversation, ProviderOptions};
use crate::report::{
    Conflict, DropReason, LayerReport, Report, RequestReport, SectionReport, SectionStatus,
};

/// What the report is made of.
pub(super) struct Parts<'a> {
    pub framed: Framed<'a>,
    /// Reports of the sections selection left out (filtered or overridden).
    pub left_out: Vec<SectionReport>,
    pub conflicts: Vec<Conflict>,
    pub fitted: Fitted<'a>,
    pub laid: Laid,
    /// The last report's entries, which this one may write over (from the engine; empty for
    /// the plain kernel).
    pub last_entries: Vec<SectionReport>,
}

/// The assembled context of one request, with its report.
pub(super) fn report(m: &Meter<'_>, agent: &VerifiedAgent, parts: Parts<'_>) -> AssembledContext {
    let Parts {
        framed,
        mut left_out,
        conflicts,
        fitted,
        laid,
        last_entries,
    } = parts;
    left_out.extend(framed.reserved);
    let sections = entries(m, &fitted, &laid.kept, left_out, last_entries);
    let (layers, dropped_any) = layer_reports(&fitted.units, &laid, &framed.budget);
    let request = laid.conversation.as_ref().map(|c| {
        request_report(
            c,
            framed.settings.provider_options,
            framed.margin,
            laid.tokens,
        )
    });
    let prompt_budget = framed.prompt_budget;
    tracing::debug!(tokens = laid.tokens, budget = prompt_budget, "assembled");
    AssembledContext::new(Contents {
        serial: crate::output::next_serial(),
        identity_digest: agent.identity_digest(),
        tools: framed.tools_report.effective.clone(),
        report: Report {
            agent_id: agent.agent_id().to_owned(),
            identity_digest: agent.identity_digest().to_string(),
            tokenizer: m.tokenizer.name().to_owned(),
            tier: framed.tier,
            total_tokens: u64::from(framed.budget.total_tokens),
            response_reserve: u64::from(framed.budget.response_reserve),
            prompt_budget,
            used_tokens: laid.tokens,
            idle_tokens: if dropped_any {
                prompt_budget.saturating_sub(laid.tokens)
            } else {
                0
            },
            chars: laid.chars,
            max_total_chars: framed.max_chars,
            identity_tokens: framed.identity.0,
            stable_prefix: laid.stable_prefix,
            breakpoints: laid.breakpoints,
            layers,
            sections,
            conflicts,
            tools: framed.tools_report,
            request,
            omissions: framed.settings.omissions.clone(),
        },
        text: laid.text,
        conversation: laid.conversation,
    })
}

/// Every section's entry, in report order (see the module's comment): each written once, where
/// it belongs, or, when the engine hands over the last report's entries, left in place where it
/// equals the entry this call writes (ADR-0037).
fn entries(
    m: &Meter<'_>,
    fitted: &Fitted<'_>,
    listed: &[usize],
    mut left_out: Vec<SectionReport>,
    mut sections: Vec<SectionReport>,
) -> Vec<SectionReport> {
    let (cands, units) = (&fitted.cands, &fitted.units);
    let mut why_of: Vec<Option<DropReason>> = vec![None; cands.len()];
    for (u, why) in fitted
        .dropped_reason
        .iter()
        .enumerate()
        .filter_map(|(u, w)| w.map(|w| (u, w)))
    {
        for &c in &units[u].members {
            why_of[c] = Some(why);
        }
    }
    let mut in_output = vec![false; cands.len()];
    for &c in listed {
        in_output[c] = true;
    }
    let rest: Vec<usize> = (0..cands.len()).filter(|c| !in_output[*c]).collect();
    left_out.sort_by(|a, b| (a.layer, &a.id).cmp(&(b.layer, &b.id)));
    let order = listed.iter().chain(&rest).copied();
    let parts = |c: usize| cand_parts(cands, units, &why_of, c);
    if sections.is_empty() {
        sections.reserve_exact(cands.len() + left_out.len());
        // Written straight into the list, not built and then moved (entries are large).
        sections.extend(order.map(|c| {
            let (s, sticky, status, measured) = parts(c);
            entry_of(s, sticky, status, measured)
        }));
        sections.extend(left_out);
        return sections;
    }
    // The last report's entries, position by position: one equal to the entry this call
    // would write is left as it is (no reference count taken, none released), any other is
    // written over; the list is then cut or extended to this report.
    sections.truncate(cands.len() + left_out.len());
    let mut reused = 0u64;
    let mut at = 0;
    for c in order {
        let (s, sticky, status, measured) = parts(c);
        match sections.get_mut(at) {
            Some(old) if entry_is(old, s, sticky, &status, measured) => reused += 1,
            Some(old) => *old = entry_of(s, sticky, status, measured),
            None => sections.push(entry_of(s, sticky, status, measured)),
        }
        at += 1;
    }
    for r in left_out {
        match sections.get_mut(at) {
            // The same provenance allocation, as for the candidates' entries.
            Some(old) if Arc::ptr_eq(&old.provenance, &r.provenance) && *old == r => reused += 1,
            Some(old) => *old = r,
            None => sections.push(r),
        }
        at += 1;
    }
    m.count(|s| s.reused_entries += reused);
    sections
}

/// The per-layer reports, and whether anything was dropped.
fn layer_reports(
    units: &[Unit],
    laid: &Laid,
    budget: &strata_core::Budget,
) -> (Vec<LayerReport>, bool) {
    // Sections and bytes dropped per layer, in one pass over the units.
    let mut dropped = PerLayer::splat((0usize, 0u64));
    for u in units.iter().filter(|u| u.dropped) {
        let d = &mut dropped[u.layer];
        d.0 += u.members.len();
        d.1 += u.bytes;
    }
    let dropped_any = dropped.values().any(|d| d.0 > 0);
    let layers = dropped
        .iter()
        .map(|(l, d)| LayerReport {
            layer: l.into(),
            tokens: laid.counts.tokens[l],
            budget: budget.layers.get(l).map(u64::from),
            kept: laid.counts.kept[l],
            cut: laid.counts.cut[l],
            dropped: d.0,
            dropped_bytes: d.1,
        })
        .collect();
    (layers, dropped_any)
}

/// The count of a provider request (ADR-0015).
fn request_report(
    c: &Conversation,
    opts: &ProviderOptions,
    margin: u32,
    total_tokens: u64,
) -> RequestReport {
    let model = opts.model.as_deref();
    let min = opts
        .min_cacheable_tokens
        .unwrap_or_else(|| crate::provider::min_cacheable_tokens(c.provider, model));
    let framed_tools = c
        .messages
        .iter()
        .any(|m| m.blocks.iter().any(|b| !matches!(b, Block::Text { .. })));
    let exact = c.provider.tokenizer_is_public() && c.tools.is_empty() && !framed_tools;
    RequestReport {
        provider: c.provider.name().to_owned(),
        count: if exact { "exact" } else { "estimate" }.to_owned(),
        system_tokens: c.system_tokens,
        tool_tokens: c.tool_tokens,
        message_tokens: c.messages.iter().map(|m| m.tokens).sum(),
        margin_pct: margin,
        total_tokens,
        messages: c.messages.len(),
        stable_prefix_tokens: c.stable_prefix_tokens(),
        expected_cached_tokens: c.expected_cached_tokens(model),
        min_cacheable_tokens: min,
    }
}

/// The entry of a section left out before candidates are made (filtered, overridden).
pub(in crate::assemble) fn report_of(
    s: &Section,
    sticky: bool,
    status: SectionStatus,
) -> SectionReport {
    entry_of(s, sticky, status, (0, 0, false))
}

/// A report entry with its tokens, characters and whether it filled the budget.
#[inline(always)]
fn entry_of(
    s: &Section,
    sticky: bool,
    status: SectionStatus,
    (tokens, chars, filled): (u64, u64, bool),
) -> SectionReport {
    SectionReport {
        id: s.id().clone(),
        layer: s.layer().into(),
        tokens,
        chars,
        bytes: s.content().as_str().len() as u64,
        filled,
        role: history_turn(s).map(|t| t.role),
        sticky,
        stable: s.stability() == Stability::Stable,
        status,
        provenance: s.provenance_shared().clone(),
    }
}

/// What the report entry of candidate `c` is made of: its section as offered, whether it is
/// sticky, its status, and its tokens, characters and whether it filled the budget.
#[inline(always)]
fn cand_parts<'s>(
    cands: &'s [Cand<'_>],
    units: &[Unit],
    why_of: &[Option<DropReason>],
    c: usize,
) -> (&'s Section, bool, SectionStatus, (u64, u64, bool)) {
    let cand = &cands[c];
    let status = match (why_of[c], &cand.cut) {
        (Some(why), _) => SectionStatus::Dropped { reason: why },
        (None, Some(cut)) => {
            let kept = cand.section().content().len() as u64;
            let head = cut.at.at as u64;
            SectionStatus::Cut {
                full_tokens: cut.full,
                head_bytes: head,
                tail_bytes: kept - head,
            }
        }
        (None, None) => SectionStatus::Kept,
    };
    // Built in one piece, so the entry is written once, where it goes.
    let measured = match why_of[c] {
        Some(_) => (0, 0, false),
        None => (
            cand.rendered().tokens,
            cand.rendered().chars,
            units[cand.unit].filled,
        ),
    };
    (cand.base.get(), cand.sticky, status, measured)
}

/// Whether `e` is the entry [`entry_of`] would write for these arguments: every field equal,
/// and the provenance the section's own allocation (compared by address, so that a reused
/// entry shares it exactly as a new one would). Written out field by field, so a field added
/// to the entry must be considered here to compile.
#[inline(always)]
fn entry_is(
    e: &SectionReport,
    s: &Section,
    sticky: bool,
    status: &SectionStatus,
    (tokens, chars, filled): (u64, u64, bool),
) -> bool {
    let SectionReport {
        id: e_id,
        layer: e_layer,
        tokens: e_tokens,
        chars: e_chars,
        bytes: e_bytes,
        filled: e_filled,
        role: e_role,
        sticky: e_sticky,
        stable: e_stable,
        status: e_status,
        provenance: e_provenance,
    } = e;
    Arc::ptr_eq(e_provenance, s.provenance_shared())
        && *e_tokens == tokens
        && *e_chars == chars
        && *e_filled == filled
        && *e_sticky == sticky
        && same_status(e_status, status)
        && *e_bytes == s.content().as_str().len() as u64
        && *e_layer == Layer::from(s.layer())
        && *e_stable == (s.stability() == Stability::Stable)
        && *e_role == history_turn(s).map(|t| t.role)
        && e_id == s.id()
}

/// `a == b`, with the common cases compared without a call.
#[inline(always)]
fn same_status(a: &SectionStatus, b: &SectionStatus) -> bool {
    match (a, b) {
        (SectionStatus::Kept, SectionStatus::Kept) => true,
        (SectionStatus::Dropped { reason: x }, SectionStatus::Dropped { reason: y }) => x == y,
        _ => a == b,
    }
}
