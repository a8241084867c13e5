//! The contributor trait: a producer of runtime sections for one of layers 3-6.
//!
//! A contributor names its layer with [`RuntimeLayer`], which has no variant for layer 1 or 2,
//! so no contributor can write identity content (ADR-0004, I7). Contributors may do I/O; the
//! registry runs them concurrently, each under a timeout, and a failing or slow one becomes a
//! marked omission unless it is sticky (ADR-0011).

use std::sync::Arc;
use std::time::Duration;

use strata_core::{
    AssemblyPath, Content, ContentHash, CoreError, ModeSet, OperationalMode, PathSet, Phase,
    PromptMode, RuntimeLayer, Section, SectionBuilder, SourceKind, Stability, Tier, Weight,
};

use crate::inputs::RequestInputs;

/// What a contributor declares about the sections it produces.
#[derive(Debug, Clone, PartialEq)]
pub struct ContributorMeta {
    /// Priority within the layer (larger is more important).
    pub priority: u32,
    /// Phase.
    pub phase: Phase,
    /// Stable output is cached until invalidated; dynamic output is never cached.
    pub stability: Stability,
    /// Modes it takes part in.
    pub modes: ModeSet,
    /// Assembly paths it takes part in.
    pub paths: PathSet,
    /// Sticky: never trimmed, and its failure fails the assembly.
    pub sticky: bool,
    /// Weight.
    pub weight: Weight,
    /// Where it comes from (static, config, mcp with the server name).
    pub source: SourceKind,
    /// Free-form tags (for lookup by tag).
    pub tags: Vec<Arc<str>>,
    /// How long it may take before it is abandoned for this assembly.
    pub timeout: Duration,
}

impl Default for ContributorMeta {
    fn default() -> Self {
        ContributorMeta {
            priority: 0,
            phase: Phase::Task,
            stability: Stability::Dynamic,
            modes: ModeSet::all(),
            paths: PathSet::all(),
            sticky: false,
            weight: Weight::default(),
            source: SourceKind::Static,
            tags: Vec::new(),
            timeout: Duration::from_secs(2),
        }
    }
}

impl ContributorMeta {
    /// Whether a contributor with this meta takes part in an assembly of `mode` on `path`.
    pub fn takes_part(&self, mode: PromptMode, path: AssemblyPath) -> bool {
        self.modes.contains(mode) && self.paths.contains(path)
    }

    /// A section builder for `layer` pre-filled from this meta: priority, phase, stability,
    /// sticky, weight, modes, paths, and provenance (this meta's source, named after
    /// `contributor_id`). Contributors use it so their sections say what they declared.
    pub fn section(
        &self,
        contributor_id: &str,
        layer: RuntimeLayer,
        id: impl AsRef<str>,
        content: impl Into<Content>,
    ) -> Result<SectionBuilder, CoreError> {
        Ok(Section::builder(layer, id, content)?
            .priority(self.priority)
            .phase(self.phase)
            .stability(self.stability)
            .sticky(self.sticky)
            .weight(self.weight)
            .modes(self.modes)
            .paths(self.paths)
            .source(self.source.clone(), contributor_id))
    }
}

/// How the section cache may keep a contributor's output (ADR-0011).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CachePolicy {
    /// Never cached: recomputed on every gathering (the default for dynamic contributors).
    Never,
    /// Cached until invalidated (the default for stable contributors).
    UntilInvalidated,
    /// Cached for a time to live; once expired, the old output is served while a background
    /// thread refreshes it (stale-while-revalidate). `None` uses the cache's default TTL
    /// (30 s unless configured).
    Ttl(Option<Duration>),
}

/// Everything a contributor may look at for one assembly. Values are plain data; nothing here
/// gives access to layers 1-2 beyond the identity digest.
#[derive(Debug, Clone)]
pub struct ContributionContext {
    /// The agent's id from its verified definition.
    pub agent_id: Arc<str>,
    /// The identity digest of the verified definition (cache keys depend on it).
    pub identity_digest: strata_core::ContentHash,
    /// The session.
    pub session_id: Arc<str>,
    /// Prompt mode.
    pub mode: PromptMode,
    /// Assembly path.
    pub path: AssemblyPath,
    /// Context tier.
    pub tier: Tier,
    /// Operational mode.
    pub operational_mode: OperationalMode,
    /// The current user message or search query, if any.
    pub query: Option<Arc<str>>,
    /// The time of this assembly, Unix milliseconds (passed in, so output is reproducible).
    pub now_ms: i64,
    /// Per-request inputs for built-in contributors (tools, skills, inbound, language...).
    pub inputs: Arc<RequestInputs>,
}

impl ContributionContext {
    /// A context with the given identity, session and time, and defaults for the rest: mode
    /// `full`, path `soul`, tier 3, operational mode `assistant`, no query, empty inputs.
    pub fn new(
        agent_id: impl Into<Arc<str>>,
        identity_digest: ContentHash,
        session_id: impl Into<Arc<str>>,
        now_ms: i64,
    ) -> ContributionContext {
        ContributionContext {
            agent_id: agent_id.into(),
            identity_digest,
            session_id: session_id.into(),
            mode: PromptMode::default(),
            path: AssemblyPath::default(),
            tier: Tier::T3,
            operational_mode: OperationalMode::default(),
            query: None,
            now_ms,
            inputs: Arc::new(RequestInputs::default()),
        }
    }
}

/// Why a contributor produced nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContributorError {
    /// Its source failed (I/O, store, network).
    #[error("contributor source failed: {0}")]
    Source(String),
    /// It took longer than its timeout.
    #[error("contributor timed out after {0:?}")]
    Timeout(Duration),
    /// It panicked.
    #[error("contributor panicked")]
    Panicked,
}

/// A producer of sections for one runtime layer.
pub trait Contributor: Send + Sync + 'static {
    /// A unique id (`env`, `memory.search`, `mcp:github/workflow`...).
    fn id(&self) -> &str;

    /// The runtime layer it writes to.
    fn layer(&self) -> RuntimeLayer;

    /// What it declares about its sections.
    fn meta(&self) -> ContributorMeta {
        ContributorMeta::default()
    }

    /// How the section cache may keep this contributor's output. By default stable
    /// contributors are cached until invalidated and dynamic ones never; a contributor opts
    /// into a TTL with stale-while-revalidate by returning [`CachePolicy::Ttl`] (ADR-0011).
    fn cache_policy(&self) -> CachePolicy {
        match self.meta().stability {
            Stability::Stable => CachePolicy::UntilInvalidated,
            Stability::Dynamic => CachePolicy::Never,
        }
    }

    /// A fingerprint of the per-request inputs this contributor's output depends on beyond the
    /// identity digest, mode, path, tier and operational mode (for example the announced tools).
    /// It is part of the cache key, so changed inputs never serve old output (ADR-0011).
    /// The default, `None`, says the output depends on nothing else.
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let _ = ctx;
        None
    }

    /// A digest of the outside state this contributor's output is made from (files on disk,
    /// say), which may change between two requests with the same inputs. When it returns
    /// `Some`, the registry asks for it before every lookup and serves cached output only while
    /// it equals the digest the output was computed under; a different one is a miss, and the
    /// output is computed again for this very request (ADR-0011). It is computed again after
    /// the contributor ran, and output whose sources changed meanwhile is not cached.
    ///
    /// Unlike [`Contributor::cache_fingerprint`], which keys the cache, a validator replaces
    /// the entry it no longer matches, so sources that change often do not fill the cache.
    /// It runs on every gathering, cached or not, and before a lookup on the gathering's own
    /// thread, outside the contributor's timeout: it must be much cheaper than
    /// [`Contributor::contribute`], must not block on a slow source, and must not fail: it
    /// describes a source it cannot read by what it could see (the error's kind, for instance),
    /// and `contribute` reports the error.
    /// The default, `None`, says there is no such state: output is served as the cache policy
    /// allows.
    fn cache_validator(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let _ = ctx;
        None
    }

    /// Produce sections for one assembly. Sections must be of [`Contributor::layer`]; the
    /// registry drops any that are not and reports it.
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError>;
}
