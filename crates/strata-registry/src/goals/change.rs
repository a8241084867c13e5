//! The changes a caller (the runtime or its operator, never the model) makes to a scope's
//! goals, each one write, and retry-safe under an operation key whose record is kept in the
//! goal book with the change (ADR-0031, ADR-0042). Confirming a lock is one of them: a marker
//! in the model's output only proposes one (ADR-0011).

use serde::{Deserialize, Serialize};

use super::error::GoalError;
use super::manager::GoalManager;
use super::model::{
    add_artifact, add_checkpoint, add_decision, ArtifactAction, ArtifactKind, CheckpointStatus,
    Goal, GoalBook, GoalPriority, GoalStatus,
};

/// How long an operation's record answers repeats: a day, as the session log's records.
const RECORD_TTL_MS: i64 = 24 * 60 * 60 * 1000;
/// Most operation records a goal book keeps; the oldest go first.
const MAX_RECORDS: usize = 256;

/// A change the caller makes to a scope's goals.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GoalChange {
    /// Create a goal and make it the active one (an active goal is paused).
    CreateGoal {
        /// What it is.
        description: String,
        /// Its priority.
        priority: GoalPriority,
    },
    /// Add a checkpoint to a goal.
    AddCheckpoint {
        /// The goal (`None`: the active one).
        goal: Option<String>,
        /// What it is.
        description: String,
        /// Its status (pending for a new step).
        status: CheckpointStatus,
    },
    /// Record an unlocked decision with its rationale.
    RecordDecision {
        /// The goal (`None`: the active one).
        goal: Option<String>,
        /// What was decided (text before a `:` is its subject).
        description: String,
        /// Why.
        rationale: String,
    },
    /// Confirm the lock the model proposed: the decision can no longer change.
    ConfirmLock {
        /// The goal (`None`: the active one).
        goal: Option<String>,
        /// The decision.
        decision: u32,
    },
    /// Refuse the lock the model proposed: the decision stays, unlocked.
    RefuseLock {
        /// The goal (`None`: the active one).
        goal: Option<String>,
        /// The decision.
        decision: u32,
    },
    /// Record an artifact of a goal.
    RecordArtifact {
        /// The goal (`None`: the active one).
        goal: Option<String>,
        /// What kind of thing it is.
        kind: ArtifactKind,
        /// Its path.
        path: String,
        /// What happened to it.
        action: ArtifactAction,
    },
}

/// What a keyed change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// It ran now: the goal as it is after it.
    Done(Goal),
    /// It had run before: the answer recorded then. Nothing was written now.
    Repeated(String),
}

/// The record of a keyed change: the fingerprint of what was asked and the first answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ChangeRecord {
    fingerprint: String,
    answer: String,
    at_ms: i64,
}

/// `value`, given for `what` (`priority`, `status`, `kind`, `action`...), as one of the lower-case
/// names of `T` (a goal priority, a checkpoint status, an artifact kind or action, a file
/// action): how every interface reads them, with the same message.
pub fn parse_name<T: serde::de::DeserializeOwned>(what: &str, value: &str) -> Result<T, GoalError> {
    serde_json::from_value(serde_json::Value::String(value.to_owned()))
        .map_err(|e| GoalError::Invalid(format!("{what} `{value}`: {e}")))
}

fn non_empty(what: &str, text: &str) -> Result<(), GoalError> {
    if text.trim().is_empty() {
        return Err(GoalError::Invalid(format!(
            "the {what} is empty; say what it is"
        )));
    }
    Ok(())
}

impl GoalChange {
    /// Check what does not depend on the goals (empty texts).
    fn check(&self) -> Result<(), GoalError> {
        match self {
            GoalChange::CreateGoal { description, .. } => {
                non_empty("goal's description", description)
            }
            GoalChange::AddCheckpoint { description, .. } => {
                non_empty("checkpoint's description", description)
            }
            GoalChange::RecordDecision { description, .. } => {
                non_empty("decision's description", description)
            }
            GoalChange::RecordArtifact { path, .. } => non_empty("artifact's path", path),
            GoalChange::ConfirmLock { .. } | GoalChange::RefuseLock { .. } => Ok(()),
        }
    }

    /// Apply to `book` at `now`; the changed goal.
    fn apply(&self, book: &mut GoalBook, now: i64) -> Result<Goal, GoalError> {
        let goal_id = match self {
            GoalChange::CreateGoal {
                description,
                priority,
            } => return Ok(GoalManager::create_in(book, now, description, *priority)),
            GoalChange::AddCheckpoint { goal, .. }
            | GoalChange::RecordDecision { goal, .. }
            | GoalChange::ConfirmLock { goal, .. }
            | GoalChange::RefuseLock { goal, .. }
            | GoalChange::RecordArtifact { goal, .. } => goal,
        };
        let goal_id = match goal_id {
            Some(id) => id.clone(),
            None => book
                .goals
                .iter()
                .find(|g| g.status == GoalStatus::Active)
                .map(|g| g.id.clone())
                .ok_or_else(|| {
                    GoalError::Invalid(
                        "no goal is active: name the goal, or create one first".into(),
                    )
                })?,
        };
        let goal_id = &goal_id;
        let g = GoalManager::goal_mut(book, goal_id)?;
        match self {
            GoalChange::CreateGoal { .. } => {}
            GoalChange::AddCheckpoint {
                description,
                status,
                ..
            } => {
                add_checkpoint(g, now, description, *status);
            }
            GoalChange::RecordDecision {
                description,
                rationale,
                ..
            } => {
                add_decision(g, now, description, rationale, false);
            }
            GoalChange::ConfirmLock { decision, .. } | GoalChange::RefuseLock { decision, .. } => {
                let confirm = matches!(self, GoalChange::ConfirmLock { .. });
                let id = *decision;
                let d = g.decisions.iter_mut().find(|d| d.id == id).ok_or_else(|| {
                    GoalError::DecisionNotFound {
                        goal: goal_id.clone(),
                        decision: id,
                    }
                })?;
                if d.locked {
                    return Err(GoalError::DecisionLocked {
                        goal: goal_id.clone(),
                        decision: id,
                    });
                }
                if !d.lock_proposed {
                    return Err(GoalError::NoLockProposed {
                        goal: goal_id.clone(),
                        decision: id,
                    });
                }
                d.lock_proposed = false;
                d.locked = confirm;
                let what = if confirm { "confirmed" } else { "refused" };
                g.log(now, format!("decision {id} lock {what} by the caller"));
            }
            GoalChange::RecordArtifact {
                kind, path, action, ..
            } => add_artifact(g, now, *kind, path, *action),
        }
        Ok(g.clone())
    }
}

impl GoalManager {
    /// Make `change` with the caller's authority; the goal as it is after it. A refused change
    /// writes nothing.
    pub fn change(&self, change: &GoalChange) -> Result<Goal, GoalError> {
        change.check()?;
        self.mutate(|b, now| change.apply(b, now))
    }

    /// [`GoalManager::change`] as a retry-safe operation (ADR-0031, ADR-0042): `key` and
    /// `fingerprint` (of what the caller was asked) are recorded with the change in the same
    /// write, with the answer `answer` makes from the changed goal. A repeat with the same
    /// fingerprint gets that answer and writes nothing; with another, [`GoalError::KeyReused`].
    pub fn change_once(
        &self,
        key: &str,
        fingerprint: &str,
        change: &GoalChange,
        answer: &dyn Fn(&Goal) -> Result<String, GoalError>,
    ) -> Result<ChangeOutcome, GoalError> {
        if let Some(done) = self.repeated(key, fingerprint)? {
            return Ok(ChangeOutcome::Repeated(done));
        }
        change.check()?;
        self.mutate(|b, now| {
            if let Some(done) = Self::recorded(b, key, fingerprint, now)? {
                return Ok(ChangeOutcome::Repeated(done));
            }
            let goal = change.apply(b, now)?;
            let first = answer(&goal)?;
            b.operations
                .retain(|_, r| now.saturating_sub(r.at_ms) < RECORD_TTL_MS);
            b.operations.insert(
                key.to_owned(),
                ChangeRecord {
                    fingerprint: fingerprint.to_owned(),
                    answer: first,
                    at_ms: now,
                },
            );
            while b.operations.len() > MAX_RECORDS {
                let oldest = b
                    .operations
                    .iter()
                    .min_by_key(|(_, r)| r.at_ms)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    b.operations.remove(&k);
                }
            }
            Ok(ChangeOutcome::Done(goal))
        })
    }

    /// The first answer of the keyed change `key` if it ran (and its record has not expired);
    /// [`GoalError::KeyReused`] when the key was used for another request.
    pub fn repeated(&self, key: &str, fingerprint: &str) -> Result<Option<String>, GoalError> {
        self.refresh()?;
        let now = self.now_ms();
        let book = self.book();
        Self::recorded(&book, key, fingerprint, now)
    }

    fn recorded(
        book: &GoalBook,
        key: &str,
        fingerprint: &str,
        now: i64,
    ) -> Result<Option<String>, GoalError> {
        match book
            .operations
            .get(key)
            .filter(|r| now.saturating_sub(r.at_ms) < RECORD_TTL_MS)
        {
            None => Ok(None),
            Some(r) if r.fingerprint == fingerprint => Ok(Some(r.answer.clone())),
            Some(_) => Err(GoalError::KeyReused {
                key: key.to_owned(),
            }),
        }
    }
}
