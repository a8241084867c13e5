//! The state every request shares: the verified agent's runtime, built from the
//! [`RuntimeSettings`] and swapped atomically when a reload verifies (a refused one keeps
//! the running agent), the limits, tokens and metrics, and the receipt log (ADR-0021).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use strata_assembler::{session::StoreSpec, Provider, Runtime, SessionError};
use tokio::sync::Semaphore;

use super::{Limits, ServeError};
use crate::agent::AgentSource;
use crate::api::ReloadInfo;
use crate::auth::TokenSet;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;

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
    /// Live MCP servers whose tools and prompts every turn offers (ADR-0041); kept across
    /// reloads.
    pub live: Option<Arc<dyn strata_registry::LiveSource>>,
    /// The embedder of memory search and tool retrieval, over `strata.toml`'s
    /// `[memory.embedder]` (ADR-0046).
    pub embedder: Option<strata_registry::EmbedderConfig>,
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
        if let Some(live) = &self.live {
            b = b.live(live.clone());
        }
        if let Some(cfg) = &self.embedder {
            let embedder = strata_memory::embedder_from_config(cfg)
                .map_err(|e| SessionError::Invalid(format!("the embedder: {e}")))?;
            b = b.embedder(embedder);
        }
        let runtime = b.build()?;
        // The encoder's tables and the vocabulary's lookup, built before the first request
        // rather than during it (ADR-0020).
        runtime.tokenizer().warm_up();
        Ok(runtime)
    }
}

pub(super) struct Loaded {
    /// Always `Some` until dropped.
    runtime: Option<Runtime>,
    pub(super) loaded_at_ms: i64,
}

impl Loaded {
    fn new(runtime: Runtime, loaded_at_ms: i64) -> Loaded {
        Loaded {
            runtime: Some(runtime),
            loaded_at_ms,
        }
    }

    pub(super) fn rt(&self) -> &Runtime {
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
    pub(super) source: AgentSource,
    pub(super) settings: RuntimeSettings,
    pub(super) tokens: TokenSet,
    pub(super) limits: Limits,
    pub(super) log_content: bool,
    pub(super) metrics: Metrics,
    pub(super) permits: Arc<Semaphore>,
    pub(super) reload_lock: Mutex<Option<ReloadInfo>>,
    pub(super) receipt_log: Option<Mutex<ReceiptSink>>,
    /// Why the running agent is refused, while it is (ADR-0034): a signer revoked or below the
    /// threshold, or a trust store that cannot be read or is not as pinned.
    unavailable: Mutex<Option<String>>,
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
pub(super) enum ReceiptSink {
    File(strata_assembler::receipt::ReceiptLog),
    Postgres(Box<strata_assembler::receipt::PgReceiptLog>),
}

impl ReceiptSink {
    pub(super) fn append(
        &mut self,
        envelope: &[u8],
    ) -> Result<(), strata_assembler::receipt::LogError> {
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
            unavailable: Mutex::new(None),
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
        let fail = |e: strata_assembler::receipt::LogError| ServeError::Io {
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
                    strata_assembler::receipt::ReceiptLog::open_after_crash(path).map_err(fail)?;
                tracing::info!(path = %path.display(), entries = log.len(), head = %log.head(), torn_bytes_removed = removed, "receipt log open");
                ReceiptSink::File(log)
            }
            ReceiptLogSpec::Postgres { url, schema, init } => {
                let log = match strata_assembler::receipt::PgReceiptLog::open(url, schema) {
                    Err(strata_assembler::receipt::LogError::NotInitialised { .. }) if *init => {
                        strata_assembler::receipt::PgReceiptLog::init(url, schema)
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

    /// Check the running agent's signers against the trust store as it is now; refuse it
    /// (every turn `503 agent_unavailable`, `readyz` 503) while they do not verify, serve it
    /// again once they do (ADR-0034). Blocking (a file read).
    pub fn recheck(&self) {
        let loaded = self.loaded();
        let verdict = self.source.recheck(loaded.rt().agent());
        let mut unavailable = self
            .unavailable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match verdict {
            Ok(()) => {
                if unavailable.take().is_some() {
                    tracing::info!(
                        agent = loaded.rt().agent().agent_id(),
                        "the running agent's signers verify against the trust store again; serving"
                    );
                }
            }
            Err(e) => {
                let why = e.to_string();
                if unavailable.as_deref() != Some(why.as_str()) {
                    tracing::error!(
                        agent = loaded.rt().agent().agent_id(),
                        error = %why,
                        "the running agent no longer verifies against the trust store; refusing turns until a valid definition is loaded"
                    );
                }
                *unavailable = Some(why);
            }
        }
        self.metrics.agent_unavailable(unavailable.is_some());
    }

    /// Verify the files again and swap the runtime in if they verify and name the same agent;
    /// otherwise keep the running agent. Either way, the running agent is re-checked against
    /// the trust store first (ADR-0034). Blocking (store connections, file reads).
    pub fn reload(&self) -> Result<(), String> {
        let mut last = self
            .reload_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.recheck();
        let running = self.loaded().rt().agent().agent_id().to_owned();
        let outcome = self
            .source
            .load()
            .map_err(|e| e.to_string())
            .and_then(|agent| {
                if agent.agent_id() == running {
                    Ok(agent)
                } else {
                    Err(format!(
                        "the definition names agent `{}` but this service runs `{running}`; a reload never changes who the agent is: restart the service with the new definition",
                        agent.agent_id()
                    ))
                }
            })
            .and_then(|agent| self.settings.build(agent).map_err(|e| e.to_string()));
        let at_ms = now_ms();
        match outcome {
            Ok(runtime) => {
                *self
                    .unavailable
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                self.metrics.agent_unavailable(false);
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

    pub(super) fn loaded(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// The loaded agent, checked against the clock (validity is re-checked on every request)
    /// and not refused by the last re-check of its signers (ADR-0034).
    pub(super) fn current_valid(&self) -> Result<Arc<Loaded>, ApiError> {
        if let Some(why) = self
            .unavailable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            return Err(ApiError::new(
                ErrorCode::AgentUnavailable,
                format!(
                    "the running agent is refused: {why}; load a definition signed by trusted keys (SIGHUP, or replace the file), or restore the trust store"
                ),
            ));
        }
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::server) fn demo_state(limits: Limits) -> (Arc<AppState>, tempfile::TempDir) {
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
            live: None,
            embedder: None,
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

    /// `strata serve --config strata.toml` embeds with the embedder the file names: the
    /// service builds its runtime through the same builder (ADR-0046), and an embedder the
    /// environment cannot complete stops the start with the variable's name.
    #[test]
    fn the_configured_embedder_is_the_service_s() {
        let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo");
        let dir = tempfile::tempdir().expect("tempdir");
        let source = || {
            AgentSource::new(
                demo.join("agent.signed.json"),
                demo.join("trust.toml"),
                &crate::RollbackSpec::InMemory,
            )
            .expect("source")
        };
        let settings = |embedder: &str| {
            let config = dir.path().join("strata.toml");
            std::fs::write(&config, format!("[memory.embedder]\n{embedder}")).expect("write");
            RuntimeSettings {
                store: StoreSpec::Sqlite(dir.path().join("m.db")),
                config: Some(config),
                provider: Provider::Anthropic,
                model: "m".into(),
                max_tokens: 64,
                receipt_key: None,
                live: None,
                embedder: None,
            }
        };
        let tokens = || TokenSet::from_tokens(["unit-test-token-0123456789"]);
        let st = AppState::start(
            source(),
            settings("kind = \"hashing\"\ndims = 64\n"),
            tokens(),
            Limits::default(),
            false,
        )
        .expect("state");
        assert_eq!(
            st.current.load().rt().embedder().name(),
            "strata-hash-v1/64"
        );
        drop(st);
        let unset = "kind = \"openai\"\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\ndimensions = 8\napi_key_env = \"STRATA_SERVE_TEST_UNSET_KEY\"\n";
        let e = AppState::start(
            source(),
            settings(unset),
            tokens(),
            Limits::default(),
            false,
        )
        .expect_err("an unset key variable stops the start");
        assert!(e.to_string().contains("STRATA_SERVE_TEST_UNSET_KEY"), "{e}");
    }

    /// The service builds its tokenizer's tables when it starts, so that no request pays for
    /// them. Verifies ADR-0020.
    #[test]
    fn the_tokenizer_is_warm_once_the_service_has_started() {
        let (_st, _dir) = demo_state(Limits::default());
        assert!(strata_core::TiktokenTokenizer::o200k().is_warm());
    }
}
