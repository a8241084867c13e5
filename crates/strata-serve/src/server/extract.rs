//! What handlers take from a request: a JSON body whose rejections are the service's JSON
//! errors, the same with the operation its `Idempotency-Key` names, a checked session id from
//! the path, and [`blocking`], which runs a handler's store and assembly work off the async
//! workers.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use serde::de::DeserializeOwned;
use strata_assembler::session::OperationId;

use crate::error::{ApiError, ErrorCode};

/// The header naming a retry-safe operation (the IETF httpapi draft's `Idempotency-Key`).
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The operation a request's `Idempotency-Key` names, fingerprinted by the method, the path
/// and the body, so that the same key with another request is told apart (ADR-0031). The key
/// may be sent bare or as a quoted structured-field string.
fn operation(
    headers: &HeaderMap,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Option<OperationId>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::invalid(
            "the Idempotency-Key header holds 1-255 characters of printable ASCII, bare or quoted",
        )
    };
    let v = v.to_str().map_err(|_| bad())?.trim();
    let key = v
        .strip_prefix('"')
        .and_then(|k| k.strip_suffix('"'))
        .unwrap_or(v);
    let mut request = Vec::with_capacity(method.len() + path.len() + body.len() + 2);
    request.extend_from_slice(method.as_bytes());
    request.push(b' ');
    request.extend_from_slice(path.as_bytes());
    request.push(b'\n');
    request.extend_from_slice(body);
    OperationId::new(key, &request).map(Some).map_err(|_| bad())
}

/// A JSON body with the operation its `Idempotency-Key` header names, if any.
pub(super) struct KeyedJson<T> {
    pub(super) body: T,
    pub(super) op: Option<OperationId>,
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for KeyedJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("application/json")
                    || (v.starts_with("application/") && v.ends_with("+json"))
            });
        if !json {
            return Err(ApiError::invalid(
                "send the body as JSON with `Content-Type: application/json`",
            ));
        }
        let headers = req.headers().clone();
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let bytes = match Bytes::from_request(req, state).await {
            Ok(b) => b,
            Err(rej) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::new(
                    ErrorCode::BodyTooLarge,
                    "the request body is over the server's limit (--max-body-bytes); send \
                     less, or raise the limit",
                ))
            }
            Err(rej) => return Err(ApiError::invalid(rej.body_text())),
        };
        let body = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::invalid(format!("the request body: {e}")))?;
        let op = operation(&headers, &method, &path, &bytes)?;
        Ok(KeyedJson { body, op })
    }
}

/// The operation an `Idempotency-Key` header names on a request without a body.
pub(super) struct Keyed(pub(super) Option<OperationId>);

impl<S: Send + Sync> FromRequestParts<S> for Keyed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        operation(&parts.headers, parts.method.as_str(), parts.uri.path(), &[]).map(Keyed)
    }
}

/// A JSON body whose rejections are the service's JSON errors.
pub(super) struct ApiJson<T>(pub(super) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rej) if rej.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
                ErrorCode::BodyTooLarge,
                "the request body is over the server's limit (--max-body-bytes); send less, or \
                 raise the limit",
            )),
            Err(rej) if rej.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE => Err(
                ApiError::invalid("send the body as JSON with `Content-Type: application/json`"),
            ),
            Err(rej) => Err(ApiError::invalid(rej.body_text())),
        }
    }
}

/// A session id from the path: 1-128 characters of `[A-Za-z0-9._:-]`, starting with a letter
/// or a digit and holding no `..`.
pub(super) struct SessionId(pub(super) String);

/// Whether `id` is a session id the service accepts: 1-128 characters of `[A-Za-z0-9._:-]`,
/// the first a letter or a digit, and no `..` (so that no id reads as a path step; ADR-0033).
pub(crate) fn valid_session_id(id: &str) -> bool {
    id.len() <= 128
        && id.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && !id.contains("..")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::invalid(e.body_text()))?;
        if !valid_session_id(&id) {
            return Err(ApiError::invalid(
                "a session id is 1-128 characters of letters, digits, `.`, `_`, `:` and `-`, \
                 starts with a letter or a digit, and holds no `..`",
            ));
        }
        Ok(SessionId(id))
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!(error = %e, "a request's worker failed");
        ApiError::new(
            ErrorCode::Internal,
            "the request's worker failed; see the server log",
        )
    })?
}
