//! `strata serve`: the session API as an HTTP/JSON service (ADR-0022). The service itself is
//! the `strata-serve` crate; this module turns flags into its options and runs it on a tokio
//! runtime.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use strata_assembler::{session::StoreSpec, Provider};
use strata_serve::{
    AgentSource, Limits, Listen, Listener, RollbackSpec, RuntimeSettings, ServeOptions, TlsFiles,
    TokenSet,
};

use crate::error::CliError;
use crate::output::Output;

/// Arguments of `strata serve`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  # The bundled demo agent on the embedded SQLite store, loopback only:
  strata serve --agent crates/strata-cli/demo/agent.signed.json \\
      --trust crates/strata-cli/demo/trust.toml
  # The token is in .strata/serve.token (created on first start); then:
  curl -s -H \"Authorization: Bearer $(tail -n 1 .strata/serve.token)\" \\
      -H 'Content-Type: application/json' -d '{\"message\": \"Hello\"}' \\
      http://127.0.0.1:8177/v1/sessions/s1/turns
  # Several servers sharing sessions, memories and the rollback state in PostgreSQL:
  strata serve --agent a.signed.json --trust trust.toml \\
      --postgres postgres://u@db/strata --listen 0.0.0.0:8177 \\
      --tls-cert cert.pem --tls-key key.pem --token-file tokens

Routes: GET /healthz, /readyz, /openapi.json (no token); GET /metrics, /v1/agent;
POST /v1/sessions/{id}/turns, /replies, /tool-results, /reset; GET and DELETE
/v1/sessions/{id}; POST /v1/memories, /v1/memories/search. Every error is JSON:
{\"error\": {\"code\", \"message\"}}. When ready, one line goes to standard output:
`listening http://ADDR` or `listening unix:PATH`. SIGHUP verifies the definition again and
swaps it in only if it verifies; SIGTERM and SIGINT drain in-flight requests and stop.
The address is bound first: if it is in use, serve exits with code 1 before it creates
the token file or the store.

Logging: the default level is `info` (requests and lifecycle, never their content; see
--log-content); -v shows debug, -vv trace; --quiet errors only; RUST_LOG replaces them.")]
pub struct ServeArgs {
    /// The signed agent definition (DSSE envelope).
    #[arg(long, value_name = "FILE", required_unless_present = "openapi")]
    pub agent: Option<PathBuf>,
    /// The trust store.
    #[arg(long, value_name = "FILE", required_unless_present = "openapi")]
    pub trust: Option<PathBuf>,
    /// Refuse the trust store, at start and on every reload and re-check, unless the SHA-256
    /// of its exact bytes is this (`sha256:<hex>`, as `strata verify` prints it): pinning makes
    /// an edited or truncated store detectable.
    #[arg(long, value_name = "SHA256", env = "STRATA_TRUST_SHA256")]
    pub trust_sha256: Option<String>,
    /// Rollback state file (create it once with `strata verify --init-rollback-state`). With
    /// --postgres and no file, the rollback state lives in PostgreSQL. Otherwise rollback is
    /// checked in memory only.
    #[arg(long, value_name = "FILE")]
    pub rollback_state: Option<PathBuf>,
    /// With --postgres: create the rollback-state table on first start (an explicit, one-time
    /// step; refused if it exists already).
    #[arg(long, requires = "postgres")]
    pub init_rollback_state: bool,
    /// The SQLite memory file (created if missing).
    #[arg(long, value_name = "FILE", default_value = ".strata/memory.db")]
    pub store: PathBuf,
    /// A PostgreSQL connection string: sessions, memories and the rollback state are shared
    /// by every server on it.
    #[arg(long, value_name = "URL", env = "STRATA_POSTGRES")]
    pub postgres: Option<String>,
    /// A strata.toml (budgets, default mode, protected priorities, caching, MEMORY.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TCP address to listen on; port 0 picks a free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8177")]
    pub listen: SocketAddr,
    /// Listen on a Unix domain socket (mode 0600) instead of TCP.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// Bearer tokens, one per line (or `sha256:<hex>` of a token). Default
    /// `.strata/serve.token`, created with a random token when missing.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Provider the requests are written for: anthropic, openai-chat or openai-responses.
    #[arg(long, default_value = "anthropic")]
    pub provider: Provider,
    /// Model named in the requests (required: the operator chooses it; or set STRATA_MODEL).
    #[arg(long, value_name = "NAME", env = "STRATA_MODEL")]
    pub model: Option<String>,
    /// Maximum output tokens written into the requests.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: u32,
    /// Sign a receipt for every prepared turn with this runtime key (`strata keygen`).
    #[arg(long, value_name = "FILE")]
    pub receipt_key: Option<PathBuf>,
    /// Append every prepared turn's signed receipt to this receipt log (needs --receipt-key;
    /// one server per log; audit it with `strata receipt audit`).
    #[arg(
        long,
        value_name = "FILE",
        requires = "receipt_key",
        conflicts_with = "receipt_log_postgres"
    )]
    pub receipt_log: Option<PathBuf>,
    /// Append every prepared turn's signed receipt to the receipt log in the --postgres
    /// database, one chain shared by every server on it (needs --receipt-key; audit it with
    /// `strata receipt audit --postgres URL`).
    #[arg(long, requires_all = ["receipt_key", "postgres"])]
    pub receipt_log_postgres: bool,
    /// With --receipt-log-postgres: create the receipt log table on first start (an explicit,
    /// one-time step; later starts refuse a database without it). Remove it after the first
    /// start: left in place, it would let a dropped table start a new, empty chain.
    #[arg(long, requires = "receipt_log_postgres")]
    pub init_receipt_log: bool,
    /// TLS certificate chain (PEM); with --tls-key, the server speaks HTTPS only.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// An MCP server whose tools and prompts every turn offers, started as a command:
    /// `NAME=COMMAND ARGS...` (repeatable; `[[mcp]]` in strata.toml does the same). Its tools
    /// are held to the pins of the signed definition (ADR-0041).
    #[arg(long = "mcp", value_name = "NAME=COMMAND")]
    pub mcp: Vec<String>,
    /// An MCP server reached over Streamable HTTP: `NAME=URL` (repeatable).
    #[arg(long = "mcp-url", value_name = "NAME=URL")]
    pub mcp_url: Vec<String>,
    /// Seconds between listings of a connected MCP server without a change notification: a
    /// silent change, or a lost HTTP server, is noticed within this time.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub mcp_relist_secs: u64,
    /// An OpenAI-compatible embeddings server (`POST /v1/embeddings`) for memory search and
    /// tool retrieval, over `[memory.embedder]` in strata.toml (default: the offline hashing
    /// embedder). Needs --embedder-model and --embedder-dimensions. A store keeps the embedder
    /// it was created with and refuses another (ADR-0046).
    #[arg(
        long,
        value_name = "URL",
        requires_all = ["embedder_model", "embedder_dimensions"]
    )]
    pub embedder_url: Option<String>,
    /// The embedding model's name (with --embedder-url).
    #[arg(long, value_name = "NAME", requires = "embedder_url")]
    pub embedder_model: Option<String>,
    /// The length of the model's vectors (with --embedder-url).
    #[arg(long, value_name = "N", requires = "embedder_url")]
    pub embedder_dimensions: Option<usize>,
    /// The NAME of the environment variable holding the embeddings server's API key (with
    /// --embedder-url; the key itself is never a flag).
    #[arg(long, value_name = "VAR", requires = "embedder_url")]
    pub embedder_key_env: Option<String>,
    /// Largest request body, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Largest message, tool output, memory or extra section, bytes.
    #[arg(long, default_value_t = 256 << 10)]
    pub max_section_bytes: usize,
    /// Per-request timeout, seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
    /// Requests served at once; past it, 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Seconds shutdown waits for in-flight requests.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_secs: u64,
    /// Seconds a client may take to send a request's headers, and again its body; a request
    /// takes a concurrency slot only once its body has arrived.
    #[arg(long, default_value_t = 10)]
    pub read_timeout_secs: u64,
    /// Check the definition and trust store files this often (seconds) and reload on change;
    /// 0 turns the watcher off (SIGHUP still reloads).
    #[arg(long, default_value_t = 2)]
    pub watch_secs: u64,
    /// Log request content (messages, replies, tool output) at debug level. Off by default.
    #[arg(long)]
    pub log_content: bool,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    pub openapi: bool,
}

/// Run `strata serve`.
pub fn run(args: &ServeArgs, out: &Output) -> Result<(), CliError> {
    if args.openapi {
        return out.result(&strata_serve::openapi_document());
    }
    let (Some(agent), Some(trust)) = (&args.agent, &args.trust) else {
        return Err(CliError::Usage(
            "--agent and --trust are required to serve".into(),
        ));
    };
    let Some(model) = args.model.as_deref().filter(|m| !m.trim().is_empty()) else {
        return Err(CliError::Usage(
            "--model is required to serve: name the model the requests are written for (e.g. `--model claude-sonnet-4-5`), or set STRATA_MODEL".into(),
        ));
    };
    // Flags are checked before any file is read or anything starts.
    let embedder_config = embedder(args)?;
    super::require_file(agent, "signed agent definition")?;
    let listen = match &args.unix {
        Some(p) => Listen::Unix(p.clone()),
        None => Listen::Tcp(args.listen),
    };
    // Bind first: an address in use fails the start before the token file, the store or any
    // other state is created.
    let listener = Listener::bind(&listen).map_err(|e| CliError::Other(e.to_string()))?;
    let rollback = rollback_spec(args)?;
    let refused = |e| match e {
        strata_serve::LoadError::Refused(e) => CliError::Refused(e),
        other => CliError::Other(other.to_string()),
    };
    let mut source = AgentSource::new(agent, trust, &rollback).map_err(refused)?;
    if let Some(pin) = &args.trust_sha256 {
        source = source.trust_pin(pin).map_err(refused)?;
    }
    let tokens = bearer_tokens(args)?;
    let mut opts = serve_options(args, source, model, listen, tokens);
    opts.runtime.embedder = embedder_config;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Other(format!("starting the async runtime: {e}")))?;
    opts.runtime.live = start_mcp_servers(args, &rt)?;
    rt.block_on(strata_serve::serve_on(listener, opts, |bound| {
        // The one line on standard output: tests and supervisors read the address from it.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "listening {bound}");
        let _ = stdout.flush();
    }))
    .map_err(|e| match e {
        strata_serve::ServeError::Agent(strata_serve::LoadError::Refused(e)) => {
            CliError::Refused(e)
        }
        other => CliError::Other(other.to_string()),
    })
}

/// Where the rollback state lives: `--rollback-state`'s file, else the PostgreSQL store
/// (created first with `--init-rollback-state` if it is missing there), else memory only.
fn rollback_spec(args: &ServeArgs) -> Result<RollbackSpec, CliError> {
    Ok(match (&args.rollback_state, &args.postgres) {
        (Some(file), _) => RollbackSpec::File(file.clone()),
        (None, Some(url)) => {
            let schema = strata_memory::pg::DEFAULT_PG_SCHEMA.to_owned();
            if args.init_rollback_state {
                match strata_agentdef::RollbackGuard::postgres(url, &schema) {
                    Ok(_) => {}
                    Err(strata_agentdef::AgentDefError::RollbackStateMissing { .. }) => {
                        strata_agentdef::RollbackGuard::postgres_init(url, &schema).map_err(
                            |e| CliError::agentdef("creating the rollback state in PostgreSQL", e),
                        )?;
                    }
                    Err(e) => {
                        return Err(CliError::agentdef(
                            "opening the rollback state in PostgreSQL",
                            e,
                        ))
                    }
                }
            }
            RollbackSpec::Postgres {
                url: url.clone(),
                schema,
            }
        }
        (None, None) => RollbackSpec::InMemory,
    })
}

/// The bearer tokens: read from `--token-file`, or from `.strata/serve.token`, which is
/// created with a new token on first start.
fn bearer_tokens(args: &ServeArgs) -> Result<TokenSet, CliError> {
    let token_path = args
        .token_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(".strata/serve.token"));
    if args.token_file.is_some() {
        TokenSet::read(&token_path)
    } else {
        TokenSet::read_or_create(&token_path).map(|(set, created)| {
            if created {
                tracing::warn!(file = %token_path.display(), "created a bearer token; send it as `Authorization: Bearer <token>`");
            }
            set
        })
    }
    .map_err(|e| CliError::Other(e.to_string()))
}

/// The service's options from the flags: store, provider and model, TLS, limits, the
/// definition watcher and the receipt log (MCP servers are started later, on the runtime).
fn serve_options(
    args: &ServeArgs,
    source: AgentSource,
    model: &str,
    listen: Listen,
    tokens: TokenSet,
) -> ServeOptions {
    let store = match &args.postgres {
        Some(url) => StoreSpec::Postgres(url.clone()),
        None => StoreSpec::Sqlite(args.store.clone()),
    };
    ServeOptions {
        source,
        runtime: RuntimeSettings {
            store,
            config: args.config.clone(),
            provider: args.provider,
            model: model.to_owned(),
            max_tokens: args.max_tokens,
            receipt_key: args.receipt_key.clone(),
            live: None,
            // Set by `run` from the --embedder-* flags, checked before anything starts.
            embedder: None,
        },
        listen,
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        },
        tokens,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_section_bytes: args.max_section_bytes,
            request_timeout: Duration::from_secs(args.timeout_secs.max(1)),
            concurrency: args.concurrency.max(1),
            shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
            read_timeout: Duration::from_secs(args.read_timeout_secs.max(1)),
        },
        log_content: args.log_content,
        watch: (args.watch_secs > 0).then(|| Duration::from_secs(args.watch_secs)),
        receipt_log: match (&args.receipt_log, &args.postgres) {
            (Some(path), _) => Some(strata_serve::ReceiptLogSpec::File(path.clone())),
            (None, Some(url)) if args.receipt_log_postgres => {
                Some(strata_serve::ReceiptLogSpec::Postgres {
                    url: url.clone(),
                    schema: strata_memory::pg::DEFAULT_PG_SCHEMA.to_owned(),
                    init: args.init_receipt_log,
                })
            }
            _ => None,
        },
    }
}

/// Start the configured MCP servers on the runtime and wait up to 20 seconds for them to
/// The embedder the --embedder-* flags name, checked as `strata.toml`'s would be.
fn embedder(args: &ServeArgs) -> Result<Option<strata_registry::EmbedderConfig>, CliError> {
    let (Some(url), Some(model), Some(dimensions)) = (
        &args.embedder_url,
        &args.embedder_model,
        args.embedder_dimensions,
    ) else {
        return Ok(None);
    };
    let config = strata_registry::EmbedderConfig::OpenAi {
        url: url.clone(),
        model: model.clone(),
        dimensions,
        api_key_env: args.embedder_key_env.clone(),
        request_dimensions: false,
    };
    config.check().map_err(|(key, why)| {
        let flag = key.rsplit('.').next().unwrap_or(key).replace('_', "-");
        let flag = match flag.as_str() {
            "api-key-env" => "key-env".to_owned(),
            other => other.to_owned(),
        };
        CliError::Usage(format!("--embedder-{flag}: {why}"))
    })?;
    Ok(Some(config))
}

/// The live MCP servers of `[[mcp]]` in `--config`'s strata.toml, then of `--mcp` and
/// `--mcp-url`, started on `rt` (none without any).
fn start_mcp_servers(
    args: &ServeArgs,
    rt: &tokio::runtime::Runtime,
) -> Result<Option<std::sync::Arc<dyn strata_registry::LiveSource>>, CliError> {
    let mut specs = match &args.config {
        Some(path) => super::mcp::config_servers(path)?,
        None => Vec::new(),
    };
    for (values, url) in [(&args.mcp, false), (&args.mcp_url, true)] {
        for v in values {
            specs.push(
                strata_mcp::ServerSpec::parse_assignment(v, url)
                    .map_err(|e| CliError::Usage(e.to_string()))?,
            );
        }
    }
    super::mcp::start_live(
        specs,
        std::time::Duration::from_secs(args.mcp_relist_secs.max(1)),
        rt,
    )
}
