//! The kernel: the assembly as plain functions, each stage taking the hand-off of the one
//! before it and returning its own (ARCHITECTURE.md, ADR-0037). This is the enforcement point a
//! reviewer reads for I1-I9:
//!
//! [`frame`] (budget, identity, tools; the only stage that reads the request) ->
//! [`Framed`](frame::Framed); [`select`] (mode and path, conflicts, tool pairs) ->
//! [`Selected`]; [`measure`] (candidates and trimming units) -> [`Measured`](measure::Measured);
//! [`fit`] (sticky check, trimming, refill, the opening of a provider history) ->
//! [`Fitted`](fit::Fitted); [`place`] (provider channels, or the plain-text layout) ->
//! [`Laid`](place::Laid); [`report`] -> the [`AssembledContext`].
//!
//! Elements are measured by a [`Meter`]: with the tokenizer alone for the plain kernel, or
//! asking the memoisation engine first; either way a measurement has one answer. The stages
//! keep nothing between calls. The engine may hand them where a sort starts, which ids were
//! found distinct, and the last report's entries to write over; each is checked or only
//! changes speed, and the property test `engine_equals_kernel` compares the two paths.
//!
//! Architecture invariant: this module does no I/O and reads no clock; the same inputs give the
//! same bytes (I6, ADR-0013). Identity comes only from a `VerifiedAgent` and is copied into the
//! output first, byte for byte, exactly once (I1, ADR-0006); it is never trimmed (I2, ADR-0008).
//!
//! Every function here fits on a screen: clippy's `too_many_lines` is on for the kernel, at the
//! threshold in `clippy.toml` (80 lines).
#![warn(clippy::too_many_lines)]

use std::cmp::Reverse;
use std::sync::Arc;

use strata_agentdef::VerifiedAgent;
use strata_core::format;
use strata_core::{Phase, RuntimeLayer, Section, Stability, Turn};

mod fit;
mod frame;
mod measure;
mod pairs;
mod place;
mod reasoning;
mod report;
mod select;
mod tools;

use select::Selected;

pub(super) use report::report_of;
pub(super) use select::{cuttable_natively, SelectHint};
pub(super) use tools::narrow_tools;

use super::element::{CutAt, Meter, Rendered};
use super::{TOOL_CATALOG_ID, TOOL_CATALOG_KEY};
use crate::error::AssembleError;
use crate::output::AssembledContext;
use crate::report::DropReason;
use crate::request::AssemblyRequest;

/// An agent past its validity assembles nothing, whenever it was loaded (ADR-0017).
pub(super) fn check_valid(
    agent: &VerifiedAgent,
    req: &AssemblyRequest,
) -> Result<(), AssembleError> {
    let Some(now_ms) = req.now_ms else {
        return Ok(());
    };
    let policy = agent.loaded_under();
    policy.warn_if_weakened("assembling");
    if policy != strata_agentdef::Expiry::IgnoreDangerously {
        agent
            .check_valid_at(policy.instant(now_ms.div_euclid(1000)))
            .map_err(|e| AssembleError::AgentNotValid(e.to_string()))?;
    }
    Ok(())
}

/// Assemble the context of one request (ADR-0006, ADR-0007, ADR-0008, ADR-0009, ADR-0013):
/// the stages in order, each from the hand-off of the one before.
pub(super) fn assemble(
    m: &Meter<'_>,
    agent: &VerifiedAgent,
    req: &AssemblyRequest,
) -> Result<AssembledContext, AssembleError> {
    // Taken first, so that what the last output held besides its entries is released before
    // this call allocates its own.
    let last_entries = m.memo.map(|e| e.last_entries()).unwrap_or_default();
    let mut catalog = None;
    let mut framed = frame::frame(m, agent, req, &mut catalog)?;
    let selected = {
        let input = std::mem::take(&mut framed.input);
        let mut hint = m.memo.map(|e| e.take_select_hint()).unwrap_or_default();
        let selected = select::select(agent, &framed.settings, input, &mut hint);
        if let Some(e) = m.memo {
            e.keep_select_hint(hint);
        }
        selected?
    };
    if selected.ids_known {
        m.count(|s| s.known_ids += 1);
    }
    let Selected {
        winners,
        reports,
        conflicts,
        ..
    } = selected;
    let measured = measure::measure(winners, &framed.settings);
    let fitted = fit::fit(m, measured, &framed)?;
    let laid = place::place(m, agent, &framed, &fitted)?;
    let parts = report::Parts {
        framed,
        left_out: reports,
        conflicts,
        fitted,
        laid,
        last_entries,
    };
    let out = report::report(m, agent, parts);
    if let Some(e) = m.memo {
        e.keep_last(&out, req.sections.len());
    }
    Ok(out)
}

pub(super) struct Cand<'a> {
    /// The section as offered (borrowed from the request, or owned once stripped of invisible
    /// characters): the section its report describes.
    base: Base<'a>,
    /// The cut form, once cut: boxed, as few candidates are cut and every one is built.
    cut: Option<Box<CutForm>>,
    sticky: bool,
    /// The rendered element, once fitting has measured it (ADR-0037).
    element: Option<Arc<Rendered>>,
    unit: usize,
}

/// A candidate's cut form.
pub(super) struct CutForm {
    /// The section in cut form.
    section: Section,
    /// Where the offered text was cut.
    at: CutAt,
    /// The tokens of the whole rendered section, when they were counted.
    full: Option<u64>,
}

/// What an unmeasured candidate reports: nothing rendered, nothing counted.
static UNMEASURED: Rendered = Rendered {
    text: String::new(),
    tokens: 0,
    chars: 0,
    content_tokens: 0,
};

/// The turn of a working-memory section: only layer 5 holds the history, so a turn on a section
/// of another layer is not one (its section is fenced data like any other).
pub(super) fn history_turn(s: &Section) -> Option<&Turn> {
    s.turn()
        .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
}

impl Cand<'_> {
    /// The history turn of the candidate's section, if it is one.
    fn turn(&self) -> Option<&Turn> {
        history_turn(self.section())
    }

    /// The rendered element, or an empty one before fitting measures the candidate.
    fn rendered(&self) -> &Rendered {
        self.element.as_deref().unwrap_or(&UNMEASURED)
    }

    /// The section as it is rendered: cut, or as offered.
    fn section(&self) -> &Section {
        match &self.cut {
            Some(cut) => &cut.section,
            None => self.base.get(),
        }
    }
}

/// A section borrowed from the request, or owned when assembly had to change it. A pointer in
/// either case, so candidates stay small to build and move.
pub(super) enum Base<'a> {
    Borrowed(&'a Section),
    Owned(Box<Section>),
}

impl Base<'_> {
    fn get(&self) -> &Section {
        match self {
            Base::Borrowed(s) => s,
            Base::Owned(s) => s,
        }
    }
}

/// The candidates of a unit: one for most units, more for a tool call with its result. The
/// first is held inline, so a unit of one section allocates nothing.
#[derive(Default)]
pub(super) struct Members {
    first: usize,
    rest: Vec<usize>,
    len: usize,
}

impl Members {
    fn push(&mut self, c: usize) {
        if self.len == 0 {
            self.first = c;
        } else {
            self.rest.push(c);
        }
        self.len += 1;
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> MembersIter<'_> {
        (self.len > 0)
            .then_some(&self.first)
            .into_iter()
            .chain(self.rest.iter())
    }
}

type MembersIter<'a> =
    std::iter::Chain<std::option::IntoIter<&'a usize>, std::slice::Iter<'a, usize>>;

impl<'a> IntoIterator for &'a Members {
    type Item = &'a usize;
    type IntoIter = MembersIter<'a>;
    fn into_iter(self) -> MembersIter<'a> {
        self.iter()
    }
}

pub(super) struct Unit {
    layer: RuntimeLayer,
    members: Members,
    sticky: bool,
    turn_seq: Option<u64>,
    score: u64,
    /// The smallest candidate index among the members: candidates come in the canonical order
    /// of selection (layer, score, id, hash), so this breaks ties as the id would, without
    /// comparing strings.
    first: usize,
    tokens: u64,
    chars: u64,
    /// Bytes of content of the members (known without rendering).
    bytes: u64,
    /// Separate ASCII words of the members as offered (known without rendering): part of the
    /// unit's lower bound of tokens (ADR-0037).
    words: u64,
    /// Fitting has measured a member (which may since be cut).
    measured: bool,
    dropped: bool,
    /// Kept in room left after a more important unit was dropped (ADR-0037).
    filled: bool,
}

/// The output order of candidate `idx`: layer, stability, phase, turn chronology, score, then
/// the candidate's index, which follows the canonical order of selection (equal scores by id
/// and content hash), so no string is compared.
pub(super) fn order_key(
    s: &Section,
    idx: usize,
) -> (RuntimeLayer, Stability, Phase, u64, Reverse<u64>, usize) {
    let seq = history_turn(s).map_or(0, |t| t.seq);
    (
        s.layer(),
        s.stability(),
        s.phase(),
        seq,
        Reverse(s.score()),
        idx,
    )
}

/// An omission marker for `count` units of `l` holding `bytes` bytes of content (ADR-0037),
/// dropped for `reason`: the report's name of the reason every one of them was dropped for,
/// or [`SEVERAL_REASONS`] when they were dropped for different ones.
pub(super) fn marker_text(l: RuntimeLayer, count: u64, bytes: u64, reason: &str) -> String {
    let mut m = String::new();
    let what = if count == 1 {
        "1 section".to_owned()
    } else {
        format!("{count} sections")
    };
    format::write_omitted(&mut m, l.into(), &what, reason, bytes);
    m
}

/// The marker's reason when a layer's sections were dropped for different reasons (the report
/// names each section's).
pub(super) const SEVERAL_REASONS: &str = "several";

/// The reasons a layer's marker can give, given which limits apply besides the prompt budget
/// (the layer's own budget, the character cap, the section cap): its reservation is the most
/// any of them costs.
pub(super) fn marker_reasons(layer_budget: bool, max_chars: bool, cap: bool) -> Vec<&'static str> {
    let mut reasons = vec![DropReason::Budget.as_str()];
    for (applies, reason) in [
        (layer_budget, DropReason::LayerBudget),
        (max_chars, DropReason::MaxTotalChars),
        (cap, DropReason::SectionCap),
    ] {
        if applies {
            reasons.push(reason.as_str());
        }
    }
    if reasons.len() > 1 {
        reasons.push(SEVERAL_REASONS);
    }
    reasons
}

/// The section without its invisible and control characters (`Invisible::Strip`).
pub(super) fn strip_invisible(s: &Section) -> Section {
    let text = s.content().as_str();
    if !text.chars().any(format::is_invisible_or_control) {
        return s.clone();
    }
    s.with_content(
        text.chars()
            .filter(|c| !format::is_invisible_or_control(*c))
            .collect::<String>(),
    )
}
