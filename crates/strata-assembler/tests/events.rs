//! What a turn changes for its session, told in the turn and to the registry's subscribers
//! (ADR-0045), as the Prompts System's events describe: the prompt is updated whenever the
//! stable prefix changes (identity, tools, goals, the operational template), a session's mode
//! change is announced, and a turn that changes nothing, or is refused, announces nothing.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;

use strata_assembler::session::TurnEvent;
use strata_assembler::{assemble::*, prelude::*, session::*};

fn runtime(dir: &Path) -> Runtime {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
        .build()
        .unwrap()
}

fn mode(m: OperationalMode) -> TurnOptions {
    TurnOptions {
        operational_mode: Some(m),
        ..TurnOptions::default()
    }
}

/// Prompts System, events: "system prompt updated" fires for a goal change and for a changed
/// operational template, not for a turn that only adds to the history; "mode changed" fires
/// from sessions, once per change, in the turn and to subscribers.
#[test]
fn goal_and_mode_changes_are_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let events = rt.registry().subscribe();
    let s = rt.session("s1");
    let first = s
        .prepare("Plan the release.", &mode(OperationalMode::Assistant))
        .unwrap();
    assert!(
        matches!(first.events[..], [TurnEvent::PromptUpdated { .. }]),
        "{:?}",
        first.events
    );
    s.record_reply(&Reply::text("Ok.")).unwrap();
    let same = s
        .prepare("Go on.", &mode(OperationalMode::Assistant))
        .unwrap();
    assert_eq!(same.events, vec![], "nothing stable changed");
    s.record_reply(&Reply::text("Ok.")).unwrap();

    // A goal is part of the stable context.
    s.goals()
        .unwrap()
        .create_goal("Ship version 2", GoalPriority::High)
        .unwrap();
    let goal = s
        .prepare("What is the goal?", &mode(OperationalMode::Assistant))
        .unwrap();
    assert!(turn_wire(&goal).contains("Ship version 2"));
    assert!(
        matches!(goal.events[..], [TurnEvent::PromptUpdated { .. }]),
        "{:?}",
        goal.events
    );
    s.record_reply(&Reply::text("Ok.")).unwrap();

    // Another operational mode: its template changes the prefix, and the mode change is told.
    let dev = s
        .prepare("Now debug it.", &mode(OperationalMode::Developer))
        .unwrap();
    assert!(
        dev.events.contains(&TurnEvent::ModeChanged {
            from: OperationalMode::Assistant,
            to: OperationalMode::Developer
        }),
        "{:?}",
        dev.events
    );
    s.record_reply(&Reply::text("Ok.")).unwrap();

    // A refused turn announces nothing and remembers nothing.
    let tiny = TurnOptions {
        context_window: Some(64),
        ..mode(OperationalMode::Planning)
    };
    assert!(s.prepare("refused", &tiny).is_err());
    let again = s
        .prepare("Still debugging.", &mode(OperationalMode::Developer))
        .unwrap();
    assert_eq!(again.events, vec![]);

    let got: Vec<RegistryEvent> = events
        .try_iter()
        .filter(|e| {
            matches!(
                e,
                RegistryEvent::SystemPromptUpdated { .. }
                    | RegistryEvent::SessionModeChanged { .. }
            )
        })
        .collect();
    let modes: Vec<&RegistryEvent> = got
        .iter()
        .filter(|e| matches!(e, RegistryEvent::SessionModeChanged { .. }))
        .collect();
    assert_eq!(modes.len(), 1, "{got:?}");
    assert!(matches!(
        modes[0],
        RegistryEvent::SessionModeChanged { session, from: OperationalMode::Assistant, to: OperationalMode::Developer }
            if &**session == "s1"
    ));
    let prompts = got.len() - modes.len();
    let told: usize = [&first, &goal, &dev]
        .iter()
        .map(|t| {
            t.events
                .iter()
                .filter(|e| matches!(e, TurnEvent::PromptUpdated { .. }))
                .count()
        })
        .sum();
    assert_eq!(prompts, told, "{got:?}");
}

fn turn_wire(t: &PreparedTurn) -> String {
    t.body.to_string()
}
