//! The service: options, the router and the serving loop (ADR-0022).
//!
//! The rest is split by job: `state` (the shared state: the loaded runtime, its reload and
//! the receipt log), `extract` (request bodies and session ids), `layers` (limits, timeout,
//! metrics and the token check around the routes), and the handlers in `probes` (health,
//! readiness, metrics, this document, the agent), `sessions`, `goals`, `compactions` and
//! `memories`.

mod extract;
mod layers;
// The handlers' annotations are read by the OpenAPI document (`crate::openapi`).
pub(crate) mod compactions;
pub(crate) mod goals;
pub(crate) mod memories;
pub(crate) mod probes;
pub(crate) mod sessions;
mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use strata_assembler::SessionError;

use crate::agent::{AgentSource, Fingerprint, LoadError};
use crate::auth::TokenSet;
use crate::error::{ApiError, ErrorCode};
use goals::{
    add_checkpoint, answer_lock, create_goal, get_goals, record_artifact, record_decision,
    record_file,
};
use layers::{guard, require_token};
use memories::{add_memory, search_memories};
use probes::{agent, healthz, metrics, openapi, readyz};
use sessions::{
    delete_session, get_session, prepare_turn, record_reply, record_tool_result, reset_session,
    run_tool_call,
};

pub use state::{AppState, ReceiptLogSpec, RuntimeSettings};

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
    /// Longest a client may take to send a request's headers, and again its body; past it the
    /// connection is closed (headers) or `408 request_timeout` is answered (body). A request
    /// takes a concurrency slot only once its body is read, so slow senders cannot hold the
    /// slots (default 10 s).
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1 << 20,
            max_section_bytes: 256 << 10,
            request_timeout: Duration::from_secs(30),
            concurrency: 64,
            shutdown_grace: Duration::from_secs(30),
            read_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// Refuse a message, extra section, tool output or memory over the section limit.
    pub(super) fn check_section(&self, what: &str, len: usize) -> Result<(), ApiError> {
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
        .route(
            "/v1/sessions/{session_id}/tool-calls/{call_id}/run",
            post(run_tool_call),
        )
        .route("/v1/sessions/{session_id}/reset", post(reset_session))
        .route(
            "/v1/sessions/{session_id}/goals",
            get(get_goals).post(create_goal),
        )
        .route(
            "/v1/sessions/{session_id}/goals/checkpoints",
            post(add_checkpoint),
        )
        .route(
            "/v1/sessions/{session_id}/goals/artifacts",
            post(record_artifact),
        )
        .route(
            "/v1/sessions/{session_id}/goals/decisions",
            post(record_decision),
        )
        .route("/v1/sessions/{session_id}/goals/locks", post(answer_lock))
        .route("/v1/sessions/{session_id}/files", post(record_file))
        .route(
            "/v1/sessions/{session_id}/compactions",
            post(compactions::compact_session).get(compactions::list_compactions),
        )
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

/// A bound listening socket, made before anything else of a start (the store, files, the agent)
/// so that an address in use fails the start with nothing created. A Unix socket's file is
/// removed when the listener is dropped, served or not.
#[derive(Debug)]
pub struct Listener {
    socket: Option<Socket>,
    unix_path: Option<PathBuf>,
}

#[derive(Debug)]
enum Socket {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Listener {
    /// Bind `listen`: a TCP address, or a Unix socket created with mode 0600 (a stale socket
    /// is replaced; one a server still answers on is refused). The error names the address.
    pub fn bind(listen: &Listen) -> Result<Listener, ServeError> {
        match listen {
            Listen::Tcp(addr) => {
                let listener = std::net::TcpListener::bind(addr)
                    .map_err(io(format!("cannot listen on {addr}")))?;
                listener
                    .set_nonblocking(true)
                    .map_err(io("configuring the listener"))?;
                Ok(Listener {
                    socket: Some(Socket::Tcp(listener)),
                    unix_path: None,
                })
            }
            Listen::Unix(path) => {
                remove_stale_socket(path)?;
                let listener = std::os::unix::net::UnixListener::bind(path)
                    .map_err(io(format!("cannot listen on {}", path.display())))?;
                // From here on, dropping the listener removes the socket file.
                let bound = Listener {
                    socket: Some(Socket::Unix(listener)),
                    unix_path: Some(path.clone()),
                };
                {
                    use std::os::unix::fs::PermissionsExt as _;
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                        .map_err(io(format!("restricting {}", path.display())))?;
                }
                if let Some(Socket::Unix(l)) = &bound.socket {
                    l.set_nonblocking(true)
                        .map_err(io("configuring the listener"))?;
                }
                Ok(bound)
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Close the socket before its file goes.
        drop(self.socket.take());
        if let Some(path) = &self.unix_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Start the service and serve until SIGTERM or SIGINT, then drain in-flight requests.
/// `on_ready` is called once, with the bound address, when connections are accepted. The
/// address is bound first, before the store is opened ([`Listener::bind`]).
pub async fn serve(
    opts: ServeOptions,
    on_ready: impl FnOnce(&Bound) + Send,
) -> Result<(), ServeError> {
    let listener = Listener::bind(&opts.listen)?;
    serve_on(listener, opts, on_ready).await
}

/// [`serve`] on a listener bound beforehand (`opts.listen` is not read), for callers that
/// bind before they create anything of their own, such as a token file.
pub async fn serve_on(
    mut listener: Listener,
    opts: ServeOptions,
    on_ready: impl FnOnce(&Bound) + Send,
) -> Result<(), ServeError> {
    let ServeOptions {
        source,
        runtime,
        listen: _,
        tls,
        tokens,
        limits,
        log_content,
        watch,
        receipt_log,
    } = opts;
    let grace = limits.shutdown_grace;
    let read_timeout = limits.read_timeout;
    let state = start_state(source, runtime, tokens, limits, log_content, receipt_log).await?;
    let app = router(state.clone());
    let tls_config = match &tls {
        Some(files) => Some(load_tls(files).await?),
        None => None,
    };
    spawn_reloaders(state.clone(), watch);

    let socket = listener.socket.take().ok_or_else(|| ServeError::Io {
        what: "listening".into(),
        source: std::io::Error::other("the listener was already used"),
    })?;
    let app = app.into_make_service();
    match socket {
        Socket::Tcp(tcp) => serve_tcp(tcp, app, tls_config, grace, read_timeout, on_ready).await?,
        Socket::Unix(unix) => {
            let path = listener.unix_path.clone().unwrap_or_default();
            serve_unix(unix, path, app, tls_config, grace, read_timeout, on_ready).await?;
        }
    }
    // The socket file of a Unix listener goes with it.
    drop(listener);
    tracing::info!("stopped");
    Ok(())
}

/// The application state: the agent loaded and checked, the runtime built, the receipt log
/// opened; on a blocking thread, since loading reads files and opens the store.
async fn start_state(
    source: AgentSource,
    runtime: RuntimeSettings,
    tokens: TokenSet,
    limits: Limits,
    log_content: bool,
    receipt_log: Option<ReceiptLogSpec>,
) -> Result<Arc<AppState>, ServeError> {
    let state = tokio::task::spawn_blocking(move || {
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
    })??;
    Ok(Arc::new(state))
}

/// The TLS configuration from a PEM certificate chain and key.
async fn load_tls(files: &TlsFiles) -> Result<axum_server::tls_rustls::RustlsConfig, ServeError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    axum_server::tls_rustls::RustlsConfig::from_pem_file(&files.cert, &files.key)
        .await
        .map_err(io(format!(
            "TLS certificate {} / key {}",
            files.cert.display(),
            files.key.display()
        )))
}

/// Serve `app` on a TCP listener (with TLS when configured) until a stop signal has drained
/// the requests in flight.
async fn serve_tcp(
    listener: std::net::TcpListener,
    app: axum::routing::IntoMakeService<Router>,
    tls_config: Option<axum_server::tls_rustls::RustlsConfig>,
    grace: Duration,
    read_timeout: Duration,
    on_ready: impl FnOnce(&Bound) + Send,
) -> Result<(), ServeError> {
    let local = listener
        .local_addr()
        .map_err(io("reading the bound address"))?;
    if !local.ip().is_loopback() && tls_config.is_none() {
        tracing::warn!(%local, "listening beyond loopback without TLS: tokens and prompts cross the network in clear text");
    }
    let scheme = if tls_config.is_some() {
        "https"
    } else {
        "http"
    };
    let handle = axum_server::Handle::new();
    spawn_shutdown(handle.clone(), grace);
    on_ready(&Bound::Tcp(format!("{scheme}://{local}")));
    match tls_config {
        Some(cfg) => {
            let mut server = axum_server::tls_rustls::from_tcp_rustls(listener, cfg)
                .map_err(io("TLS listener"))?;
            header_timeout(server.http_builder(), read_timeout);
            server.handle(handle).serve(app).await
        }
        None => {
            let mut server = axum_server::from_tcp(listener).map_err(io("listener"))?;
            header_timeout(server.http_builder(), read_timeout);
            server.handle(handle).serve(app).await
        }
    }
    .map_err(io("serving"))
}

/// Serve `app` on a Unix socket at `path` (with TLS when configured) until a stop signal has
/// drained the requests in flight.
async fn serve_unix(
    unix: std::os::unix::net::UnixListener,
    path: PathBuf,
    app: axum::routing::IntoMakeService<Router>,
    tls_config: Option<axum_server::tls_rustls::RustlsConfig>,
    grace: Duration,
    read_timeout: Duration,
    on_ready: impl FnOnce(&Bound) + Send,
) -> Result<(), ServeError> {
    let handle = axum_server::Handle::new();
    spawn_shutdown(handle.clone(), grace);
    on_ready(&Bound::Unix(path));
    match tls_config {
        Some(cfg) => {
            let mut server =
                axum_server::tls_rustls::from_unix_rustls(unix, cfg).map_err(io("TLS listener"))?;
            header_timeout(server.http_builder(), read_timeout);
            server.handle(handle).serve(app).await
        }
        None => {
            let mut server = axum_server::from_unix(unix).map_err(io("listener"))?;
            header_timeout(server.http_builder(), read_timeout);
            server.handle(handle).serve(app).await
        }
    }
    .map_err(io("serving"))
}

/// Close a connection whose client takes longer than `t` to send a request's headers.
fn header_timeout(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    t: Duration,
) {
    builder.http1().header_read_timeout(t);
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
    let Some(every) = watch else {
        // No watcher: the running agent's signers are still re-checked, every minute
        // (ADR-0034).
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || st.recheck()).await;
            }
        });
        return;
    };
    {
        tokio::spawn(async move {
            let mut seen: Fingerprint = state.source.fingerprint();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Every tick re-checks the running agent's signers (ADR-0034), changed files or
                // not: a revocation is seen within one interval.
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || st.recheck()).await;
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
