//! Stage 3 of assembly: take the selected sections as candidates and group them into trimming
//! units (a tool call and its result are one unit). Nothing is rendered or counted here: a
//! section's cost is measured when fitting reaches it, so what is dropped is never tokenized
//! (ADR-0037).
//!
//! The newest user turn is always kept: it is sticky whatever its section says, and when even
//! sticky content does not fit, fitting cuts it to its head and tail before failing the request
//! (ADR-0030). Without it a model would answer the question before.
//!
//! A turn's reasoning stays with it only where it is sent (ADR-0043).
//!
//! Hand-off: [`Measured`], the candidates and their units.

use std::sync::Arc;

use strata_core::{Keep, Role, Section};

use super::frame::Settings;
use super::{history_turn, reasoning, strip_invisible, Base, Cand, Members, Unit};
use crate::assemble::FastMap;
use crate::request::Invisible;

/// Candidates with their trimming units.
pub(super) struct Measured<'a> {
    /// One per selected section, in the canonical order of selection.
    pub cands: Vec<Cand<'a>>,
    /// Trimming units.
    pub units: Vec<Unit>,
    /// The candidate holding the newest user turn of working memory, if any.
    pub newest_user: Option<usize>,
}

/// The newest user turn of working memory among `sections`: the user turn with the highest
/// sequence number (the first offered of equals).
pub(super) fn newest_user_turn(sections: &[&Section]) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    for (i, s) in sections.iter().enumerate() {
        let Some(t) = history_turn(s).filter(|t| t.role == Role::User) else {
            continue;
        };
        if best.is_none_or(|(seq, _)| t.seq > seq) {
            best = Some((t.seq, i));
        }
    }
    best.map(|(_, i)| i)
}

/// Turn the winners of selection into candidates and units. Their reports are written when
/// the assembly is done, in report order, so nothing is built here and moved later.
pub(super) fn measure<'a>(winners: Vec<&'a Section>, settings: &Settings<'_>) -> Measured<'a> {
    let mut cands: Vec<Cand<'a>> = Vec::with_capacity(winners.len());
    let mut units: Vec<Unit> = Vec::with_capacity(winners.len());
    let mut unit_of_call: FastMap<Arc<str>, usize> = FastMap::default();
    let newest_user = newest_user_turn(&winners);
    let newest_seq = newest_user.and_then(|i| history_turn(winners[i]).map(|t| t.seq));
    let native = settings.provider.is_some();
    for (i, s) in winners.into_iter().enumerate() {
        let newest = newest_user == Some(i);
        let sticky = newest || s.sticky() || settings.protected_priorities.contains(&s.priority());
        let base = match settings.render.invisible {
            // The newest user turn is cut at both ends: the question is usually at one.
            Invisible::Escape if newest && s.keep() != Keep::Both => {
                Base::Owned(Box::new(s.with_keep(Keep::Both)))
            }
            Invisible::Escape => Base::Borrowed(s),
            Invisible::Strip if newest => {
                Base::Owned(Box::new(strip_invisible(s).with_keep(Keep::Both)))
            }
            Invisible::Strip => Base::Owned(Box::new(strip_invisible(s))),
        };
        // Reasoning goes only where its provider requires it (ADR-0043).
        let base = match reasoning::without_unsent(base.get(), native, newest_seq) {
            Some(bare) => Base::Owned(Box::new(bare)),
            None => base,
        };
        let section = base.get();
        let call = history_turn(section).and_then(|t| t.call_id.clone());
        let unit = match call.as_ref().and_then(|c| unit_of_call.get(c)) {
            Some(u) => *u,
            None => {
                units.push(Unit {
                    layer: section.layer(),
                    members: Members::default(),
                    sticky: false,
                    turn_seq: None,
                    score: 0,
                    first: cands.len(),
                    tokens: 0,
                    chars: 0,
                    bytes: 0,
                    words: 0,
                    measured: false,
                    dropped: false,
                    filled: false,
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
        if let Some(t) = history_turn(section) {
            u.turn_seq = Some(u.turn_seq.map_or(t.seq, |q| q.min(t.seq)));
        }
        u.bytes += section.content().as_str().len() as u64;
        u.words += section.ascii_words() as u64;
        cands.push(Cand {
            base,
            cut: None,
            sticky,
            element: None,
            unit,
        });
    }
    Measured {
        cands,
        units,
        newest_user,
    }
}
