//! The session routes: prepare a turn, record the model's reply and a tool's output, read a
//! session's entries, and reset or delete a session.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};
use strata_assembler::{
    assemble::{AssemblyPath, OperationalMode, PromptMode, Section, SectionSpec},
    session::{ActiveSkill, Inbound, InputError, OperationId, Outcome, UnknownThinkingLevel},
    AnnouncedTool, PreparedTurn, Reply, Session, SessionError, ToolCall, ToolName, ToolOutput,
    TurnOptions,
};

use super::extract::{blocking, Keyed, KeyedJson, SessionId};
use super::AppState;
use crate::api::{
    Recorded, RefusedToolView, Removed, ReplyRequest, ReplyResponse, SessionView,
    ToolResultRequest, ToolRunView, ToolSpec, TurnEntry, TurnRequest, TurnResponse,
};
use crate::error::{ApiError, ErrorCode};

/// The header a repeated operation's answer carries.
const REPLAYED: &str = "idempotent-replayed";

/// A 200 answer with a JSON body written once: the same bytes for the first answer and for
/// every repeat (ADR-0031).
pub(super) fn answer(body: String, replayed: bool) -> Response {
    let mut resp = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    if replayed {
        resp.headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    resp
}

/// `value` as the JSON of an answer.
pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, SessionError> {
    serde_json::to_string(value).map_err(|e| SessionError::Invalid(format!("response: {e}")))
}

/// The recorded answer of `op` on `session`, if the operation ran before.
pub(super) fn replay(
    session: &Session<'_>,
    op: Option<&OperationId>,
) -> Result<Option<Response>, ApiError> {
    match op {
        Some(op) => Ok(session.repeated_answer(op)?.map(|a| answer(a, true))),
        None => Ok(None),
    }
}

fn turn_options(
    st: &AppState,
    req: TurnRequest,
) -> Result<(Option<String>, TurnOptions), ApiError> {
    let mut opts = TurnOptions::default();
    if let Some(m) = &req.mode {
        opts.mode = Some(
            m.parse::<PromptMode>()
                .map_err(|e| ApiError::invalid(format!("mode `{m}`: {e}")))?,
        );
    }
    if let Some(p) = &req.path {
        opts.path = Some(
            p.parse::<AssemblyPath>()
                .map_err(|e| ApiError::invalid(format!("path `{p}`: {e}")))?,
        );
    }
    if let Some(m) = &req.operational_mode {
        opts.operational_mode = Some(
            m.parse::<OperationalMode>()
                .map_err(|e| ApiError::invalid(format!("operational_mode `{m}`: {e}")))?,
        );
    }
    if let Some(t) = &req.thinking {
        opts.thinking = Some(
            t.parse()
                .map_err(|e: UnknownThinkingLevel| ApiError::invalid(e.to_string()))?,
        );
    }
    if let Some(z) = &req.time_zone {
        opts.time_zone = Some(
            z.parse()
                .map_err(|e: InputError| ApiError::invalid(e.to_string()))?,
        );
    }
    for s in req.skills.unwrap_or_default() {
        st.limits
            .check_section(&format!("skill `{}`", s.id), s.instructions.len())?;
        opts.skills.push(
            ActiveSkill::new(s.id, s.instructions).map_err(|e| ApiError::invalid(e.to_string()))?,
        );
    }
    opts.inbound = req.inbound.map(|i| Inbound {
        sender: i.sender.map(Into::into),
        channel: i.channel.map(Into::into),
        metadata: i.metadata,
    });
    opts.voice = req.voice.unwrap_or(false);
    opts.language = req.language;
    opts.model = req.model;
    opts.recent_footprint = req.recent_footprint.unwrap_or_default();
    if let Some(b) = &req.business_context {
        st.limits.check_section("the business context", b.len())?;
    }
    opts.business_context = req.business_context;
    opts.sanity_checks = req.sanity_checks;
    opts.context_window = req.context_window;
    opts.tools = req.tools.map(announced).transpose()?;
    opts.retrieved_tools = req.retrieved_tools.map(announced).transpose()?;
    if let Some(m) = &req.message {
        st.limits.check_section("the message", m.len())?;
    }
    opts.sections = runtime_sections(st, "sections", req.sections.unwrap_or_default())?;
    opts.resolved_context = runtime_sections(
        st,
        "resolved_context",
        req.resolved_context.unwrap_or_default(),
    )?;
    Ok((req.message, opts))
}

/// The announced tools of a turn request, as the session takes them.
fn announced(tools: Vec<ToolSpec>) -> Result<Vec<AnnouncedTool>, ApiError> {
    let mut out = Vec::with_capacity(tools.len());
    for t in tools {
        let name = t.name.clone();
        let v = serde_json::to_value(&t)
            .map_err(|e| ApiError::invalid(format!("tool `{name}`: {e}")))?;
        let tool: AnnouncedTool = serde_json::from_value(v)
            .map_err(|e| ApiError::invalid(format!("tool `{name}`: {e}")))?;
        out.push(tool);
    }
    Ok(out)
}

/// Runtime sections of the request's field `field` (the runtime input format), each within
/// the section limit.
fn runtime_sections(
    st: &AppState,
    field: &str,
    values: Vec<Value>,
) -> Result<Vec<Section>, ApiError> {
    let mut out = Vec::with_capacity(values.len());
    for (i, v) in values.into_iter().enumerate() {
        let spec: SectionSpec = serde_json::from_value(v)
            .map_err(|e| ApiError::invalid(format!("{field}[{i}]: {e}")))?;
        st.limits
            .check_section(&format!("{field}[{i}] (`{}`)", spec.id), spec.content.len())?;
        let s = spec
            .into_section()
            .map_err(|e| ApiError::invalid(format!("{field}[{i}]: {e}")))?;
        out.push(s);
    }
    Ok(out)
}

/// Prepare a turn: record the user's message (if any) and return the provider request.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/turns", operation_id = "prepare_turn",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit, without `..`"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing")),
    request_body = TurnRequest,
    responses(
        (status = 200, description = "The request to send", body = TurnResponse),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Continuing a session with no turns", body = crate::error::ErrorBody),
        (status = 413, description = "Body or section over the limit", body = crate::error::ErrorBody),
        (status = 409, description = "The session kept changing while the turn was prepared; retry", body = crate::error::ErrorBody),
        (status = 422, description = "The identity and sticky sections do not fit, the message cannot fit even cut, or the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
        (status = 503, description = "Overloaded, timed out, agent not valid or store unavailable", body = crate::error::ErrorBody)))]
pub(super) async fn prepare_turn(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<TurnRequest>,
) -> Result<Response, ApiError> {
    let loaded = st.current_valid()?;
    let (message, opts) = turn_options(&st, req)?;
    if st.log_content {
        tracing::debug!(session = %id, message = ?message, "turn content");
    }
    let st2 = st.clone();
    blocking(move || {
        let rt = loaded.rt();
        let session = rt.session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        // The response is written before the turn is stored, so a repeat gets these bytes.
        let made = std::cell::RefCell::new(None::<String>);
        let respond = |prepared: &PreparedTurn| -> Result<String, SessionError> {
            let response =
                turn_response(&st2, &id, prepared).map_err(|e| SessionError::Invalid(e.message))?;
            let body = to_json(&response)?;
            *made.borrow_mut() = Some(body.clone());
            Ok(body)
        };
        let (prepared, body) = match (&message, &op) {
            (Some(m), Some(op)) => match session.prepare_once(op, m, &opts, &respond)? {
                Outcome::Done(p) => {
                    let body = made.take().ok_or_else(|| {
                        ApiError::new(ErrorCode::Internal, "the turn's response was not written")
                    })?;
                    (p, body)
                }
                Outcome::Repeated(a) => return Ok(answer(a, true)),
            },
            (Some(m), None) => {
                let p = session.prepare(m, &opts)?;
                let body = respond(&p)?;
                (p, body)
            }
            (None, _) => {
                if !session.exists()? {
                    return Err(ApiError::unknown_session(&id));
                }
                let p = session.continue_turn(&opts)?;
                let body = respond(&p)?;
                (p, body)
            }
        };
        st2.metrics.turn(prepared.report());
        Ok(answer(body, false))
    })
    .await
}

/// The response to a prepared turn; its receipt, when the runtime signs one, is appended to
/// the receipt log first.
fn turn_response(
    st: &AppState,
    id: &str,
    prepared: &PreparedTurn,
) -> Result<TurnResponse, ApiError> {
    let report = serde_json::to_value(prepared.report())
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("report: {e}")))?;
    let receipt = match &prepared.receipt {
        Some(r) => {
            let envelope = r.to_json();
            if let Some(log) = &st.receipt_log {
                // The receipt is on disk before the turn is acknowledged.
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .append(envelope.as_bytes())
                    .map_err(|e| {
                        tracing::error!(error = %e, "appending a receipt");
                        ApiError::new(
                            ErrorCode::Internal,
                            format!("the receipt could not be logged: {e}"),
                        )
                    })?;
            }
            Some(
                serde_json::from_str::<Value>(&envelope)
                    .map_err(|e| ApiError::new(ErrorCode::Internal, format!("receipt: {e}")))?,
            )
        }
        None => None,
    };
    Ok(TurnResponse {
        session_id: id.to_owned(),
        provider: st.settings.provider.name().to_owned(),
        identity_digest: prepared.identity_digest().to_string(),
        request: prepared.body.clone(),
        report,
        receipt,
        refused_tools: prepared
            .refused_tools()
            .into_iter()
            .map(|t| RefusedToolView {
                name: t.name,
                reason: t.reason,
                cause: t.cause.as_str().to_owned(),
            })
            .collect(),
        dropped_turns: prepared.dropped_turns(),
        events: prepared
            .events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
            .collect(),
    })
}

/// Record the model's reply (text and tool calls).
#[utoipa::path(post, path = "/v1/sessions/{session_id}/replies", operation_id = "record_reply",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing")),
    request_body = ReplyRequest,
    responses(
        (status = 200, description = "Recorded", body = ReplyResponse),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody),
        (status = 422, description = "The reply calls a tool that is not on the signed allowlist (tool_not_allowed), or the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
        (status = 503, description = "Overloaded, timed out, agent not valid or store unavailable", body = crate::error::ErrorBody)))]
pub(super) async fn record_reply(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<ReplyRequest>,
) -> Result<Response, ApiError> {
    let loaded = st.current_valid()?;
    let mut reply = Reply::text(req.text);
    for c in req.tool_calls {
        let name = ToolName::new(&c.name)
            .map_err(|e| ApiError::invalid(format!("tool call `{}`: {e}", c.id)))?;
        reply.tool_calls.push(ToolCall {
            id: c.id,
            name,
            arguments: c.arguments,
        });
    }
    for (i, block) in req.reasoning.into_iter().enumerate() {
        let block: strata_core::Reasoning = serde_json::from_value(block).map_err(|e| {
            ApiError::invalid(format!(
                "reasoning block {i} is not a provider's reasoning block as returned: {e}"
            ))
        })?;
        let wanted = block.format().provider_name();
        if wanted != st.settings.provider.name() {
            return Err(ApiError::invalid(format!(
                "reasoning block {i} is a `{}` block, which only {wanted} requests take; this server writes {} requests",
                block.type_name(),
                st.settings.provider.name()
            )));
        }
        reply.reasoning.push(block);
    }
    if reply.text.trim().is_empty() && reply.tool_calls.is_empty() {
        return Err(ApiError::invalid(
            "a reply has text, tool calls, or both; this one has neither",
        ));
    }
    if st.log_content {
        tracing::debug!(session = %id, reply = ?reply, "reply content");
    }
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        let respond =
            |report: &strata_assembler::session::MarkerReport| -> Result<String, SessionError> {
                let refused: Vec<Value> = report
                    .refused()
                    .map(|(m, why)| json!({ "marker": format!("{m:?}"), "reason": why }))
                    .collect();
                to_json(&ReplyResponse {
                    goals: json!({
                        "markers": report.outcomes.len(),
                        "refused": refused,
                        "malformed": report.malformed.len(),
                    }),
                })
            };
        Ok(match &op {
            Some(op) => match session.record_reply_once(op, &reply, &respond)? {
                Outcome::Done(report) => answer(respond(&report)?, false),
                Outcome::Repeated(a) => answer(a, true),
            },
            None => answer(respond(&session.record_reply(&reply)?)?, false),
        })
    })
    .await
}

/// Record a tool's output.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/tool-results",
    operation_id = "record_tool_result", tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing")),
    request_body = ToolResultRequest,
    responses(
        (status = 200, description = "Recorded", body = Recorded),
        (status = 400, description = "Invalid (e.g. no such call in the session)", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody),
        (status = 413, description = "Output over the section limit", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody),
        (status = 503, description = "Overloaded, timed out, agent not valid or store unavailable", body = crate::error::ErrorBody)))]
pub(super) async fn record_tool_result(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    KeyedJson { body: req, op }: KeyedJson<ToolResultRequest>,
) -> Result<Response, ApiError> {
    let loaded = st.current_valid()?;
    st.limits
        .check_section("the tool output", req.output.len())?;
    if st.log_content {
        tracing::debug!(session = %id, call = %req.call_id, output = %req.output, "tool result content");
    }
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        let body = to_json(&Recorded { recorded: true })?;
        let mut output = ToolOutput::new(req.call_id, req.output)
            .keeping(req.keep.map(Into::into).unwrap_or_default());
        output.is_error = req.is_error;
        Ok(match &op {
            Some(op) => match session.record_output_once(op, &output, &body)? {
                Outcome::Done(()) => answer(body, false),
                Outcome::Repeated(a) => answer(a, true),
            },
            None => {
                session.record_output(&output)?;
                answer(body, false)
            }
        })
    })
    .await
}

/// Run a recorded tool call through the live MCP server that announces the tool, and record
/// its result (ADR-0041).
#[utoipa::path(post, path = "/v1/sessions/{session_id}/tool-calls/{call_id}/run",
    operation_id = "run_tool_call", tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("call_id" = String, Path, description = "The recorded tool call, as the model's reply named it"), ("Idempotency-Key" = Option<String>, Header, description = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing")),
    responses(
        (status = 200, description = "Run and recorded: the server's result, which is data", body = ToolRunView),
        (status = 400, description = "Invalid (no such call, a call that already has a result, no MCP servers)", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody),
        (status = 409, description = "tool_not_offered: the session's last prepared turn did not offer the tool, or no connected server offers it as signed now (not announced, or its definition changed); nothing was run", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used for another request", body = crate::error::ErrorBody),
        (status = 503, description = "The server did not complete the call, overloaded, timed out, agent not valid or store unavailable", body = crate::error::ErrorBody)))]
pub(super) async fn run_tool_call(
    State(st): State<Arc<AppState>>,
    axum::extract::Path((session_id, call_id)): axum::extract::Path<(String, String)>,
    Keyed(op): Keyed,
) -> Result<Response, ApiError> {
    if !super::extract::valid_session_id(&session_id) {
        return Err(ApiError::invalid(
            "a session id is 1-128 characters of letters, digits, `.`, `_`, `:` and `-`, \
             starts with a letter or a digit, and holds no `..`",
        ));
    }
    let loaded = st.current_valid()?;
    let id = session_id;
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        Ok(match session.run_tool_call_once(&call_id, op.as_ref())? {
            Outcome::Done(run) => answer(
                to_json(&ToolRunView {
                    call_id: run.call_id,
                    tool: run.tool,
                    output: run.output,
                    is_error: run.is_error,
                })?,
                false,
            ),
            Outcome::Repeated(a) => answer(a, true),
        })
    })
    .await
}

/// A session's recorded entries.
#[utoipa::path(get, path = "/v1/sessions/{session_id}", operation_id = "get_session",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The session", body = SessionView),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody)))]
pub(super) async fn get_session(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
) -> Result<Json<SessionView>, ApiError> {
    let loaded = st.loaded();
    blocking(move || {
        let entries = loaded.rt().session(id.as_str()).turns()?;
        if entries.is_empty() {
            return Err(ApiError::unknown_session(&id));
        }
        let turns = entries
            .into_iter()
            .map(|e| TurnEntry {
                seq: e.seq,
                role: e.role.name().to_owned(),
                content: e.content.as_str().to_owned(),
                call_id: e.call_id.map(|c| c.to_string()),
            })
            .collect();
        Ok(Json(SessionView {
            session_id: id,
            turns,
        }))
    })
    .await
}

async fn remove(
    st: Arc<AppState>,
    id: String,
    op: Option<OperationId>,
) -> Result<Response, ApiError> {
    let loaded = st.loaded();
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if let Some(done) = replay(&session, op.as_ref())? {
            return Ok(done);
        }
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        let respond = |n: &usize| to_json(&Removed { removed: *n });
        Ok(match &op {
            Some(op) => match session.reset_once(op, &respond)? {
                Outcome::Done(n) => answer(respond(&n)?, false),
                Outcome::Repeated(a) => answer(a, true),
            },
            None => answer(respond(&session.reset()?)?, false),
        })
    })
    .await
}

/// Forget a session's conversation.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/reset", operation_id = "reset_session",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing")),
    responses(
        (status = 200, description = "Entries removed", body = Removed),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody)))]
pub(super) async fn reset_session(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    Keyed(op): Keyed,
) -> Result<Response, ApiError> {
    remove(st, id, op).await
}

/// Delete a session (its conversation and per-session state).
#[utoipa::path(delete, path = "/v1/sessions/{session_id}", operation_id = "delete_session",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session"), ("Idempotency-Key" = Option<String>, Header, description = "Makes the operation retry-safe: 1-255 printable ASCII characters; a repeat with the same key and request gets the first answer and changes nothing")),
    responses(
        (status = 200, description = "Entries removed", body = Removed),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody)))]
pub(super) async fn delete_session(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    Keyed(op): Keyed,
) -> Result<Response, ApiError> {
    remove(st, id, op).await
}
