//! An assembly report in words, for readers rather than programs: the reason behind every
//! outcome ("layer 6 yields to the layers above it; 2,197 tokens short" instead of `budget`),
//! what was left out and how large it was, and the warning about prompt budget left idle while
//! content was dropped. The terminal table and the HTML page of `strata explain` both use it
//! (ADR-0026).
//!
//! The report itself carries no text of dropped sections; [`SectionInput`] records, for each
//! runtime section handed to the assembler, its size before fitting, a preview and, for turns,
//! the role and sequence. `strata assemble --format json` writes them next to the report.

use serde::{Deserialize, Serialize};
use strata_assembler::assemble::{Layer, Section, Tokenizer, TOOL_CATALOG_ID, TOOL_CATALOG_KEY};
use strata_assembler::assemble::{LayerReport, Report, SectionReport, SectionStatus};

/// Characters of a section's text kept as its preview.
pub const PREVIEW_CHARS: usize = 600;

/// One runtime section as handed to the assembler, before fitting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionInput {
    /// Layer.
    pub layer: Layer,
    /// Section id.
    pub id: String,
    /// Tokens of the section's text (without the fence around it).
    pub tokens: u64,
    /// Characters of the section's text.
    pub chars: u64,
    /// The first [`PREVIEW_CHARS`] characters of the text.
    pub preview: String,
    /// For a turn (layer 5): who spoke (`user`, `assistant`, `tool_call`, `tool_result`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// For a turn: its position in the conversation (larger is newer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

/// Describe the sections of a request before they are fitted.
pub fn describe_inputs(sections: &[Section], tokenizer: &dyn Tokenizer) -> Vec<SectionInput> {
    sections
        .iter()
        .map(|s| {
            let text = s.content().as_str();
            SectionInput {
                layer: s.layer().into(),
                id: s.id().to_string(),
                tokens: tokenizer.count(text) as u64,
                chars: text.chars().count() as u64,
                preview: text.chars().take(PREVIEW_CHARS).collect(),
                role: s.turn().map(|t| t.role.name().to_owned()),
                seq: s.turn().map(|t| t.seq),
            }
        })
        .collect()
}

/// The input of a reported section, if it was described.
pub fn input_of<'a>(inputs: &'a [SectionInput], s: &SectionReport) -> Option<&'a SectionInput> {
    inputs.iter().find(|i| i.layer == s.layer && i.id == s.id)
}

/// A number with thousands separators (`2,197`).
pub fn num(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count of tokens in words: `1 token`, `2,197 tokens`.
pub fn tokens(n: u64) -> String {
    if n == 1 {
        "1 token".to_owned()
    } else {
        format!("{} tokens", num(n))
    }
}

/// A count of sections in words: `1 section`, `32 sections`.
pub fn sections(n: usize) -> String {
    if n == 1 {
        "1 section".to_owned()
    } else {
        format!("{} sections", num(n as u64))
    }
}

/// Tokens the fixed part of a fence (its opening and closing tags, without the section's id
/// and source) is taken to need at most when no section of the report shows its fence. The
/// assembler's fences take about 35 tokens with a short id and source.
pub const FENCE_BOUND: u64 = 64;

/// The most tokens a fence took in this report: the tokens of a section kept whole, less the
/// tokens of its text, over every described section kept whole. `None` when none was.
pub fn observed_fence(r: &Report, inputs: &[SectionInput]) -> Option<u64> {
    r.sections
        .iter()
        .filter(|s| matches!(s.status, SectionStatus::Kept))
        .filter_map(|s| input_of(inputs, s).map(|i| s.tokens.saturating_sub(i.tokens)))
        .max()
}

/// A bound on the tokens the fence of `s` would take: the largest fence of the report (or
/// [`FENCE_BOUND`]) plus one token per byte of the section's id and source name, which a fence
/// repeats and which no token is shorter than.
pub fn fence_bound(s: &SectionReport, observed: Option<u64>) -> u64 {
    observed.unwrap_or(FENCE_BOUND) + (s.id.len() + s.provenance.name.len()) as u64
}

/// Prompt tokens left unused.
pub fn idle_tokens(r: &Report) -> u64 {
    r.prompt_budget.saturating_sub(r.used_tokens)
}

/// Kind of outcome: what the reader should make of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Kept whole.
    Kept,
    /// Shortened to fit.
    Cut,
    /// Left out to fit a budget: a loss.
    Dropped,
    /// Left out by design (a mode or path filter, a higher layer's conflicting section).
    ByDesign,
}

impl Kind {
    /// The CSS class of the kind.
    pub fn class(self) -> &'static str {
        match self {
            Kind::Kept => "kept",
            Kind::Cut => "cut",
            Kind::Dropped => "dropped",
            Kind::ByDesign => "design",
        }
    }
}

/// The kind of a section's outcome and a short word for it.
pub fn outcome(s: &SectionReport) -> (Kind, String) {
    match &s.status {
        SectionStatus::Kept => (Kind::Kept, "kept".into()),
        SectionStatus::Cut {
            full_tokens: Some(full),
            ..
        } => (
            Kind::Cut,
            format!("cut to {} of {} tokens", num(s.tokens), num(*full)),
        ),
        SectionStatus::Cut {
            head_bytes,
            tail_bytes,
            ..
        } => (
            Kind::Cut,
            format!(
                "cut to {} tokens ({} of {} bytes)",
                num(s.tokens),
                num(head_bytes + tail_bytes),
                num(s.bytes)
            ),
        ),
        SectionStatus::Dropped { .. } => (Kind::Dropped, "dropped".into()),
        SectionStatus::Filtered { reason } => (
            Kind::ByDesign,
            match reason.as_ref() {
                "mode" | "path" => format!("not in this {reason}"),
                "reserved" => "reserved id".to_owned(),
                "empty" => "empty turn".to_owned(),
                "unpaired" => "unpaired tool turn".to_owned(),
                other => format!("left out ({other})"),
            },
        ),
        SectionStatus::Overridden { by_layer, .. } => (
            Kind::ByDesign,
            format!("overridden by layer {}", by_layer.number()),
        ),
        #[allow(
            unreachable_patterns,
            reason = "the report may gain outcomes; show them by name"
        )]
        other => (Kind::Dropped, format!("{other:?}")),
    }
}

fn layers_above(l: Layer) -> String {
    match l.number() {
        n if n <= 3 => "layers 1-2".to_owned(),
        n => format!("layers 1-{}", n - 1),
    }
}

/// Why a section has its outcome, in a sentence; `inputs` are the described sections of the
/// report (for the size of what was dropped and of the fences kept).
pub fn reason(s: &SectionReport, r: &Report, inputs: &[SectionInput]) -> String {
    match &s.status {
        SectionStatus::Kept => {
            if s.sticky {
                "kept whole; sticky, so never dropped for budget".into()
            } else {
                "kept whole".into()
            }
        }
        SectionStatus::Cut {
            full_tokens: Some(full),
            ..
        } => format!(
            "shortened to fit: {} of its {} tokens kept ({} cut); the cut point is marked in the text",
            num(s.tokens),
            num(*full),
            num(full.saturating_sub(s.tokens))
        ),
        SectionStatus::Cut {
            head_bytes,
            tail_bytes,
            ..
        } => format!(
            "shortened to fit: {} of its {} bytes kept in {} tokens ({} bytes cut, not counted); \
             the cut point is marked in the text",
            num(head_bytes + tail_bytes),
            num(s.bytes),
            num(s.tokens),
            num(s.bytes.saturating_sub(head_bytes + tail_bytes))
        ),
        SectionStatus::Dropped { reason } => dropped_reason(s, reason, r, inputs),
        SectionStatus::Filtered { reason } => filtered_reason(reason),
        SectionStatus::Overridden { by_layer, by_id, on } => format!(
            "left out by design: layer {} `{by_id}` claims the same {} and the higher layer wins",
            by_layer.number(),
            if let Some(id) = on.strip_prefix("id:") {
                format!("id `{id}`")
            } else {
                format!("key `{on}`")
            }
        ),
        #[allow(
            unreachable_patterns,
            reason = "the report may gain outcomes; show them by name"
        )]
        other => format!("{other:?}"),
    }
}

/// Why a section was dropped, by the assembler's `reason`: which budget or cap left it out.
fn dropped_reason(s: &SectionReport, reason: &str, r: &Report, inputs: &[SectionInput]) -> String {
    let n = s.layer.number();
    let need = input_of(inputs, s).map(|i| i.tokens);
    match reason {
        "budget" => budget_reason(s, need, r, inputs),
        "layer_budget" => {
            let soft = r
                .layers
                .iter()
                .find(|l| l.layer == s.layer)
                .and_then(|l| l.budget);
            match soft {
                Some(b) => format!(
                    "layer {n}'s soft budget of {} is full{}",
                    tokens(b),
                    need.map_or(String::new(), |t| format!(
                        "; its text needs about {}",
                        tokens(t)
                    ))
                ),
                None => format!("layer {n}'s soft budget is full"),
            }
        }
        "max_total_chars" => format!(
            "the character cap of the whole prompt ({}) was reached",
            r.max_total_chars.map_or("set".to_owned(), num)
        ),
        "section_cap" => "it is larger than the per-section token cap and could not be \
                          shortened to fit it"
            .into(),
        other => format!("dropped ({other})"),
    }
}

/// Why a section was dropped when the prompt budget ran out: the layers it yields to and,
/// when its size is known (`need`), whether it may have fit in the budget left unused.
fn budget_reason(
    s: &SectionReport,
    need: Option<u64>,
    r: &Report,
    inputs: &[SectionInput],
) -> String {
    let idle = idle_tokens(r);
    let mut t = format!(
        "layer {} yields to {} when the prompt budget ({}) runs out",
        s.layer.number(),
        layers_above(s.layer),
        tokens(r.prompt_budget)
    );
    if let Some(need) = need {
        let fence = fence_bound(s, observed_fence(r, inputs));
        if need > idle {
            t.push_str(&format!(
                "; its text alone needs about {}, {} more than the {} left unused",
                tokens(need),
                tokens(need - idle),
                tokens(idle)
            ));
        } else {
            t.push_str(&format!(
                "; its text needs about {} and its fence up to about {} more, \
                 with {} left unused: it {}",
                tokens(need),
                tokens(fence),
                tokens(idle),
                if need + fence <= idle {
                    "may have fit"
                } else {
                    "would not have fit"
                }
            ));
        }
    }
    t
}

/// Why a section was left out by design (not a loss), by the assembler's `reason`.
fn filtered_reason(reason: &str) -> String {
    match reason {
        "mode" | "path" => format!(
            "left out by design: this section does not take part in the current {reason}; \
             not a loss"
        ),
        "reserved" => format!(
            "left out by design: its id or key is reserved for the tool catalog the \
             assembler writes (id `{TOOL_CATALOG_ID}`, key `{TOOL_CATALOG_KEY}`); rename it \
             to send it"
        ),
        "empty" => "left out: an empty user or assistant turn is not sent".into(),
        "unpaired" => "left out: a tool call without its result, or a result without its \
                       call, is not sent under --drop-unpaired"
            .into(),
        other => format!("left out by design ({other}); not a loss"),
    }
}

/// Tokens of the sections dropped from a layer (3-6), from the section inputs (their text,
/// without fences: an estimate).
pub fn dropped_tokens(r: &Report, inputs: &[SectionInput], layer: Layer) -> u64 {
    r.sections
        .iter()
        .filter(|s| s.layer == layer && matches!(s.status, SectionStatus::Dropped { .. }))
        .filter_map(|s| input_of(inputs, s).map(|i| i.tokens))
        .sum()
}

/// Tokens cut off the cut sections of a layer.
pub fn cut_tokens(r: &Report, inputs: &[SectionInput], layer: Layer) -> u64 {
    r.sections
        .iter()
        .filter(|s| s.layer == layer)
        .map(|s| cut_off_tokens(s, inputs))
        .sum()
}

/// Tokens of content a layer left out: what its dropped sections held and what was cut off
/// its cut sections.
pub fn left_out_tokens(r: &Report, inputs: &[SectionInput], layer: Layer) -> u64 {
    dropped_tokens(r, inputs, layer) + cut_tokens(r, inputs, layer)
}

/// Whether the tokens a layer takes are only its omission marker: it kept and cut nothing,
/// dropped something, and still takes tokens.
pub fn only_omission_marker(l: &LayerReport) -> bool {
    l.kept + l.cut == 0 && l.dropped > 0 && l.tokens > 0
}

/// Tokens cut off a cut section: from its whole count when the report has it, otherwise from
/// the tokens its input was counted at (an estimate, as for dropped sections); 0 for other
/// outcomes or when neither is known.
pub fn cut_off_tokens(s: &SectionReport, inputs: &[SectionInput]) -> u64 {
    match s.status {
        SectionStatus::Cut {
            full_tokens: Some(full),
            ..
        } => full.saturating_sub(s.tokens),
        SectionStatus::Cut {
            full_tokens: None, ..
        } => input_of(inputs, s).map_or(0, |i| i.tokens.saturating_sub(s.tokens)),
        _ => 0,
    }
}

/// Prompt budget left idle while content was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    /// Prompt tokens unused.
    pub idle: u64,
    /// Sections dropped.
    pub dropped: usize,
    /// Tokens of the dropped sections' text, where known.
    pub dropped_tokens: u64,
    /// Dropped sections whose text and a bound on their fence ([`fence_bound`]) together are
    /// no larger than the idle budget: each may have fit on its own.
    pub may_fit: usize,
}

/// The idle-budget warning: content was dropped while part of the prompt budget stayed
/// unused. `None` when nothing was dropped, or when the unused rest is too small to matter:
/// under a tenth of the prompt budget and too small for any dropped section with its fence.
pub fn idle_budget(r: &Report, inputs: &[SectionInput]) -> Option<Idle> {
    let idle = idle_tokens(r);
    let dropped: Vec<&SectionReport> = r
        .sections
        .iter()
        .filter(|s| matches!(s.status, SectionStatus::Dropped { .. }))
        .collect();
    if dropped.is_empty() || idle == 0 {
        return None;
    }
    let observed = observed_fence(r, inputs);
    let sizes: Vec<(u64, u64)> = dropped
        .iter()
        .filter_map(|s| input_of(inputs, s).map(|i| (i.tokens, fence_bound(s, observed))))
        .collect();
    let may_fit = sizes
        .iter()
        .filter(|&&(text, fence)| text + fence <= idle)
        .count();
    if may_fit == 0 && idle.saturating_mul(10) < r.prompt_budget {
        return None;
    }
    Some(Idle {
        idle,
        dropped: dropped.len(),
        dropped_tokens: sizes.iter().map(|&(text, _)| text).sum(),
        may_fit,
    })
}

impl Idle {
    /// The warning in a sentence.
    pub fn text(&self, r: &Report) -> String {
        let mut t = format!(
            "{}{} {} dropped while {} of the {} prompt tokens stayed unused ({}% of the prompt \
             budget used).",
            sections(self.dropped),
            if self.dropped_tokens > 0 {
                format!(" (about {} of text)", tokens(self.dropped_tokens))
            } else {
                String::new()
            },
            if self.dropped == 1 { "was" } else { "were" },
            num(self.idle),
            num(r.prompt_budget),
            (r.used_tokens * 100)
                .checked_div(r.prompt_budget)
                .unwrap_or(0)
        );
        match self.may_fit {
            0 => {}
            1 => t.push_str(
                " 1 of them may fit in the unused budget on its own, counting the fence around \
                 it.",
            ),
            n => t.push_str(&format!(
                " {} of them may each fit in the unused budget on its own, counting the fence \
                 around it.",
                num(n as u64)
            )),
        }
        t.push_str(
            " Raise the budget, lower the layers' soft budgets' share, or split large sections \
             so that smaller ones can take the room.",
        );
        t
    }
}

/// A cache breakpoint as a reader sees it: where a cacheable prefix of the plain-text
/// assembly ends, and what ends there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CachePoint {
    /// What ends there: "layers 1-2 (identity)", "the stable prefix (in layer 3)", "layer 3
    /// and the stable prefix", "layer 4".
    pub label: String,
    /// Byte offset in the text.
    pub byte: usize,
    /// Token offset.
    pub token: u64,
    /// Whether it lies past the stable prefix: its prefix is cached only while the layers
    /// before it do not change.
    pub past_stable: bool,
}

/// The report's cache breakpoints, each offset once, named by what ends there.
pub fn cache_points(r: &Report) -> Vec<CachePoint> {
    let mut out: Vec<CachePoint> = Vec::new();
    for b in &r.breakpoints {
        if out.iter().any(|p| p.byte == b.byte) {
            continue;
        }
        let n = b.after_layer.number();
        let ends_layer = !r
            .breakpoints
            .iter()
            .any(|o| o.after_layer == b.after_layer && o.byte > b.byte);
        let label = if n <= 2 {
            "layers 1-2 (identity)".to_owned()
        } else if b.byte == r.stable_prefix.byte && !ends_layer {
            format!("the stable prefix (in layer {n})")
        } else if b.byte == r.stable_prefix.byte {
            format!("layer {n} and the stable prefix")
        } else {
            format!("layer {n}")
        };
        out.push(CachePoint {
            label,
            byte: b.byte,
            token: b.token,
            past_stable: b.byte > r.stable_prefix.byte,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(num(0), "0");
        assert_eq!(num(999), "999");
        assert_eq!(num(2197), "2,197");
        assert_eq!(num(1_234_567), "1,234,567");
    }
}
