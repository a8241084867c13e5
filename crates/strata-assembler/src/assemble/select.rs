//! Stages 1-2 of assembly: narrow the tools, select the sections that take part in this mode
//! and path, resolve conflicts for the higher layer, and check a native history's tool pairs.
//!
//! Hand-off: [`Selected`], the winning sections with the reports and conflicts of the losers.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use strata_agentdef::VerifiedAgent;
use strata_core::{
    Layer, Phase, Role, RuntimeLayer, Section, SectionId, SourceKind, Stability, ToolName,
    ToolPolicy, ToolSchema,
};

use super::{report_of, schema, FastMap, TOOL_CATALOG_ID, TOOL_CATALOG_KEY};
use crate::error::AssembleError;
use crate::provider::{PairPolicy, RequestTool, ToolDescriptions};
use crate::report::{
    Conflict, FilterReason, SchemaTextRemoved, SectionReport, SectionStatus, ToolsReport,
};
use crate::request::AssemblyRequest;

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

/// What one call of [`select`] leaves for the next (ADR-0024).
#[derive(Default)]
pub(super) struct SelectHint {
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
pub(super) fn select<'a>(
    agent: &VerifiedAgent,
    req: &AssemblyRequest,
    input: Vec<&'a Section>,
    hint: &mut SelectHint,
) -> Result<Selected<'a>, AssembleError> {
    let native = req.provider;
    let opts = &req.provider_options;
    let mut reports: Vec<SectionReport> = Vec::new();
    let mut conflicts = Vec::new();
    // Mode and path filtering.
    let mut live = Vec::new();
    for s in input {
        let reason = if !s.modes().contains(req.mode) {
            Some(FilterReason::Mode)
        } else if !s.paths().contains(req.path) {
            Some(FilterReason::Path)
        } else {
            None
        };
        match reason {
            Some(r) => reports.push(report_of(s, false, SectionStatus::Filtered { reason: r })),
            None => live.push(s),
        }
    }

    // Canonical order for conflict resolution: higher layer first, then score, id, hash, and
    // the input position, so the order is total and does not depend on where the sort starts.
    // The sort starts from the previous call's order (`hint`, when it has the same length):
    // a request that changed little is then already sorted or nearly, which the sort detects
    // in about one comparison per section (ADR-0024). The result is the same from any start.
    let repeated_shape = hint.perm.len() == live.len();
    let start: Vec<usize> = if repeated_shape {
        std::mem::take(&mut hint.perm)
    } else {
        (0..live.len()).collect()
    };
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
    let live: Vec<&'a Section> = perm.iter().map(|&i| live[i]).collect();
    hint.perm = perm;
    let n = live.len();
    let identity = agent.identity();
    // Ids known distinct from the last call: no section can lose on its id (see
    // `SelectHint::distinct`), so only keys are checked. Otherwise every id is recorded.
    let ids_distinct = hint
        .distinct
        .as_ref()
        .is_some_and(|d| d.hold_for(identity.sections(), &live));
    if !ids_distinct {
        hint.distinct = None;
    }

    // Conflicts: the higher layer wins; identity always wins (I4, ADR-0007). Ids are found by
    // the digest each section keeps of its id, so an id's text is read only where two digests
    // are equal (a real conflict, or a collision, which goes to a map keyed by the text);
    // keys by their text, borrowed. No string is copied or compared in order and no reference
    // count is touched per section (ADR-0024), but once, on the second call of a request's
    // shape, to keep the ids that the calls after it compare in place of the table.
    let mut by_key: FastMap<&str, (Layer, &SectionId)> = FastMap::default();
    let mut by_id: FastMap<u64, (Layer, &str)> =
        FastMap::with_capacity_and_hasher(if ids_distinct { 0 } else { n }, Default::default());
    // Ids whose digest another id already holds.
    let mut collided: FastMap<&str, Layer> = FastMap::default();
    for s in identity.sections() {
        if let Some(k) = s.key() {
            by_key.insert(k.as_str(), (s.layer().into(), s.id()));
        }
        if ids_distinct {
            continue;
        }
        let id = s.id().as_str();
        match by_id.entry(strata_core::id_digest(id)) {
            Entry::Vacant(v) => {
                v.insert((s.layer().into(), id));
            }
            Entry::Occupied(o) if o.get().1 == id => {}
            Entry::Occupied(_) => {
                collided.insert(id, s.layer().into());
            }
        }
    }
    /// Where a winning section's id is recorded.
    enum Slot<'m, 'a> {
        Digest(std::collections::hash_map::VacantEntry<'m, u64, (Layer, &'a str)>),
        Text(std::collections::hash_map::VacantEntry<'m, &'a str, Layer>),
    }
    let mut winners = Vec::with_capacity(n);
    // Whether every section won, each recording its id: then the ids were pairwise distinct.
    let mut all_won = true;
    for &s in &live {
        // One lookup of the id's digest per section: the entry is looked up once, and filled
        // only if the section wins.
        let id = s.id().as_str();
        let lost_id = |l: Layer| Err(((l, s.id().clone()), format!("id:{}", s.id())));
        let slot = if ids_distinct {
            Ok(None)
        } else {
            match by_id.entry(s.id_digest()) {
                Entry::Vacant(v) => Ok(Some(Slot::Digest(v))),
                Entry::Occupied(o) if o.get().1 == id => lost_id(o.get().0),
                Entry::Occupied(_) => match collided.entry(id) {
                    Entry::Occupied(o) => lost_id(*o.get()),
                    Entry::Vacant(v) => Ok(Some(Slot::Text(v))),
                },
            }
        };
        let lost = match slot {
            Err(lost) => Some(lost),
            Ok(v) => match s.key().and_then(|k| {
                by_key
                    .get(k.as_str())
                    .map(|w| ((w.0, w.1.clone()), k.to_string()))
            }) {
                Some(lost) => Some(lost),
                None => {
                    match v {
                        Some(Slot::Digest(v)) => {
                            v.insert((s.layer().into(), id));
                        }
                        Some(Slot::Text(v)) => {
                            v.insert(s.layer().into());
                        }
                        None => {}
                    }
                    None
                }
            },
        };
        if let Some(((wl, wid), on)) = lost {
            all_won = false;
            conflicts.push(Conflict {
                on: on.clone(),
                winner: (wl, wid.to_string()),
                loser: (s.layer().into(), s.id().to_string()),
            });
            reports.push(report_of(
                s,
                false,
                SectionStatus::Overridden {
                    by_layer: wl,
                    by_id: wid.to_string(),
                    on,
                },
            ));
            continue;
        }
        if let Some(k) = s.key() {
            by_key.insert(k.as_str(), (s.layer().into(), s.id()));
        }
        winners.push(s);
    }
    // From the second call with as many sections on, the next call may skip the ids' table
    // (a first call, as from a new assembler, pays for no copy of the ids).
    if all_won && !ids_distinct && repeated_shape {
        hint.distinct = Some(DistinctIds {
            identity: identity.sections().iter().map(|s| s.id().clone()).collect(),
            ids: live
                .iter()
                .map(|s| (s.id_digest(), s.id().clone()))
                .collect(),
        });
    }
    if native.is_some() {
        winners = check_pairs(winners, opts.pairs, &mut reports)?;
        // Providers refuse empty text blocks: a user or assistant turn with nothing to say
        // is left out and reported (ADR-0015).
        winners.retain(|s| {
            let empty = s
                .turn()
                .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
                .is_some_and(|t| matches!(t.role, Role::User | Role::Assistant))
                && s.content().as_str().trim().is_empty();
            if empty {
                reports.push(report_of(
                    s,
                    false,
                    SectionStatus::Filtered {
                        reason: FilterReason::Empty,
                    },
                ));
            }
            !empty
        });
    }

    Ok(Selected {
        winners,
        reports,
        conflicts,
        ids_known: ids_distinct,
    })
}

/// Narrow the tool set: layer 1's allowlist, intersected with the caller's policy, intersected
/// with what is announced (I4, ADR-0007). A tool whose signed entry pins a schema is refused when
/// the announcement carries another schema or another description ("definition changed");
/// otherwise it takes the announced schema, stripped of its free text unless the policy is
/// [`ToolDescriptions::AnnouncedDangerously`], and refused when a name in it is not an
/// identifier (ADR-0032). Descriptions follow [`ToolDescriptions`]: by default the signed one
/// replaces the announced one (ADR-0015). For the plain-text format the effective tools are also
/// listed in a fenced layer-3 catalog section.
pub(super) fn narrow_tools(
    agent: &VerifiedAgent,
    req: &AssemblyRequest,
) -> (ToolsReport, Option<Section>, Vec<RequestTool>) {
    let identity = agent.identity();
    let policy = req.provider_options.tool_descriptions;
    let mut report = ToolsReport::default();
    if let ToolPolicy::Only(set) = &req.tool_policy {
        for name in set {
            if !identity.allows(name) {
                report.refused.push((
                    name.to_string(),
                    "not in layer 1's allowlist; delegated context cannot widen it".into(),
                ));
            }
        }
    }
    let mut effective: BTreeMap<ToolName, RequestTool> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for t in &req.tools {
        if !seen.insert(t.name.clone()) {
            report.refused.push((
                t.name.to_string(),
                "announced more than once; the first announcement is used".into(),
            ));
            continue;
        }
        let by = t
            .server
            .as_deref()
            .map_or_else(|| "the runtime".to_owned(), |s| format!("MCP server `{s}`"));
        let Some(signed) = identity.tools().iter().find(|a| a.name == t.name) else {
            report.refused.push((
                t.name.to_string(),
                format!("announced by {by} but not in layer 1's allowlist"),
            ));
            continue;
        };
        if !req.tool_policy.permits(&t.name) {
            report.refused.push((
                t.name.to_string(),
                "restricted by the delegated tool policy".into(),
            ));
            continue;
        }
        let (parameters, schema_source) = match (&signed.parameters, &t.parameters) {
            (Some(pinned), Some(announced)) if pinned != announced => {
                report.refused.push((
                    t.name.to_string(),
                    format!(
                        "definition changed: {by} announced a schema ({}) that differs from the signed one ({})",
                        announced.digest(),
                        pinned.digest()
                    ),
                ));
                continue;
            }
            (Some(pinned), _) => {
                let announced = t.description.as_str();
                if !announced.is_empty() && announced != signed.description {
                    report.refused.push((
                        t.name.to_string(),
                        format!("definition changed: {by} announced a description that differs from the signed one"),
                    ));
                    continue;
                }
                (pinned.clone(), "signed")
            }
            // The announced schema is data: offered as announced only under the loud policy;
            // otherwise its structure without its free text, and what was removed is
            // reported (ADR-0032).
            (None, Some(announced)) => match policy {
                ToolDescriptions::AnnouncedDangerously => (announced.clone(), "announced"),
                ToolDescriptions::Signed | ToolDescriptions::Withheld => {
                    match schema::strip(&announced.to_value()) {
                        Ok(stripped) => {
                            let Ok(parameters) = ToolSchema::from_value(&stripped.schema) else {
                                // Not reached: stripping keeps the announced object an object.
                                report.refused.push((
                                    t.name.to_string(),
                                    format!("{by} announced a schema that is not an object"),
                                ));
                                continue;
                            };
                            if !stripped.removed.is_empty() {
                                report.schema_text_removed.push(SchemaTextRemoved {
                                    tool: t.name.clone(),
                                    paths: stripped.removed,
                                });
                            }
                            (parameters, "announced")
                        }
                        Err(bad) => {
                            report.refused.push((
                                t.name.to_string(),
                                format!(
                                    "{by} announced a schema with a name at `{}` that is not an identifier ({}); rename it, or pin the schema in the signed definition",
                                    bad.path,
                                    schema::IDENTIFIER_PATTERN
                                ),
                            ));
                            continue;
                        }
                    }
                }
            },
            (None, None) => (empty_schema(), "none"),
        };
        let description = match policy {
            ToolDescriptions::Signed => signed.description.clone(),
            ToolDescriptions::Withheld => String::new(),
            ToolDescriptions::AnnouncedDangerously => t.description.as_str().to_owned(),
        };
        effective.insert(
            t.name.clone(),
            RequestTool {
                name: t.name.clone(),
                description,
                parameters,
                schema_source: schema_source.to_owned(),
            },
        );
    }
    report.refused.sort();
    report
        .schema_text_removed
        .sort_by(|a, b| a.tool.cmp(&b.tool));
    report.effective = effective.keys().cloned().collect();
    let tools: Vec<RequestTool> = effective.into_values().collect();
    if tools.is_empty() {
        return (report, None, tools);
    }
    let body: Vec<String> = tools
        .iter()
        .map(|t| {
            if t.description.is_empty() {
                format!("- {}", t.name)
            } else {
                format!("- {}: {}", t.name, t.description)
            }
        })
        .collect();
    let section = Section::builder(
        RuntimeLayer::Shared,
        TOOL_CATALOG_ID,
        format!("Tools available now:\n{}", body.join("\n")),
    )
    .and_then(|b| b.key(TOOL_CATALOG_KEY))
    .map(|b| {
        // The highest priority: among layer-3 catalogs claiming the key, this one wins (I4).
        // Sticky: derived from the signed allowlist, it is protected like the signed text.
        b.phase(Phase::Tools)
            .stability(Stability::Stable)
            .sticky(true)
            .priority(u32::MAX)
            .source(SourceKind::Static, "assembler")
            .build()
    })
    .ok();
    (report, section, tools)
}

/// `{"type":"object","properties":{}}`: the schema of a tool whose arguments nobody described.
fn empty_schema() -> ToolSchema {
    let v = serde_json::json!({ "type": "object", "properties": {} });
    ToolSchema::from_value(&v).expect("an object literal is a tool schema")
}

/// Native turns that are the user's or the agent's own words are never cut; fenced data and
/// tool results may be (ADR-0015).
pub(super) fn cuttable_natively(s: &Section) -> bool {
    match s
        .turn()
        .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
    {
        Some(t) => t.role == Role::ToolResult,
        None => true,
    }
}

/// Check the working-memory history of a provider-native request: every tool call has a name,
/// an id, JSON-object arguments and exactly one result after it, with no user or assistant turn
/// in between; every result answers a call. Unpaired turns fail the assembly, or are filtered
/// under [`PairPolicy::DropUnpaired`] (ADR-0015).
fn check_pairs<'a>(
    winners: Vec<&'a Section>,
    policy: PairPolicy,
    reports: &mut Vec<SectionReport>,
) -> Result<Vec<&'a Section>, AssembleError> {
    let turn_of = |s: &Section| {
        s.turn()
            .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
            .cloned()
    };
    let mut calls: BTreeMap<Arc<str>, u64> = BTreeMap::new();
    let mut results: BTreeMap<Arc<str>, u64> = BTreeMap::new();
    for s in &winners {
        let Some(t) = turn_of(s) else { continue };
        let dup = |what: &str, id: &str| AssembleError::History {
            why: format!(
                "two tool {what}s share the call id `{id}`; call ids must be unique in a session"
            ),
        };
        match t.role {
            Role::ToolCall => {
                let id = t.call_id.clone().ok_or_else(|| AssembleError::History {
                    why: format!("tool call `{}` has no call id", s.id()),
                })?;
                if t.name.is_none() {
                    return Err(AssembleError::History {
                        why: format!("tool call `{}` has no tool name", s.id()),
                    });
                }
                match serde_json::from_str::<serde_json::Value>(s.content().as_str()) {
                    Ok(v) if v.is_object() => {}
                    _ => {
                        return Err(AssembleError::History {
                            why: format!(
                                "tool call `{}` has arguments that are not a JSON object",
                                s.id()
                            ),
                        })
                    }
                }
                if calls.insert(id.clone(), t.seq).is_some() {
                    return Err(dup("call", &id));
                }
            }
            Role::ToolResult => {
                let id = t.call_id.clone().ok_or_else(|| AssembleError::History {
                    why: format!("tool result `{}` has no call id", s.id()),
                })?;
                if results.insert(id.clone(), t.seq).is_some() {
                    return Err(dup("result", &id));
                }
            }
            Role::User | Role::Assistant => {}
        }
    }
    let mut unpaired: BTreeSet<Arc<str>> = BTreeSet::new();
    for (id, seq) in &calls {
        match results.get(id) {
            Some(r) if r > seq => {}
            Some(_) => {
                return Err(AssembleError::History {
                    why: format!("the result of tool call `{id}` comes before the call"),
                })
            }
            None => {
                unpaired.insert(id.clone());
            }
        }
    }
    for id in results.keys() {
        if !calls.contains_key(id) {
            unpaired.insert(id.clone());
        }
    }
    if let (Some(id), PairPolicy::Error) = (unpaired.iter().next(), policy) {
        return Err(AssembleError::History {
            why: format!(
                "tool call `{id}` has no {}; record the missing turn, or leave unpaired tool turns out with `--drop-unpaired`",
                if calls.contains_key(id) { "result" } else { "call" }
            ),
        });
    }
    // No user or assistant turn may stand between a call and its result.
    let mut turns: Vec<(u64, Role, Option<Arc<str>>)> = winners
        .iter()
        .filter_map(|s| turn_of(s).map(|t| (t.seq, t.role, t.call_id)))
        .filter(|(_, _, c)| c.as_ref().is_none_or(|c| !unpaired.contains(c)))
        .collect();
    turns.sort();
    let mut pending: BTreeSet<Arc<str>> = BTreeSet::new();
    for (seq, role, call) in turns {
        match (role, call) {
            (Role::ToolCall, Some(c)) => {
                pending.insert(c);
            }
            (Role::ToolResult, Some(c)) => {
                pending.remove(&c);
            }
            _ => {
                if let Some(c) = pending.iter().next() {
                    return Err(AssembleError::History {
                        why: format!("turn {seq} stands between tool call `{c}` and its result; results must follow their calls"),
                    });
                }
            }
        }
    }
    let mut out = Vec::with_capacity(winners.len());
    for s in winners {
        let drop = turn_of(s)
            .and_then(|t| t.call_id)
            .is_some_and(|c| unpaired.contains(&c));
        if drop {
            reports.push(report_of(
                s,
                false,
                SectionStatus::Filtered {
                    reason: FilterReason::Unpaired,
                },
            ));
        } else {
            out.push(s);
        }
    }
    Ok(out)
}
