//! Stage 2 of assembly: select the sections that take part in this mode and path, in the
//! canonical order, resolve conflicts on id or key for the higher layer (identity always wins;
//! I4, ADR-0007), and for a provider request check the history's tool pairs and leave out empty
//! turns (ADR-0015).
//!
//! Hand-off: [`Selected`], the winning sections with the reports and conflicts of the losers.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;

use strata_agentdef::VerifiedAgent;
use strata_core::{IdentitySection, Layer, Role, RuntimeLayer, Section, SectionId};

use super::frame::Settings;
use super::pairs::check_pairs;
use super::reasoning::check_reasoning;
use super::{history_turn, report_of};
use crate::assemble::FastMap;
use crate::error::AssembleError;
use crate::report::{Conflict, FilterReason, SectionReport, SectionStatus};

/// The sections that take part, after filtering and conflicts.
pub(super) struct Selected<'a> {
    /// Winners, in the canonical conflict order (borrowed: sections are large to move).
    pub winners: Vec<&'a Section>,
    /// Reports of the sections filtered or overridden.
    pub reports: Vec<SectionReport>,
    /// Conflicts resolved for the higher layer.
    pub conflicts: Vec<Conflict>,
    /// Whether the ids were known distinct from the last call (see [`SelectHint`]).
    pub ids_known: bool,
}

/// What one call of [`select`] leaves for the next (ADR-0037).
#[derive(Default)]
pub(in crate::assemble) struct SelectHint {
    /// The canonical order, as positions in the sections that took part: where the next sort
    /// starts. Only a starting point: the sort's result is the same from any start.
    perm: Vec<usize>,
    /// The ids of the sections that took part, in the canonical order, with their digests, and
    /// the ids of the identity they were checked against, when no two of them were equal. A
    /// fact, not a starting point: a call whose identity ids and ordered ids are equal to
    /// these, text for text, has pairwise distinct ids too, so it loses no section on its id
    /// and needs no table of ids.
    distinct: Option<DistinctIds>,
}

/// Ids known to be pairwise distinct (see [`SelectHint::distinct`]).
struct DistinctIds {
    identity: Vec<SectionId>,
    ids: Vec<(u64, SectionId)>,
}

impl DistinctIds {
    /// Whether `live` (in canonical order) under `identity` has exactly these ids.
    fn hold_for(&self, identity: &[strata_core::IdentitySection], live: &[&Section]) -> bool {
        self.identity.len() == identity.len()
            && self.ids.len() == live.len()
            && self.identity.iter().zip(identity).all(|(a, b)| a == b.id())
            && self
                .ids
                .iter()
                .zip(live)
                .all(|((d, id), s)| *d == s.id_digest() && id == s.id())
    }
}

/// Select the sections of `input` that take part in the request's mode and path, and resolve
/// conflicts on id or key for the higher layer (identity always wins; I4, ADR-0007). For a
/// provider-native request, also check the tool pairs and leave out empty turns (ADR-0015).
/// `hint` is where the engine lets the canonical order's sort start and what it knows of the
/// ids; the result does not depend on it.
pub(super) fn select<'a>(
    agent: &VerifiedAgent,
    settings: &Settings<'_>,
    input: Vec<&'a Section>,
    hint: &mut SelectHint,
) -> Result<Selected<'a>, AssembleError> {
    let mut reports: Vec<SectionReport> = Vec::new();
    let mut live = Vec::with_capacity(input.len());
    for s in input {
        let reason = if !s.modes().contains(settings.mode) {
            Some(FilterReason::Mode)
        } else if !s.paths().contains(settings.path) {
            Some(FilterReason::Path)
        } else {
            None
        };
        match reason {
            Some(reason) => reports.push(report_of(s, false, SectionStatus::Filtered { reason })),
            None => live.push(s),
        }
    }
    let repeated_shape = hint.perm.len() == live.len();
    let start = if repeated_shape {
        std::mem::take(&mut hint.perm)
    } else {
        (0..live.len()).collect()
    };
    hint.perm = canonical_order(&live, start);
    let live: Vec<&'a Section> = hint.perm.iter().map(|&i| live[i]).collect();
    let identity = agent.identity().sections();
    // Ids known distinct from the last call: no section can lose on its id (see
    // `SelectHint::distinct`), so only keys are checked. Otherwise every id is recorded.
    let ids_known = hint
        .distinct
        .as_ref()
        .is_some_and(|d| d.hold_for(identity, &live));
    let (mut winners, conflicts) = resolve_conflicts(identity, &live, ids_known, &mut reports);
    // From the second call with as many sections on, the next call may skip the ids' table
    // (a first call, as from a new assembler, pays for no copy of the ids).
    hint.distinct = if ids_known {
        hint.distinct.take()
    } else {
        (winners.len() == live.len() && repeated_shape).then(|| DistinctIds {
            identity: identity.iter().map(|s| s.id().clone()).collect(),
            ids: live
                .iter()
                .map(|s| (s.id_digest(), s.id().clone()))
                .collect(),
        })
    };
    if settings.provider.is_some() {
        winners = check_pairs(winners, settings.provider_options.pairs, &mut reports)?;
        if let Some(p) = settings.provider {
            check_reasoning(&winners, p)?;
        }
        winners = drop_empty_turns(winners, &mut reports);
    }
    Ok(Selected {
        winners,
        reports,
        conflicts,
        ids_known,
    })
}

/// The canonical order of `live` for conflict resolution, as positions: higher layer first,
/// then score, id, hash, and the input position, so the order is total and does not depend on
/// `start`, the permutation the sort starts from. The engine hands over the last call's order,
/// so a request that changed little is already sorted or nearly, which the sort detects in
/// about one comparison per section (ADR-0037).
fn canonical_order(live: &[&Section], start: Vec<usize>) -> Vec<usize> {
    // Sort compact keys (layer, score, position), read once per section, then order each run
    // of equal layer and score by id and hash: strings are compared only inside such runs.
    // Where layer, score and position fit in 64 bits (scores below 2^48 with 10,000
    // sections), each key is one integer in that order, which sorts faster than the tuple.
    let raw: Vec<(RuntimeLayer, u64)> = live.iter().map(|s| (s.layer(), s.score())).collect();
    let max_score = raw.iter().map(|r| r.1).max().unwrap_or(0);
    let pos_bits = usize::BITS - live.len().leading_zeros();
    let score_bits = u64::BITS - max_score.leading_zeros();
    let mut perm: Vec<usize> = start;
    // Per position in the sorted order, the (layer, score) it sorted by, as a value that is
    // equal exactly when both are.
    let group: Vec<(u64, u64)> = if 2 + score_bits + pos_bits <= u64::BITS {
        let mut keys: Vec<u64> = perm
            .iter()
            .map(|&i| {
                let (layer, score) = raw[i];
                ((layer.index() as u64) << 62) | ((max_score - score) << pos_bits) | i as u64
            })
            .collect();
        keys.sort_unstable();
        perm.clear();
        perm.extend(keys.iter().map(|k| (k & ((1u64 << pos_bits) - 1)) as usize));
        keys.iter().map(|k| (0, k >> pos_bits)).collect()
    } else {
        let mut keys: Vec<(RuntimeLayer, Reverse<u64>, usize)> = perm
            .iter()
            .map(|&i| (raw[i].0, Reverse(raw[i].1), i))
            .collect();
        keys.sort_unstable();
        perm.clear();
        perm.extend(keys.iter().map(|k| k.2));
        keys.iter().map(|k| (k.0.index() as u64, k.1 .0)).collect()
    };
    let mut run = 0;
    while run < perm.len() {
        let mut end = run + 1;
        while end < perm.len() && group[end] == group[run] {
            end += 1;
        }
        if end - run > 1 {
            perm[run..end].sort_by(|&a, &b| {
                let (x, y) = (live[a], live[b]);
                x.id()
                    .cmp(y.id())
                    .then_with(|| x.content_hash().cmp(&y.content_hash()))
                    .then(a.cmp(&b))
            });
        }
        run = end;
    }
    perm
}

/// Where a winning section's id is recorded.
enum Slot<'m, 'a> {
    Digest(std::collections::hash_map::VacantEntry<'m, u64, (Layer, &'a str)>),
    Text(std::collections::hash_map::VacantEntry<'m, &'a str, Layer>),
}

/// The ids and keys claimed so far, identity's first. Ids are found by the digest each section
/// keeps of its id, so an id's text is read only where two digests are equal (a real conflict,
/// or a collision, which goes to a map keyed by the text); keys by their text, borrowed. No
/// string is copied or compared in order and no reference count is touched per section
/// (ADR-0037).
struct Claims<'a> {
    by_key: FastMap<&'a str, (Layer, &'a SectionId)>,
    by_id: FastMap<u64, (Layer, &'a str)>,
    /// Ids whose digest another id already holds.
    collided: FastMap<&'a str, Layer>,
}

impl<'a> Claims<'a> {
    /// The claims of identity; its ids are recorded unless `ids_known`.
    fn of_identity(identity: &'a [IdentitySection], ids_known: bool, n: usize) -> Claims<'a> {
        let mut c = Claims {
            by_key: FastMap::default(),
            by_id: FastMap::with_capacity_and_hasher(
                if ids_known { 0 } else { n },
                Default::default(),
            ),
            collided: FastMap::default(),
        };
        for s in identity {
            if let Some(k) = s.key() {
                c.by_key.insert(k.as_str(), (s.layer().into(), s.id()));
            }
            if ids_known {
                continue;
            }
            let id = s.id().as_str();
            match c.by_id.entry(strata_core::id_digest(id)) {
                Entry::Vacant(v) => {
                    v.insert((s.layer().into(), id));
                }
                Entry::Occupied(o) if o.get().1 == id => {}
                Entry::Occupied(_) => {
                    c.collided.insert(id, s.layer().into());
                }
            }
        }
        c
    }

    /// Claim the id and key of `s`: the winner it loses to, with what was contested, or `None`
    /// when it wins (and its claims are recorded). With `ids_known`, ids are not looked up.
    fn claim(&mut self, s: &'a Section, ids_known: bool) -> Option<((Layer, SectionId), String)> {
        let id = s.id().as_str();
        let lost_id = |l: Layer| Err(((l, s.id().clone()), format!("id:{}", s.id())));
        let slot = if ids_known {
            Ok(None)
        } else {
            match self.by_id.entry(s.id_digest()) {
                Entry::Vacant(v) => Ok(Some(Slot::Digest(v))),
                Entry::Occupied(o) if o.get().1 == id => lost_id(o.get().0),
                Entry::Occupied(_) => match self.collided.entry(id) {
                    Entry::Occupied(o) => lost_id(*o.get()),
                    Entry::Vacant(v) => Ok(Some(Slot::Text(v))),
                },
            }
        };
        let slot = match slot {
            Err(lost) => return Some(lost),
            Ok(slot) => slot,
        };
        if let Some(k) = s.key() {
            if let Some(w) = self.by_key.get(k.as_str()) {
                return Some(((w.0, w.1.clone()), k.to_string()));
            }
        }
        match slot {
            Some(Slot::Digest(v)) => {
                v.insert((s.layer().into(), id));
            }
            Some(Slot::Text(v)) => {
                v.insert(s.layer().into());
            }
            None => {}
        }
        if let Some(k) = s.key() {
            self.by_key.insert(k.as_str(), (s.layer().into(), s.id()));
        }
        None
    }
}

/// Resolve conflicts: in canonical order, a section whose id or key is already claimed (by
/// identity, or a section before it) loses to the claimant and is reported; the higher layer
/// wins, identity always (I4, ADR-0007). The winners, and the conflicts.
fn resolve_conflicts<'a>(
    identity: &[IdentitySection],
    live: &[&'a Section],
    ids_known: bool,
    reports: &mut Vec<SectionReport>,
) -> (Vec<&'a Section>, Vec<Conflict>) {
    let mut claims = Claims::of_identity(identity, ids_known, live.len());
    let mut winners = Vec::with_capacity(live.len());
    let mut conflicts = Vec::new();
    for &s in live {
        let Some(((wl, wid), on)) = claims.claim(s, ids_known) else {
            winners.push(s);
            continue;
        };
        conflicts.push(Conflict {
            on: on.clone(),
            winner: (wl, wid.to_string()),
            loser: (s.layer().into(), s.id().to_string()),
        });
        let status = SectionStatus::Overridden {
            by_layer: wl,
            by_id: wid.to_string(),
            on,
        };
        reports.push(report_of(s, false, status));
    }
    (winners, conflicts)
}

/// Providers refuse empty text blocks: a user or assistant turn with nothing to say is left
/// out and reported (ADR-0015).
fn drop_empty_turns<'a>(
    mut winners: Vec<&'a Section>,
    reports: &mut Vec<SectionReport>,
) -> Vec<&'a Section> {
    winners.retain(|s| {
        let empty = history_turn(s).is_some_and(|t| matches!(t.role, Role::User | Role::Assistant))
            && s.content().as_str().trim().is_empty();
        if empty {
            let status = SectionStatus::Filtered {
                reason: FilterReason::Empty,
            };
            reports.push(report_of(s, false, status));
        }
        !empty
    });
    winners
}

/// Native turns that are the user's or the agent's own words are never cut; fenced data and
/// tool results may be (ADR-0015).
pub(in crate::assemble) fn cuttable_natively(s: &Section) -> bool {
    match history_turn(s) {
        Some(t) => t.role == Role::ToolResult,
        None => true,
    }
}
