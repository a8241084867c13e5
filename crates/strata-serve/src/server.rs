//! The service: options, shared state, the router and the serving loop (ADR-0022).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use strata_assembler::{
    AnnouncedTool, AssemblyPath, PromptMode, Provider, Reply, Runtime, SectionSpec, SessionError,
    StoreSpec, ToolCall, ToolName, TurnOptions,
};
use strata_memory::{NewMemory, SearchOptions};
use tokio::sync::Semaphore;

use crate::agent::{AgentSource, Fingerprint, LoadError};
use crate::api::{
    AgentInfo, MemoryCreated, MemoryHit, MemoryRequest, Recorded, ReloadInfo, Removed,
    ReplyRequest, ReplyResponse, SearchRequest, SearchResponse, SessionView, Status,
    ToolResultRequest, TurnEntry, TurnRequest, TurnResponse,
};
use crate::auth::TokenSet;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;

/// Where the service listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address (default `127.0.0.1:8177`; port 0 picks a free port).
    Tcp(SocketAddr),
    /// A Unix domain socket path (created with mode 0600).
    Unix(PathBuf),
}

impl Default for Listen {
    fn default() -> Self {
        Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 8177)))
    }
}

/// A certificate chain and private key (PEM) for TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

/// Limits on what one request may cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body, bytes (default 1 MiB).
    pub max_body_bytes: usize,
    /// Largest extra section or message, bytes (default 256 KiB).
    pub max_section_bytes: usize,
    /// Longest a request may take before `503 timeout` (default 30 s).
    pub request_timeout: Duration,
    /// Requests served at once; past it, `503 overloaded` with `Retry-After` (default 64).
    pub concurrency: usize,
    /// How long shutdown waits for in-flight requests (default 30 s).
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1 << 20,
            max_section_bytes: 256 << 10,
            request_timeout: Duration::from_secs(30),
            concurrency: 64,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// Refuse a message, extra section, tool output or memory over the section limit.
    fn check_section(&self, what: &str, len: usize) -> Result<(), ApiError> {
        let max = self.max_section_bytes;
        if len <= max {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::BodyTooLarge,
            format!(
                "{what} is {len} bytes, over the {max}-byte section limit (--max-section-bytes); shorten it, or raise the limit"
            ),
        ))
    }
}

/// How each runtime is built from a verified agent.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// The memory store.
    pub store: StoreSpec,
    /// A `strata.toml`.
    pub config: Option<PathBuf>,
    /// The provider requests are written for.
    pub provider: Provider,
    /// The model named in requests.
    pub model: String,
    /// Maximum output tokens.
    pub max_tokens: u32,
    /// A key to sign a receipt for every prepared turn.
    pub receipt_key: Option<PathBuf>,
}

impl RuntimeSettings {
    fn build(&self, agent: strata_assembler::VerifiedAgent) -> Result<Runtime, SessionError> {
        let mut b = Runtime::builder(agent)
            .provider(self.provider, self.model.clone())
            .max_tokens(self.max_tokens);
        b = match &self.store {
            StoreSpec::Sqlite(path) => b.sqlite(path.clone()),
            StoreSpec::Postgres(url) => b.postgres(url.clone()),
        };
        if let Some(cfg) = &self.config {
            b = b.config_file(cfg)?;
        }
        if let Some(path) = &self.receipt_key {
            let key = strata_agentdef::KeyPair::read_private(path).map_err(|e| {
                SessionError::Invalid(format!("receipt key {}: {e}", path.display()))
            })?;
            b = b.receipt_key(key);
        }
        let runtime = b.build()?;
        // The encoder's tables and the vocabulary's lookup, built before the first request
        // rather than during it (ADR-0020).
        runtime.tokenizer().warm_up();
        Ok(runtime)
    }
}

/// Everything `strata serve` needs.
#[derive(Debug)]
pub struct ServeOptions {
    /// The signed definition, its trust store and the rollback guard.
    pub source: AgentSource,
    /// How runtimes are built.
    pub runtime: RuntimeSettings,
    /// Where to listen.
    pub listen: Listen,
    /// TLS, when given.
    pub tls: Option<TlsFiles>,
    /// Accepted bearer tokens.
    pub tokens: TokenSet,
    /// Limits.
    pub limits: Limits,
    /// Log request content (messages, tool output) at debug level. Off by default.
    pub log_content: bool,
    /// Poll the definition and trust store files this often and reload on change.
    pub watch: Option<Duration>,
    /// Append every prepared turn's signed receipt to this receipt log (needs a receipt key).
    pub receipt_log: Option<ReceiptLogSpec>,
}

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The agent was refused at start.
    #[error("agent refused at start: {0}")]
    Agent(#[from] LoadError),
    /// The runtime could not be built (store, configuration).
    #[error("runtime: {0}")]
    Runtime(#[from] SessionError),
    /// Binding, TLS or serving failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

struct Loaded {
    /// Always `Some` until dropped.
    runtime: Option<Runtime>,
    loaded_at_ms: i64,
}

impl Loaded {
    fn new(runtime: Runtime, loaded_at_ms: i64) -> Loaded {
        Loaded {
            runtime: Some(runtime),
            loaded_at_ms,
        }
    }

    fn rt(&self) -> &Runtime {
        self.runtime
            .as_ref()
            .expect("a loaded runtime until dropped")
    }
}

impl Drop for Loaded {
    /// A replaced runtime is dropped on a thread of its own: the last reference may be held by
    /// a request on an async worker, and closing a PostgreSQL client blocks, which must not
    /// happen on a worker.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            let _ = std::thread::Builder::new()
                .name("strata-retire".into())
                .spawn(move || drop(rt));
        }
    }
}

/// State shared by every request.
pub struct AppState {
    current: ArcSwap<Loaded>,
    source: AgentSource,
    settings: RuntimeSettings,
    tokens: TokenSet,
    limits: Limits,
    log_content: bool,
    metrics: Metrics,
    permits: Arc<Semaphore>,
    reload_lock: Mutex<Option<ReloadInfo>>,
    receipt_log: Option<Mutex<ReceiptSink>>,
}

/// Where a server appends the receipts it signs (ADR-0021).
#[derive(Debug, Clone)]
pub enum ReceiptLogSpec {
    /// A file log: one server per file (the file is locked).
    File(PathBuf),
    /// The receipt log in PostgreSQL, one chain shared by every server on it.
    Postgres {
        /// Connection string.
        url: String,
        /// Schema holding the `receipt_log` table.
        schema: String,
        /// Create the table if it does not exist yet (a one-time operator step).
        init: bool,
    },
}

/// An open receipt log.
#[derive(Debug)]
enum ReceiptSink {
    File(strata_assembler::ReceiptLog),
    Postgres(Box<strata_assembler::PgReceiptLog>),
}

impl ReceiptSink {
    fn append(&mut self, envelope: &[u8]) -> Result<(), strata_assembler::LogError> {
        match self {
            ReceiptSink::File(log) => log.append(envelope).map(drop),
            ReceiptSink::Postgres(log) => log.append(envelope).map(drop),
        }
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl AppState {
    /// Verify the agent and build its runtime.
    pub fn start(
        source: AgentSource,
        settings: RuntimeSettings,
        tokens: TokenSet,
        limits: Limits,
        log_content: bool,
    ) -> Result<AppState, ServeError> {
        let agent = source.load()?;
        let runtime = settings.build(agent)?;
        tracing::info!(
            agent = runtime.agent().agent_id(),
            version = runtime.agent().version(),
            identity = %runtime.agent().identity_digest(),
            "agent verified"
        );
        Ok(AppState {
            current: ArcSwap::from_pointee(Loaded::new(runtime, now_ms())),
            source,
            settings,
            tokens,
            permits: Arc::new(Semaphore::new(limits.concurrency.max(1))),
            limits,
            log_content,
            metrics: Metrics::new(),
            reload_lock: Mutex::new(None),
            receipt_log: None,
        })
    }

    /// Append every prepared turn's receipt to `spec`'s log: a file log is opened (and a record
    /// a crash cut short removed) now and locked against other writers; the PostgreSQL log is
    /// audited (chain only) and shared with other servers (ADR-0021).
    pub fn with_receipt_log(mut self, spec: &ReceiptLogSpec) -> Result<AppState, ServeError> {
        let what = match spec {
            ReceiptLogSpec::File(path) => format!("receipt log {}", path.display()),
            ReceiptLogSpec::Postgres { schema, .. } => {
                format!("receipt log in PostgreSQL schema {schema}")
            }
        };
        let fail = |e: strata_assembler::LogError| ServeError::Io {
            what: what.clone(),
            source: std::io::Error::other(e.to_string()),
        };
        if self.settings.receipt_key.is_none() {
            return Err(ServeError::Io {
                what,
                source: std::io::Error::other("a receipt log needs a receipt key (--receipt-key)"),
            });
        }
        let sink = match spec {
            ReceiptLogSpec::File(path) => {
                let (log, removed) =
                    strata_assembler::ReceiptLog::open_after_crash(path).map_err(fail)?;
                tracing::info!(path = %path.display(), entries = log.len(), head = %log.head(), torn_bytes_removed = removed, "receipt log open");
                ReceiptSink::File(log)
            }
            ReceiptLogSpec::Postgres { url, schema, init } => {
                let log = match strata_assembler::PgReceiptLog::open(url, schema) {
                    Err(strata_assembler::LogError::NotInitialised { .. }) if *init => {
                        strata_assembler::PgReceiptLog::init(url, schema)
                    }
                    other => other,
                }
                .map_err(fail)?;
                ReceiptSink::Postgres(Box::new(log))
            }
        };
        self.receipt_log = Some(Mutex::new(sink));
        Ok(self)
    }

    /// Verify the files again and swap the runtime in if they verify; otherwise keep the
    /// running agent. Blocking (store connections, file reads).
    pub fn reload(&self) -> Result<(), String> {
        let mut last = self
            .reload_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let outcome = self
            .source
            .load()
            .map_err(|e| e.to_string())
            .and_then(|agent| self.settings.build(agent).map_err(|e| e.to_string()));
        let at_ms = now_ms();
        match outcome {
            Ok(runtime) => {
                tracing::info!(
                    agent = runtime.agent().agent_id(),
                    version = runtime.agent().version(),
                    identity = %runtime.agent().identity_digest(),
                    "agent reloaded"
                );
                self.current.store(Arc::new(Loaded::new(runtime, at_ms)));
                self.metrics.reload(true);
                *last = Some(ReloadInfo {
                    at_ms,
                    ok: true,
                    error: None,
                });
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "reload refused; the running agent is kept");
                self.metrics.reload(false);
                *last = Some(ReloadInfo {
                    at_ms,
                    ok: false,
                    error: Some(e.clone()),
                });
                Err(e)
            }
        }
    }

    fn loaded(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// The loaded agent, checked against the clock (validity is re-checked on every request).
    fn current_valid(&self) -> Result<Arc<Loaded>, ApiError> {
        let loaded = self.loaded();
        loaded.rt().agent().check_current().map_err(|e| {
            ApiError::new(
                ErrorCode::AgentUnavailable,
                format!(
                    "the loaded agent is not valid now: {e}; sign a current definition and reload (SIGHUP)"
                ),
            )
        })?;
        Ok(loaded)
    }
}

/// A JSON body whose rejections are the service's JSON errors.
struct ApiJson<T>(T);

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
struct SessionId(String);

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

async fn blocking<T: Send + 'static>(
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

/// The router with every route, the token check, limits and metrics.
pub fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/agent", get(agent))
        .route(
            "/v1/sessions/{session_id}",
            get(get_session).delete(delete_session),
        )
        .route("/v1/sessions/{session_id}/turns", post(prepare_turn))
        .route("/v1/sessions/{session_id}/replies", post(record_reply))
        .route(
            "/v1/sessions/{session_id}/tool-results",
            post(record_tool_result),
        )
        .route("/v1/sessions/{session_id}/reset", post(reset_session))
        .route("/v1/memories", post(add_memory))
        .route("/v1/memories/search", post(search_memories))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        .merge(protected)
        .route_layer(middleware::from_fn_with_state(state.clone(), guard))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .with_state(state)
}

/// Concurrency limit, timeout, metrics and the access log, around every matched route.
async fn guard(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = req.method().clone();
    let started = Instant::now();
    let exempt = matches!(route.as_str(), "/healthz" | "/readyz");
    let permit = if exempt {
        None
    } else {
        match st.permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                st.metrics.shed();
                // Read (and discard) the body first, so that the client, still sending it,
                // receives the 503 instead of a reset connection.
                let _ = axum::body::to_bytes(req.into_body(), st.limits.max_body_bytes).await;
                let mut e = ApiError::new(
                    ErrorCode::Overloaded,
                    "the server is at its concurrency limit; retry after the `Retry-After` seconds",
                );
                e.retry_after = Some(1);
                let resp = e.into_response();
                st.metrics.request(
                    &route,
                    method.as_str(),
                    resp.status().as_u16(),
                    started.elapsed().as_secs_f64(),
                );
                return resp;
            }
        }
    };
    // A body declared larger than the limit is refused before any handler runs; it is read
    // (up to a bound) and discarded first, so the client, still sending, receives the 413
    // instead of a reset connection.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(len) = declared.filter(|l| *l > st.limits.max_body_bytes) {
        if len <= st.limits.max_body_bytes.saturating_mul(16) {
            let _ = axum::body::to_bytes(req.into_body(), len).await;
        }
        let resp = ApiError::new(
            ErrorCode::BodyTooLarge,
            format!(
                "the request body is {len} bytes, over the server's limit of {} (--max-body-bytes); send less, or raise the limit",
                st.limits.max_body_bytes
            ),
        )
        .into_response();
        st.metrics.request(
            &route,
            method.as_str(),
            resp.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
        return resp;
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

/// Every protected route needs `Authorization: Bearer <token>` with an accepted token.
async fn require_token(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
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

async fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such route; GET /openapi.json lists the routes",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "the route does not take this method; GET /openapi.json lists the methods",
    )
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "service",
    responses((status = 200, description = "The process is alive", body = Status)))]
async fn healthz() -> Json<Status> {
    Json(Status {
        status: "ok".into(),
    })
}

/// Readiness: the agent is loaded and valid now.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "service",
    responses(
        (status = 200, description = "Ready", body = Status),
        (status = 503, description = "The agent is outside its validity window", body = crate::error::ErrorBody)))]
async fn readyz(State(st): State<Arc<AppState>>) -> Result<Json<Status>, ApiError> {
    st.current_valid()?;
    Ok(Json(Status {
        status: "ready".into(),
    }))
}

/// The OpenAPI document of this service.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "service",
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi() -> Response {
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
async fn metrics(State(st): State<Arc<AppState>>) -> Response {
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
async fn agent(State(st): State<Arc<AppState>>) -> Json<AgentInfo> {
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
    opts.context_window = req.context_window;
    if let Some(tools) = req.tools {
        let mut out = Vec::with_capacity(tools.len());
        for t in tools {
            let name = t.name.clone();
            let v = serde_json::to_value(&t)
                .map_err(|e| ApiError::invalid(format!("tool `{name}`: {e}")))?;
            let tool: AnnouncedTool = serde_json::from_value(v)
                .map_err(|e| ApiError::invalid(format!("tool `{name}`: {e}")))?;
            out.push(tool);
        }
        opts.tools = Some(out);
    }
    if let Some(m) = &req.message {
        st.limits.check_section("the message", m.len())?;
    }
    for (i, v) in req.sections.unwrap_or_default().into_iter().enumerate() {
        let spec: SectionSpec = serde_json::from_value(v)
            .map_err(|e| ApiError::invalid(format!("sections[{i}]: {e}")))?;
        st.limits.check_section(
            &format!("sections[{i}] (`{}`)", spec.id),
            spec.content.len(),
        )?;
        let s = spec
            .into_section()
            .map_err(|e| ApiError::invalid(format!("sections[{i}]: {e}")))?;
        opts.sections.push(s);
    }
    Ok((req.message, opts))
}

/// Prepare a turn: record the user's message (if any) and return the provider request.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/turns", operation_id = "prepare_turn",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "1-128 characters of [A-Za-z0-9._:-]")),
    request_body = TurnRequest,
    responses(
        (status = 200, description = "The request to send", body = TurnResponse),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Continuing a session with no turns", body = crate::error::ErrorBody),
        (status = 413, description = "Body or section over the limit", body = crate::error::ErrorBody),
        (status = 422, description = "The identity and sticky sections do not fit", body = crate::error::ErrorBody),
        (status = 503, description = "Overloaded, timed out or agent not valid", body = crate::error::ErrorBody)))]
async fn prepare_turn(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    ApiJson(req): ApiJson<TurnRequest>,
) -> Result<Json<TurnResponse>, ApiError> {
    let loaded = st.current_valid()?;
    let (message, opts) = turn_options(&st, req)?;
    if st.log_content {
        tracing::debug!(session = %id, message = ?message, "turn content");
    }
    let st2 = st.clone();
    blocking(move || {
        let rt = loaded.rt();
        let session = rt.session(id.as_str());
        let prepared = match &message {
            Some(m) => session.prepare(m, &opts)?,
            None => {
                if !session.exists()? {
                    return Err(ApiError::unknown_session(&id));
                }
                session.continue_turn(&opts)?
            }
        };
        st2.metrics.turn(prepared.report());
        let report = serde_json::to_value(prepared.report())
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("report: {e}")))?;
        let receipt = match &prepared.receipt {
            Some(r) => {
                let envelope = r.to_json();
                if let Some(log) = &st2.receipt_log {
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
        Ok(Json(TurnResponse {
            session_id: id,
            provider: st2.settings.provider.name().to_owned(),
            identity_digest: prepared.identity_digest().to_string(),
            request: prepared.body,
            report,
            receipt,
        }))
    })
    .await
}

/// Record the model's reply (text and tool calls).
#[utoipa::path(post, path = "/v1/sessions/{session_id}/replies", operation_id = "record_reply",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    request_body = ReplyRequest,
    responses(
        (status = 200, description = "Recorded", body = ReplyResponse),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody),
        (status = 503, description = "Overloaded, timed out or agent not valid", body = crate::error::ErrorBody)))]
async fn record_reply(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    ApiJson(req): ApiJson<ReplyRequest>,
) -> Result<Json<ReplyResponse>, ApiError> {
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
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        let report = session.record_reply(&reply)?;
        let refused: Vec<Value> = report
            .refused()
            .map(|(m, why)| json!({ "marker": format!("{m:?}"), "reason": why }))
            .collect();
        Ok(Json(ReplyResponse {
            goals: json!({
                "markers": report.outcomes.len(),
                "refused": refused,
                "malformed": report.malformed.len(),
            }),
        }))
    })
    .await
}

/// Record a tool's output.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/tool-results",
    operation_id = "record_tool_result", tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    request_body = ToolResultRequest,
    responses(
        (status = 200, description = "Recorded", body = Recorded),
        (status = 400, description = "Invalid (e.g. no such call in the session)", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody),
        (status = 413, description = "Output over the section limit", body = crate::error::ErrorBody),
        (status = 503, description = "Overloaded, timed out or agent not valid", body = crate::error::ErrorBody)))]
async fn record_tool_result(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
    ApiJson(req): ApiJson<ToolResultRequest>,
) -> Result<Json<Recorded>, ApiError> {
    let loaded = st.current_valid()?;
    st.limits
        .check_section("the tool output", req.output.len())?;
    if st.log_content {
        tracing::debug!(session = %id, call = %req.call_id, output = %req.output, "tool result content");
    }
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        session.record_tool_result(&req.call_id, &req.output)?;
        Ok(Json(Recorded { recorded: true }))
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
async fn get_session(
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

async fn remove(st: Arc<AppState>, id: String) -> Result<Json<Removed>, ApiError> {
    let loaded = st.loaded();
    blocking(move || {
        let session = loaded.rt().session(id.as_str());
        if !session.exists()? {
            return Err(ApiError::unknown_session(&id));
        }
        Ok(Json(Removed {
            removed: session.reset()?,
        }))
    })
    .await
}

/// Forget a session's conversation.
#[utoipa::path(post, path = "/v1/sessions/{session_id}/reset", operation_id = "reset_session",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "Entries removed", body = Removed),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody)))]
async fn reset_session(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
) -> Result<Json<Removed>, ApiError> {
    remove(st, id).await
}

/// Delete a session (its conversation and per-session state).
#[utoipa::path(delete, path = "/v1/sessions/{session_id}", operation_id = "delete_session",
    tag = "sessions", security(("bearer" = [])),
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "Entries removed", body = Removed),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 404, description = "Unknown session", body = crate::error::ErrorBody)))]
async fn delete_session(
    State(st): State<Arc<AppState>>,
    SessionId(id): SessionId,
) -> Result<Json<Removed>, ApiError> {
    remove(st, id).await
}

/// Store a long-term memory of the loaded agent.
#[utoipa::path(post, path = "/v1/memories", operation_id = "add_memory", tag = "memories",
    security(("bearer" = [])),
    request_body = MemoryRequest,
    responses(
        (status = 201, description = "Stored", body = MemoryCreated),
        (status = 400, description = "Invalid request", body = crate::error::ErrorBody),
        (status = 401, description = "No or wrong token", body = crate::error::ErrorBody),
        (status = 413, description = "Over the section limit", body = crate::error::ErrorBody)))]
async fn add_memory(
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
        let rec = rt
            .memory()
            .put(NewMemory::new(rt.agent().agent_id(), req.content).with_tags(req.tags))?;
        Ok((
            StatusCode::CREATED,
            Json(MemoryCreated {
                id: rec.id.to_string(),
            }),
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
async fn search_memories(
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

/// What `serve` reports once it is listening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// `http://` or `https://` and the address.
    Tcp(String),
    /// The socket path.
    Unix(PathBuf),
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Tcp(url) => f.write_str(url),
            Bound::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// Start the service and serve until SIGTERM or SIGINT, then drain in-flight requests.
/// `on_ready` is called once, with the bound address, when connections are accepted.
pub async fn serve(
    opts: ServeOptions,
    on_ready: impl FnOnce(&Bound) + Send,
) -> Result<(), ServeError> {
    let ServeOptions {
        source,
        runtime,
        listen,
        tls,
        tokens,
        limits,
        log_content,
        watch,
        receipt_log,
    } = opts;
    let grace = limits.shutdown_grace;
    let state = {
        let source = source;
        tokio::task::spawn_blocking(move || {
            let st = AppState::start(source, runtime, tokens, limits, log_content)?;
            match &receipt_log {
                Some(spec) => st.with_receipt_log(spec),
                None => Ok(st),
            }
        })
        .await
        .map_err(|e| ServeError::Io {
            what: "starting".into(),
            source: std::io::Error::other(e.to_string()),
        })??
    };
    let state = Arc::new(state);
    let app = router(state.clone());
    let tls_config = match &tls {
        Some(files) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            Some(
                axum_server::tls_rustls::RustlsConfig::from_pem_file(&files.cert, &files.key)
                    .await
                    .map_err(io(format!(
                        "TLS certificate {} / key {}",
                        files.cert.display(),
                        files.key.display()
                    )))?,
            )
        }
        None => None,
    };
    let scheme = if tls_config.is_some() {
        "https"
    } else {
        "http"
    };

    spawn_reloaders(state.clone(), watch);

    match listen {
        Listen::Tcp(addr) => {
            let listener =
                std::net::TcpListener::bind(addr).map_err(io(format!("binding {addr}")))?;
            listener
                .set_nonblocking(true)
                .map_err(io("configuring the listener"))?;
            let local = listener
                .local_addr()
                .map_err(io("reading the bound address"))?;
            if !local.ip().is_loopback() && tls_config.is_none() {
                tracing::warn!(%local, "listening beyond loopback without TLS: tokens and prompts cross the network in clear text");
            }
            let handle = axum_server::Handle::new();
            spawn_shutdown(handle.clone(), grace);
            let make = app.into_make_service();
            on_ready(&Bound::Tcp(format!("{scheme}://{local}")));
            match tls_config {
                Some(cfg) => axum_server::tls_rustls::from_tcp_rustls(listener, cfg)
                    .map_err(io("TLS listener"))?
                    .handle(handle)
                    .serve(make)
                    .await
                    .map_err(io("serving"))?,
                None => axum_server::from_tcp(listener)
                    .map_err(io("listener"))?
                    .handle(handle)
                    .serve(make)
                    .await
                    .map_err(io("serving"))?,
            }
        }
        Listen::Unix(path) => {
            remove_stale_socket(&path)?;
            let listener = std::os::unix::net::UnixListener::bind(&path)
                .map_err(io(format!("binding {}", path.display())))?;
            {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(io(format!("restricting {}", path.display())))?;
            }
            listener
                .set_nonblocking(true)
                .map_err(io("configuring the listener"))?;
            let handle = axum_server::Handle::new();
            spawn_shutdown(handle.clone(), grace);
            let make = app.into_make_service();
            on_ready(&Bound::Unix(path.clone()));
            let served = match tls_config {
                Some(cfg) => {
                    axum_server::tls_rustls::from_unix_rustls(listener, cfg)
                        .map_err(io("TLS listener"))?
                        .handle(handle)
                        .serve(make)
                        .await
                }
                None => {
                    axum_server::from_unix(listener)
                        .map_err(io("listener"))?
                        .handle(handle)
                        .serve(make)
                        .await
                }
            };
            let _ = std::fs::remove_file(&path);
            served.map_err(io("serving"))?;
        }
    }
    tracing::info!("stopped");
    Ok(())
}

fn remove_stale_socket(path: &std::path::Path) -> Result<(), ServeError> {
    use std::os::unix::fs::FileTypeExt as _;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ServeError::Io {
                    what: format!("binding {}", path.display()),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AddrInUse,
                        "another server is listening on this socket",
                    ),
                });
            }
            std::fs::remove_file(path).map_err(io(format!("removing stale {}", path.display())))
        }
        Ok(_) => Err(ServeError::Io {
            what: format!("binding {}", path.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way; choose another path",
            ),
        }),
        Err(_) => Ok(()),
    }
}

fn spawn_shutdown<A>(handle: axum_server::Handle<A>, grace: Duration)
where
    A: axum_server::Address + Send + Sync + 'static,
{
    tokio::spawn(async move {
        wait_for_stop().await;
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            "stopping: draining in-flight requests"
        );
        handle.graceful_shutdown(Some(grace));
    });
}

async fn wait_for_stop() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for SIGTERM/SIGINT; stop the server with SIGKILL");
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

fn spawn_reloaders(state: Arc<AppState>, watch: Option<Duration>) {
    let st = state.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::error!("cannot listen for SIGHUP; reload by restarting");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: verifying the agent definition again");
            let st = st.clone();
            let _ = tokio::task::spawn_blocking(move || st.reload()).await;
        }
    });
    if let Some(every) = watch {
        tokio::spawn(async move {
            let mut seen: Fingerprint = state.source.fingerprint();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let now = state.source.fingerprint();
                if now != seen {
                    seen = now;
                    tracing::info!(file = %state.source.agent_path().display(), "definition or trust store changed: verifying again");
                    let st = state.clone();
                    let _ = tokio::task::spawn_blocking(move || st.reload()).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    fn demo_state(limits: Limits) -> (Arc<AppState>, tempfile::TempDir) {
        let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo");
        let dir = tempfile::tempdir().expect("tempdir");
        let source = AgentSource::new(
            demo.join("agent.signed.json"),
            demo.join("trust.toml"),
            &crate::RollbackSpec::InMemory,
        )
        .expect("source");
        let settings = RuntimeSettings {
            store: StoreSpec::Sqlite(dir.path().join("m.db")),
            config: None,
            provider: Provider::Anthropic,
            model: "m".into(),
            max_tokens: 64,
            receipt_key: None,
        };
        let st = AppState::start(
            source,
            settings,
            TokenSet::from_tokens(["unit-test-token-0123456789"]),
            limits,
            false,
        )
        .expect("state");
        (Arc::new(st), dir)
    }

    /// The service builds its tokenizer's tables when it starts, so that no request pays for
    /// them. Verifies ADR-0020.
    #[test]
    fn the_tokenizer_is_warm_once_the_service_has_started() {
        let (_st, _dir) = demo_state(Limits::default());
        assert!(strata_core::TiktokenTokenizer::o200k().is_warm());
    }

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
