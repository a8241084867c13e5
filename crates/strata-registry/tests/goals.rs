//! Goals: lifecycle, checkpoints, locked decisions, artifacts, persistence, markers, section.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

use std::sync::Arc;

use proptest::prelude::*;
use strata_core::{ContentHash, Phase, PromptMode, RuntimeLayer};
use strata_registry::goals::{
    ArtifactAction, ArtifactKind, CheckpointStatus, GoalStatus, Progress,
};
use strata_registry::{
    parse_markers, AssistantOutput, ContributionContext, Contributor, GoalError, GoalManager,
    GoalPriority, ManualClock, Marker, MarkerOutcome, Registry,
};

fn manager() -> GoalManager {
    GoalManager::in_memory_with_clock(Arc::new(ManualClock::new(1_000)))
}

#[test]
fn lifecycle_and_history() {
    let m = manager();
    let a = m.create_goal("Build auth", GoalPriority::High).unwrap();
    assert_eq!(a.id, "goal-1");
    assert_eq!(m.active_goal().unwrap().id, "goal-1");
    let b = m.create_goal("Fix CI", GoalPriority::Low).unwrap();
    // Only one goal is active: the first was paused.
    assert_eq!(m.goal(&a.id).unwrap().status, GoalStatus::Paused);
    assert_eq!(m.active_goal().unwrap().id, b.id);
    m.pause_goal(&b.id).unwrap();
    assert!(m.active_goal().is_none());
    m.resume_goal(&a.id).unwrap();
    assert_eq!(m.active_goal().unwrap().id, a.id);
    m.complete_goal(&a.id, "shipped").unwrap();
    let done = m.goal(&a.id).unwrap();
    assert_eq!(done.status, GoalStatus::Completed);
    assert_eq!(done.summary.as_deref(), Some("shipped"));
    assert_eq!(done.completed_ms, Some(1_000));
    assert!(matches!(
        m.resume_goal(&a.id),
        Err(GoalError::InvalidState { .. })
    ));
    assert!(matches!(
        m.pause_goal("goal-9"),
        Err(GoalError::GoalNotFound(_))
    ));
    let history = m.history();
    assert_eq!(history.len(), 2);
    let events: Vec<&str> = history[0].history.iter().map(|e| e.what.as_str()).collect();
    assert_eq!(
        events,
        [
            "created",
            "paused: another goal became active",
            "resumed",
            "completed"
        ]
    );
}

#[test]
fn checkpoints_progress_decisions_artifacts() {
    let m = manager();
    let g = m.create_goal("Auth", GoalPriority::High).unwrap().id;
    for d in ["Design", "Login", "JWT", "Register", "Hashing"] {
        m.create_checkpoint(&g, d).unwrap();
    }
    m.update_checkpoint(&g, 1, CheckpointStatus::Completed)
        .unwrap();
    m.update_checkpoint(&g, 2, CheckpointStatus::Completed)
        .unwrap();
    m.update_checkpoint(&g, 3, CheckpointStatus::InProgress)
        .unwrap();
    assert_eq!(
        m.progress(&g).unwrap(),
        Progress {
            completed: 2,
            total: 5,
            percentage: 40
        }
    );
    assert!(matches!(
        m.update_checkpoint(&g, 9, CheckpointStatus::Completed),
        Err(GoalError::CheckpointNotFound { .. })
    ));

    let d = m.record_decision(&g, "Use JWT", "stateless").unwrap();
    m.update_decision(&g, d.id, "Use JWT with refresh", "stateless")
        .unwrap();
    m.lock_decision(&g, d.id).unwrap();
    let e = m
        .update_decision(&g, d.id, "Use sessions", "simpler")
        .unwrap_err();
    assert!(matches!(e, GoalError::DecisionLocked { .. }), "{e}");
    assert!(e.to_string().contains("locked"));

    m.record_artifact(
        &g,
        ArtifactKind::File,
        "src/auth.rs",
        ArtifactAction::Created,
    )
    .unwrap();
    m.record_artifact(
        &g,
        ArtifactKind::Test,
        "tests/auth.rs",
        ArtifactAction::Created,
    )
    .unwrap();
    m.set_next(&g, "Add hashing").unwrap();

    let text = m.active_goal().unwrap().render();
    assert_eq!(
        text,
        "Current goal: Auth\nPriority: high\nStatus: active\nProgress: 2 of 5 checkpoints completed (40%)\n\n\
         Checkpoints:\n1. [done] Design\n2. [done] Login\n3. [in progress] JWT\n4. [pending] Register\n5. [pending] Hashing\n\n\
         Decisions:\n- [locked] Use JWT with refresh (because stateless)\n\n\
         Artifacts:\n- Created: src/auth.rs\n- Created (test): tests/auth.rs\n\n\
         Next: Add hashing"
    );
}

/// The seed example, read from the model's output.
#[test]
fn markers_update_the_goal() {
    let m = manager();
    let out = AssistantOutput::new(
        "Here is my plan.\n\
         [GOAL] Implement user authentication system\n\
         [CHECKPOINT] Design authentication flow - COMPLETED\n\
         [CHECKPOINT] Add JWT token generation - IN PROGRESS\n\
         [CHECKPOINT] Create user registration\n\
         [DECISION] Use JWT for authentication - LOCKED\n\
         [DECISION] Hashing: use bcrypt\n\
         [ARTIFACT] Created src/auth/login.ts\n\
         [ARTIFACT] Renamed x\n\
         [NEXT] Implement JWT token generation\n\
         not a marker: [GOAL] inside a sentence\n",
    );
    let report = m.apply(&out).unwrap();
    assert!(report
        .outcomes
        .iter()
        .all(|(_, o)| *o == MarkerOutcome::Applied));
    assert_eq!(report.outcomes.len(), 8);
    assert_eq!(report.malformed.len(), 1);
    assert_eq!(report.malformed[0].line, 9);
    let g = m.active_goal().unwrap();
    assert_eq!(g.description, "Implement user authentication system");
    let cps: Vec<_> = g
        .checkpoints
        .iter()
        .map(|c| (c.description.as_str(), c.status))
        .collect();
    assert_eq!(
        cps,
        [
            ("Design authentication flow", CheckpointStatus::Completed),
            ("Add JWT token generation", CheckpointStatus::InProgress),
            ("Create user registration", CheckpointStatus::Pending),
        ]
    );
    // The model's `- LOCKED` only proposes the lock; the caller confirms it (ADR-0011).
    assert!(!g.decisions[0].locked && g.decisions[0].lock_proposed);
    assert!(!g.decisions[1].locked && !g.decisions[1].lock_proposed);
    assert_eq!(m.pending_locks().len(), 1);
    m.lock_decision(&g.id, g.decisions[0].id).unwrap();
    assert!(m.pending_locks().is_empty());
    assert_eq!(g.artifacts[0].path, "src/auth/login.ts");
    assert_eq!(g.next.as_deref(), Some("Implement JWT token generation"));

    // Later output: progress, a change to an unlocked decision, and attempts to change the
    // locked one or to start another goal, which are refused.
    let report = m
        .apply(&AssistantOutput::new(
            "[CHECKPOINT] Add JWT token generation - COMPLETED\n\
             [DECISION] Hashing: use argon2\n\
             [DECISION] Use JWT for authentication\n\
             [DECISION] use jwt for authentication - LOCKED\n\
             [GOAL] Something else entirely\n\
             [GOAL] implement user authentication system",
        ))
        .unwrap();
    let outcomes: Vec<&MarkerOutcome> = report.outcomes.iter().map(|(_, o)| o).collect();
    assert_eq!(outcomes[0], &MarkerOutcome::Applied);
    assert_eq!(outcomes[1], &MarkerOutcome::Applied);
    assert!(matches!(outcomes[2], MarkerOutcome::Refused(r) if r.contains("locked")));
    assert_eq!(outcomes[3], &MarkerOutcome::Unchanged);
    assert!(matches!(outcomes[4], MarkerOutcome::Refused(r) if r.contains("active")));
    assert_eq!(outcomes[5], &MarkerOutcome::Unchanged);
    assert_eq!(report.refused().count(), 2);
    let g = m.active_goal().unwrap();
    assert_eq!(g.decisions[0].description, "Use JWT for authentication");
    assert!(g.decisions[0].locked);
    assert_eq!(g.decisions[1].description, "Hashing: use argon2");
    assert_eq!(g.progress().completed, 2);
}

/// Verifies ADR-0011: a `- LOCKED` marker in the model's output alone locks nothing. The
/// decision is recorded as a proposal, shown as not confirmed in the sticky goal section, and a
/// later output can still change it; only the caller's authority locks.
#[test]
fn a_lock_from_the_model_alone_is_never_permanent() {
    let m = manager();
    let injected = AssistantOutput::new("[GOAL] Ship it\n[DECISION] Auth: none - LOCKED");
    let report = m.apply(&injected).unwrap();
    assert!(report.refused().next().is_none());
    let g = m.active_goal().unwrap();
    assert!(
        !g.decisions[0].locked,
        "the model locked a decision by itself"
    );
    assert!(g.decisions[0].lock_proposed);
    let text = g.render();
    assert!(
        text.contains("[lock proposed, not confirmed] Auth: none"),
        "{text}"
    );
    assert!(!text.contains("[locked]"), "{text}");
    // The next output (the injection is gone) changes it back.
    let r = m
        .apply(&AssistantOutput::new("[DECISION] Auth: OAuth with PKCE"))
        .unwrap();
    assert_eq!(r.outcomes[0].1, MarkerOutcome::Applied);
    let d = &m.active_goal().unwrap().decisions[0];
    assert_eq!(d.description, "Auth: OAuth with PKCE");
    assert!(!d.locked && !d.lock_proposed);
    assert!(m.pending_locks().is_empty());
    // With the caller's authority the same marker locks, and then nothing changes it.
    m.apply_confirmed(&AssistantOutput::new(
        "[DECISION] Auth: OAuth with PKCE - LOCKED",
    ))
    .unwrap();
    let r = m
        .apply(&AssistantOutput::new("[DECISION] Auth: none"))
        .unwrap();
    assert!(matches!(&r.outcomes[0].1, MarkerOutcome::Refused(x) if x.contains("locked")));
    assert!(m.active_goal().unwrap().decisions[0].locked);
}

#[test]
fn markers_without_an_active_goal_are_refused() {
    let m = manager();
    let r = m
        .apply(&AssistantOutput::new("[CHECKPOINT] x - DONE\n[NEXT] y"))
        .unwrap();
    assert_eq!(r.refused().count(), 2);
    assert!(m.history().is_empty());
}

/// Verifies ADR-0011: goals persist atomically as JSON and survive a reopen.
#[test]
fn goals_persist_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("goals.json");
    {
        let m = GoalManager::open(&path).unwrap();
        let g = m.create_goal("Persist me", GoalPriority::Medium).unwrap();
        m.create_checkpoint(&g.id, "step").unwrap();
        m.apply_confirmed(&AssistantOutput::new("[DECISION] Store: JSON - LOCKED"))
            .unwrap();
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["goals.json"], "no temporary file is left behind");
    let m = GoalManager::open(&path).unwrap();
    let g = m.active_goal().unwrap();
    assert_eq!(g.description, "Persist me");
    assert_eq!(g.checkpoints.len(), 1);
    assert!(g.decisions[0].locked);
    // Ids continue after a reopen.
    assert_eq!(
        m.create_goal("Next", GoalPriority::Low).unwrap().id,
        "goal-2"
    );
}

#[test]
fn corrupt_or_unknown_goal_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("goals.json");
    std::fs::write(&path, "{not json").unwrap();
    let e = GoalManager::open(&path).unwrap_err();
    assert!(matches!(e, GoalError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("move it aside"));
    std::fs::write(&path, r#"{"version":1,"next_goal":0,"goals":[],"extra":1}"#).unwrap();
    assert!(matches!(
        GoalManager::open(&path),
        Err(GoalError::Corrupt { .. })
    ));
    std::fs::write(&path, r#"{"version":7,"next_goal":0,"goals":[]}"#).unwrap();
    assert!(matches!(
        GoalManager::open(&path),
        Err(GoalError::Corrupt { .. })
    ));
}

#[test]
fn a_failed_write_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("goals.json");
    let m = GoalManager::open(&path).unwrap();
    let e = m.create_goal("x", GoalPriority::Low).unwrap_err();
    assert!(matches!(e, GoalError::Io { .. }), "{e}");
    assert!(m.history().is_empty());
}

/// Verifies ADR-0011 and ADR-0008: the goal is a sticky layer-4 section of phase task, which
/// budget pressure never compresses, and it is present in full and compact prompts.
#[test]
fn the_goal_is_a_sticky_layer_four_section() {
    let m = Arc::new(manager());
    let r = Registry::new();
    r.register(m.clone()).unwrap();
    let mut ctx = ContributionContext::new("a", ContentHash::of("d"), "s1", 0);
    assert!(r.gather(&ctx).unwrap().sections.is_empty());
    m.create_goal("Ship", GoalPriority::High).unwrap();
    for mode in [PromptMode::Full, PromptMode::Compact] {
        ctx.mode = mode;
        let g = r.gather(&ctx).unwrap();
        let s = &g.sections[0];
        assert_eq!(s.layer(), RuntimeLayer::Delegated);
        assert!(s.sticky());
        assert_eq!(s.phase(), Phase::Task);
        assert!(s.content().as_str().starts_with("Current goal: Ship"));
    }
}

#[test]
fn a_session_manager_only_contributes_to_its_session() {
    let m = manager().for_session("s2");
    assert_eq!(m.id(), "goal:s2");
    m.create_goal("Mine", GoalPriority::High).unwrap();
    let ctx = ContributionContext::new("a", ContentHash::of("d"), "s1", 0);
    assert!(m.contribute(&ctx).unwrap().is_empty());
    let ctx = ContributionContext::new("a", ContentHash::of("d"), "s2", 0);
    assert_eq!(m.contribute(&ctx).unwrap().len(), 1);
}

fn marker_like() -> impl Strategy<Value = String> {
    let tag = prop_oneof![
        Just("[GOAL]"),
        Just("[CHECKPOINT]"),
        Just("[DECISION]"),
        Just("[ARTIFACT]"),
        Just("[NEXT]"),
        Just("[goal]"),
        Just("["),
        Just("]"),
    ];
    let tail = prop_oneof![
        Just(""),
        Just(" - LOCKED"),
        Just(" - COMPLETED"),
        Just(" - IN PROGRESS"),
        Just(" - "),
        Just(":"),
    ];
    proptest::collection::vec(
        (
            tag,
            "\\PC{0,12}",
            prop_oneof![Just(""), Just(" Created "), Just(" Deleted")],
            tail,
        )
            .prop_map(|(t, body, verb, tail)| format!("{t}{verb}{body}{tail}")),
        0..12,
    )
    .prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The marker parser is total: any text, arbitrary or marker-shaped, parses without panic,
    /// and every marker it returns carries non-empty text within the length limit.
    #[test]
    fn parser_is_total(text in prop_oneof![any::<String>(), marker_like(), "\\PC*"]) {
        let parsed = parse_markers(&AssistantOutput::new(text));
        for (_, m) in &parsed.markers {
            let t = match m {
                Marker::Goal(t) | Marker::Next(t) => t,
                Marker::Checkpoint { description, .. } | Marker::Decision { description, .. } => description,
                Marker::Artifact { path, .. } => path,
            };
            prop_assert!(!t.is_empty());
            prop_assert!(t.chars().count() <= strata_registry::goals::MAX_MARKER_TEXT);
        }
    }

    /// Verifies ADR-0011: once locked, a decision never changes, whatever later output says.
    #[test]
    fn locked_decisions_never_change(outputs in proptest::collection::vec(prop_oneof![
        marker_like(),
        Just("[DECISION] Db: mysql".to_owned()),
        Just("[DECISION] db: postgres".to_owned()),
        Just("[DECISION] DB: sqlite - LOCKED".to_owned()),
        "\\[DECISION\\] [Dd][Bb]:\\PC{0,8}( - (LOCKED|locked))?",
    ], 1..6)) {
        let m = manager();
        m.apply_confirmed(&AssistantOutput::new("[GOAL] g\n[DECISION] Db: postgres - LOCKED")).unwrap();
        for o in outputs {
            m.apply(&AssistantOutput::new(o)).unwrap();
            let d = m.goal("goal-1").unwrap().decisions[0].clone();
            prop_assert_eq!(d.description.as_str(), "Db: postgres");
            prop_assert!(d.locked);
        }
    }
}
