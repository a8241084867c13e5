//! `strata serve`: the session API of `strata-assembler` as an HTTP/JSON service, for agent
//! runtimes not written in Rust (ADR-0022).
//!
//! One long-running process verifies the signed agent at start, keeps its tokenizer, caches and
//! store connections warm, and serves every session: prepare a turn (the provider request body
//! and the report), record replies and tool results, reset or delete sessions, add and search
//! memories. Safe by default: loopback only, bearer tokens (stored hashed, compared in constant
//! time) on everything beyond health, body and section size limits, per-request timeouts, a
//! concurrency limit answered with `503` and `Retry-After`, no request content in logs unless
//! asked, TLS through rustls when a certificate is given. SIGHUP or a changed definition
//! re-verifies and swaps the agent atomically; a refused reload keeps the running one.

#![forbid(unsafe_code)]
// Every function fits on a screen (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod agent;
mod api;
mod auth;
mod error;
mod metrics;
mod openapi;
mod server;

pub use agent::{AgentSource, LoadError, RollbackSpec};
pub use api::*;
pub use auth::{TokenError, TokenSet, MIN_TOKEN_CHARS};
pub use error::{ApiError, ErrorBody, ErrorCode, ErrorDetail};
pub use metrics::Metrics;
pub use openapi::document as openapi_document;
pub use server::{
    router, serve, serve_on, AppState, Bound, Limits, Listen, Listener, ReceiptLogSpec,
    RuntimeSettings, ServeError, ServeOptions, TlsFiles,
};
