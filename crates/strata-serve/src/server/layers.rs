//! The layers around the routes: [`guard`] (the body read within its timeout, then the
//! concurrency limit, the request timeout, the body limit, metrics and the access log) around
//! every matched route, and [`require_token`]
//! (the bearer token) around every route beyond health, readiness and this document.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::error::{ApiError, ErrorCode};

/// Concurrency limit, timeout, metrics and the access log, around every matched route.
pub(super) async fn guard(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = req.method().clone();
    let started = Instant::now();
    let exempt = matches!(route.as_str(), "/healthz" | "/readyz");
    // A request refused before its handler runs is counted like any other.
    let refused = |resp: Response| {
        st.metrics.request(
            &route,
            method.as_str(),
            resp.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
        resp
    };
    // The body is read before a concurrency slot is taken, within the read timeout, so that
    // clients sending slowly hold a connection but no slot (ADR-0033).
    let req = match read_body(&st, req).await {
        Ok(req) => req,
        Err(resp) => return refused(*resp),
    };
    let permit = if exempt {
        None
    } else {
        match st.permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => return refused(overloaded(&st, req).await),
        }
    };
    let declared = declared_length(&req);
    if let Some(len) = declared.filter(|l| *l > st.limits.max_body_bytes) {
        return refused(too_large(&st, req, len).await);
    }
    let has_body =
        declared.is_some_and(|l| l > 0) || req.headers().contains_key(header::TRANSFER_ENCODING);
    st.metrics.in_flight(1);
    let mut resp = match tokio::time::timeout(st.limits.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            ErrorCode::Timeout,
            format!(
                "the request took longer than {} s (--timeout-secs); retry, or raise the limit",
                st.limits.request_timeout.as_secs_f64()
            ),
        )
        .into_response(),
    };
    st.metrics.in_flight(-1);
    drop(permit);
    // A refusal may leave part of the request body unread (an extractor refused the path
    // before reading it): close the connection so a pooling client does not send its next
    // request into the leftover bytes.
    if has_body && (resp.status().is_client_error() || resp.status().is_server_error()) {
        resp.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    let secs = started.elapsed().as_secs_f64();
    let status = resp.status().as_u16();
    st.metrics.request(&route, method.as_str(), status, secs);
    tracing::info!(
        method = %method,
        route = %route,
        status,
        ms = secs * 1000.0,
        "request"
    );
    resp
}

/// The body length a request declares (`Content-Length`), if it declares one.
fn declared_length(req: &Request) -> Option<usize> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// `503 overloaded` at the concurrency limit. The body is read (and discarded) first, so that
/// the client, still sending it, receives the 503 instead of a reset connection.
async fn overloaded(st: &AppState, req: Request) -> Response {
    st.metrics.shed();
    let _ = axum::body::to_bytes(req.into_body(), st.limits.max_body_bytes).await;
    let mut e = ApiError::new(
        ErrorCode::Overloaded,
        "the server is at its concurrency limit; retry after the `Retry-After` seconds",
    );
    e.retry_after = Some(1);
    e.into_response()
}

/// `413 body_too_large` for a body declared `len` bytes, over the limit, before any handler
/// runs. The body is read (up to a bound) and discarded first, so the client, still sending,
/// receives the 413 instead of a reset connection.
async fn too_large(st: &AppState, req: Request, len: usize) -> Response {
    if len <= st.limits.max_body_bytes.saturating_mul(16) {
        let _ = axum::body::to_bytes(req.into_body(), len).await;
    }
    ApiError::new(
        ErrorCode::BodyTooLarge,
        format!(
            "the request body is {len} bytes, over the server's limit of {} (--max-body-bytes); send less, or raise the limit",
            st.limits.max_body_bytes
        ),
    )
    .into_response()
}

/// `req` with its body read into memory, within the read timeout and the body limit; a body
/// declared or found larger than the limit is `413 body_too_large`, one not sent in time is
/// `408 request_timeout`.
async fn read_body(st: &AppState, req: Request) -> Result<Request, Box<Response>> {
    let limit = st.limits.max_body_bytes;
    if declared_length(&req).is_some_and(|l| l > limit) {
        // Left to the check below, which reads a bounded part of it first.
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(st.limits.read_timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, axum::body::Body::from(bytes))),
        Ok(Err(_)) => Err(Box::new(
            ApiError::new(
                ErrorCode::BodyTooLarge,
                format!(
                    "the request body is over the server's limit of {limit} bytes (--max-body-bytes); send less, or raise the limit"
                ),
            )
            .into_response(),
        )),
        Err(_) => {
            let mut resp = ApiError::new(
                ErrorCode::RequestTimeout,
                format!(
                    "the request body did not arrive within {} s; send it at once, and retry",
                    st.limits.read_timeout.as_secs_f64()
                ),
            )
            .into_response();
            resp.headers_mut().insert(
                header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            Err(Box::new(resp))
        }
    }
}

/// Every protected route needs `Authorization: Bearer <token>` with an accepted token.
pub(super) async fn require_token(
    State(st): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    let refusal = match presented {
        None => "send `Authorization: Bearer <token>` with a token from the server's token file",
        Some(t) if !st.tokens.accepts(t) => {
            "the bearer token is not accepted; use one from the server's token file"
        }
        Some(_) => return next.run(req).await,
    };
    // Read (and discard) what the client is sending, bounded by the body limit, so that it
    // receives the 401 on a connection left in a clean state.
    let _ = axum::body::to_bytes(req.into_body(), st.limits.max_body_bytes).await;
    ApiError::new(ErrorCode::Unauthorized, refusal).into_response()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::StatusCode;
    use axum::middleware;
    use axum::routing::get;
    use axum::Router;
    use serde_json::Value;
    use tower::ServiceExt as _;

    use super::*;
    use crate::server::state::tests::demo_state;
    use crate::server::Limits;

    /// A route slower than the timeout is answered `503 timeout` at the limit, as JSON.
    /// Verifies ADR-0022.
    #[tokio::test]
    async fn a_request_past_the_timeout_is_answered_503_timeout() {
        let (st, _dir) = demo_state(Limits {
            request_timeout: Duration::from_millis(200),
            ..Limits::default()
        });
        let app = Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route_layer(middleware::from_fn_with_state(st.clone(), guard))
            .with_state(st);
        let started = Instant::now();
        let resp = app
            .oneshot(
                Request::builder()
                    .uri("/slow")
                    .body(axum::body::Body::empty())
                    .expect("request"),
            )
            .await
            .expect("response");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .expect("body");
        let v: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["error"]["code"], "timeout");
    }
}
