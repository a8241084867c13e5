//! Stage 3 of assembly: render every selected section once (cached by content), count its
//! exact tokens in the request's frame, apply section caps, and group sections into trimming
//! units (a tool call and its result are one unit).
//!
//! Hand-off: [`Measured`], the candidates and their units.

use std::collections::HashMap;
use std::sync::Arc;

use strata_core::{Budget, RuntimeLayer, Section};

use super::{report_of, strip_invisible, Assembler, Cand, Unit};
use crate::report::{SectionReport, SectionStatus};
use crate::request::{AssemblyRequest, Invisible};

/// Candidates with their cost and trimming units.
pub(super) struct Measured {
    /// One per selected section that its cap did not drop.
    pub cands: Vec<Cand>,
    /// Trimming units.
    pub units: Vec<Unit>,
}

impl Assembler {
    /// Measure the winners of selection; reports of the candidates are appended to `reports`.
    pub(super) fn measure(
        &self,
        winners: Vec<Section>,
        req: &AssemblyRequest,
        budget: &Budget,
        reports: &mut Vec<SectionReport>,
    ) -> Measured {
        let native = req.provider;
        // Render, apply section caps, build trimming units.
        let mut cands: Vec<Cand> = Vec::with_capacity(winners.len());
        let mut units: Vec<Unit> = Vec::new();
        let mut unit_of_call: HashMap<Arc<str>, usize> = HashMap::new();
        for s in winners {
            let sticky = s.sticky() || req.protected_priorities.contains(&s.priority());
            let enc = req.render.encodings[s.layer().index()];
            let s = match req.render.invisible {
                Invisible::Escape => s,
                Invisible::Strip => strip_invisible(&s),
            };
            let mut rendered = self.render(&s, enc, false, native.is_some());
            let mut section = s;
            let mut cut_from = None;
            if let Some(cap) = budget.section_cap.map(u64::from) {
                if rendered.tokens > cap && !sticky {
                    match self.cut_to(&section, enc, cap, native.is_some()) {
                        Some((c, r)) => {
                            cut_from = Some(rendered.tokens);
                            section = c;
                            rendered = r;
                        }
                        None => {
                            reports.push(report_of(
                                &section,
                                sticky,
                                SectionStatus::Dropped {
                                    reason: "section_cap".into(),
                                },
                            ));
                            continue;
                        }
                    }
                }
            }
            let call = section
                .turn()
                .filter(|_| section.layer() == RuntimeLayer::WorkingMemory)
                .and_then(|t| t.call_id.clone());
            let unit = match call.as_ref().and_then(|c| unit_of_call.get(c)) {
                Some(u) => *u,
                None => {
                    units.push(Unit {
                        layer: section.layer(),
                        members: Vec::new(),
                        sticky: false,
                        turn_seq: None,
                        score: 0,
                        first_id: section.id().clone(),
                        tokens: 0,
                        chars: 0,
                        dropped: false,
                    });
                    if let Some(c) = call {
                        unit_of_call.insert(c, units.len() - 1);
                    }
                    units.len() - 1
                }
            };
            let u = &mut units[unit];
            u.members.push(cands.len());
            u.sticky |= sticky;
            u.score = u.score.max(section.score());
            if section.layer() == RuntimeLayer::WorkingMemory {
                if let Some(t) = section.turn() {
                    u.turn_seq = Some(u.turn_seq.map_or(t.seq, |q| q.min(t.seq)));
                }
            }
            u.first_id = u.first_id.clone().min(section.id().clone());
            u.tokens += rendered.tokens;
            u.chars += rendered.chars;
            reports.push(report_of(&section, sticky, SectionStatus::Kept));
            cands.push(Cand {
                section,
                sticky,
                rendered,
                cut_from,
                unit,
                report_idx: reports.len() - 1,
            });
        }

        Measured { cands, units }
    }
}
