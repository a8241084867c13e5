//! Stage 4 of assembly: fit the budget. Identity and sticky sections must fit or the assembly
//! fails (I2); then whole units are dropped, lowest layer first, per-layer soft budgets before
//! the total, with each layer's omission marker reserved once it drops anything; finally the
//! slack re-adds the last dropped section in cut form (ADR-0008).
//!
//! Hand-off: [`Fitted`], the drops per layer and the reason of each dropped unit; the units of
//! [`Measured`] are marked dropped in place.

use std::cmp::Reverse;
use std::collections::HashMap;

use strata_core::{Budget, RuntimeLayer};

use super::measure::Measured;
use super::{marker_text, Assembler, Unit, MIN_CUT_TOKENS};
use crate::error::AssembleError;
use crate::request::AssemblyRequest;

/// What fitting decided.
pub(super) struct Fitted {
    /// Units dropped per layer (for the omission markers).
    pub drops: [u64; 4],
    /// Why each dropped unit was dropped.
    pub dropped_reason: HashMap<usize, &'static str>,
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

impl Assembler {
    /// Fit the measured candidates into `limits`.
    pub(super) fn fit(
        &self,
        m: &mut Measured,
        req: &AssemblyRequest,
        budget: &Budget,
        limits: &Limits,
    ) -> Result<Fitted, AssembleError> {
        let native = req.provider;
        let (fit_budget, max_chars) = (limits.fit_budget, limits.max_chars);
        let (base_tokens, id_chars) = limits.base;
        let Measured { cands, units } = m;
        // A sticky tool call keeps its result with it; a result that is not sticky itself is
        // cut, largest first, rather than failing the request for its size.
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
                .filter(|c| !cands[*c].sticky)
                .collect();
            shrinkable.sort_by_key(|c| Reverse(cands[*c].rendered.tokens));
            for c in shrinkable {
                if excess == 0 {
                    break;
                }
                let have = cands[c].rendered.tokens;
                let enc = req.render.encodings[cands[c].section.layer().index()];
                let Some((cut, r)) = self.cut_to(
                    &cands[c].section,
                    enc,
                    have.saturating_sub(excess),
                    native.is_some(),
                ) else {
                    continue;
                };
                let u = cands[c].unit;
                units[u].tokens = units[u].tokens - have + r.tokens;
                units[u].chars = units[u].chars - cands[c].rendered.chars + r.chars;
                excess = excess.saturating_sub(have - r.tokens);
                cands[c].cut_from = Some(cands[c].cut_from.unwrap_or(have));
                cands[c].section = cut;
                cands[c].rendered = r;
            }
        }
        // Sticky sections must fit with identity, or the assembly fails (I2).
        let sticky_tokens: u64 = units.iter().filter(|u| u.sticky).map(|u| u.tokens).sum();
        let sticky_chars: u64 = units.iter().filter(|u| u.sticky).map(|u| u.chars).sum();
        let sticky_count = cands.iter().filter(|c| c.sticky).count();
        if base_tokens + sticky_tokens > fit_budget {
            return Err(AssembleError::StickyExceedsBudget {
                count: sticky_count,
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

        // Upper bounds of each layer's omission marker, reserved once the layer drops anything.
        let mut marker_bound = [(0u64, 0u64); 4];
        for l in RuntimeLayer::ALL {
            let n = units.iter().filter(|u| u.layer == l).count() as u64;
            let t: u64 = units
                .iter()
                .filter(|u| u.layer == l)
                .map(|u| u.tokens)
                .sum();
            if n > 0 {
                marker_bound[l.index()] =
                    self.text_cost(&marker_text(l, n.max(10) * 10, t.max(10) * 10));
            }
        }

        // Removal order: lowest layer first; inside a layer the lowest score first, and for
        // working-memory turns the oldest first (a tool call and its result go together).
        let mut order: Vec<usize> = (0..units.len()).filter(|u| !units[*u].sticky).collect();
        order.sort_by(|a, b| {
            let (ua, ub) = (&units[*a], &units[*b]);
            let ka = (
                Reverse(ua.layer),
                ua.turn_seq.is_some(),
                ua.turn_seq.unwrap_or(0),
                ua.score,
            );
            let kb = (
                Reverse(ub.layer),
                ub.turn_seq.is_some(),
                ub.turn_seq.unwrap_or(0),
                ub.score,
            );
            ka.cmp(&kb).then_with(|| ub.first_id.cmp(&ua.first_id))
        });

        let mut tally = Tally {
            tokens: [0; 4],
            chars: [0; 4],
            drops: [0; 4],
            base: (base_tokens, id_chars),
            marker: marker_bound,
            markers: true,
        };
        for u in units.iter() {
            tally.tokens[u.layer.index()] += u.tokens;
            tally.chars[u.layer.index()] += u.chars;
        }
        let mut dropped_reason: HashMap<usize, &'static str> = HashMap::new();

        // Per-layer soft budgets.
        for l in RuntimeLayer::ALL {
            let Some(lb) = budget.layers.get(l).map(u64::from) else {
                continue;
            };
            let in_layer: Vec<usize> = order
                .iter()
                .copied()
                .filter(|u| units[*u].layer == l)
                .collect();
            for u in in_layer {
                if tally.layer_used(l) <= lb {
                    break;
                }
                tally.drop(&mut units[u]);
                dropped_reason.insert(u, "layer_budget");
            }
        }
        // The total budget and the character cap.
        let fits = |(t, c): (u64, u64)| t <= fit_budget && max_chars.is_none_or(|mc| c <= mc);
        let mut last_budget_drop = None;
        for &u in &order {
            let (t, _) = tally.total();
            if fits(tally.total()) {
                break;
            }
            if units[u].dropped {
                continue;
            }
            tally.drop(&mut units[u]);
            dropped_reason.insert(
                u,
                if t > fit_budget {
                    "budget"
                } else {
                    "max_total_chars"
                },
            );
            last_budget_drop = Some(u);
        }
        // Everything that may go has gone; if only the omission markers are left over, leave
        // them out (the report still lists every dropped section) rather than fail.
        let mut markers = true;
        if !fits(tally.total()) {
            tally.markers = false;
            if fits(tally.total()) {
                markers = false;
            } else {
                tally.markers = true;
            }
        }
        if !fits(tally.total()) {
            return Err(AssembleError::StickyExceedsBudget {
                count: sticky_count,
                needed: tally.total().0,
                budget: fit_budget,
            });
        }

        // Use the slack: re-add the last dropped single section in cut form.
        if let Some(u) = last_budget_drop.filter(|u| units[*u].members.len() == 1) {
            let i = units[u].layer.index();
            let mut trial = tally.clone();
            trial.undrop_marker(units[u].layer);
            let (t, c) = trial.total();
            let slack = fit_budget.saturating_sub(t);
            if slack >= MIN_CUT_TOKENS {
                let ci = units[u].members[0];
                let enc = req.render.encodings[i];
                if let Some((cut, r)) =
                    self.cut_to(&cands[ci].section, enc, slack, native.is_some())
                {
                    if max_chars.is_none_or(|mc| c + r.chars <= mc) {
                        let full = cands[ci].rendered.tokens;
                        cands[ci].section = cut;
                        cands[ci].cut_from = Some(cands[ci].cut_from.unwrap_or(full));
                        cands[ci].rendered = r.clone();
                        units[u].dropped = false;
                        units[u].tokens = r.tokens;
                        units[u].chars = r.chars;
                        tally = trial;
                        tally.tokens[i] += r.tokens;
                        tally.chars[i] += r.chars;
                        dropped_reason.remove(&u);
                    }
                }
            }
        }
        Ok(Fitted {
            drops: if markers { tally.drops } else { [0; 4] },
            dropped_reason,
        })
    }
}

/// Running totals of the trimming loop: tokens and characters kept per layer, drops per layer,
/// identity cost, and the reserved upper bound of each layer's omission marker.
#[derive(Clone)]
struct Tally {
    tokens: [u64; 4],
    chars: [u64; 4],
    drops: [u64; 4],
    base: (u64, u64),
    marker: [(u64, u64); 4],
    /// Whether omission markers are written (and so counted).
    markers: bool,
}

impl Tally {
    fn total(&self) -> (u64, u64) {
        let (mut t, mut c) = self.base;
        for i in 0..4 {
            t += self.tokens[i];
            c += self.chars[i];
            if self.markers && self.drops[i] > 0 {
                t += self.marker[i].0;
                c += self.marker[i].1;
            }
        }
        (t, c)
    }

    fn layer_used(&self, l: RuntimeLayer) -> u64 {
        let i = l.index();
        self.tokens[i]
            + if self.markers && self.drops[i] > 0 {
                self.marker[i].0
            } else {
                0
            }
    }

    fn drop(&mut self, unit: &mut Unit) {
        unit.dropped = true;
        let i = unit.layer.index();
        self.tokens[i] -= unit.tokens;
        self.chars[i] -= unit.chars;
        self.drops[i] += 1;
    }

    /// Count one drop of layer `l` as undone (the unit's cost is added back by the caller).
    fn undrop_marker(&mut self, l: RuntimeLayer) {
        self.drops[l.index()] -= 1;
    }
}
