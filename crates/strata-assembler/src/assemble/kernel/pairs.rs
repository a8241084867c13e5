//! The tool pairs of a provider request's history, part of selection (ADR-0015): every tool
//! call has a name, an id, JSON-object arguments and exactly one result after it, with no user
//! or assistant turn in between; every result answers a call.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use strata_core::{Role, Section};

use super::{history_turn, report_of};
use crate::error::AssembleError;
use crate::provider::PairPolicy;
use crate::report::{FilterReason, SectionReport, SectionStatus};

/// Sequence numbers of tool turns by call id.
type BySeq = BTreeMap<Arc<str>, u64>;

/// Check the working-memory history of a provider-native request. Unpaired turns fail the
/// assembly, or are filtered under [`PairPolicy::DropUnpaired`] and reported.
pub(super) fn check_pairs<'a>(
    winners: Vec<&'a Section>,
    policy: PairPolicy,
    reports: &mut Vec<SectionReport>,
) -> Result<Vec<&'a Section>, AssembleError> {
    let (calls, results) = tool_turns(&winners)?;
    let mut unpaired: BTreeSet<Arc<str>> = BTreeSet::new();
    for (id, seq) in &calls {
        match results.get(id) {
            Some(r) if r > seq => {}
            Some(_) => {
                return Err(history(format!(
                    "the result of tool call `{id}` comes before the call"
                )))
            }
            None => {
                unpaired.insert(id.clone());
            }
        }
    }
    unpaired.extend(
        results
            .keys()
            .filter(|id| !calls.contains_key(*id))
            .cloned(),
    );
    if let (Some(id), PairPolicy::Error) = (unpaired.iter().next(), policy) {
        return Err(history(format!(
            "tool call `{id}` has no {}; record the missing turn, or leave unpaired tool turns out with `--drop-unpaired`",
            if calls.contains_key(id) { "result" } else { "call" }
        )));
    }
    nothing_between(&winners, &unpaired)?;
    let mut out = Vec::with_capacity(winners.len());
    for s in winners {
        let drop = history_turn(s)
            .and_then(|t| t.call_id.as_ref())
            .is_some_and(|c| unpaired.contains(c));
        if drop {
            let status = SectionStatus::Filtered {
                reason: FilterReason::Unpaired,
            };
            reports.push(report_of(s, false, status));
        } else {
            out.push(s);
        }
    }
    Ok(out)
}

fn history(why: String) -> AssembleError {
    AssembleError::History { why }
}

/// The tool calls and results of `winners` by call id, each checked on its own.
fn tool_turns(winners: &[&Section]) -> Result<(BySeq, BySeq), AssembleError> {
    let mut calls = BySeq::new();
    let mut results = BySeq::new();
    let dup = |what: &str, id: &str| {
        history(format!(
            "two tool {what}s share the call id `{id}`; call ids must be unique in a session"
        ))
    };
    for s in winners {
        let Some(t) = history_turn(s) else { continue };
        match t.role {
            Role::ToolCall => {
                let id = t
                    .call_id
                    .clone()
                    .ok_or_else(|| history(format!("tool call `{}` has no call id", s.id())))?;
                if t.name.is_none() {
                    return Err(history(format!("tool call `{}` has no tool name", s.id())));
                }
                match serde_json::from_str::<serde_json::Value>(s.content().as_str()) {
                    Ok(v) if v.is_object() => {}
                    _ => {
                        return Err(history(format!(
                            "tool call `{}` has arguments that are not a JSON object",
                            s.id()
                        )))
                    }
                }
                if calls.insert(id.clone(), t.seq).is_some() {
                    return Err(dup("call", &id));
                }
            }
            Role::ToolResult => {
                let id = t
                    .call_id
                    .clone()
                    .ok_or_else(|| history(format!("tool result `{}` has no call id", s.id())))?;
                if results.insert(id.clone(), t.seq).is_some() {
                    return Err(dup("result", &id));
                }
            }
            Role::User | Role::Assistant => {}
        }
    }
    Ok((calls, results))
}

/// No user or assistant turn may stand between a call and its result (unpaired turns aside).
fn nothing_between(
    winners: &[&Section],
    unpaired: &BTreeSet<Arc<str>>,
) -> Result<(), AssembleError> {
    let mut turns: Vec<(u64, Role, Option<Arc<str>>)> = winners
        .iter()
        .filter_map(|s| history_turn(s).map(|t| (t.seq, t.role, t.call_id.clone())))
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
                    return Err(history(format!(
                        "turn {seq} stands between tool call `{c}` and its result; results must follow their calls"
                    )));
                }
            }
        }
    }
    Ok(())
}
