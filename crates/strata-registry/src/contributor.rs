//! The contributor trait: a producer of runtime sections for one of layers 3-6.
//!
//! A contributor names its layer with [`RuntimeLayer`], which has no variant for layer 1 or 2,
//! so no contributor can write identity content (ADR-0004, I7). Contributors may do I/O; the
//! registry runs them concurrently, each under a timeout, and a failing or slow one becomes a
//! marked omission unless it is sticky (ADR-0011).

use std::sync::Arc;
use std::time::Duration;

use strata_core::{
    AssemblyPath, ModeSet, OperationalMode, PathSet, Phase, PromptMode, RuntimeLayer, Section,
    SourceKind, Stability, Tier, Weight,
};

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

    /// Produce sections for one assembly. Sections must be of [`Contributor::layer`]; the
    /// registry drops any that are not and reports it.
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError>;
}
