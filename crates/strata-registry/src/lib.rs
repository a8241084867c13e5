//! `strata-registry`: contributors of runtime sections (layers 3-6), the registry that runs
//! them, the section cache, prompt modes and assembly paths, built-in contributors, the goal
//! manager, `strata.toml` configuration and operational-mode templates (ADR-0011).
//!
//! Architecture invariants kept here:
//! - Nothing in this crate produces identity content: contributors name their layer with
//!   `RuntimeLayer`, which cannot name layer 1 or 2 (ADR-0006, ADR-0004). Workspace files such
//!   as `SOUL.md` are layer 3, never identity.
//! - Gathering never fails because a non-sticky contributor failed; it reports an omission.
//! - The section cache never serves output across an invalidation, and its keys include the
//!   identity digest, so a new agent definition never sees old output.
//!
//! The paved path: one registry for the runtime, built-ins registered once, a gathering per
//! request.
//!
//! ```
//! use std::sync::Arc;
//! use strata_core::ContentHash;
//! use strata_registry::{Builtins, ContributionContext, Registry, SectionCache};
//!
//! let registry = Arc::new(Registry::with_cache(Arc::new(SectionCache::default())));
//! Builtins::detect().register(&registry)?;
//! // The digest comes from the verified agent definition; the time from the runtime.
//! let ctx = ContributionContext::new("ada", ContentHash::of("digest"), "session-1", 0);
//! let gathered = registry.gather(&ctx)?;
//! assert!(gathered.sections.iter().any(|s| s.id().as_str() == "time"));
//! assert!(gathered.omissions.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
// Every function fits on one screen for a reader (threshold in clippy.toml); tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod builtins;
pub mod cache;
pub mod config;
pub mod contributor;
pub mod gather;
pub mod goals;
pub mod inputs;
pub mod live;
pub mod modes;
pub mod registry;
pub mod templates;

pub use builtins::Builtins;
pub use cache::{CacheKey, CacheStats, Clock, ManualClock, SectionCache, SystemClock};
pub use config::{
    Config, ConfigError, ConfiguredPrompt, EmbedderConfig, McpServerConfig, StoreConfig,
    MAX_EMBEDDING_DIMS,
};
pub use contributor::{
    CachePolicy, ContributionContext, Contributor, ContributorError, ContributorMeta,
};
pub use gather::{GatherError, Gathered, Omission, OmissionReason, Run, RunOutcome};
pub use goals::{
    parse_markers, parse_name, ArtifactAction, ArtifactKind, AssistantOutput, ChangeOutcome,
    CheckpointStatus, Goal, GoalChange, GoalError, GoalManager, GoalPriority, GoalStore, Marker,
    MarkerOutcome, MarkerReport,
};
pub use inputs::{
    ActiveSkill, Fingerprint, Inbound, InputError, RequestInputs, ThinkingLevel, TimeZone,
    UnknownThinkingLevel,
};
pub use live::{LiveCallError, LivePrompt, LiveServer, LiveSource, LiveState, LiveToolResult};
pub use modes::{Owner, StandardSection};
pub use registry::{Registered, Registry, RegistryError, RegistryEvent, TAG_SKILLS, TAG_TOOLS};
pub use templates::{OperationalTemplate, SignedTemplate, TemplateError, TemplateValues};
