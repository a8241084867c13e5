//! The compaction routes (ADR-0047): store a summary of a range of a session's entries, which
//! stands in for the range on later turns, and list a session's summaries.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use strata_assembler::session::{Compaction, CompactionRecord, Outcome};

use super::extract::{blocking, KeyedJson, SessionId};
use super::goals::KEY_DOC;
use super::sessions::{answer, replay, to_json};
use super::AppState;
use crate::api::{CompactionRequest, CompactionView, CompactionsView};
use crate::error::ApiError;

fn view(r: CompactionRecord) -> CompactionView {
    CompactionView {
        first_seq: r.first_seq,
        last_seq: r.last_seq,
        entries: r.entries,
        summary: r.summary,
        model: r.model,
        at_ms: r.at_ms,
    }
}

/// Store a summary of a range of the session's entries: later turns carry it, as data, in
/// place of the range; the entries stay in the session.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/compactions", operation_id = "compact_session",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = KEY_DOC)),
    request_body = CompactionRequest,
    responses(
        (status = 200, description = "Stored", body = CompactionView),
        (status = 400, description = "Invalid (a range not in the session, reaching the newest user message, splitting a tool call from its result, or overlapping a stored summary; an empty or oversized summary); nothing was stored", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody)))]
pub(super) async fn compact_session(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<CompactionRequest>,
) -> Result<Response, ApiError> {
    let loaded = st.current_valid()?;
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        let c = Compaction {
            first_seq: req.first_seq,
            last_seq: req.last_seq,
            summary: req.summary,
            model: req.model,
        };
        let respond = |r: &CompactionRecord| to_json(&view(r.clone()));
        Ok(match &op {
            Some(op) => match session.compact_once(op, &c, &respond)? {
                Outcome::Done(r) => answer(respond(&r)?, false),
                Outcome::Repeated(a) => answer(a, true),
            },
            None => answer(respond(&session.compact(&c)?)?, false),
        })
    })
    .await
}

/// A session's summaries, oldest range first.
#[utoipa::path(get, path = "/v1/sessions/{session_id}/compactions", operation_id = "list_compactions",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The summaries", body = CompactionsView),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody)))]
pub(super) async fn list_compactions(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
) -> Result<Json<CompactionsView>, ApiError> {
    let loaded = st.loaded();
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        Ok(Json(CompactionsView {
            compactions: session.compactions()?.into_iter().map(view).collect(),
            session_id: id,
        }))
    })
    .await
}
