//! The model's reasoning in a provider request's history (ADR-0043), part of selection and
//! measuring: which blocks a request may carry, and which it does.
//!
//! A block is sent back unchanged (its provider checks it), so it is refused rather than
//! changed: a block of another provider's format, on a turn that is not the agent's, or holding
//! a form of the wire format fails the assembly. Blocks are sent only while their tool loop
//! lasts, on the agent's turns after the newest user turn, which is where both providers
//! require them; older turns are sent without them. What is sent is counted with its turn.

use strata_core::{Reasoning, Role, Section, Turn};

use super::history_turn;
use super::measure::newest_user_turn;
use crate::error::AssembleError;
use crate::provider::Provider;

/// Refuse a history whose reasoning `provider`'s request cannot carry unchanged: reasoning on
/// a turn that is not the agent's, anywhere; a block that would be sent but is another
/// provider's or holds a form of the wire format.
pub(super) fn check_reasoning(
    winners: &[&Section],
    provider: Provider,
) -> Result<(), AssembleError> {
    let newest_user = newest_user_turn(winners).and_then(|i| history_turn(winners[i]));
    let newest_seq = newest_user.map(|t| t.seq);
    for s in winners {
        let Some(t) = history_turn(s).filter(|t| !t.reasoning.is_empty()) else {
            continue;
        };
        if !matches!(t.role, Role::Assistant | Role::ToolCall) {
            return Err(refused(
                s,
                "only the agent's words and tool calls carry reasoning",
            ));
        }
        if is_sent(t, true, newest_seq) {
            for r in &t.reasoning {
                check_block(s, r, provider)?;
            }
        }
    }
    Ok(())
}

fn check_block(s: &Section, r: &Reasoning, provider: Provider) -> Result<(), AssembleError> {
    let wanted = r.format().provider_name();
    if wanted != provider.name() {
        return Err(refused(
            s,
            &format!(
                "a `{}` block goes back to {wanted} only, and this request is for {}",
                r.type_name(),
                provider.name()
            ),
        ));
    }
    if r.holds_wire_form() {
        return Err(refused(
            s,
            &format!(
                "its `{}` block holds a form of the wire format and cannot be changed; leave the block out",
                r.type_name()
            ),
        ));
    }
    Ok(())
}

fn refused(s: &Section, why: &str) -> AssembleError {
    AssembleError::History {
        why: format!("turn `{}` has reasoning it cannot send: {why}", s.id()),
    }
}

/// Whether the reasoning of `turn` is sent: in a provider request, on a turn after the newest
/// user turn (`newest_user_seq`, when there is one).
pub(super) fn is_sent(turn: &Turn, native: bool, newest_user_seq: Option<u64>) -> bool {
    native
        && matches!(turn.role, Role::Assistant | Role::ToolCall)
        && newest_user_seq.is_none_or(|u| turn.seq > u)
}

/// `s` without the reasoning of its turn, when it has some that is not sent.
pub(super) fn without_unsent(
    s: &Section,
    native: bool,
    newest_user_seq: Option<u64>,
) -> Option<Section> {
    let t = history_turn(s).filter(|t| !t.reasoning.is_empty())?;
    if is_sent(t, native, newest_user_seq) {
        return None;
    }
    Some(s.with_turn(Turn {
        reasoning: Vec::new(),
        ..t.clone()
    }))
}
