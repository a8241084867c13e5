//! Fuzz target: goal markers parsed from the assistant's own output (ADR-0011). The parser is
//! total, applying markers never panics, and a locked decision never changes afterwards.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_registry::{AssistantOutput, GoalManager};
use strata_registry::goals::parse_markers;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let output = AssistantOutput::new(text.as_ref());
    let _ = parse_markers(&output);
    let goals = GoalManager::in_memory();
    let first = AssistantOutput::new("[GOAL] keep secrets\n[DECISION] Never share credentials - LOCKED\n");
    if goals.apply(&first).is_err() {
        return;
    }
    let before = goals.active_goal().map(|g| g.decisions.iter().filter(|d| d.locked).map(|d| d.description.clone()).collect::<Vec<_>>());
    let _ = goals.apply(&output);
    if let (Some(before), Some(goal)) = (before, goals.goal(&goals.history().first().map(|g| g.id.clone()).unwrap_or_default())) {
        for locked in before {
            assert!(goal.decisions.iter().any(|d| d.locked && d.description == locked), "locked decision `{locked}` changed");
        }
    }
});
