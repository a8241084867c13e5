//! The goal book: goals with their checkpoints, decisions, artifacts and history, how a goal
//! reads in the prompt, and the edits every way of changing a goal shares.

use serde::{Deserialize, Serialize};

use super::markers::clip;

/// A goal's priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalPriority {
    /// High.
    High,
    /// Medium.
    Medium,
    /// Low.
    Low,
}

/// Where a goal is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// Being worked on (at most one goal at a time).
    Active,
    /// Set aside; can be resumed.
    Paused,
    /// Done.
    Completed,
}

/// A checkpoint's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    /// Not started.
    Pending,
    /// Under way.
    InProgress,
    /// Done.
    Completed,
}

impl CheckpointStatus {
    pub(super) fn label(self) -> &'static str {
        match self {
            CheckpointStatus::Pending => "pending",
            CheckpointStatus::InProgress => "in progress",
            CheckpointStatus::Completed => "done",
        }
    }
}

/// What kind of thing an artifact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// A file.
    File,
    /// A test.
    Test,
    /// Documentation.
    Documentation,
}

impl ArtifactKind {
    /// The lower-case name (`file`, `test`, `documentation`).
    pub const fn name(self) -> &'static str {
        match self {
            ArtifactKind::File => "file",
            ArtifactKind::Test => "test",
            ArtifactKind::Documentation => "documentation",
        }
    }
}

/// What happened to an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactAction {
    /// Created.
    Created,
    /// Modified.
    Modified,
    /// Deleted.
    Deleted,
}

impl ArtifactAction {
    pub(super) fn label(self) -> &'static str {
        match self {
            ArtifactAction::Created => "Created",
            ArtifactAction::Modified => "Modified",
            ArtifactAction::Deleted => "Deleted",
        }
    }
}

/// A step towards a goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Number within the goal, from 1.
    pub id: u32,
    /// What it is.
    pub description: String,
    /// Status.
    pub status: CheckpointStatus,
    /// When it was completed (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_ms: Option<i64>,
}

/// A decision taken while working on a goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Number within the goal, from 1.
    pub id: u32,
    /// What was decided. Text before a `:` is its subject: a later decision on the same
    /// subject replaces it, unless it is locked.
    pub description: String,
    /// Why.
    #[serde(default)]
    pub rationale: String,
    /// A locked decision cannot be changed. Only the caller locks (ADR-0011).
    pub locked: bool,
    /// The model's output asked to lock it; it stays unlocked until the caller confirms.
    #[serde(default)]
    pub lock_proposed: bool,
    /// When it was recorded (Unix ms).
    pub decided_ms: i64,
}

impl Decision {
    pub(super) fn subject(&self) -> String {
        subject_of(&self.description)
    }
}

pub(super) fn subject_of(description: &str) -> String {
    description
        .split_once(':')
        .map_or(description, |(s, _)| s)
        .trim()
        .to_lowercase()
}

/// Something produced while working on a goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Kind.
    pub kind: ArtifactKind,
    /// Path.
    pub path: String,
    /// What happened to it.
    pub action: ArtifactAction,
    /// When (Unix ms).
    pub at_ms: i64,
}

/// One entry of a goal's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalEvent {
    /// When (Unix ms).
    pub at_ms: i64,
    /// What happened.
    pub what: String,
}

/// A goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// Id (`goal-1`, `goal-2`...).
    pub id: String,
    /// What it is.
    pub description: String,
    /// Priority.
    pub priority: GoalPriority,
    /// Status.
    pub status: GoalStatus,
    /// When it was created (Unix ms).
    pub created_ms: i64,
    /// When it was completed (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_ms: Option<i64>,
    /// The summary given on completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Checkpoints in creation order.
    #[serde(default)]
    pub checkpoints: Vec<Checkpoint>,
    /// Decisions in creation order.
    #[serde(default)]
    pub decisions: Vec<Decision>,
    /// Artifacts in the order they were recorded.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// The next step, if one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// What happened to it, oldest first.
    #[serde(default)]
    pub history: Vec<GoalEvent>,
}

impl Goal {
    /// Completed checkpoints over all checkpoints.
    pub fn progress(&self) -> Progress {
        let total = self.checkpoints.len();
        let completed = self
            .checkpoints
            .iter()
            .filter(|c| c.status == CheckpointStatus::Completed)
            .count();
        let percentage = (completed * 100)
            .checked_div(total)
            .map_or(0, |p| u8::try_from(p).unwrap_or(100));
        Progress {
            completed,
            total,
            percentage,
        }
    }

    pub(super) fn log(&mut self, at_ms: i64, what: String) {
        self.history.push(GoalEvent { at_ms, what });
    }

    /// The goal as text for the prompt.
    pub fn render(&self) -> String {
        let p = self.progress();
        let priority = match self.priority {
            GoalPriority::High => "high",
            GoalPriority::Medium => "medium",
            GoalPriority::Low => "low",
        };
        let status = match self.status {
            GoalStatus::Active => "active",
            GoalStatus::Paused => "paused",
            GoalStatus::Completed => "completed",
        };
        let mut out = format!(
            "Current goal: {}\nPriority: {priority}\nStatus: {status}\nProgress: {} of {} checkpoints completed ({}%)",
            self.description, p.completed, p.total, p.percentage
        );
        if !self.checkpoints.is_empty() {
            out.push_str("\n\nCheckpoints:");
            for c in &self.checkpoints {
                out.push_str(&format!(
                    "\n{}. [{}] {}",
                    c.id,
                    c.status.label(),
                    c.description
                ));
            }
        }
        if !self.decisions.is_empty() {
            out.push_str("\n\nDecisions:");
            for d in &self.decisions {
                out.push_str("\n- ");
                if d.locked {
                    out.push_str("[locked] ");
                } else if d.lock_proposed {
                    out.push_str("[lock proposed, not confirmed] ");
                }
                out.push_str(&d.description);
                if !d.rationale.is_empty() {
                    out.push_str(&format!(" (because {})", d.rationale));
                }
            }
        }
        if !self.artifacts.is_empty() {
            out.push_str("\n\nArtifacts:");
            for a in &self.artifacts {
                match a.kind {
                    ArtifactKind::File => {
                        out.push_str(&format!("\n- {}: {}", a.action.label(), a.path));
                    }
                    kind => out.push_str(&format!(
                        "\n- {} ({}): {}",
                        a.action.label(),
                        kind.name(),
                        a.path
                    )),
                }
            }
        }
        if let Some(next) = &self.next {
            out.push_str(&format!("\n\nNext: {next}"));
        }
        out
    }
}

/// Completed checkpoints over all checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Completed checkpoints.
    pub completed: usize,
    /// All checkpoints.
    pub total: usize,
    /// Completed as a whole percentage, rounded down (0 when there are none).
    pub percentage: u8,
}

/// What the goal file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GoalBook {
    pub(super) version: u32,
    pub(super) next_goal: u64,
    pub(super) goals: Vec<Goal>,
    /// Records of the caller's keyed changes (ADR-0031), kept with the goals they changed so
    /// that a change and its record are one write. Absent from books that never had one.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(super) operations: std::collections::BTreeMap<String, super::change::ChangeRecord>,
}

/// The version of the goal book format this build reads and writes.
pub(super) const BOOK_VERSION: u32 = 1;

pub(super) fn add_checkpoint(
    g: &mut Goal,
    now: i64,
    description: &str,
    status: CheckpointStatus,
) -> Checkpoint {
    let id = g.checkpoints.iter().map(|c| c.id).max().unwrap_or(0) + 1;
    let c = Checkpoint {
        id,
        description: clip(description),
        status,
        completed_ms: (status == CheckpointStatus::Completed).then_some(now),
    };
    g.checkpoints.push(c.clone());
    g.log(now, format!("checkpoint {id} added"));
    c
}

pub(super) fn set_checkpoint(g: &mut Goal, idx: usize, now: i64, status: CheckpointStatus) {
    let c = &mut g.checkpoints[idx];
    if c.status == status {
        return;
    }
    c.status = status;
    c.completed_ms = (status == CheckpointStatus::Completed).then_some(now);
    let id = c.id;
    g.log(now, format!("checkpoint {id} is {}", status.label()));
}

pub(super) fn add_decision(
    g: &mut Goal,
    now: i64,
    description: &str,
    rationale: &str,
    locked: bool,
) -> Decision {
    let id = g.decisions.iter().map(|d| d.id).max().unwrap_or(0) + 1;
    let d = Decision {
        id,
        description: clip(description),
        rationale: rationale.to_owned(),
        locked,
        lock_proposed: false,
        decided_ms: now,
    };
    g.decisions.push(d.clone());
    g.log(now, format!("decision {id} recorded"));
    d
}

pub(super) fn add_artifact(
    g: &mut Goal,
    now: i64,
    kind: ArtifactKind,
    path: &str,
    action: ArtifactAction,
) {
    let path = clip(path);
    if g.artifacts
        .last()
        .is_some_and(|a| a.path == path && a.action == action && a.kind == kind)
    {
        return;
    }
    g.artifacts.push(Artifact {
        kind,
        path: path.clone(),
        action,
        at_ms: now,
    });
    g.log(now, format!("{} {path}", action.label().to_lowercase()));
}
