//! What handlers take from a request: a JSON body whose rejections are the service's JSON
//! errors, a checked session id from the path, and [`blocking`], which runs a handler's
//! store and assembly work off the async workers.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};

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

/// A session id from the path: 1-128 characters of `[A-Za-z0-9._:-]`.
pub(super) struct SessionId(pub(super) String);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::invalid(e.body_text()))?;
        let ok = !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if !ok {
            return Err(ApiError::invalid(
                "a session id is 1-128 characters of letters, digits, `.`, `_`, `:` and `-`",
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
