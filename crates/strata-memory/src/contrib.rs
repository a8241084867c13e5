//! Contributors that turn store content into sections for the assembler: shared facts
//! (layer 3), recent working memory (layer 5), and hybrid search results, wikilink neighbours
//! and the `MEMORY.md` index (layer 6).
//!
//! Every section carries [`SourceKind::Store`] with the store's name, and its record id and
//! time where the store has them; the assembler fences all of it as untrusted content
//! (ADR-0006, ADR-0009, ADR-0012). A store failure becomes [`ContributorError::Source`], which
//! the registry turns into a marked omission.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strata_core::{
    ContentHash, Phase, Role, RuntimeLayer, Section, SourceKind, Stability, Tokenizer,
};
use strata_registry::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};

use crate::error::MemoryError;
use crate::long_term::{LongTermMemory, MemoryId, SearchOptions};
use crate::markdown::{IndexLimits, MemoryIndex, NoteGraph, WalkOptions};
use crate::shared::{Scope, SharedContext, SharedContextReader};
use crate::working::{Entry, WorkingMemory};

fn source_err(e: MemoryError) -> ContributorError {
    ContributorError::Source(e.to_string())
}

fn core_err(e: strata_core::CoreError) -> ContributorError {
    ContributorError::Source(e.to_string())
}

/// The declared meta of a contributor whose sections come from a store.
fn store_meta(priority: u32, phase: Phase, stability: Stability) -> ContributorMeta {
    ContributorMeta {
        priority,
        phase,
        stability,
        source: SourceKind::Store,
        ..ContributorMeta::default()
    }
}

/// `meta` as declared by a store contributor: whatever it says, its source is the store.
fn from_store(meta: ContributorMeta) -> ContributorMeta {
    ContributorMeta {
        source: SourceKind::Store,
        ..meta
    }
}

/// A section id `prefix` + `name` when it is a valid id of at most 128 characters, otherwise
/// `prefix` + `h-` + a hash of `name`.
fn section_id(prefix: &str, name: &str) -> String {
    let plain = format!("{prefix}{name}");
    if plain.len() <= 128
        && plain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
    {
        plain
    } else {
        format!(
            "{prefix}h-{}",
            &blake3::hash(name.as_bytes()).to_hex()[..32]
        )
    }
}

/// Layer 3: the shared facts of the agent's scope, the configured extra scopes and the global
/// scope, one section per fact. A key set in a more specific scope hides the same key in a
/// broader one (agent, then the extra scopes in order, then global). Each section has the
/// conflict key `fact:<key>`.
#[derive(Debug, Clone)]
pub struct SharedFactsContributor {
    id: String,
    reader: SharedContextReader,
    extra_scopes: Vec<Scope>,
    sticky: StickyFacts,
    meta: ContributorMeta,
}

/// Which facts are sticky (never dropped for budget): those whose key starts with one of the
/// prefixes, in the order they are read, while their rendered text stays within `max_chars`
/// in total. The cap keeps a store's volume from growing every turn's sticky set, which would
/// refuse turns once it no longer fits (ADR-0008); facts past it are ordinary sections. The cap
/// is in characters and the budget in tokens: choose one that fits the budget (ADR-0050).
#[derive(Debug, Clone, Default)]
pub struct StickyFacts {
    /// Key prefixes (`user.`).
    pub prefixes: Vec<String>,
    /// Most characters of sticky facts, in total.
    pub max_chars: usize,
}

impl SharedFactsContributor {
    /// Facts read through `reader`. Defaults: id `shared.facts`, phase `task`, priority 50,
    /// stable, cached with the cache's default time to live (facts change rarely, and stable
    /// sections keep the provider's prompt cache warm).
    pub fn new(reader: SharedContextReader) -> SharedFactsContributor {
        SharedFactsContributor {
            id: "shared.facts".into(),
            reader,
            extra_scopes: Vec::new(),
            sticky: StickyFacts::default(),
            meta: ContributorMeta {
                priority: 50,
                phase: Phase::Task,
                stability: Stability::Stable,
                source: SourceKind::Store,
                timeout: Duration::from_secs(2),
                ..ContributorMeta::default()
            },
        }
    }

    /// Also read these scopes (for example `workspace:acme`), between the agent's and the
    /// global scope.
    #[must_use]
    pub fn with_scopes(mut self, scopes: Vec<Scope>) -> Self {
        self.extra_scopes = scopes;
        self
    }

    /// Make the facts `sticky` names sticky, within its cap.
    #[must_use]
    pub fn with_sticky(mut self, sticky: StickyFacts) -> Self {
        self.sticky = sticky;
        self
    }

    /// Replace the declared meta (its source is kept as [`SourceKind::Store`]).
    #[must_use]
    pub fn with_meta(mut self, meta: ContributorMeta) -> Self {
        self.meta = from_store(meta);
        self
    }

    /// Use another contributor id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }
}

impl Contributor for SharedFactsContributor {
    fn id(&self) -> &str {
        &self.id
    }

    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }

    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }

    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::Ttl(None)
    }

    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let mut scopes = Vec::with_capacity(self.extra_scopes.len() + 2);
        // An agent id that cannot form a scope has no agent facts.
        if let Ok(s) = Scope::agent(&ctx.agent_id) {
            scopes.push(s);
        }
        scopes.extend(self.extra_scopes.iter().cloned());
        scopes.push(Scope::global());
        let facts = self.reader.facts(&scopes).map_err(source_err)?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut sticky_chars = 0usize;
        for f in facts {
            if !seen.insert(f.key.clone()) {
                continue;
            }
            let record = format!("{}/{}", f.scope, f.key);
            let text = format!("{}: {}", f.key, f.value);
            let sticky = self
                .sticky
                .prefixes
                .iter()
                .any(|p| f.key.starts_with(p.as_str()))
                && sticky_chars + text.chars().count() <= self.sticky.max_chars;
            if sticky {
                sticky_chars += text.chars().count();
            }
            let section = self
                .meta
                .section(
                    &self.id,
                    RuntimeLayer::Shared,
                    section_id("fact/", &f.key),
                    text,
                )
                .map_err(core_err)?
                .sticky(sticky)
                .key(format!("fact:{}", f.key))
                .map_err(core_err)?
                .source(SourceKind::Store, self.reader.store_name())
                .record(Some(&record), Some(f.updated_ms), None)
                .build();
            out.push(section);
        }
        Ok(out)
    }
}

/// Layer 5: the newest working-memory entries of the session that fit a token budget, one
/// section per turn, each with its [`strata_core::Turn`] (sequence, role, call id) so the
/// assembler can drop the oldest turns first and keep a tool call with its result
/// (ADR-0008). Entries are chosen by [`WorkingMemory::recent_within`], so no call/result pair
/// is split here either.
#[derive(Debug, Clone)]
pub struct WorkingMemoryContributor {
    id: String,
    store: Arc<dyn WorkingMemory>,
    tokenizer: Arc<dyn Tokenizer>,
    token_budget: usize,
    meta: ContributorMeta,
}

impl std::fmt::Debug for dyn WorkingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkingMemory")
            .field("store", &self.store_name())
            .finish()
    }
}

impl std::fmt::Debug for dyn LongTermMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LongTermMemory")
            .field("store", &self.store_name())
            .finish()
    }
}

impl WorkingMemoryContributor {
    /// Recent turns of `store` within `token_budget` tokens of `tokenizer`, and always the
    /// whole exchange in progress. Defaults: id `working.recent`, phase `history`, priority 50,
    /// dynamic.
    pub fn new(
        store: Arc<dyn WorkingMemory>,
        tokenizer: Arc<dyn Tokenizer>,
        token_budget: usize,
    ) -> WorkingMemoryContributor {
        WorkingMemoryContributor {
            id: "working.recent".into(),
            store,
            tokenizer,
            token_budget,
            meta: store_meta(50, Phase::History, Stability::Dynamic),
        }
    }

    /// Replace the declared meta (its source is kept as [`SourceKind::Store`]).
    #[must_use]
    pub fn with_meta(mut self, meta: ContributorMeta) -> Self {
        self.meta = from_store(meta);
        self
    }

    /// Use another contributor id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The section this contributor gives for entry `e`: what a session shows for an entry it
    /// has not stored yet, exactly as it will show it once stored (ADR-0031).
    pub fn section_of(&self, e: &Entry) -> Result<Section, ContributorError> {
        let record = e.seq.to_string();
        Ok(self
            .meta
            .section(
                &self.id,
                RuntimeLayer::WorkingMemory,
                format!("turn/{}", e.seq),
                e.content.clone(),
            )
            .map_err(core_err)?
            .turn(e.turn())
            .keep(e.keep())
            .source(SourceKind::Store, self.store.store_name())
            .record(Some(&record), Some(e.at_ms), None)
            .build())
    }
}

impl Contributor for WorkingMemoryContributor {
    fn id(&self) -> &str {
        &self.id
    }

    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::WorkingMemory
    }

    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }

    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let mut entries = self
            .store
            .recent_within(&ctx.session_id, self.token_budget, self.tokenizer.as_ref())
            .map_err(source_err)?;
        // The exchange in progress (the newest user message and what followed it) is always
        // gathered whole, whatever the history budget: a tool result larger than that budget
        // must not take the question it answers out of the request. Cutting it to fit is the
        // assembler's job, which reports it (ADR-0039).
        if !entries.iter().any(|e| e.role == Role::User) {
            let first_kept = entries.first().map(|e| e.seq);
            let mut current: Vec<Entry> = self
                .store
                .current_exchange(&ctx.session_id)
                .map_err(source_err)?
                .into_iter()
                .filter(|e| first_kept.is_none_or(|f| e.seq < f))
                .collect();
            current.append(&mut entries);
            entries = current;
        }
        entries.iter().map(|e| self.section_of(e)).collect()
    }
}

/// Layer 6: hybrid search over long-term memory with the request's query, one section per
/// memory (provenance: record id, creation time, fused score), best first by priority.
/// Optionally followed by the wikilink neighbours of the notes found, and restricted to the
/// agent's own memories unless configured otherwise.
#[derive(Debug, Clone)]
pub struct LongTermMemoryContributor {
    id: String,
    store: Arc<dyn LongTermMemory>,
    search: SearchOptions,
    own_memories_only: bool,
    graph: Option<(Arc<NoteGraph>, WalkOptions)>,
    meta: ContributorMeta,
    cache_ttl: Option<Duration>,
}

impl LongTermMemoryContributor {
    /// How long a search's hits are kept for the same query by default: 30 seconds, as
    /// DevClaw caches its memory search.
    pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(30);

    /// Search `store` with `search` (top-k, tags, mode...). Defaults: id `memory.search`,
    /// phase `memory`, priority 40, dynamic, only the agent's own memories, the hits of a
    /// query kept for [`Self::DEFAULT_CACHE_TTL`] (a runtime that adds a memory drops them).
    pub fn new(store: Arc<dyn LongTermMemory>, search: SearchOptions) -> LongTermMemoryContributor {
        LongTermMemoryContributor {
            id: "memory.search".into(),
            store,
            search,
            own_memories_only: true,
            graph: None,
            meta: store_meta(40, Phase::Memory, Stability::Dynamic),
            cache_ttl: Some(Self::DEFAULT_CACHE_TTL),
        }
    }

    /// Keep a query's hits for `ttl` (`None`: search on every request).
    #[must_use]
    pub fn with_cache_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.cache_ttl = ttl;
        self
    }

    /// Search every agent's memories, not only the requesting agent's.
    #[must_use]
    pub fn across_agents(mut self) -> Self {
        self.own_memories_only = false;
        self
    }

    /// After the search, add the notes linked from the notes it found (memories imported with
    /// [`NoteGraph::to_memories`]), walked with `walk`.
    #[must_use]
    pub fn with_note_graph(mut self, graph: Arc<NoteGraph>, walk: WalkOptions) -> Self {
        self.graph = Some((graph, walk));
        self
    }

    /// Replace the declared meta (its source is kept as [`SourceKind::Store`]).
    #[must_use]
    pub fn with_meta(mut self, meta: ContributorMeta) -> Self {
        self.meta = from_store(meta);
        self
    }

    /// Use another contributor id.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }
}

impl Contributor for LongTermMemoryContributor {
    fn id(&self) -> &str {
        &self.id
    }

    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::LongTermMemory
    }

    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }

    fn cache_policy(&self) -> CachePolicy {
        match self.cache_ttl {
            Some(ttl) => CachePolicy::Ttl(Some(ttl)),
            None => CachePolicy::Never,
        }
    }

    /// The hits depend on the query (the agent is part of every cache key).
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        Some(
            strata_registry::Fingerprint::new(&self.id)
                .add_opt(ctx.query.as_deref())
                .finish(),
        )
    }

    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let Some(query) = ctx.query.as_deref() else {
            return Ok(Vec::new());
        };
        let mut options = self.search.clone();
        if self.own_memories_only {
            options.agent_id = Some(ctx.agent_id.to_string());
        }
        let hits = self.store.search(query, &options).map_err(source_err)?;
        let n = u32::try_from(hits.len()).unwrap_or(u32::MAX);
        let store_name = self.store.store_name().to_owned();
        let mut out = Vec::with_capacity(hits.len());
        let mut found_notes: Vec<Arc<str>> = Vec::new();
        for (rank, hit) in hits.iter().enumerate() {
            let r = u32::try_from(rank).unwrap_or(u32::MAX);
            let rec = &hit.record;
            out.push(
                self.meta
                    .section(
                        &self.id,
                        RuntimeLayer::LongTermMemory,
                        section_id("mem/", rec.id.as_str()),
                        rec.content.clone(),
                    )
                    .map_err(core_err)?
                    // Best first: the top hit gets the highest priority.
                    .priority(self.meta.priority.saturating_add(n - r))
                    .source(SourceKind::Store, &store_name)
                    .record(Some(rec.id.as_str()), Some(rec.created_ms), Some(hit.score))
                    .build(),
            );
            if let Some((graph, _)) = &self.graph {
                if let Some(k) = graph.note_key_of_memory(&rec.id) {
                    found_notes.push(k.clone());
                }
            }
        }
        if let Some((graph, walk)) = &self.graph {
            let start: Vec<&str> = found_notes.iter().map(|k| &**k).collect();
            for nb in graph.neighbours(&start, *walk) {
                let Some(note) = graph.note(&nb.key) else {
                    continue;
                };
                let id: MemoryId = crate::markdown::note_memory_id(&nb.key);
                out.push(
                    self.meta
                        .section(
                            &self.id,
                            RuntimeLayer::LongTermMemory,
                            section_id("note/", &nb.key),
                            note.text.as_str(),
                        )
                        .map_err(core_err)?
                        .priority(self.meta.priority)
                        .source(SourceKind::Store, &store_name)
                        .record(Some(id.as_str()), None, None)
                        .build(),
                );
            }
        }
        Ok(out)
    }
}

/// Layer 6: the `MEMORY.md` index, read within its limits, as one stable section. When the
/// file was cut, a last line says so (and how much was kept); a missing file gives nothing.
#[derive(Debug, Clone)]
pub struct MemoryIndexContributor {
    id: String,
    path: PathBuf,
    limits: IndexLimits,
    meta: ContributorMeta,
}

impl MemoryIndexContributor {
    /// The index at `path` with `limits`. Defaults: id `memory.index`, phase `memory`,
    /// priority 45, stable, cached until the file changes.
    pub fn new(path: impl Into<PathBuf>, limits: IndexLimits) -> MemoryIndexContributor {
        MemoryIndexContributor {
            id: "memory.index".into(),
            path: path.into(),
            limits,
            meta: store_meta(45, Phase::Memory, Stability::Stable),
        }
    }
}

impl Contributor for MemoryIndexContributor {
    fn id(&self) -> &str {
        &self.id
    }

    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::LongTermMemory
    }

    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }

    /// Cached until the file changes: the validator is what
    /// [`strata_registry::Fingerprint::add_file`] says of it, up to four bytes per character
    /// shown (a FIFO put in its place is never opened), so an edited MEMORY.md reaches the very
    /// next turn.
    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::UntilInvalidated
    }

    fn cache_validator(&self, _ctx: &ContributionContext) -> Option<strata_core::ContentHash> {
        let max_bytes = u64::try_from(self.limits.max_chars)
            .unwrap_or(u64::MAX)
            .saturating_mul(4);
        Some(
            strata_registry::Fingerprint::new(&self.id)
                .add_file(&self.path, max_bytes)
                .finish(),
        )
    }

    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let Some(index) = MemoryIndex::read(&self.path, self.limits).map_err(source_err)? else {
            return Ok(Vec::new());
        };
        let mut text = index.text;
        if let Some(t) = index.truncated {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[MEMORY.md truncated: {} of {} lines, {} of {} characters kept]\n",
                t.kept_lines, t.total_lines, t.kept_chars, t.total_chars
            ));
        }
        let name = format!("file:{}", self.path.display());
        Ok(vec![self
            .meta
            .section(&self.id, RuntimeLayer::LongTermMemory, "memory-index", text)
            .map_err(core_err)?
            .source(SourceKind::Store, &name)
            .build()])
    }
}

/// Layer 5: the files this session read or changed, newest first (the seeds' session-files
/// section, which grows with a long conversation and competes with other memory for room).
/// The list comes from the session's `files` document in the store, which the runtime writes
/// when its tools read or change a file ([`crate::state::record_session_file`]). Defaults: id
/// `session.files`, phase `memory`, priority 78, dynamic, at most 50 files shown.
pub struct SessionFilesContributor {
    id: String,
    state: Arc<dyn crate::state::SessionState>,
    name: String,
    max_files: usize,
    meta: ContributorMeta,
}

impl std::fmt::Debug for SessionFilesContributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionFilesContributor")
            .field("id", &self.id)
            .field("store", &self.name)
            .finish_non_exhaustive()
    }
}

impl SessionFilesContributor {
    /// The files of each gathering's session, from `state` (a store named `store_name`).
    pub fn new(
        state: Arc<dyn crate::state::SessionState>,
        store_name: impl Into<String>,
    ) -> SessionFilesContributor {
        SessionFilesContributor {
            id: "session.files".into(),
            state,
            name: store_name.into(),
            max_files: 50,
            meta: store_meta(78, Phase::Memory, Stability::Dynamic),
        }
    }

    /// Show at most `n` files (the newest).
    #[must_use]
    pub fn with_max_files(mut self, n: usize) -> Self {
        self.max_files = n.max(1);
        self
    }

    /// Replace the declared meta (its source is kept as [`SourceKind::Store`]).
    #[must_use]
    pub fn with_meta(mut self, meta: ContributorMeta) -> Self {
        self.meta = from_store(meta);
        self
    }
}

impl Contributor for SessionFilesContributor {
    fn id(&self) -> &str {
        &self.id
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::WorkingMemory
    }
    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let files =
            crate::state::session_files(&*self.state, &ctx.session_id).map_err(source_err)?;
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let shown = files.len().min(self.max_files);
        let mut text = String::from("Files in this session (newest first):");
        for f in files.iter().rev().take(shown) {
            text.push_str(&format!("\n- {}: {}", f.action.label(), f.path));
        }
        if files.len() > shown {
            text.push_str(&format!("\n- ... and {} older", files.len() - shown));
        }
        Ok(vec![self
            .meta
            .section(&self.id, RuntimeLayer::WorkingMemory, "session-files", text)
            .map_err(core_err)?
            .source(SourceKind::Store, &self.name)
            .build()])
    }
}

/// The tag of memories that summarise a past run or session (the seeds' episodic summaries).
pub const EPISODE_TAG: &str = "episode";

/// Layer 6: summaries of the agent's past runs, the newest first: its long-term memories
/// tagged [`EPISODE_TAG`], one section each. They come from the runtime, which stores a summary
/// when a run ends. Defaults: id `memory.episodes`, phase `memory`, priority 40, dynamic, the
/// newest 3.
pub struct EpisodicContributor {
    id: String,
    store: Arc<dyn LongTermMemory>,
    newest: usize,
    meta: ContributorMeta,
}

impl std::fmt::Debug for EpisodicContributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodicContributor")
            .field("id", &self.id)
            .field("newest", &self.newest)
            .finish_non_exhaustive()
    }
}

impl EpisodicContributor {
    /// The newest episodes of each gathering's agent in `store`.
    pub fn new(store: Arc<dyn LongTermMemory>) -> EpisodicContributor {
        EpisodicContributor {
            id: "memory.episodes".into(),
            store,
            newest: 3,
            meta: store_meta(40, Phase::Memory, Stability::Dynamic),
        }
    }

    /// Show the newest `n` episodes.
    #[must_use]
    pub fn with_newest(mut self, n: usize) -> Self {
        self.newest = n.max(1);
        self
    }

    /// Replace the declared meta (its source is kept as [`SourceKind::Store`]).
    #[must_use]
    pub fn with_meta(mut self, meta: ContributorMeta) -> Self {
        self.meta = from_store(meta);
        self
    }
}

impl Contributor for EpisodicContributor {
    fn id(&self) -> &str {
        &self.id
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::LongTermMemory
    }
    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let mut episodes = self
            .store
            .list(
                &crate::long_term::ListOptions::all()
                    .agent(ctx.agent_id.to_string())
                    .tags([EPISODE_TAG]),
            )
            .map_err(source_err)?;
        episodes.sort_by(|a, b| {
            b.created_ms
                .cmp(&a.created_ms)
                .then_with(|| b.id.as_str().cmp(a.id.as_str()))
        });
        episodes.truncate(self.newest);
        let n = u32::try_from(episodes.len()).unwrap_or(u32::MAX);
        let store_name = self.store.store_name().to_owned();
        episodes
            .iter()
            .enumerate()
            .map(|(i, rec)| {
                let r = u32::try_from(i).unwrap_or(u32::MAX);
                Ok(self
                    .meta
                    .section(
                        &self.id,
                        RuntimeLayer::LongTermMemory,
                        section_id("episode/", rec.id.as_str()),
                        rec.content.clone(),
                    )
                    .map_err(core_err)?
                    // Newest first: the newest gets the highest priority.
                    .priority(self.meta.priority.saturating_add(n - r))
                    .source(SourceKind::Store, &store_name)
                    .record(Some(rec.id.as_str()), Some(rec.created_ms), None)
                    .build())
            })
            .collect()
    }
}

/// One session's goal book in a store's per-session documents, for
/// `strata_registry::GoalManager::in_store` (ADR-0016).
pub struct StoredGoals {
    state: Arc<dyn crate::state::SessionState>,
    store_name: String,
    session: Arc<str>,
}

impl StoredGoals {
    /// The goals of `session` in `state` (a store named `store_name`).
    pub fn new(
        state: Arc<dyn crate::state::SessionState>,
        store_name: impl Into<String>,
        session: impl Into<Arc<str>>,
    ) -> StoredGoals {
        StoredGoals {
            state,
            store_name: store_name.into(),
            session: session.into(),
        }
    }
}

impl strata_registry::GoalStore for StoredGoals {
    fn describe(&self) -> String {
        format!("{} (session `{}`)", self.store_name, self.session)
    }
    fn load(&self) -> Result<Option<(String, u64)>, strata_registry::GoalError> {
        self.state
            .state(&self.session, crate::state::GOALS_DOC)
            .map(|d| d.map(|d| (d.value, d.version)))
            .map_err(|e| self.err(e))
    }
    fn save(
        &self,
        json: &str,
        expected: Option<u64>,
    ) -> Result<Option<u64>, strata_registry::GoalError> {
        self.state
            .put_state(&self.session, crate::state::GOALS_DOC, json, expected)
            .map_err(|e| self.err(e))
    }
}

impl StoredGoals {
    fn err(&self, e: MemoryError) -> strata_registry::GoalError {
        strata_registry::GoalError::Store {
            store: strata_registry::GoalStore::describe(self),
            reason: e.to_string(),
        }
    }
}
