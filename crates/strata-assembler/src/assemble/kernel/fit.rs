//! Stage 4 of assembly: fit the budget. Identity and sticky sections must fit or the assembly
//! fails (I2); the newest user turn, sticky too, is cut to its head and tail before that
//! (ADR-0030). Then units are taken in keep order (lower layer first; inside a layer the newest
//! turns, then the highest score) and each is kept if it fits the room left, counted only up to
//! that room; the first that does not fit may be kept in cut form, and smaller units after it
//! that still fit are kept too (filling the budget). Each layer's omission marker is reserved
//! while it may drop anything; reservations given back by layers that dropped nothing are
//! offered, in a second pass, to the units dropped meanwhile (ADR-0008, ADR-0037). Last, a
//! provider history opens with a user turn: where no stable context leads, the turns kept
//! before the first user turn are dropped (ADR-0015). Every decision of what is kept is made
//! here; placing only places.
//!
//! Hand-off: [`Fitted`], the candidates and units (marked dropped or filled, kept candidates
//! carrying their rendered element), the drops per layer and the reason of each dropped unit.

use std::cmp::Reverse;

use strata_core::format::Encoding;
use strata_core::{Role, RuntimeLayer, Stability};

use super::frame::Framed;
use super::frame::Settings;
use super::measure::Measured;
use super::{cuttable_natively, marker_reasons, marker_text, Cand, CutForm, Unit, SEVERAL_REASONS};
use crate::assemble::element::{Meter, MIN_CUT_TOKENS};
use crate::error::AssembleError;
use crate::per_layer::PerLayer;
use crate::report::DropReason;

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
pub(super) struct Fitted<'a> {
    /// The candidates, kept ones carrying their rendered element (and cut form).
    pub cands: Vec<Cand<'a>>,
    /// The units, marked dropped or filled.
    pub units: Vec<Unit>,
    /// Units dropped per layer whose omission marker is written.
    pub drops: PerLayer<u64>,
    /// Bytes of content dropped per layer (for the omission markers).
    pub dropped_bytes: PerLayer<u64>,
    /// Why each dropped unit was dropped, by unit index.
    pub dropped_reason: Vec<Option<DropReason>>,
}

impl Fitted<'_> {
    /// The reason layer `l`'s omission marker gives: the one reason all the dropped units it
    /// counts share, else [`SEVERAL_REASONS`]. (Units left out at the history's start have no
    /// marker: the report names them.)
    pub fn marker_reason(&self, l: RuntimeLayer) -> &'static str {
        let mut reasons = self
            .units
            .iter()
            .zip(&self.dropped_reason)
            .filter(|(unit, _)| unit.layer == l && unit.dropped)
            .filter_map(|(_, r)| *r)
            .filter(|r| *r != DropReason::HistoryStart);
        match reasons.next() {
            Some(first) if reasons.all(|r| r == first) => first.as_str(),
            Some(_) => SEVERAL_REASONS,
            None => DropReason::Budget.as_str(),
        }
    }
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

/// What does not change while units are fitted.
struct Rules<'r, 'm> {
    m: &'r Meter<'m>,
    settings: &'r Settings<'r>,
    framed: &'r Framed<'r>,
    /// The section cap.
    cap: Option<u64>,
    /// Each layer's omission marker's upper bound (tokens, characters).
    marker: PerLayer<(u64, u64)>,
    /// The smallest element of each layer: below this much room, nothing of it can fit.
    floors: PerLayer<u64>,
    min_floor: u64,
    /// Whether separate ASCII words each take a token of their own (ADR-0037).
    words_count: bool,
}

/// What fitting has used and decided so far.
struct Tally {
    /// Tokens and characters used, markers reserved included.
    used: (u64, u64),
    layer_used: PerLayer<u64>,
    /// Layers whose marker is reserved.
    reserved: PerLayer<bool>,
    drops: PerLayer<u64>,
    dropped_bytes: PerLayer<u64>,
    dropped_reason: Vec<Option<DropReason>>,
    /// Whether the one attempt at a cut unit was made.
    cut_tried: bool,
    /// Whether a layer gave its reservation back.
    released: bool,
}

/// Fit the candidates of `measured` into the budget of `framed`.
pub(super) fn fit<'a>(
    m: &Meter<'_>,
    measured: Measured<'a>,
    framed: &Framed<'_>,
) -> Result<Fitted<'a>, AssembleError> {
    let settings = &framed.settings;
    let Measured {
        mut cands,
        mut units,
        newest_user,
    } = measured;
    let cap = framed.budget.section_cap.map(u64::from);
    measure_sticky(m, &mut cands, &mut units, settings, cap);
    let whole_newest = newest_user.map(|c| cands[c].rendered().tokens);
    shrink_sticky(m, &mut cands, &mut units, settings, framed, newest_user);
    let sticky = sticky_fits(&cands, &units, framed, newest_user.zip(whole_newest))?;
    let order = keep_order(m, &units, sticky.fresh);
    let native = settings.provider.is_some();
    let floors = PerLayer::from_fn(|l| m.floor(l, settings.render.encoding(l), native));
    let rules = Rules {
        m,
        settings,
        framed,
        cap,
        marker: PerLayer::from_fn(|l| {
            let (n, b) = sticky.others[l];
            if n > 0 {
                // The most any marker of the layer can cost, whatever its reason.
                marker_reasons(
                    framed.budget.layers.get(l).is_some(),
                    framed.max_chars.is_some(),
                    cap.is_some(),
                )
                .iter()
                .map(|r| m.text_cost(&marker_text(l, n.max(10) * 10, b.max(10) * 10, r)))
                .fold((0, 0), |a, c| (a.0.max(c.0), a.1.max(c.1)))
            } else {
                (0, 0)
            }
        }),
        min_floor: floors.values().copied().min().unwrap_or(0),
        floors,
        words_count: m.splits_ascii_words(),
    };
    let mut tally = reserve_markers(&rules, sticky.used, sticky.layer_used, units.len());
    for (k, &u) in order.iter().enumerate() {
        let last_in_layer = order
            .get(k + 1)
            .is_none_or(|n| units[*n].layer != units[u].layer);
        fit_unit(&rules, &mut tally, &mut cands, &mut units, u, last_in_layer);
    }
    if tally.released {
        refill(&rules, &mut tally, &mut cands, &mut units, &order);
    }
    // A unit is filled when a more important one was dropped before it (ADR-0037).
    let mut dropped_before = false;
    for &u in &order {
        if units[u].dropped {
            dropped_before = true;
        } else {
            units[u].filled = dropped_before;
        }
    }
    for l in RuntimeLayer::ALL {
        if !tally.reserved[l] {
            tally.drops[l] = 0;
        }
    }
    if native {
        open_with_user(&cands, &mut units, &mut tally.dropped_reason);
    }
    Ok(Fitted {
        cands,
        units,
        drops: tally.drops,
        dropped_bytes: tally.dropped_bytes,
        dropped_reason: tally.dropped_reason,
    })
}

/// Measure candidate `cand` against `room` tokens, applying the section cap to sections that
/// are not sticky. On success the candidate holds its rendered element.
fn measure_member(
    m: &Meter<'_>,
    cand: &mut Cand<'_>,
    settings: &Settings<'_>,
    cap: Option<u64>,
    room: u64,
) -> Member {
    let native = settings.provider.is_some();
    // Measured afresh from the text as offered: a cut from an earlier pass (a unit dropped
    // after one member was cut to the cap) must not be rendered without its marker.
    cand.cut = None;
    let enc = settings.render.encoding(cand.section().layer());
    let cap = cap.filter(|_| !cand.sticky);
    let limit = cap.map_or(room, |c| c.min(room));
    if let Some(r) = m.probe(cand.section(), enc, native, limit) {
        cand.element = Some(r);
        return Member::Fits;
    }
    let Some(cap) = cap.filter(|c| *c <= room) else {
        return Member::Over;
    };
    // Over the cap (the probe had the whole room above it): cut to the cap.
    match m.cut_to(cand.base.get(), enc, cap, native) {
        Some(cut) => {
            // The whole form is counted only on request (ADR-0037).
            let full = settings
                .count_cut_sections
                .then(|| m.render(cand.base.get(), enc, None, native).tokens);
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

/// Measure sticky units in full: they must fit. Their members that are not sticky themselves
/// still obey the section cap.
fn measure_sticky(
    m: &Meter<'_>,
    cands: &mut [Cand<'_>],
    units: &mut [Unit],
    settings: &Settings<'_>,
    cap: Option<u64>,
) {
    let native = settings.provider.is_some();
    for u in units.iter_mut().filter(|u| u.sticky) {
        for &c in &u.members {
            match measure_member(m, &mut cands[c], settings, cap, u64::MAX) {
                Member::Fits => {}
                Member::Over | Member::Capped => {
                    // Not even an empty body fits the cap: keep it whole, as a sticky unit's
                    // member (the cap yields to stickiness).
                    let enc = settings.render.encoding(cands[c].section().layer());
                    cands[c].element = Some(m.render(cands[c].section(), enc, None, native));
                }
            }
            u.tokens += cands[c].rendered().tokens;
            u.chars += cands[c].rendered().chars;
        }
    }
}

/// Cut sticky content that may be cut until identity and the sticky units fit: a sticky tool
/// call keeps its result with it, and a result that is not sticky itself is cut, largest first,
/// rather than failing the request for its size. The newest user turn is cut last, to its head
/// and tail, and never below `MIN_CUT_TOKENS` of its own words (ADR-0030).
fn shrink_sticky(
    m: &Meter<'_>,
    cands: &mut [Cand<'_>],
    units: &mut [Unit],
    settings: &Settings<'_>,
    framed: &Framed<'_>,
    newest_user: Option<usize>,
) {
    let sticky: u64 = units.iter().filter(|u| u.sticky).map(|u| u.tokens).sum();
    let mut excess = (framed.base_tokens + sticky).saturating_sub(framed.fit_budget);
    if excess == 0 {
        return;
    }
    let native = settings.provider.is_some();
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
        let enc = settings.render.encoding(cands[c].section().layer());
        let to = have.saturating_sub(excess);
        // Always cut the text as offered, so the cut's place in it is known exactly.
        let cut = if Some(c) == newest_user {
            m.cut_section(cands[c].base.get(), enc, to, native)
                .filter(|k| {
                    m.tokenizer.count(k.section.content().as_str()) as u64 >= MIN_CUT_TOKENS
                })
        } else {
            m.cut_to(cands[c].base.get(), enc, to, native)
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

/// What the sticky units take, and what is left to fit.
struct Sticky {
    /// Tokens and characters of identity, frames and the sticky units.
    used: (u64, u64),
    /// Tokens of the sticky units per layer.
    layer_used: PerLayer<u64>,
    /// Per layer, the units that are not sticky and their bytes.
    others: PerLayer<(u64, u64)>,
    /// The units that are not sticky.
    fresh: Vec<usize>,
}

/// Check that identity and the sticky units fit (I2), in one pass over the units; `newest` is
/// the newest user turn's candidate with its whole count, which names the message as what does
/// not fit when the rest would (ADR-0030).
fn sticky_fits(
    cands: &[Cand<'_>],
    units: &[Unit],
    framed: &Framed<'_>,
    newest: Option<(usize, u64)>,
) -> Result<Sticky, AssembleError> {
    let (base_tokens, id_chars) = (framed.base_tokens, framed.identity.1);
    let fit_budget = framed.fit_budget;
    let (mut tokens, mut chars) = (0u64, 0u64);
    let mut layer_used = PerLayer::splat(0u64);
    let mut others = PerLayer::splat((0u64, 0u64));
    let mut fresh: Vec<usize> = Vec::with_capacity(units.len());
    for (i, u) in units.iter().enumerate() {
        if u.sticky {
            tokens += u.tokens;
            chars += u.chars;
            layer_used[u.layer] += u.tokens;
        } else {
            fresh.push(i);
            others[u.layer].0 += 1;
            others[u.layer].1 += u.bytes;
        }
    }
    if base_tokens + tokens > fit_budget {
        // Without the newest user turn, would the rest fit? Then the message is the problem,
        // and the caller is told so.
        if let Some((c, whole)) = newest {
            let rest = base_tokens + tokens - cands[c].rendered().tokens;
            if rest <= fit_budget {
                return Err(AssembleError::MessageTooLarge {
                    tokens: whole,
                    available: fit_budget - rest,
                    budget: fit_budget,
                    minimum: MIN_CUT_TOKENS,
                });
            }
        }
        return Err(AssembleError::StickyExceedsBudget {
            count: cands.iter().filter(|c| c.sticky).count(),
            needed: base_tokens + tokens,
            budget: fit_budget,
        });
    }
    if let Some(mc) = framed.max_chars.filter(|mc| id_chars + chars > *mc) {
        return Err(AssembleError::CharsExceeded {
            needed: id_chars + chars,
            limit: mc,
        });
    }
    Ok(Sticky {
        used: (base_tokens + tokens, id_chars + chars),
        layer_used,
        others,
        fresh,
    })
}

/// The units of `fresh` in keep order: lower layer first; inside a layer turns before other
/// sections, newest first, then the highest score, then the canonical order of selection (which
/// orders equal scores by id, so no string is compared here). The key ends with a unique
/// index, so the order is total: the engine may hand the sort the last call's order to start
/// from (a request that changed little is then nearly sorted), and the result is the same from
/// any start (ADR-0037).
fn keep_order(m: &Meter<'_>, units: &[Unit], fresh: Vec<usize>) -> Vec<usize> {
    let hint = m.memo.map(|e| e.take_keep_hint()).unwrap_or_default();
    let mut member = vec![false; units.len()];
    for &u in &fresh {
        member[u] = true;
    }
    let same = hint.len() == fresh.len()
        && hint
            .iter()
            .all(|&u| u < member.len() && std::mem::replace(&mut member[u], false));
    let mut order = if same { hint } else { fresh };
    // Keys read once per unit into one array (a unit is large and `order` visits units out of
    // place), then sorted with the unit.
    let mut keyed: Vec<(KeepKey, usize)> = order
        .iter()
        .map(|&i| {
            let u = &units[i];
            let key = (
                u.layer,
                Reverse(u.turn_seq.is_some()),
                Reverse(u.turn_seq.unwrap_or(0)),
                Reverse(u.score),
                u.first,
            );
            (key, i)
        })
        .collect();
    keyed.sort_by_key(|k| k.0);
    order.clear();
    order.extend(keyed.iter().map(|k| k.1));
    if let Some(e) = m.memo {
        e.keep_keep_hint(&order);
    }
    order
}

/// Reserve each layer's omission marker, from the most sections and bytes it could state,
/// where it fits after identity and the sticky units. A layer's reservation is held until the
/// layer is done, and given back if it drops nothing. Bounds that do not fit are left out,
/// highest layer first: those layers drop without a marker (the report still lists every
/// dropped section).
fn reserve_markers(
    rules: &Rules<'_, '_>,
    mut used: (u64, u64),
    layer_used: PerLayer<u64>,
    units: usize,
) -> Tally {
    let mut reserved = PerLayer::splat(false);
    let (fit_budget, max_chars) = (rules.framed.fit_budget, rules.framed.max_chars);
    for l in RuntimeLayer::ALL {
        let (t, c) = rules.marker[l];
        if t > 0 && used.0 + t <= fit_budget && max_chars.is_none_or(|mc| used.1 + c <= mc) {
            reserved[l] = true;
            used.0 += t;
            used.1 += c;
        }
    }
    Tally {
        used,
        layer_used,
        reserved,
        drops: PerLayer::splat(0),
        dropped_bytes: PerLayer::splat(0),
        dropped_reason: vec![None; units],
        cut_tried: false,
        released: false,
    }
}

/// A unit's lower bound of tokens, known without rendering it: its members' element floors
/// and, where separate words each take a token, its words (ADR-0037). A unit not measured yet
/// has its members as offered, whose words measuring counted; one measured may hold a cut
/// member, whose words are counted again. Other encodings rewrite the words, so they get none.
fn unit_floor(rules: &Rules<'_, '_>, unit: &Unit, cands: &[Cand<'_>]) -> u64 {
    let l = unit.layer;
    let words = if !(rules.words_count && rules.settings.render.encoding(l) == Encoding::Escaped) {
        0
    } else if unit.measured {
        unit.members
            .iter()
            .map(|c| cands[*c].section().ascii_words() as u64)
            .sum()
    } else {
        unit.words
    };
    unit.members.len() as u64 * rules.floors[l] + words
}

/// The room for a unit of layer `l`: in all, and within the layer's soft budget, with the
/// layer's marker reservation `give_back` usable by its last unit.
fn room_for(
    rules: &Rules<'_, '_>,
    tally: &Tally,
    l: RuntimeLayer,
    give_back: (u64, u64),
) -> (u64, u64) {
    let room_total = (rules.framed.fit_budget + give_back.0).saturating_sub(tally.used.0);
    let room_layer = rules.framed.budget.layers.get(l).map_or(u64::MAX, |lb| {
        let held = if tally.reserved[l] && give_back.0 == 0 {
            rules.marker[l].0
        } else {
            0
        };
        u64::from(lb).saturating_sub(tally.layer_used[l] + held)
    });
    (room_total, room_layer)
}

/// Measure every member of unit `u` in `room`: whether all fit, or why not.
fn measure_unit(
    rules: &Rules<'_, '_>,
    cands: &mut [Cand<'_>],
    units: &mut [Unit],
    u: usize,
    room: u64,
) -> Result<(), Member> {
    units[u].measured = true;
    let mut left = room;
    for &c in &units[u].members {
        match measure_member(rules.m, &mut cands[c], rules.settings, rules.cap, left) {
            Member::Fits => left -= cands[c].rendered().tokens.min(left),
            other => return Err(other),
        }
    }
    Ok(())
}

/// The tokens and characters of unit `u`'s members as rendered.
fn unit_cost(cands: &[Cand<'_>], unit: &Unit) -> (u64, u64) {
    unit.members.iter().fold((0, 0), |(t, ch), c| {
        (
            t + cands[*c].rendered().tokens,
            ch + cands[*c].rendered().chars,
        )
    })
}

/// Fit unit `u`, next in keep order: keep it whole if it fits, else in cut form if it is the
/// first that does not fit, else drop it; `last_in_layer` when no unit of its layer follows.
fn fit_unit(
    rules: &Rules<'_, '_>,
    tally: &mut Tally,
    cands: &mut [Cand<'_>],
    units: &mut [Unit],
    u: usize,
    last_in_layer: bool,
) {
    let l = units[u].layer;
    // The last unit of a layer that has dropped nothing may use the layer's marker
    // reservation: if it fits, no marker is needed.
    let give_back = if last_in_layer && tally.drops[l] == 0 && tally.reserved[l] {
        rules.marker[l]
    } else {
        (0, 0)
    };
    let (room_total, room_layer) = room_for(rules, tally, l, give_back);
    let room = room_total.min(room_layer);
    let max_chars = rules.framed.max_chars;
    let room_chars = max_chars.map(|mc| (mc + give_back.1).saturating_sub(tally.used.1));
    let why = if room_layer < room_total {
        DropReason::LayerBudget
    } else {
        DropReason::Budget
    };
    // Past the point where nothing fits, a unit costs this one comparison.
    let mut verdict = if room < rules.min_floor || unit_floor(rules, &units[u], cands) > room {
        Err(why)
    } else {
        match measure_unit(rules, cands, units, u, room) {
            Ok(()) => Ok(()),
            Err(Member::Capped) => Err(DropReason::SectionCap),
            Err(_) => Err(why),
        }
    };
    let mut cost = (0, 0);
    if verdict.is_ok() {
        cost = unit_cost(cands, &units[u]);
        if room_chars.is_some_and(|rc| cost.1 > rc) {
            verdict = Err(DropReason::MaxTotalChars);
        }
    }
    if verdict == Err(why) && !tally.cut_tried {
        if let Some(kept) = try_cut(rules, tally, cands, units, u, room) {
            cost = kept;
            verdict = Ok(());
        }
    }
    settle(tally, &mut units[u], u, verdict.map(|()| cost));
    if last_in_layer && tally.drops[l] == 0 && tally.reserved[l] {
        // Nothing dropped here: no marker, so its reservation is given back.
        tally.reserved[l] = false;
        tally.released = true;
        tally.used.0 -= rules.marker[l].0;
        tally.used.1 -= rules.marker[l].1;
    }
}

/// Record the verdict on unit `u`: kept at `cost`, or dropped for a reason.
fn settle(tally: &mut Tally, unit: &mut Unit, u: usize, verdict: Result<(u64, u64), DropReason>) {
    let l = unit.layer;
    match verdict {
        Ok(cost) => {
            tally.used.0 += cost.0;
            tally.used.1 += cost.1;
            tally.layer_used[l] += cost.0;
            unit.tokens = cost.0;
            unit.chars = cost.1;
        }
        Err(reason) => {
            unit.dropped = true;
            tally.drops[l] += 1;
            tally.dropped_bytes[l] += unit.bytes;
            tally.dropped_reason[u] = Some(reason);
        }
    }
}

/// Keep unit `u`, the first that does not fit, in cut form in `room`: its one member cut, or
/// for a tool call with its result, the member with the most content that may be cut, after the
/// others are measured in that room (whole, or cut to the section cap). A unit of one member
/// takes the one attempt whether or not it can be cut; a pair only once a cut is tried, so a
/// pair that cannot be kept leaves the attempt to the next unit. The cost kept, if kept.
fn try_cut(
    rules: &Rules<'_, '_>,
    tally: &mut Tally,
    cands: &mut [Cand<'_>],
    units: &mut [Unit],
    u: usize,
    room: u64,
) -> Option<(u64, u64)> {
    let (m, settings) = (rules.m, rules.settings);
    let native = settings.provider.is_some();
    let single = units[u].members.len() == 1;
    tally.cut_tried = single;
    units[u].measured = true;
    let c = units[u]
        .members
        .iter()
        .copied()
        .filter(|&c| single || !native || cuttable_natively(cands[c].base.get()))
        .max_by_key(|&c| (cands[c].base.get().content().len(), Reverse(c)))?;
    let (left, others) = measure_beside_cut(rules, cands, &units[u], c, room)?;
    tally.cut_tried = true;
    let enc = settings.render.encoding(units[u].layer);
    // A member that is not sticky obeys the section cap in cut form too.
    let to = rules
        .cap
        .filter(|_| !cands[c].sticky)
        .map_or(left, |k| k.min(left));
    let cut = m.cut_to(cands[c].base.get(), enc, to, native)?;
    let r = cut.rendered;
    let max_chars = rules.framed.max_chars;
    if max_chars.is_some_and(|mc| tally.used.1 + others.1 + r.chars > mc) {
        return None;
    }
    // The whole form is counted only on request (ADR-0037).
    let full = settings
        .count_cut_sections
        .then(|| m.render(cands[c].base.get(), enc, None, native).tokens);
    let full = cands[c].cut.as_ref().map_or(full, |k| k.full);
    cands[c].cut = Some(Box::new(CutForm {
        section: cut.section,
        at: cut.at,
        full,
    }));
    let cost = (others.0 + r.tokens, others.1 + r.chars);
    cands[c].element = Some(r);
    Some(cost)
}

/// Measure the members of `unit` other than `cut` in `room` less `MIN_CUT_TOKENS`: the room
/// left for the cut member and what the others take, if that leaves at least
/// `MIN_CUT_TOKENS`.
fn measure_beside_cut(
    rules: &Rules<'_, '_>,
    cands: &mut [Cand<'_>],
    unit: &Unit,
    cut: usize,
    room: u64,
) -> Option<(u64, (u64, u64))> {
    if room < MIN_CUT_TOKENS {
        return None;
    }
    let mut left = room;
    let mut others = (0u64, 0u64);
    for &c in unit.members.iter().filter(|&&c| c != cut) {
        let limit = left.saturating_sub(MIN_CUT_TOKENS);
        if measure_member(rules.m, &mut cands[c], rules.settings, rules.cap, limit) != Member::Fits
        {
            return None;
        }
        let r = cands[c].rendered();
        left -= r.tokens;
        others = (others.0 + r.tokens, others.1 + r.chars);
    }
    (left >= MIN_CUT_TOKENS).then_some((left, others))
}

/// Offer the reservations given back, held while the layers before them were fitted, in keep
/// order to the units dropped for the budget meanwhile.
fn refill(
    rules: &Rules<'_, '_>,
    tally: &mut Tally,
    cands: &mut [Cand<'_>],
    units: &mut [Unit],
    order: &[usize],
) {
    for &u in order {
        if tally.dropped_reason[u] != Some(DropReason::Budget) {
            continue;
        }
        let l = units[u].layer;
        let (room_total, room_layer) = room_for(rules, tally, l, (0, 0));
        let room = room_total.min(room_layer);
        if room < rules.min_floor || unit_floor(rules, &units[u], cands) > room {
            continue;
        }
        let fits = measure_unit(rules, cands, units, u, room).is_ok();
        let cost = unit_cost(cands, &units[u]);
        let max_chars = rules.framed.max_chars;
        if !fits || max_chars.is_some_and(|mc| tally.used.1 + cost.1 > mc) {
            continue;
        }
        units[u].dropped = false;
        units[u].tokens = cost.0;
        units[u].chars = cost.1;
        tally.dropped_reason[u] = None;
        tally.drops[l] -= 1;
        tally.dropped_bytes[l] -= units[u].bytes;
        tally.used.0 += cost.0;
        tally.used.1 += cost.1;
        tally.layer_used[l] += cost.0;
        if tally.drops[l] == 0 && tally.reserved[l] {
            tally.reserved[l] = false;
            tally.used.0 -= rules.marker[l].0;
            tally.used.1 -= rules.marker[l].1;
        }
    }
}

/// Where no stable context leads a provider request, drop the history turns kept before its
/// first user turn (`history_start`): providers want the conversation to open with the user.
/// A turn's unit goes whole (a tool call with its result).
fn open_with_user(
    cands: &[Cand<'_>],
    units: &mut [Unit],
    dropped_reason: &mut [Option<DropReason>],
) {
    let kept = |c: &Cand<'_>| !units[c.unit].dropped;
    let stable_leads = cands
        .iter()
        .any(|c| kept(c) && c.turn().is_none() && c.section().stability() == Stability::Stable);
    if stable_leads {
        return;
    }
    let mut turns: Vec<usize> = (0..cands.len())
        .filter(|&c| kept(&cands[c]) && cands[c].turn().is_some())
        .collect();
    turns.sort_by_cached_key(|&c| {
        (
            cands[c].turn().map_or(0, |t| t.seq),
            cands[c].section().id().clone(),
        )
    });
    for c in turns {
        let u = cands[c].unit;
        if cands[c].turn().map(|t| t.role) == Some(Role::User) {
            break;
        }
        if !units[u].dropped {
            units[u].dropped = true;
            dropped_reason[u] = Some(DropReason::HistoryStart);
        }
    }
}
