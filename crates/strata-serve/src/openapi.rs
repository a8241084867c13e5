//! The OpenAPI 3.1 document, generated from the handlers' annotations and the API types. The
//! checked-in copy (`docs/openapi.json`) is compared with it by a test, like the other
//! generated documents.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api;
use crate::error;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "strata serve",
        description = "The strata session API over HTTP: prepare a turn (the provider request \
            body and the assembly report), record replies and tool results, manage sessions and \
            memories. Every error is `{\"error\": {\"code\", \"message\"}}` with a stable code: \
            unauthorized, invalid_request, unknown_session, not_found, method_not_allowed, \
            body_too_large, budget, message_too_large, idempotency_key_reused, tool_not_allowed, \
            tool_not_offered, session_conflict, request_timeout, overloaded, timeout, \
            agent_unavailable, store_unavailable, tool_call_failed, internal. Every operation that changes a session takes an `Idempotency-Key` \
            header: a repeat with the same key and request gets the first answer (marked \
            `Idempotent-Replayed: true`) and changes nothing; the key with another request is \
            422 idempotency_key_reused. Keys live with the session for a day. A refused \
            operation changes nothing.",
        license(name = "Apache-2.0 OR MIT")
    ),
    paths(
        crate::server::probes::healthz,
        crate::server::probes::readyz,
        crate::server::probes::openapi,
        crate::server::probes::metrics,
        crate::server::probes::agent,
        crate::server::sessions::prepare_turn,
        crate::server::sessions::record_reply,
        crate::server::sessions::record_tool_result,
        crate::server::sessions::run_tool_call,
        crate::server::sessions::get_session,
        crate::server::sessions::reset_session,
        crate::server::sessions::delete_session,
        crate::server::goals::get_goals,
        crate::server::goals::create_goal,
        crate::server::goals::add_checkpoint,
        crate::server::goals::record_artifact,
        crate::server::goals::record_decision,
        crate::server::goals::answer_lock,
        crate::server::goals::record_file,
        crate::server::compactions::compact_session,
        crate::server::compactions::list_compactions,
        crate::server::memories::add_memory,
        crate::server::memories::search_memories,
    ),
    components(schemas(
        api::Status, api::AgentInfo, api::ReloadInfo, api::ToolSpec, api::TurnRequest,
        api::SkillSpec, api::InboundSpec, api::GoalsView, api::PendingLock, api::GoalView,
        api::CheckpointView, api::DecisionView, api::ArtifactView, api::GoalRequest,
        api::CheckpointRequest, api::ArtifactRequest, api::DecisionRequest, api::LockRequest,
        api::FileRequest, api::CompactionRequest, api::CompactionView, api::CompactionsView,
        api::TurnResponse, api::RefusedToolView, api::ToolCallSpec, api::ReplyRequest, api::ReplyResponse,
        api::ToolResultRequest, api::ToolRunView, api::KeepEnd, api::Recorded, api::TurnEntry, api::SessionView, api::Removed,
        api::MemoryRequest, api::MemoryCreated, api::SearchRequest, api::MemoryHit,
        api::SearchResponse, error::ErrorBody, error::ErrorDetail, error::ErrorCode,
    )),
    modifiers(&Bearer),
    tags(
        (name = "service", description = "Health, readiness, metrics, this document"),
        (name = "agent", description = "The loaded, verified agent"),
        (name = "sessions", description = "Conversations: prepare turns, record replies and tool results"),
        (name = "goals", description = "A session's goals and files, changed with the caller's authority"),
        (name = "memories", description = "Long-term memory of the loaded agent"),
    )
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document as pretty JSON with a final newline.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    let mut s = doc
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
