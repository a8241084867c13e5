//! Building a [`Runtime`]: the store it opens, the configuration it checks first, and the
//! contributors it registers (ADR-0016). Nothing here runs a turn.

use super::*;

/// Where working and long-term memory live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// An embedded SQLite file (created if missing): the default.
    Sqlite(PathBuf),
    /// A PostgreSQL server shared by many runtimes (a libpq connection string or URL).
    #[cfg(feature = "postgres")]
    Postgres(String),
}

impl StoreSpec {
    /// The file used when neither the builder nor `strata.toml` names a store.
    pub const DEFAULT_SQLITE: &'static str = ".strata/memory.db";

    /// The store `strata.toml`'s `[store]` table names (the default SQLite file when it names
    /// none).
    pub fn from_config(store: &strata_registry::StoreConfig) -> Result<StoreSpec, SessionError> {
        match (&store.sqlite, &store.postgres) {
            (Some(_), Some(_)) => Err(SessionError::Invalid(
                "strata.toml names both store.sqlite and store.postgres; keep one".into(),
            )),
            (Some(path), None) => Ok(StoreSpec::Sqlite(path.clone())),
            #[cfg(feature = "postgres")]
            (None, Some(url)) => Ok(StoreSpec::Postgres(url.clone())),
            #[cfg(not(feature = "postgres"))]
            (None, Some(_)) => Err(SessionError::Invalid(
                "strata.toml names a PostgreSQL store but this build has no `postgres` feature"
                    .into(),
            )),
            (None, None) => Ok(StoreSpec::Sqlite(PathBuf::from(Self::DEFAULT_SQLITE))),
        }
    }
}

/// A store of working memory, long-term memory, shared facts and per-session documents.
trait Store: WorkingMemory + LongTermMemory + SharedContext + SessionState + 'static {}
impl<T: WorkingMemory + LongTermMemory + SharedContext + SessionState + 'static> Store for T {}

/// Builds a [`Runtime`].
#[must_use]
pub struct RuntimeBuilder {
    pub(super) agent: VerifiedAgent,
    pub(super) live: Option<Arc<dyn strata_registry::LiveSource>>,
    pub(super) config: Option<Config>,
    pub(super) store: Option<StoreSpec>,
    pub(super) tokenizer: Option<Arc<dyn Tokenizer>>,
    pub(super) provider: Provider,
    pub(super) params: RequestParams,
    pub(super) options: ProviderOptions,
    pub(super) tools: Vec<AnnouncedTool>,
    pub(super) workspace: Option<PathBuf>,
    pub(super) history_tokens: usize,
    pub(super) memories: usize,
    pub(super) hydrated: usize,
    pub(super) receipt_key: Option<Arc<strata_agentdef::KeyPair>>,
    pub(super) embedder: Option<Arc<dyn Embedder>>,
    pub(super) clock: Option<Arc<dyn strata_registry::Clock>>,
}

impl RuntimeBuilder {
    /// Read the time from `clock` (default: the system clock): the section cache's times to
    /// live and background refreshes, a turn's time when it names none, and the times the
    /// store stamps on entries, records and documents, and ages operation records by. A test
    /// or a simulation moves it by hand (`ManualClock`).
    pub fn clock(mut self, clock: Arc<dyn strata_registry::Clock>) -> RuntimeBuilder {
        self.clock = Some(clock);
        self
    }

    /// Embed long-term memories, search queries and the hydration path's tool retrieval with
    /// this embedder (ADR-0046); without it, the one `strata.toml`'s `[memory.embedder]`
    /// names, else the built-in hashing embedder. The store must have been created with the
    /// same embedder: another one is refused when the runtime is built.
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> RuntimeBuilder {
        self.embedder = Some(embedder);
        self
    }

    /// On the hydration path, how many of the runtime's tools are retrieved for a turn that
    /// brings no retrieved tools of its own (default 5).
    pub fn hydrated_tools(mut self, n: usize) -> RuntimeBuilder {
        self.hydrated = n.max(1);
        self
    }

    /// Offer the tools and prompts of live MCP servers on every turn (ADR-0041): each turn
    /// announces the connected servers' current tools (the assembler holds them to the signed
    /// pins), their prompts become layer-3 sections with `mcp:<server>` provenance, and an
    /// unavailable server is reported as an omission.
    pub fn live(mut self, live: Arc<dyn strata_registry::LiveSource>) -> RuntimeBuilder {
        self.live = Some(live);
        self
    }

    /// Sign a receipt of every prepared turn with this runtime key (ADR-0021); the turn then
    /// carries it, naming the exact bytes to send.
    pub fn receipt_key(mut self, key: strata_agentdef::KeyPair) -> RuntimeBuilder {
        self.receipt_key = Some(Arc::new(key));
        self
    }

    /// Read `strata.toml` (budgets, default mode, protected priorities, caching, MEMORY.md).
    pub fn config_file(mut self, path: impl AsRef<Path>) -> Result<RuntimeBuilder, SessionError> {
        self.config = Some(Config::load(path)?);
        Ok(self)
    }

    /// Use this configuration.
    pub fn config(mut self, config: Config) -> RuntimeBuilder {
        self.config = Some(config);
        self
    }

    /// Keep memory in this SQLite file (the default is `./.strata/memory.db`).
    pub fn sqlite(mut self, path: impl Into<PathBuf>) -> RuntimeBuilder {
        self.store = Some(StoreSpec::Sqlite(path.into()));
        self
    }

    /// Keep memory in a PostgreSQL database shared by many runtimes.
    #[cfg(feature = "postgres")]
    pub fn postgres(mut self, url: impl Into<String>) -> RuntimeBuilder {
        self.store = Some(StoreSpec::Postgres(url.into()));
        self
    }

    /// Count with this tokenizer (default: exact o200k_base).
    pub fn tokenizer(mut self, tokenizer: Arc<dyn Tokenizer>) -> RuntimeBuilder {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// The provider and model every prepared turn is written for.
    pub fn provider(mut self, provider: Provider, model: impl Into<String>) -> RuntimeBuilder {
        self.provider = provider;
        self.params.model = model.into();
        self.options.model = Some(self.params.model.clone());
        self
    }

    /// Maximum output tokens written into every request (required by Anthropic).
    pub fn max_tokens(mut self, max_tokens: u32) -> RuntimeBuilder {
        self.params.max_tokens = Some(max_tokens);
        self
    }

    /// Other request parameters passed through unchanged.
    pub fn request_param(mut self, key: impl Into<String>, value: Value) -> RuntimeBuilder {
        self.params.extra.insert(key.into(), value);
        self
    }

    /// Settings of the provider request (system role, tool descriptions, pair policy, margin).
    pub fn provider_options(mut self, options: ProviderOptions) -> RuntimeBuilder {
        let model = self.options.model.take();
        self.options = options;
        if self.options.model.is_none() {
            self.options.model = model;
        }
        self
    }

    /// Tools the runtime offers (narrowed to the signed allowlist on every turn).
    pub fn tools(mut self, tools: Vec<AnnouncedTool>) -> RuntimeBuilder {
        self.tools = tools;
        self
    }

    /// The workspace directory (bootstrap files, MEMORY.md); default: the configuration's, else
    /// none.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> RuntimeBuilder {
        self.workspace = Some(dir.into());
        self
    }

    /// Tokens of recent conversation offered to the assembler (default 8,000).
    pub fn history_tokens(mut self, tokens: usize) -> RuntimeBuilder {
        self.history_tokens = tokens;
        self
    }

    /// Memories retrieved per turn (default 5).
    pub fn memories_per_turn(mut self, n: usize) -> RuntimeBuilder {
        self.memories = n;
        self
    }

    /// Open the store and register the contributors.
    pub fn build(mut self) -> Result<Runtime, SessionError> {
        let configured = self.config.is_some();
        let config = self.config.take().unwrap_or_default();
        // Everything that can refuse the configuration is checked before the store is opened,
        // so a refused build creates nothing (a `Config` built in code included).
        let prompts = checked_config(&config)?;
        // The store given to the builder, else `strata.toml`'s, else `./.strata/memory.db`.
        let spec = match self.store.take() {
            Some(spec) => spec,
            None => StoreSpec::from_config(&config.store)?,
        };
        let embedder = self.checked_embedder(&config)?;
        let clock = self
            .clock
            .take()
            .unwrap_or_else(|| Arc::new(SystemClock::new()));
        let store = open_store(&spec, embedder.clone(), &clock)?;
        let tokenizer = match self.tokenizer.take() {
            Some(t) => t,
            None => default_tokenizer()?,
        };
        let registry = Registry::from_config(&config, clock.clone());
        let workspace = self
            .workspace
            .take()
            .or_else(|| config.workspace.dir.clone());
        // The built-ins with `strata.toml`'s workspace (bootstrap files) and custom
        // instructions.
        reg(Builtins {
            workspace: workspace.clone(),
            custom_instructions: config.workspace.custom_instructions.clone(),
            ..Builtins::detect()
        }
        .register(&registry))?;
        for prompt in prompts {
            reg(registry.register(Arc::new(prompt)))?;
        }
        let history = self.register_memory(&registry, &store, &tokenizer, &config, &workspace)?;
        if let Some(ws) = workspace.as_ref().filter(|ws| ws.is_dir()) {
            reg(registry.register(Arc::new(WorkspaceHints::new(ws))))?;
        }
        // The operational-mode template of the turn's mode and tier, within the tier's prompt
        // budget (ADR-0016).
        check_tier_prompts(&self.agent, &*tokenizer)?;
        reg(
            registry.register(Arc::new(strata_registry::OperationalTemplate::new(
                self.agent.clone(),
            ))),
        )?;
        // Each session's goals, kept in the store (ADR-0016).
        reg(registry.register(Arc::new(SessionGoals {
            state: store.state(),
            store: store.name(),
            clock: clock.clone(),
        })))?;
        Ok(Runtime {
            embedder,
            clock,
            tool_vectors: std::sync::Mutex::new(std::collections::HashMap::new()),
            refused: std::sync::Mutex::new(None),
            history,
            agent: Arc::new(self.agent),
            assembler: Assembler::new(tokenizer.clone()),
            tokenizer,
            registry,
            store,
            config,
            configured,
            hydrated: self.hydrated,
            provider: self.provider,
            params: self.params,
            options: self.options,
            tools: self.tools,
            prompts: std::sync::Mutex::new(std::collections::HashMap::new()),
            receipt_key: self.receipt_key,
            live: self.live,
            live_seen: std::sync::Mutex::new(std::collections::BTreeMap::new()),
        })
    }

    /// The builder's embedder, else the one `strata.toml` names (ADR-0046), after one probe: a
    /// server that is down, refuses the key or answers vectors of another length fails the
    /// build here, before any store is opened or created.
    fn checked_embedder(&mut self, config: &Config) -> Result<Arc<dyn Embedder>, SessionError> {
        let embedder = match self.embedder.take() {
            Some(e) => e,
            None => strata_memory::embedder_from_config(&config.memory.embedder)?,
        };
        strata_memory::embed_checked(&*embedder, &["strata embedder check"])?;
        tracing::info!(
            embedder = embedder.name(),
            dims = embedder.dims(),
            "embedder ready"
        );
        Ok(embedder)
    }

    /// Register the contributors that read the store or the workspace's memory index, each in
    /// the modes and paths the seeds give its kind of section (ADR-0016): shared facts, the
    /// conversation history (returned: the runtime reads it too), long-term memories, the
    /// memory index, Ivy's session files (layer 5) and episodic summaries (layer 6).
    fn register_memory(
        &self,
        registry: &Registry,
        store: &Arc<dyn StoreHandle>,
        tokenizer: &Arc<dyn Tokenizer>,
        config: &Config,
        workspace: &Option<PathBuf>,
    ) -> Result<Arc<WorkingMemoryContributor>, SessionError> {
        let scopes = fact_scopes(config)?;
        reg(registry.register(Arc::new(
            SharedFactsContributor::new(store.shared())
                .with_scopes(scopes)
                .with_sticky(strata_memory::StickyFacts {
                    prefixes: config.memory.sticky_fact_prefixes.clone(),
                    max_chars: config.memory.sticky_facts_max_chars,
                })
                .with_meta(seeded(
                    SharedFactsContributor::new(store.shared()).meta(),
                    StandardSection::WorkspaceProfile,
                )),
        )))?;
        let history =
            WorkingMemoryContributor::new(store.working(), tokenizer.clone(), self.history_tokens);
        let history_meta = seeded(history.meta(), StandardSection::ConversationHistory);
        let history = Arc::new(history.with_meta(history_meta));
        // The history with each stored summary standing in for its range (ADR-0047).
        reg(registry.register(Arc::new(compact::CompactedHistory {
            inner: history.clone(),
            state: store.state(),
            store: store.name(),
        })))?;
        let mut memories =
            LongTermMemoryContributor::new(store.long_term(), SearchOptions::top(self.memories));
        let index = workspace
            .as_ref()
            .map(|ws| ws.join(&config.memory.file))
            .filter(|index| index.is_file());
        // The notes beside MEMORY.md: a note the search finds brings the notes it links to.
        if let Some(graph) = index.as_deref().map(note_graph).transpose()? {
            memories = memories.with_note_graph(graph, strata_memory::WalkOptions::default());
        }
        let memories_meta = seeded(memories.meta(), StandardSection::Memory);
        reg(registry.register(Arc::new(memories.with_meta(memories_meta))))?;
        if let Some(index) = index {
            let c = MemoryIndexContributor::new(index, index_limits(config));
            let meta = seeded(c.meta(), StandardSection::Memory);
            reg(registry.register(Arc::new(Restricted { inner: c, meta })))?;
        }
        let files = SessionFilesContributor::new(store.state(), store.name());
        let files_meta = seeded(files.meta(), StandardSection::SessionContext);
        reg(registry.register(Arc::new(files.with_meta(files_meta))))?;
        let episodes = EpisodicContributor::new(store.long_term());
        let episodes_meta = seeded(episodes.meta(), StandardSection::Memory);
        reg(registry.register(Arc::new(episodes.with_meta(episodes_meta))))?;
        Ok(history)
    }
}

/// A registration's failure as a session error.
fn reg(r: Result<(), strata_registry::RegistryError>) -> Result<(), SessionError> {
    r.map_err(|e| SessionError::Registry(e.to_string()))
}

/// `[workspace] fact_scopes`: the shared-fact scopes read between the agent's own and the
/// global one (a project's facts), each checked as a scope (ADR-0050).
fn fact_scopes(config: &Config) -> Result<Vec<strata_memory::Scope>, SessionError> {
    config
        .workspace
        .fact_scopes
        .iter()
        .map(|s| {
            strata_memory::Scope::new(s).map_err(|e| {
                SessionError::Config(strata_registry::ConfigError::Value {
                    key: "workspace.fact_scopes",
                    location: None,
                    reason: e.to_string(),
                })
            })
        })
        .collect()
}

/// `config` checked whole (as `strata.toml` is when read, for a `Config` built in code too),
/// with its fact scopes; its `[[prompts]]` as prompts to register.
fn checked_config(config: &Config) -> Result<Vec<strata_registry::builtins::Prompt>, SessionError> {
    config.validate()?;
    fact_scopes(config)?;
    config_prompts(config)
}

/// `[[prompts]]`: the runtime's own fixed text as prompts with source `config` (ADR-0050).
fn config_prompts(config: &Config) -> Result<Vec<strata_registry::builtins::Prompt>, SessionError> {
    config
        .prompts
        .iter()
        .map(|p| {
            p.to_prompt().map_err(|(key, reason)| {
                SessionError::Config(strata_registry::ConfigError::Value {
                    key,
                    location: None,
                    reason,
                })
            })
        })
        .collect()
}

/// The wikilink graph of the notes in the folder of the memory index `index` (every `*.md`
/// file there and in its subfolders, hidden ones skipped), read once when the runtime is
/// built. The memory search adds the notes linked from the notes it finds (the notes are
/// memories once imported, `strata memory import`).
fn note_graph(index: &Path) -> Result<Arc<strata_memory::NoteGraph>, SessionError> {
    let dir = index.parent().unwrap_or(Path::new("."));
    let graph = strata_memory::NoteGraph::load(dir)?;
    tracing::debug!(dir = %dir.display(), notes = graph.len(), "note graph read");
    Ok(Arc::new(graph))
}

/// Open the store `spec` names with `embedder`, creating a SQLite file's folder; a store
/// created with another embedder is refused (ADR-0046).
/// The runtime's clock as the store's: entries, records and their lifetimes are stamped on
/// the same clock as the section cache and the turns.
#[derive(Clone)]
struct StoreClock(Arc<dyn strata_registry::Clock>);

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreClock")
    }
}

impl strata_memory::Clock for StoreClock {
    fn now_ms(&self) -> i64 {
        self.0.unix_ms()
    }
}

fn open_store(
    spec: &StoreSpec,
    embedder: Arc<dyn Embedder>,
    clock: &Arc<dyn strata_registry::Clock>,
) -> Result<Arc<dyn StoreHandle>, SessionError> {
    let options =
        strata_memory::StoreOptions::default().with_clock(Arc::new(StoreClock(clock.clone())));
    Ok(match spec {
        StoreSpec::Sqlite(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    SessionError::Invalid(format!("creating {}: {e}", dir.display()))
                })?;
            }
            Arc::new(Handle(Arc::new(SqliteStore::open_with(
                path, embedder, options,
            )?)))
        }
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres(url) => {
            Arc::new(Handle(Arc::new(strata_memory::PgStore::connect_with(
                url,
                strata_memory::pg::DEFAULT_PG_SCHEMA,
                embedder,
                options,
            )?)))
        }
    })
}

/// A contributor taking part under another meta (modes and paths), for contributors that do not
/// let their meta be set.
struct Restricted<C> {
    inner: C,
    meta: ContributorMeta,
}

impl<C: Contributor> Contributor for Restricted<C> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn layer(&self) -> RuntimeLayer {
        self.inner.layer()
    }
    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }
    fn cache_policy(&self) -> strata_registry::CachePolicy {
        self.inner.cache_policy()
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        self.inner.cache_fingerprint(ctx)
    }
    fn cache_validator(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        self.inner.cache_validator(ctx)
    }
    fn contribute(
        &self,
        ctx: &ContributionContext,
    ) -> Result<Vec<Section>, strata_registry::ContributorError> {
        self.inner.contribute(ctx)
    }
}

/// `meta` with the modes and paths of the seeds' `kind` of section.
fn seeded(mut meta: ContributorMeta, kind: StandardSection) -> ContributorMeta {
    meta.modes = kind.modes();
    meta.paths = kind.paths();
    meta
}

fn index_limits(config: &Config) -> strata_memory::IndexLimits {
    let mut limits = strata_memory::IndexLimits::default();
    limits.max_lines = config.memory.max_lines;
    limits.max_chars = config.memory.max_chars;
    limits
}

#[cfg(feature = "tiktoken")]
fn default_tokenizer() -> Result<Arc<dyn Tokenizer>, SessionError> {
    Ok(Arc::new(strata_core::TiktokenTokenizer::o200k()))
}

#[cfg(not(feature = "tiktoken"))]
fn default_tokenizer() -> Result<Arc<dyn Tokenizer>, SessionError> {
    Err(SessionError::Invalid(
        "no tokenizer: build with the `tiktoken` feature or pass one to `tokenizer`".into(),
    ))
}

/// The store seen through the three interfaces the contributors take.
pub(super) trait StoreHandle: Send + Sync {
    fn working(&self) -> Arc<dyn WorkingMemory>;
    fn long_term(&self) -> Arc<dyn LongTermMemory>;
    fn shared(&self) -> SharedContextReader;
    fn state(&self) -> Arc<dyn SessionState>;
    fn name(&self) -> String;
}

struct Handle<S: Store>(Arc<S>);

impl<S: Store> StoreHandle for Handle<S> {
    fn state(&self) -> Arc<dyn SessionState> {
        self.0.clone()
    }
    fn name(&self) -> String {
        WorkingMemory::store_name(&*self.0).to_owned()
    }
    fn working(&self) -> Arc<dyn WorkingMemory> {
        self.0.clone()
    }
    fn long_term(&self) -> Arc<dyn LongTermMemory> {
        self.0.clone()
    }
    fn shared(&self) -> SharedContextReader {
        SharedContextReader::new(self.0.clone())
    }
}
