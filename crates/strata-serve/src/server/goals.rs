//! The goal and file routes of a session: read its goals, create one, add checkpoints,
//! decisions and artifacts, confirm or refuse a lock the model proposed, and record the files
//! its tools touched. They carry the caller's authority: a marker in a model's reply only
//! proposes a lock, and only `POST .../goals/locks` confirms it (ADR-0011). Every change is
//! one write with its operation's record (ADR-0031).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use serde::de::DeserializeOwned;
use strata_assembler::{
    memory::FileAction,
    session::{OperationId, Outcome},
};
use strata_registry::{Goal, GoalChange};

use super::extract::{blocking, KeyedJson, SessionId};
use super::sessions::{answer, replay, to_json};
use super::AppState;
use crate::api::{
    ArtifactRequest, ArtifactView, CheckpointRequest, CheckpointView, DecisionRequest,
    DecisionView, FileRequest, GoalRequest, GoalView, GoalsView, LockRequest, PendingLock,
    Recorded,
};
use crate::error::ApiError;

/// `value` of the field `field` as one of the names of `T`, refused with the library's words.
fn named<T: DeserializeOwned>(field: &str, value: &str) -> Result<T, ApiError> {
    strata_registry::parse_name(field, value).map_err(|e| ApiError::invalid(e.to_string()))
}

fn name_of<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A goal as the API shows it.
pub(super) fn goal_view(g: &Goal) -> GoalView {
    let p = g.progress();
    GoalView {
        id: g.id.clone(),
        description: g.description.clone(),
        priority: name_of(&g.priority),
        status: name_of(&g.status),
        completed: p.completed,
        total: p.total,
        checkpoints: g
            .checkpoints
            .iter()
            .map(|c| CheckpointView {
                id: c.id,
                description: c.description.clone(),
                status: name_of(&c.status),
            })
            .collect(),
        decisions: g
            .decisions
            .iter()
            .map(|d| DecisionView {
                id: d.id,
                description: d.description.clone(),
                rationale: d.rationale.clone(),
                locked: d.locked,
                lock_proposed: d.lock_proposed,
            })
            .collect(),
        artifacts: g
            .artifacts
            .iter()
            .map(|a| ArtifactView {
                kind: name_of(&a.kind),
                path: a.path.clone(),
                action: name_of(&a.action),
            })
            .collect(),
        next: g.next.clone(),
    }
}

/// Make `change` on the session, keyed by `op` when given.
async fn change(
    st: Arc<AppState>,
    id: String,
    op: Option<OperationId>,
    change: GoalChange,
) -> Result<Response, ApiError> {
    let loaded = st.current_valid()?;
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        let respond = |g: &Goal| to_json(&goal_view(g));
        Ok(match &op {
            Some(op) => match session.change_goals_once(op, &change, &respond)? {
                Outcome::Done(g) => answer(respond(&g)?, false),
                Outcome::Repeated(a) => answer(a, true),
            },
            None => answer(respond(&session.change_goals(&change)?)?, false),
        })
    })
    .await
}

/// The `Idempotency-Key` header's description, on every route that changes a session.
pub(super) const KEY_DOC: &str = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing";

/// A session's goals.
#[utoipa::path(get, path = "/v1/sessions/{session_id}/goals", operation_id = "get_goals",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The goals (none for a session that has none)", body = GoalsView),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody)))]
pub(super) async fn get_goals(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
) -> Result<Json<GoalsView>, ApiError> {
    let loaded = st.loaded();
    blocking(move || {
        let goals = loaded.rt().session(id.as_str()).goals()?;
        let pending_locks = goals
            .pending_locks()
            .into_iter()
            .map(|(goal, d)| PendingLock {
                goal,
                decision: d.id,
                description: d.description,
            })
            .collect();
        Ok(Json(GoalsView {
            session_id: id,
            goals: goals.history().iter().map(goal_view).collect(),
            pending_locks,
        }))
    })
    .await
}

/// Create a goal and make it the active one (an active goal is paused).
#[utoipa::path(post, path = "/v1/sessions/{session_id}/goals", operation_id = "create_goal",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = GoalRequest,
    responses(
        (status = 200, description = "The new goal", body = GoalView),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn create_goal(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<GoalRequest>,
) -> Result<Response, ApiError> {
    let priority = match &req.priority {
        Some(p) => named("priority", p)?,
        None => strata_registry::GoalPriority::Medium,
    };
    change(
        st,
        id,
        op,
        GoalChange::CreateGoal {
            description: req.description,
            priority,
        },
    )
    .await
}

/// Add a checkpoint to a goal.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/goals/checkpoints", operation_id = "add_checkpoint",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = CheckpointRequest,
    responses(
        (status = 200, description = "The goal after the change", body = GoalView),
        (status = 400, description = "Invalid request, or no goal is active", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "No such goal", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn add_checkpoint(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<CheckpointRequest>,
) -> Result<Response, ApiError> {
    let status = match &req.status {
        Some(s) => named("status", s)?,
        None => strata_registry::CheckpointStatus::Pending,
    };
    change(
        st,
        id,
        op,
        GoalChange::AddCheckpoint {
            goal: req.goal,
            description: req.description,
            status,
        },
    )
    .await
}

/// Record an artifact of a goal, with its kind.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/goals/artifacts", operation_id = "record_artifact",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = ArtifactRequest,
    responses(
        (status = 200, description = "The goal after the change", body = GoalView),
        (status = 400, description = "Invalid request, or no goal is active", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "No such goal", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn record_artifact(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<ArtifactRequest>,
) -> Result<Response, ApiError> {
    let action = named("action", &req.action)?;
    let kind = match &req.kind {
        Some(k) => named("kind", k)?,
        None => strata_registry::ArtifactKind::File,
    };
    change(
        st,
        id,
        op,
        GoalChange::RecordArtifact {
            goal: req.goal,
            kind,
            path: req.path,
            action,
        },
    )
    .await
}

/// Record an unlocked decision of a goal, with its rationale.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/goals/decisions", operation_id = "record_decision",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = DecisionRequest,
    responses(
        (status = 200, description = "The goal after the change", body = GoalView),
        (status = 400, description = "Invalid request, or no goal is active", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "No such goal", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn record_decision(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<DecisionRequest>,
) -> Result<Response, ApiError> {
    change(
        st,
        id,
        op,
        GoalChange::RecordDecision {
            goal: req.goal,
            description: req.description,
            rationale: req.rationale,
        },
    )
    .await
}

/// Confirm (`confirm: true`) or refuse the lock the model proposed for a decision. Only this
/// call locks: a marker in a reply only proposes (ADR-0011).
#[utoipa::path(post, path = "/v1/sessions/{session_id}/goals/locks", operation_id = "answer_lock",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = LockRequest,
    responses(
        (status = 200, description = "The goal after the change", body = GoalView),
        (status = 400, description = "Invalid request, no goal is active, the decision is locked already or has no proposed lock", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "No such goal or decision", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn answer_lock(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<LockRequest>,
) -> Result<Response, ApiError> {
    let (goal, decision) = (req.goal, req.decision);
    let change_of = if req.confirm {
        GoalChange::ConfirmLock { goal, decision }
    } else {
        GoalChange::RefuseLock { goal, decision }
    };
    change(st, id, op, change_of).await
}

/// Record that a tool of the session read, changed or deleted a file; the session-files
/// section lists them, newest first.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/files", operation_id = "record_file",
    tag = "goals", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = FileRequest,
    responses(
        (status = 200, description = "Recorded", body = Recorded),
        (status = 400, description = "Invalid request (an empty path, a control character, an unknown action)", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn record_file(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<FileRequest>,
) -> Result<Response, ApiError> {
    let action: FileAction = named("action", &req.action)?;
    let loaded = st.current_valid()?;
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        let body = to_json(&Recorded { recorded: true })?;
        Ok(match &op {
            Some(op) => match session.record_file_once(op, &req.path, action, &body)? {
                Outcome::Done(()) => answer(body, false),
                Outcome::Repeated(a) => answer(a, true),
            },
            None => {
                session.record_file(&req.path, action)?;
                answer(body, false)
            }
        })
    })
    .await
}
