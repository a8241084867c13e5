//! The routes about the service itself rather than a session: liveness, readiness, this
//! OpenAPI document, Prometheus metrics and the loaded agent.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;
use crate::api::{AgentInfo, Status};
use crate::error::ApiError;

/// Liveness.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "service",
    responses((status = 200, description = "The process is alive", body = Status)))]
pub(super) async fn healthz() -> Json<Status> {
    Json(Status {
        status: "ok".into(),
    })
}

/// Readiness: the agent is loaded and valid now.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "service",
    responses(
        (status = 200, description = "Ready", body = Status),
        (status = 503, description = "The agent is outside its validity window", body = crate::error::ErrorBody)))]
pub(super) async fn readyz(State(st): State<Arc<AppState>>) -> Result<Json<Status>, ApiError> {
    st.current_valid()?;
    Ok(Json(Status {
        status: "ready".into(),
    }))
}

/// The OpenAPI document of this service.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "service",
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json")))]
pub(super) async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "service",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain"),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody)))]
pub(super) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    st.metrics.cache(st.loaded().rt().cache_stats());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.encode(),
    )
        .into_response()
}

/// The loaded agent.
#[utoipa::path(get, path = "/v1/agent", operation_id = "agent", tag = "agent",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The loaded agent", body = AgentInfo),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody)))]
pub(super) async fn agent(State(st): State<Arc<AppState>>) -> Json<AgentInfo> {
    let loaded = st.loaded();
    let a = loaded.rt().agent();
    let (not_before, not_after) = a.validity();
    let last_reload = st
        .reload_lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    Json(AgentInfo {
        agent_id: a.agent_id().to_owned(),
        version: a.version(),
        identity_digest: a.identity_digest().to_string(),
        payload_sha256: a.payload_sha256().to_owned(),
        signers: a.signers().iter().map(ToString::to_string).collect(),
        not_before,
        not_after,
        provider: st.settings.provider.name().to_owned(),
        model: st.settings.model.clone(),
        loaded_at_ms: loaded.loaded_at_ms,
        last_reload,
    })
}
