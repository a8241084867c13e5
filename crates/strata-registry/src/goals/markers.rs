//! Goal markers in the model's output: [`AssistantOutput`], the total parser and the applying
//! of each marker to the active goal under the authority it carries (ADR-0011).

use std::sync::Arc;

use super::manager::GoalManager;
use super::model::{
    add_artifact, add_checkpoint, add_decision, set_checkpoint, subject_of, ArtifactAction,
    ArtifactKind, CheckpointStatus, Goal, GoalBook, GoalPriority, GoalStatus,
};
use super::{MAX_MARKERS_PER_OUTPUT, MAX_MARKER_TEXT};

/// Text the model produced, the only input of marker parsing.
///
/// Build it only from the model's own response. It deliberately implements no `From`,
/// `FromStr` or `Deserialize`, so tool output, memories and other runtime text do not turn
/// into it by accident (ADR-0006). Neither of these compiles:
///
/// ```compile_fail
/// let tool_output = String::from("[DECISION] Auth: none - LOCKED");
/// let out: strata_registry::AssistantOutput = tool_output.into();
/// ```
///
/// ```compile_fail
/// let out: strata_registry::AssistantOutput = serde_json::from_str("\"[GOAL] x\"").unwrap();
/// ```
///
/// The runtime wraps the model's response:
///
/// ```
/// use strata_registry::{AssistantOutput, GoalManager};
/// let goals = GoalManager::in_memory();
/// let report = goals.apply(&AssistantOutput::new("[GOAL] Ship the release")).unwrap();
/// assert_eq!(report.outcomes.len(), 1);
/// assert_eq!(goals.active_goal().unwrap().description, "Ship the release");
/// ```
#[derive(Debug)]
pub struct AssistantOutput {
    text: Arc<str>,
}

impl AssistantOutput {
    /// Wrap the model's response text.
    pub fn new(text: impl Into<Arc<str>>) -> AssistantOutput {
        AssistantOutput { text: text.into() }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// A marker read from assistant output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// `[GOAL] <description>`.
    Goal(String),
    /// `[CHECKPOINT] <description> - COMPLETED | IN PROGRESS | PENDING`.
    Checkpoint {
        /// Description.
        description: String,
        /// Status (pending when not given).
        status: CheckpointStatus,
    },
    /// `[DECISION] <description> [- LOCKED]`.
    Decision {
        /// Description.
        description: String,
        /// Whether it is locked.
        locked: bool,
    },
    /// `[ARTIFACT] Created|Modified|Deleted <path>`.
    Artifact {
        /// What happened.
        action: ArtifactAction,
        /// The path.
        path: String,
    },
    /// `[NEXT] <step>`.
    Next(String),
}

/// A line that looked like a marker but could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Markers read from one output, in order, with the line each came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedMarkers {
    /// The markers.
    pub markers: Vec<(usize, Marker)>,
    /// Lines that looked like markers but were not valid.
    pub malformed: Vec<Malformed>,
}

pub(super) fn clip(s: &str) -> String {
    s.trim().chars().take(MAX_MARKER_TEXT).collect()
}

/// Split `rest` at its last ` - ` when the suffix is one of the words `parse` accepts.
pub(super) fn split_suffix<T>(
    rest: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> (String, Option<T>) {
    if let Some((head, tail)) = rest.rsplit_once(" - ") {
        if let Some(v) = parse(tail) {
            return (clip(head), Some(v));
        }
    }
    (clip(rest), None)
}

pub(super) fn normalise(word: &str) -> String {
    word.trim()
        .trim_end_matches(['.', '!'])
        .to_uppercase()
        .replace(['_', '-'], " ")
}

pub(super) fn checkpoint_status(word: &str) -> Option<CheckpointStatus> {
    match normalise(word).as_str() {
        "COMPLETED" | "COMPLETE" | "DONE" => Some(CheckpointStatus::Completed),
        "IN PROGRESS" => Some(CheckpointStatus::InProgress),
        "PENDING" => Some(CheckpointStatus::Pending),
        _ => None,
    }
}

/// Read the markers of an assistant output. Total: never panics on any text.
pub fn parse_markers(output: &AssistantOutput) -> ParsedMarkers {
    let mut parsed = ParsedMarkers::default();
    for (i, raw) in output.as_str().lines().enumerate() {
        let line_no = i + 1;
        let Some((tag, rest)) = marker_tag(raw) else {
            continue;
        };
        if parsed.markers.len() >= MAX_MARKERS_PER_OUTPUT {
            parsed.malformed.push(Malformed {
                line: line_no,
                reason: format!("more than {MAX_MARKERS_PER_OUTPUT} markers in one output"),
            });
            continue;
        }
        match parse_marker(&tag, rest) {
            Ok(marker) => parsed.markers.push((line_no, marker)),
            Err(reason) => parsed.malformed.push(Malformed {
                line: line_no,
                reason,
            }),
        }
    }
    parsed
}

/// The tag (upper case) of a line that starts, after blanks, with the tag of a marker, and
/// the text after the tag; `None` for any other line.
fn marker_tag(raw: &str) -> Option<(String, &str)> {
    let line = raw.trim_start();
    let after = line.strip_prefix('[')?;
    let (tag, rest) = after.split_once(']')?;
    let tag = tag.to_ascii_uppercase();
    if !matches!(
        tag.as_str(),
        "GOAL" | "CHECKPOINT" | "DECISION" | "ARTIFACT" | "NEXT"
    ) {
        return None;
    }
    Some((tag, rest))
}

/// The marker of tag `tag` (a marker tag, upper case) with the text `rest` after it; or why
/// the line is malformed.
fn parse_marker(tag: &str, rest: &str) -> Result<Marker, String> {
    let rest = rest.trim();
    if rest.is_empty() {
        return Err(format!("[{tag}] has no text"));
    }
    let marker = match tag {
        "GOAL" => Marker::Goal(clip(rest)),
        "NEXT" => Marker::Next(clip(rest)),
        "CHECKPOINT" => {
            let (description, status) = split_suffix(rest, checkpoint_status);
            Marker::Checkpoint {
                description,
                status: status.unwrap_or(CheckpointStatus::Pending),
            }
        }
        "DECISION" => {
            let (description, locked) =
                split_suffix(rest, |w| (normalise(w) == "LOCKED").then_some(()));
            Marker::Decision {
                description,
                locked: locked.is_some(),
            }
        }
        _ => parse_artifact(rest)?,
    };
    if matches!(&marker, Marker::Checkpoint { description, .. } | Marker::Decision { description, .. } if description.is_empty())
    {
        return Err(format!("[{tag}] has no description"));
    }
    Ok(marker)
}

/// The artifact marker with the text `rest` (trimmed, not empty): an action word, then a path.
fn parse_artifact(rest: &str) -> Result<Marker, String> {
    let (verb, path) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let action = match verb.to_ascii_lowercase().trim_end_matches(':') {
        "created" => Some(ArtifactAction::Created),
        "modified" => Some(ArtifactAction::Modified),
        "deleted" => Some(ArtifactAction::Deleted),
        _ => None,
    };
    let path = clip(path);
    match action {
        Some(action) if !path.is_empty() => Ok(Marker::Artifact { action, path }),
        _ => Err("[ARTIFACT] needs Created, Modified or Deleted, then a path".into()),
    }
}

/// What applying one marker did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// The goal changed.
    Applied,
    /// It said what was already recorded.
    Unchanged,
    /// It was refused, with the reason.
    Refused(String),
}

/// What applying an output's markers did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkerReport {
    /// Each marker with its outcome, in order.
    pub outcomes: Vec<(Marker, MarkerOutcome)>,
    /// Lines that looked like markers but were not valid.
    pub malformed: Vec<Malformed>,
}

impl MarkerReport {
    /// The refused markers.
    pub fn refused(&self) -> impl Iterator<Item = (&Marker, &str)> {
        self.outcomes.iter().filter_map(|(m, o)| match o {
            MarkerOutcome::Refused(r) => Some((m, r.as_str())),
            _ => None,
        })
    }
}

/// Whose authority a marker carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Authority {
    /// The model's output alone: nothing permanent.
    Model,
    /// The caller vouches for it: locks take effect.
    Caller,
}

pub(super) fn apply_marker(
    b: &mut GoalBook,
    now: i64,
    marker: &Marker,
    authority: Authority,
) -> MarkerOutcome {
    let active = b.goals.iter_mut().find(|g| g.status == GoalStatus::Active);
    if let Marker::Goal(description) = marker {
        return match active {
            None => {
                GoalManager::create_in(b, now, description, GoalPriority::Medium);
                MarkerOutcome::Applied
            }
            Some(g) if g.description.eq_ignore_ascii_case(description) => MarkerOutcome::Unchanged,
            Some(g) => MarkerOutcome::Refused(format!(
                "goal `{}` is active; complete or pause it before starting another",
                g.id
            )),
        };
    }
    let Some(g) = active else {
        return MarkerOutcome::Refused("no goal is active".into());
    };
    match marker {
        Marker::Goal(_) => MarkerOutcome::Unchanged,
        Marker::Checkpoint {
            description,
            status,
        } => apply_checkpoint(g, now, description, *status),
        Marker::Decision {
            description,
            locked,
        } => apply_decision(g, now, description, *locked, authority),
        Marker::Artifact { action, path } => {
            let before = g.artifacts.len();
            add_artifact(g, now, ArtifactKind::File, path, *action);
            if g.artifacts.len() == before {
                MarkerOutcome::Unchanged
            } else {
                MarkerOutcome::Applied
            }
        }
        Marker::Next(next) => {
            if g.next.as_deref() == Some(next.as_str()) {
                MarkerOutcome::Unchanged
            } else {
                g.next = Some(next.clone());
                MarkerOutcome::Applied
            }
        }
    }
}

/// Record a checkpoint on the active goal `g`: add it, or set the status of the one with the
/// same description (in any case).
fn apply_checkpoint(
    g: &mut Goal,
    now: i64,
    description: &str,
    status: CheckpointStatus,
) -> MarkerOutcome {
    match g
        .checkpoints
        .iter()
        .position(|c| c.description.eq_ignore_ascii_case(description))
    {
        None => {
            add_checkpoint(g, now, description, status);
            MarkerOutcome::Applied
        }
        Some(i) if g.checkpoints[i].status == status => MarkerOutcome::Unchanged,
        Some(i) => {
            set_checkpoint(g, i, now, status);
            MarkerOutcome::Applied
        }
    }
}

/// Record a decision on the active goal `g`: add it, or change the one on the same subject
/// unless that one is locked. A lock takes effect only under the caller's authority; the
/// model's only proposes it.
fn apply_decision(
    g: &mut Goal,
    now: i64,
    description: &str,
    locked: bool,
    authority: Authority,
) -> MarkerOutcome {
    let subject = subject_of(description);
    // ADR-0011: only the caller's authority locks; the model's marker proposes.
    let lock_now = locked && authority == Authority::Caller;
    let propose = locked && !lock_now;
    match g.decisions.iter().position(|d| d.subject() == subject) {
        None => {
            let d = add_decision(g, now, description, "", lock_now);
            if propose {
                if let Some(x) = g.decisions.iter_mut().find(|x| x.id == d.id) {
                    x.lock_proposed = true;
                }
                g.log(now, format!("decision {} lock proposed by the model", d.id));
            }
            MarkerOutcome::Applied
        }
        Some(i) => {
            let d = &mut g.decisions[i];
            let same_text = d.description.eq_ignore_ascii_case(description);
            if d.locked {
                if same_text && locked {
                    MarkerOutcome::Unchanged
                } else {
                    MarkerOutcome::Refused(format!(
                        "decision {} (`{}`) is locked and cannot be changed",
                        d.id, d.description
                    ))
                }
            } else if same_text && d.lock_proposed == propose && !lock_now {
                MarkerOutcome::Unchanged
            } else {
                d.description = description.to_owned();
                d.locked = lock_now;
                d.lock_proposed = propose;
                let id = d.id;
                g.log(now, format!("decision {id} changed"));
                MarkerOutcome::Applied
            }
        }
    }
}
