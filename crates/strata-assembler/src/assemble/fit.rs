//! Stage 4 of assembly: fit the budget. Identity and sticky sections must fit or the assembly
//! fails (I2); the newest user turn, sticky too, is cut to its head and tail before that. Then units are taken in keep order (lower layer first; inside a layer the newest
//! turns, then the highest score) and each is kept if it fits the room left, counted only up to
//! that room; the first that does not fit may be kept in cut form, and smaller units after it
//! that still fit are kept too (filling the budget). Each layer's omission marker is reserved
//! while it may drop anything; reservations given back by layers that dropped nothing are
//! offered, in a second pass, to the units dropped meanwhile (ADR-0008, ADR-0024).
//!
//! Hand-off: [`Fitted`], the drops per layer and the reason of each dropped unit; the units of
//! [`Measured`] are marked dropped or filled, and kept candidates carry their rendered element.

use std::cmp::Reverse;

use strata_core::format::Encoding;
use strata_core::{Budget, RuntimeLayer};

use super::measure::Measured;
use super::{marker_text, select, Assembler, Cand, CutForm, Unit, MIN_CUT_TOKENS};
use crate::error::AssembleError;
use crate::per_layer::PerLayer;
use crate::report::DropReason;
use crate::request::AssemblyRequest;

/// A unit's place in keep order: layer, turns first, newest turn first, highest score first,
/// then its first candidate (unique).
type KeepKey = (
    RuntimeLayer,
    Reverse<bool>,
    Reverse<u64>,
    Reverse<u64>,
    usize,
);

/// What fitting decided.
pub(super) struct Fitted {
    /// Units dropped per layer whose omission marker is written.
    pub drops: PerLayer<u64>,
    /// Bytes of content dropped per layer (for the omission markers).
    pub dropped_bytes: PerLayer<u64>,
    /// Why each dropped unit was dropped, by unit index.
    pub dropped_reason: Vec<Option<DropReason>>,
}

/// The limits of one fit.
pub(super) struct Limits {
    /// Tokens the request may take (margin applied).
    pub fit_budget: u64,
    /// Character cap.
    pub max_chars: Option<u64>,
    /// Fixed cost: identity and frame tokens, identity characters.
    pub base: (u64, u64),
}

/// The outcome of measuring one member of a unit against the room left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// Fits as rendered (whole or cut to the section cap).
    Fits,
    /// Does not fit the room.
    Over,
    /// Over the section cap and cannot be cut to it.
    Capped,
}

impl Assembler {
    /// Measure candidate `c` against `room` tokens, applying the section cap to sections that
    /// are not sticky. On success the candidate holds its rendered element.
    fn measure_member(
        &self,
        cand: &mut Cand<'_>,
        req: &AssemblyRequest,
        cap: Option<u64>,
        room: u64,
    ) -> Member {
        let native = req.provider.is_some();
        // Measured afresh from the text as offered: a cut from an earlier pass (a unit dropped
        // after one member was cut to the cap) must not be rendered without its marker.
        cand.cut = None;
        let enc = req.render.encoding(cand.section().layer());
        let cap = cap.filter(|_| !cand.sticky);
        let limit = cap.map_or(room, |c| c.min(room));
        if let Some(r) = self.probe(cand.section(), enc, native, limit) {
            cand.element = Some(r);
            return Member::Fits;
        }
        let Some(cap) = cap.filter(|c| *c <= room) else {
            return Member::Over;
        };
        // Over the cap (the probe had the whole room above it): cut to the cap.
        match self.cut_to(cand.base.get(), enc, cap, native) {
            Some(cut) => {
                // The whole form is counted only on request (ADR-0024).
                let full = req
                    .count_cut_sections
                    .then(|| self.render(cand.base.get(), enc, None, native).tokens);
                cand.cut = Some(Box::new(CutForm {
                    section: cut.section,
                    at: cut.at,
                    full,
                }));
                cand.element = Some(cut.rendered);
                Member::Fits
            }
            None => Member::Capped,
        }
    }

    /// Fit the candidates into `limits`.
    pub(super) fn fit(
        &self,
        m: &mut Measured<'_>,
        req: &AssemblyRequest,
        budget: &Budget,
        limits: &Limits,
    ) -> Result<Fitted, AssembleError> {
        let native = req.provider;
        let (fit_budget, max_chars) = (limits.fit_budget, limits.max_chars);
        let (base_tokens, id_chars) = limits.base;
        let cap = budget.section_cap.map(u64::from);
        let Measured {
            cands,
            units,
            newest_user,
        } = m;
        let newest_user = *newest_user;
        let mut dropped_reason: Vec<Option<DropReason>> = vec![None; units.len()];

        // Sticky units are measured in full: they must fit. Their members that are not sticky
        // themselves still obey the section cap.
        for u in units.iter_mut().filter(|u| u.sticky) {
            for &c in &u.members {
                match self.measure_member(&mut cands[c], req, cap, u64::MAX) {
                    Member::Fits => {}
                    Member::Over | Member::Capped => {
                        // Not even an empty body fits the cap: keep it whole, as a sticky
                        // unit's member (the cap yields to stickiness).
                        let enc = req.render.encoding(cands[c].section().layer());
                        cands[c].element =
                            Some(self.render(cands[c].section(), enc, None, native.is_some()));
                    }
                }
                u.tokens += cands[c].rendered().tokens;
                u.chars += cands[c].rendered().chars;
            }
        }
        // A sticky tool call keeps its result with it; a result that is not sticky itself is
        // cut, largest first, rather than failing the request for its size. The newest user
        // turn is cut last, to its head and tail, and never below `MIN_CUT_TOKENS` (ADR-0030).
        let whole_newest = newest_user.map(|c| cands[c].rendered().tokens);
        let mut excess = (base_tokens
            + units
                .iter()
                .filter(|u| u.sticky)
                .map(|u| u.tokens)
                .sum::<u64>())
        .saturating_sub(fit_budget);
        if excess > 0 {
            let mut shrinkable: Vec<usize> = units
                .iter()
                .filter(|u| u.sticky)
                .flat_map(|u| u.members.iter().copied())
                .filter(|c| !cands[*c].sticky || Some(*c) == newest_user)
                .collect();
            shrinkable.sort_by_key(|c| {
                (
                    Some(*c) == newest_user,
                    Reverse(cands[*c].rendered().tokens),
                    *c,
                )
            });
            for c in shrinkable {
                if excess == 0 {
                    break;
                }
                let have = cands[c].rendered().tokens;
                let enc = req.render.encoding(cands[c].section().layer());
                let to = have.saturating_sub(excess);
                // Always cut the text as offered, so the cut's place in it is known exactly.
                let cut = if Some(c) == newest_user {
                    // A cut of the message keeps at least `MIN_CUT_TOKENS` of its own words.
                    self.cut_section(cands[c].base.get(), enc, to, native.is_some())
                        .filter(|k| {
                            self.tokenizer.count(k.section.content().as_str()) as u64
                                >= MIN_CUT_TOKENS
                        })
                } else {
                    self.cut_to(cands[c].base.get(), enc, to, native.is_some())
                };
                let Some(cut) = cut else {
                    continue;
                };
                let r = cut.rendered;
                let u = cands[c].unit;
                units[u].tokens = units[u].tokens - have + r.tokens;
                units[u].chars = units[u].chars - cands[c].rendered().chars + r.chars;
                excess = excess.saturating_sub(have - r.tokens);
                // Measured whole above, so its full count is known without counting again.
                let full = cands[c].cut.as_ref().map_or(Some(have), |k| k.full);
                cands[c].cut = Some(Box::new(CutForm {
                    section: cut.section,
                    at: cut.at,
                    full,
                }));
                cands[c].element = Some(r);
            }
        }
        // Sticky sections must fit with identity, or the assembly fails (I2).
        // One pass over the units: what the sticky ones take (in all and per layer), and per
        // layer how many of the others there are and their bytes.
        let (mut sticky_tokens, mut sticky_chars) = (0u64, 0u64);
        let mut layer_used = PerLayer::splat(0u64);
        let mut per_layer = PerLayer::splat((0u64, 0u64));
        let mut fresh: Vec<usize> = Vec::with_capacity(units.len());
        for (i, u) in units.iter().enumerate() {
            let l = u.layer;
            if u.sticky {
                sticky_tokens += u.tokens;
                sticky_chars += u.chars;
                layer_used[l] += u.tokens;
            } else {
                fresh.push(i);
                per_layer[l].0 += 1;
                per_layer[l].1 += u.bytes;
            }
        }
        if base_tokens + sticky_tokens > fit_budget {
            // Without the newest user turn, would the rest fit? Then the message is the
            // problem, and the caller is told so.
            if let (Some(c), Some(whole)) = (newest_user, whole_newest) {
                let others = base_tokens + sticky_tokens - cands[c].rendered().tokens;
                if others <= fit_budget {
                    return Err(AssembleError::MessageTooLarge {
                        tokens: whole,
                        available: fit_budget - others,
                        budget: fit_budget,
                        minimum: MIN_CUT_TOKENS,
                    });
                }
            }
            return Err(AssembleError::StickyExceedsBudget {
                count: cands.iter().filter(|c| c.sticky).count(),
                needed: base_tokens + sticky_tokens,
                budget: fit_budget,
            });
        }
        if let Some(mc) = max_chars.filter(|mc| id_chars + sticky_chars > *mc) {
            return Err(AssembleError::CharsExceeded {
                needed: id_chars + sticky_chars,
                limit: mc,
            });
        }

        // Keep order: lower layer first; inside a layer turns before other sections, newest
        // first, then the highest score, then the canonical order of selection (which orders
        // equal scores by id, so no string is compared here).
        // The sort starts from the last call's keep order when that holds the same units (a
        // request that changed little is then nearly sorted, and the merge sort costs about one
        // comparison per unit); the key ends with a unique index, so the result is the same
        // from any start (ADR-0024).
        let mut order = {
            let hint = std::mem::take(&mut self.hints().keep);
            let mut member = vec![false; units.len()];
            for &u in &fresh {
                member[u] = true;
            }
            let same = hint.len() == fresh.len()
                && hint
                    .iter()
                    .all(|&u| u < member.len() && std::mem::replace(&mut member[u], false));
            if same {
                hint
            } else {
                fresh
            }
        };
        // Keys read once per unit into one array (a unit is large and `order` visits units out
        // of place), then sorted with the unit; the key ends with a unique index.
        let mut keyed: Vec<(KeepKey, usize)> = order
            .iter()
            .map(|&i| {
                let u = &units[i];
                (
                    (
                        u.layer,
                        Reverse(u.turn_seq.is_some()),
                        Reverse(u.turn_seq.unwrap_or(0)),
                        Reverse(u.score),
                        u.first,
                    ),
                    i,
                )
            })
            .collect();
        keyed.sort_by_key(|k| k.0);
        order.clear();
        order.extend(keyed.iter().map(|k| k.1));
        self.hints().keep.clone_from(&order);

        // Upper bounds of each layer's omission marker, from the most sections and bytes it
        // could state. A layer's bound is reserved until the layer is done; if the layer drops
        // nothing it is given back. Bounds that do not fit are left out, highest layer first:
        // those layers drop without a marker (the report still lists every dropped section).
        // The units in `order` are those not sticky (`per_layer`, counted above).
        let marker = PerLayer::from_fn(|l| {
            let (n, b) = per_layer[l];
            if n > 0 {
                self.text_cost(&marker_text(l, n.max(10) * 10, b.max(10) * 10))
            } else {
                (0, 0)
            }
        });
        let mut used = (base_tokens + sticky_tokens, id_chars + sticky_chars);
        let mut reserved = PerLayer::splat(false);
        for l in RuntimeLayer::ALL {
            let (t, c) = marker[l];
            if t > 0 && used.0 + t <= fit_budget && max_chars.is_none_or(|mc| used.1 + c <= mc) {
                reserved[l] = true;
                used.0 += t;
                used.1 += c;
            }
        }
        let mut drops = PerLayer::splat(0u64);
        let mut dropped_bytes = PerLayer::splat(0u64);
        let mut cut_tried = false;
        let mut released = false;
        let native_b = native.is_some();
        // The smallest element of each layer: below this much room, nothing of it can fit.
        let floors = PerLayer::from_fn(|l| self.floor(l, req.render.encoding(l), native_b));
        let min_floor = floors.values().copied().min().unwrap_or(0);
        // Separate ASCII words of escaped or raw text each take a token of their own with the
        // tiktoken encodings: with the element floor, a lower bound of a unit's tokens known
        // without rendering it (ADR-0024). Other encodings rewrite the words, so they get none.
        let words_count = self.tokenizer.splits_ascii_words();
        // A unit's floor: its members' element floors and, where words count, its words. A
        // unit not measured yet has its members as offered, whose words measure counted; one
        // measured may hold a cut member, whose words are counted again.
        let unit_floor = |unit: &Unit, cands: &[Cand<'_>]| -> u64 {
            let i = unit.layer;
            let words = if !(words_count && req.render.encoding(i) == Encoding::Escaped) {
                0
            } else if unit.measured {
                unit.members
                    .iter()
                    .map(|c| cands[*c].section().ascii_words() as u64)
                    .sum()
            } else {
                unit.words
            };
            unit.members.len() as u64 * floors[i] + words
        };

        for (k, &u) in order.iter().enumerate() {
            let l = units[u].layer;
            let i = l;
            let last_in_layer = order.get(k + 1).is_none_or(|n| units[*n].layer != l);
            // The last unit of a layer that has dropped nothing may use the layer's marker
            // reservation: if it fits, no marker is needed.
            let give_back = if last_in_layer && drops[i] == 0 && reserved[i] {
                marker[i]
            } else {
                (0, 0)
            };
            let room_total = (fit_budget + give_back.0).saturating_sub(used.0);
            let room_layer = budget.layers.get(l).map_or(u64::MAX, |lb| {
                let held = if reserved[i] && give_back.0 == 0 {
                    marker[i].0
                } else {
                    0
                };
                u64::from(lb).saturating_sub(layer_used[i] + held)
            });
            let room = room_total.min(room_layer);
            let room_chars = max_chars.map(|mc| (mc + give_back.1).saturating_sub(used.1));
            let why = if room_layer < room_total {
                DropReason::LayerBudget
            } else {
                DropReason::Budget
            };
            let mut verdict: Result<(), DropReason> = Ok(());
            // Past the point where nothing fits, a unit costs this one comparison.
            if room < min_floor || unit_floor(&units[u], cands) > room {
                verdict = Err(why);
            } else {
                units[u].measured = true;
                let mut left = room;
                for &c in &units[u].members {
                    match self.measure_member(&mut cands[c], req, cap, left) {
                        Member::Fits => left -= cands[c].rendered().tokens.min(left),
                        Member::Over => {
                            verdict = Err(why);
                            break;
                        }
                        Member::Capped => {
                            verdict = Err(DropReason::SectionCap);
                            break;
                        }
                    }
                }
            }
            let mut cost = (0u64, 0u64);
            if verdict.is_ok() {
                for &c in &units[u].members {
                    cost.0 += cands[c].rendered().tokens;
                    cost.1 += cands[c].rendered().chars;
                }
                if room_chars.is_some_and(|rc| cost.1 > rc) {
                    verdict = Err(DropReason::MaxTotalChars);
                }
            }
            // The first unit that does not fit may be kept in cut form, in the room it leaves:
            // its one member cut, or for a tool call with its result, the member with the most
            // content that may be cut, after the others are measured in that room (whole, or
            // cut to the section cap). A unit of one member takes the one attempt whether or
            // not it can be cut (as before); a pair only once a cut is tried, so a pair that
            // cannot be kept leaves the attempt to the next unit.
            if verdict == Err(why) && !cut_tried {
                cut_tried = units[u].members.len() == 1;
                units[u].measured = true;
                let c = units[u]
                    .members
                    .iter()
                    .copied()
                    .filter(|&m| {
                        units[u].members.len() == 1
                            || !native_b
                            || select::cuttable_natively(cands[m].base.get())
                    })
                    .max_by_key(|&m| (cands[m].base.get().content().len(), Reverse(m)));
                // Kept in cut form, the unit drops nothing, so the last of a layer may use
                // the layer's marker reservation like a whole unit.
                let mut left = room;
                let mut others = (0u64, 0u64);
                if let Some(c) = c.filter(|_| room >= MIN_CUT_TOKENS) {
                    for &m in units[u].members.iter().filter(|&&m| m != c) {
                        let limit = left.saturating_sub(MIN_CUT_TOKENS);
                        if self.measure_member(&mut cands[m], req, cap, limit) != Member::Fits {
                            left = 0;
                            break;
                        }
                        let r = cands[m].rendered();
                        left -= r.tokens;
                        others = (others.0 + r.tokens, others.1 + r.chars);
                    }
                }
                if let Some(c) = c.filter(|_| left >= MIN_CUT_TOKENS) {
                    cut_tried = true;
                    let enc = req.render.encoding(i);
                    // A member that is not sticky obeys the section cap in cut form too.
                    let to = cap
                        .filter(|_| !cands[c].sticky)
                        .map_or(left, |k| k.min(left));
                    if let Some(cut) = self.cut_to(cands[c].base.get(), enc, to, native_b) {
                        let r = cut.rendered;
                        let chars_ok = max_chars.is_none_or(|mc| used.1 + others.1 + r.chars <= mc);
                        if chars_ok {
                            // The whole form is counted only on request (ADR-0024).
                            let full = req.count_cut_sections.then(|| {
                                self.render(cands[c].base.get(), enc, None, native_b).tokens
                            });
                            let full = cands[c].cut.as_ref().map_or(full, |k| k.full);
                            cands[c].cut = Some(Box::new(CutForm {
                                section: cut.section,
                                at: cut.at,
                                full,
                            }));
                            cost = (others.0 + r.tokens, others.1 + r.chars);
                            cands[c].element = Some(r);
                            verdict = Ok(());
                        }
                    }
                }
            }
            match verdict {
                Ok(()) => {
                    used.0 += cost.0;
                    used.1 += cost.1;
                    layer_used[i] += cost.0;
                    units[u].tokens = cost.0;
                    units[u].chars = cost.1;
                }
                Err(reason) => {
                    units[u].dropped = true;
                    drops[i] += 1;
                    dropped_bytes[i] += units[u].bytes;
                    dropped_reason[u] = Some(reason);
                }
            }
            if last_in_layer && drops[i] == 0 && reserved[i] {
                // Nothing dropped here: no marker, so its reservation is given back.
                reserved[i] = false;
                released = true;
                used.0 -= marker[i].0;
                used.1 -= marker[i].1;
            }
        }
        // Reservations given back were held while the layers before them were fitted: offer
        // that room, in keep order, to the units dropped for the budget meanwhile.
        if released {
            for &u in &order {
                if dropped_reason[u] != Some(DropReason::Budget) {
                    continue;
                }
                let i = units[u].layer;
                let held = if reserved[i] { marker[i].0 } else { 0 };
                let room_layer = budget.layers.get(units[u].layer).map_or(u64::MAX, |lb| {
                    u64::from(lb).saturating_sub(layer_used[i] + held)
                });
                let room = fit_budget.saturating_sub(used.0).min(room_layer);
                if room < min_floor || unit_floor(&units[u], cands) > room {
                    continue;
                }
                units[u].measured = true;
                let mut left = room;
                let mut fits = true;
                for &c in &units[u].members {
                    match self.measure_member(&mut cands[c], req, cap, left) {
                        Member::Fits => left -= cands[c].rendered().tokens.min(left),
                        Member::Over | Member::Capped => {
                            fits = false;
                            break;
                        }
                    }
                }
                let cost = units[u].members.iter().fold((0, 0), |(t, ch), c| {
                    (
                        t + cands[*c].rendered().tokens,
                        ch + cands[*c].rendered().chars,
                    )
                });
                if !fits || max_chars.is_some_and(|mc| used.1 + cost.1 > mc) {
                    continue;
                }
                units[u].dropped = false;
                units[u].tokens = cost.0;
                units[u].chars = cost.1;
                dropped_reason[u] = None;
                drops[i] -= 1;
                dropped_bytes[i] -= units[u].bytes;
                used.0 += cost.0;
                used.1 += cost.1;
                layer_used[i] += cost.0;
                if drops[i] == 0 && reserved[i] {
                    reserved[i] = false;
                    used.0 -= marker[i].0;
                    used.1 -= marker[i].1;
                }
            }
        }
        // A unit is filled when a more important one was dropped before it (ADR-0024).
        let mut dropped_before = false;
        for &u in &order {
            if units[u].dropped {
                dropped_before = true;
            } else {
                units[u].filled = dropped_before;
            }
        }
        for l in RuntimeLayer::ALL {
            if !reserved[l] {
                drops[l] = 0;
            }
        }
        Ok(Fitted {
            drops,
            dropped_bytes,
            dropped_reason,
        })
    }
}
