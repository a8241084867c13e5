//! JSON errors with a stable code (ADR-0022): every refusal the service gives, from a missing
//! token to an expired agent, is `{"error": {"code", "message"}}` with the status the code
//! implies, and the message says what to do.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use strata_assembler::{assemble::AssembleError, SessionError};
use strata_memory::MemoryError;
use strata_registry::GoalError;
use utoipa::ToSchema;

/// The stable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// 401: no bearer token, or not an accepted one.
    Unauthorized,
    /// 400: the request is malformed (JSON, unknown fields, values).
    InvalidRequest,
    /// 404: the session has no recorded turns.
    UnknownSession,
    /// 404: no such route.
    NotFound,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 413: the body or a section is over the configured size limit.
    BodyTooLarge,
    /// 422: the signed identity and sticky sections do not fit the budget.
    Budget,
    /// 422: the user's message cannot be sent even cut to its head and tail; nothing was
    /// recorded.
    MessageTooLarge,
    /// 422: the `Idempotency-Key` was used before for a different request on this session.
    IdempotencyKeyReused,
    /// 422: a reply calls a tool that is not on the agent's signed allowlist; nothing was
    /// recorded.
    ToolNotAllowed,
    /// 409: a recorded tool call cannot be run: the session's last prepared turn did not offer
    /// its tool, or no connected MCP server offers it as signed now; nothing was run or
    /// recorded. Not retried: prepare a turn first.
    ToolNotOffered,
    /// 409: the session changed while the request was prepared, again and again; retry.
    SessionConflict,
    /// 503: the memory store cannot be reached; retry after `Retry-After` seconds.
    StoreUnavailable,
    /// 408: the request body did not arrive within the read timeout.
    RequestTimeout,
    /// 503: the concurrency limit is reached; retry after `Retry-After` seconds.
    Overloaded,
    /// 503: the request took longer than the configured timeout.
    Timeout,
    /// 503: the loaded agent is outside its validity window.
    AgentUnavailable,
    /// 502: the MCP server of a recorded tool call did not complete the call (it failed,
    /// went away or did not answer in time); nothing was recorded. Not retried by the clients:
    /// the server may have run the tool before the connection failed, so the caller decides
    /// whether to run it again.
    ToolCallFailed,
    /// 500: the store or the service failed.
    Internal,
}

impl ErrorCode {
    /// The HTTP status of this code.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorCode::UnknownSession | ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::Budget
            | ErrorCode::MessageTooLarge
            | ErrorCode::IdempotencyKeyReused
            | ErrorCode::ToolNotAllowed => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::SessionConflict | ErrorCode::ToolNotOffered => StatusCode::CONFLICT,
            ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::Overloaded
            | ErrorCode::Timeout
            | ErrorCode::AgentUnavailable
            | ErrorCode::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ToolCallFailed => StatusCode::BAD_GATEWAY,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The code as written in responses and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnknownSession => "unknown_session",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::Budget => "budget",
            ErrorCode::MessageTooLarge => "message_too_large",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::ToolNotAllowed => "tool_not_allowed",
            ErrorCode::SessionConflict => "session_conflict",
            ErrorCode::ToolNotOffered => "tool_not_offered",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Timeout => "timeout",
            ErrorCode::AgentUnavailable => "agent_unavailable",
            ErrorCode::ToolCallFailed => "tool_call_failed",
            ErrorCode::Internal => "internal",
        }
    }
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Code and message.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable code; see the list in the API description.
    pub code: ErrorCode,
    /// What went wrong and what to do about it.
    pub message: String,
}

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    /// The code.
    pub code: ErrorCode,
    /// The message.
    pub message: String,
    /// Seconds for `Retry-After` (overload).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400 with a message.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    /// 404 for a session with no recorded turns.
    pub fn unknown_session(id: &str) -> ApiError {
        ApiError::new(
            ErrorCode::UnknownSession,
            format!(
                "session `{id}` has no recorded turns; start it with POST /v1/sessions/{id}/turns and a `message`"
            ),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if self.code == ErrorCode::Unauthorized {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"strata\""),
            );
        }
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        let message = e.to_string();
        let code = match &e {
            SessionError::Goals(
                GoalError::GoalNotFound(_)
                | GoalError::DecisionNotFound { .. }
                | GoalError::CheckpointNotFound { .. },
            ) => ErrorCode::NotFound,
            SessionError::Goals(GoalError::KeyReused { .. }) => ErrorCode::IdempotencyKeyReused,
            SessionError::Invalid(_) | SessionError::Input(_) | SessionError::Goals(_) => {
                ErrorCode::InvalidRequest
            }
            SessionError::KeyReused { .. } => ErrorCode::IdempotencyKeyReused,
            SessionError::ToolNotAllowed { .. } => ErrorCode::ToolNotAllowed,
            SessionError::ToolNotOffered { .. } => ErrorCode::ToolNotOffered,
            // The tool's MCP server did not complete the call: the upstream failed, not this
            // service. Not retried for the caller: the tool may have run.
            SessionError::ToolCallFailed(_) => ErrorCode::ToolCallFailed,
            SessionError::Store(m) => match m {
                MemoryError::Invalid { .. } => ErrorCode::InvalidRequest,
                MemoryError::EntryTooLarge { .. } => ErrorCode::BodyTooLarge,
                MemoryError::SessionChanged { .. } => ErrorCode::SessionConflict,
                MemoryError::ConnectionLost { .. } | MemoryError::Locked { .. } => {
                    ErrorCode::StoreUnavailable
                }
                _ => ErrorCode::Internal,
            },
            SessionError::Assemble(a) => match a {
                AssembleError::AgentNotValid(_) => ErrorCode::AgentUnavailable,
                AssembleError::MessageTooLarge { .. } => ErrorCode::MessageTooLarge,
                AssembleError::IdentityExceedsBudget { .. }
                | AssembleError::ToolsExceedBudget { .. }
                | AssembleError::StickyExceedsBudget { .. }
                | AssembleError::CharsExceeded { .. }
                | AssembleError::Budget(_) => ErrorCode::Budget,
                _ => ErrorCode::InvalidRequest,
            },
            _ => ErrorCode::Internal,
        };
        if code == ErrorCode::Internal {
            tracing::error!(error = %message, "session step failed");
        }
        let mut err = ApiError::new(code, message);
        // Passing conditions carry Retry-After (ADR-0033).
        if code == ErrorCode::StoreUnavailable {
            tracing::warn!(error = %err.message, "the memory store is unavailable");
            err.retry_after = Some(1);
        }
        if code == ErrorCode::SessionConflict {
            err.retry_after = Some(1);
        }
        err
    }
}

impl From<MemoryError> for ApiError {
    fn from(e: MemoryError) -> ApiError {
        ApiError::from(SessionError::Store(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_mcp_call_is_a_bad_gateway_not_a_timeout() {
        let e = ApiError::from(SessionError::ToolCallFailed(
            "MCP server `docs` did not complete the call of `lookup`: connection closed".into(),
        ));
        assert_eq!(e.code, ErrorCode::ToolCallFailed);
        assert_eq!(e.code.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(e.code.as_str(), "tool_call_failed");
        assert_eq!(e.retry_after, None);
        assert!(e.message.contains("nothing was recorded"), "{}", e.message);
    }
}
