//! The long-term memory routes: store a memory of the loaded agent and search its memories.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use strata_memory::{NewMemory, SearchOptions};

use super::extract::{blocking, ApiJson};
use super::AppState;
use crate::api::{MemoryCreated, MemoryHit, MemoryRequest, SearchRequest, SearchResponse};
use crate::error::ApiError;

/// Store a long-term memory of the loaded agent.
#[utoipa::path(post, path = "/v1/memories", operation_id = "add_memory", tag = "memories",
    security(("bearer" = [])),
    request_body = MemoryRequest,
    responses(
        (status = 201, description = "Stored", body = MemoryCreated),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 413, description = "Over the section limit", body = crate::error::ErrorBody)))]
pub(super) async fn add_memory(
    State(st): State<Arc<AppState>>,
    ApiJson(req): ApiJson<MemoryRequest>,
) -> Result<(StatusCode, Json<MemoryCreated>), ApiError> {
    let loaded = st.current_valid()?;
    st.limits.check_section("the memory", req.content.len())?;
    if req.content.trim().is_empty() {
        return Err(ApiError::invalid("a memory needs non-empty `content`"));
    }
    blocking(move || {
        let rt = loaded.rt();
        let id =
            rt.remember(NewMemory::new(rt.agent().agent_id(), req.content).with_tags(req.tags))?;
        Ok((
            StatusCode::CREATED,
            Json(MemoryCreated { id: id.to_string() }),
        ))
    })
    .await
}

/// Search the loaded agent's long-term memories.
#[utoipa::path(post, path = "/v1/memories/search", operation_id = "search_memories",
    tag = "memories", security(("bearer" = [])),
    request_body = SearchRequest,
    responses(
        (status = 200, description = "Results, best first", body = SearchResponse),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody)))]
pub(super) async fn search_memories(
    State(st): State<Arc<AppState>>,
    ApiJson(req): ApiJson<SearchRequest>,
) -> Result<Json<SearchResponse>, ApiError> {
    let loaded = st.current_valid()?;
    let limit = req.limit.unwrap_or(5);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::invalid("`limit` is between 1 and 100"));
    }
    blocking(move || {
        let rt = loaded.rt();
        let mut opts = SearchOptions::top(limit);
        opts.agent_id = Some(rt.agent().agent_id().to_owned());
        let hits = rt.memory().search(&req.query, &opts)?;
        Ok(Json(SearchResponse {
            results: hits
                .into_iter()
                .map(|h| MemoryHit {
                    id: h.record.id.to_string(),
                    content: h.record.content.as_str().to_owned(),
                    score: h.score,
                    tags: h.record.tags.iter().map(ToString::to_string).collect(),
                })
                .collect(),
        }))
    })
    .await
}
