//! The caller's changes of a scope's goals (`GoalChange`): a model's marker only proposes a
//! lock and only the caller's change confirms or refuses it (ADR-0011); a refused change writes
//! nothing, on disk either; a keyed change is recorded with the change, so a repeat answers the
//! first answer and writes nothing, and the key with another request is refused (ADR-0031).
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

use std::sync::Arc;

use strata_registry::{
    parse_name, ArtifactAction, ArtifactKind, AssistantOutput, ChangeOutcome, CheckpointStatus,
    GoalChange, GoalError, GoalManager, GoalPriority, ManualClock,
};

fn lock(confirm: bool, decision: u32) -> GoalChange {
    if confirm {
        GoalChange::ConfirmLock {
            goal: None,
            decision,
        }
    } else {
        GoalChange::RefuseLock {
            goal: None,
            decision,
        }
    }
}

/// Verifies ADR-0011: the model proposes, the caller confirms or refuses.
#[test]
fn only_the_caller_locks_what_the_model_proposed() {
    let m = GoalManager::in_memory_with_clock(Arc::new(ManualClock::new(1_000)));
    m.apply(&AssistantOutput::new(
        "[GOAL] Ship\n[DECISION] Tokens: JWT - LOCKED\n[DECISION] Store: SQLite - LOCKED\n[DECISION] Cache: none",
    ))
    .unwrap();
    assert_eq!(m.pending_locks().len(), 2);
    let before = m.history();
    for (change, want) in [
        (lock(true, 9), "no decision 9"),
        (lock(true, 3), "no proposed lock"),
        (
            GoalChange::ConfirmLock {
                goal: Some("goal-4".into()),
                decision: 1,
            },
            "no goal with id `goal-4`",
        ),
    ] {
        let e = m.change(&change).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        assert_eq!(m.history(), before, "a refused change wrote");
    }
    let g = m.change(&lock(true, 1)).unwrap();
    assert!(g.decisions[0].locked && !g.decisions[0].lock_proposed);
    let g = m.change(&lock(false, 2)).unwrap();
    assert!(!g.decisions[1].locked && !g.decisions[1].lock_proposed);
    assert!(m.pending_locks().is_empty());
    assert!(matches!(
        m.change(&lock(false, 1)),
        Err(GoalError::DecisionLocked { .. })
    ));
}

/// Verifies ADR-0031 and ADR-0042: one write for the change and its record, a repeat writes
/// nothing.
#[test]
fn a_keyed_change_repeats_its_first_answer_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("goals.json");
    let clock = Arc::new(ManualClock::new(5_000));
    let m = GoalManager::open_with_clock(&file, clock.clone()).unwrap();
    let create = GoalChange::CreateGoal {
        description: "Ship v2".into(),
        priority: GoalPriority::High,
    };
    let answer = |g: &strata_registry::Goal| Ok(format!("{} has {}", g.id, g.checkpoints.len()));
    assert!(matches!(
        m.change_once("k1", "create", &create, &answer).unwrap(),
        ChangeOutcome::Done(_)
    ));
    let checkpoint = GoalChange::AddCheckpoint {
        goal: None,
        description: "Tests".into(),
        status: CheckpointStatus::Pending,
    };
    m.change_once("k2", "cp", &checkpoint, &answer).unwrap();
    let on_disk = std::fs::read(&file).unwrap();
    // Reopened from the file: the records came with the goals.
    let m = GoalManager::open_with_clock(&file, clock.clone()).unwrap();
    assert_eq!(
        m.change_once("k2", "cp", &checkpoint, &answer).unwrap(),
        ChangeOutcome::Repeated("goal-1 has 1".into())
    );
    assert_eq!(std::fs::read(&file).unwrap(), on_disk, "a repeat wrote");
    assert!(matches!(
        m.change_once("k2", "other", &create, &answer),
        Err(GoalError::KeyReused { .. })
    ));
    // A refused keyed change leaves no record: the key is free for a good request.
    let bad = GoalChange::RecordArtifact {
        goal: Some("goal-9".into()),
        kind: ArtifactKind::Test,
        path: "t.rs".into(),
        action: ArtifactAction::Created,
    };
    assert!(m.change_once("k3", "bad", &bad, &answer).is_err());
    assert_eq!(std::fs::read(&file).unwrap(), on_disk);
    let good = GoalChange::RecordArtifact {
        goal: None,
        kind: ArtifactKind::Test,
        path: "t.rs".into(),
        action: ArtifactAction::Created,
    };
    assert!(matches!(
        m.change_once("k3", "good", &good, &answer).unwrap(),
        ChangeOutcome::Done(_)
    ));
    assert!(m
        .active_goal()
        .unwrap()
        .render()
        .contains("Created (test): t.rs"));
    // A day later the record has expired and the key may be used again.
    clock.advance(std::time::Duration::from_secs(24 * 60 * 60));
    assert!(matches!(
        m.change_once("k2", "other", &create, &answer).unwrap(),
        ChangeOutcome::Done(_)
    ));
}

#[test]
fn names_are_read_with_one_message() {
    assert_eq!(
        parse_name::<ArtifactKind>("kind", "documentation").unwrap(),
        ArtifactKind::Documentation
    );
    let e = parse_name::<CheckpointStatus>("status", "done")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("status `done`: unknown variant `done`"),
        "{e}"
    );
    let m = GoalManager::in_memory();
    let e = m
        .change(&GoalChange::AddCheckpoint {
            goal: None,
            description: "x".into(),
            status: CheckpointStatus::Pending,
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("no goal is active"), "{e}");
}
