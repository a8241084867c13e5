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
use strata_assembler::report::{Report, SectionReport, SectionStatus};
use strata_assembler::{Layer, Section, Tokenizer};

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
        SectionStatus::Filtered { reason } => (Kind::ByDesign, format!("not in this {reason}")),
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

/// Why a section has its outcome, in a sentence.
pub fn reason(s: &SectionReport, r: &Report, input: Option<&SectionInput>) -> String {
    let n = s.layer.number();
    let idle = idle_tokens(r);
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
        SectionStatus::Dropped { reason } => {
            let need = input.map(|i| i.tokens);
            match reason.as_ref() {
                "budget" => {
                    let mut t = format!(
                        "layer {n} yields to {} when the prompt budget ({} tokens) runs out",
                        layers_above(s.layer),
                        num(r.prompt_budget)
                    );
                    if let Some(need) = need {
                        if need > idle {
                            t.push_str(&format!(
                                "; it needs about {} tokens, {} tokens short of the {} left unused",
                                num(need),
                                num(need - idle),
                                num(idle)
                            ));
                        } else {
                            t.push_str(&format!(
                                "; it needs about {} tokens and {} are left unused: it would have fit",
                                num(need),
                                num(idle)
                            ));
                        }
                    }
                    t
                }
                "layer_budget" => {
                    let soft = r
                        .layers
                        .iter()
                        .find(|l| l.layer == s.layer)
                        .and_then(|l| l.budget);
                    match soft {
                        Some(b) => format!(
                            "layer {n}'s soft budget of {} tokens is full{}",
                            num(b),
                            need.map_or(String::new(), |t| format!(
                                "; it needs about {} tokens",
                                num(t)
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
        SectionStatus::Filtered { reason } => format!(
            "left out by design: this section does not take part in the current {reason}; \
             not a loss"
        ),
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

/// Tokens of the sections dropped from each layer (3-6), from the section inputs.
pub fn dropped_tokens(r: &Report, inputs: &[SectionInput], layer: Layer) -> u64 {
    r.sections
        .iter()
        .filter(|s| s.layer == layer && matches!(s.status, SectionStatus::Dropped { .. }))
        .filter_map(|s| input_of(inputs, s).map(|i| i.tokens))
        .sum()
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
    /// Tokens of the dropped sections, where known.
    pub dropped_tokens: u64,
    /// Dropped sections whose text alone (without its fence) is no larger than the idle budget.
    pub would_fit: usize,
}

/// The idle-budget warning: content was dropped while part of the prompt budget stayed
/// unused. `None` when nothing was dropped, or when the unused rest is too small to matter:
/// under a tenth of the prompt budget and smaller than every dropped section.
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
    let sizes: Vec<u64> = dropped
        .iter()
        .filter_map(|s| input_of(inputs, s).map(|i| i.tokens))
        .collect();
    let would_fit = sizes.iter().filter(|&&t| t <= idle).count();
    if would_fit == 0 && idle.saturating_mul(10) < r.prompt_budget {
        return None;
    }
    Some(Idle {
        idle,
        dropped: dropped.len(),
        dropped_tokens: sizes.iter().sum(),
        would_fit,
    })
}

impl Idle {
    /// The warning in a sentence.
    pub fn text(&self, r: &Report) -> String {
        let mut t = format!(
            "{} section(s){} were dropped while {} of the {} prompt tokens stayed unused ({}% \
             of the prompt budget used).",
            self.dropped,
            if self.dropped_tokens > 0 {
                format!(" (about {} tokens)", num(self.dropped_tokens))
            } else {
                String::new()
            },
            num(self.idle),
            num(r.prompt_budget),
            (r.used_tokens * 100)
                .checked_div(r.prompt_budget)
                .unwrap_or(0)
        );
        if self.would_fit > 0 {
            t.push_str(&format!(
                " {} of them would {}fit in the unused budget on its own (counting its text, \
                 without the fence around it).",
                self.would_fit,
                if self.would_fit == 1 { "" } else { "each " }
            ));
        }
        t.push_str(
            " Raise the budget, lower the layers' soft budgets' share, or split large sections \
             so that smaller ones can take the room.",
        );
        t
    }
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
