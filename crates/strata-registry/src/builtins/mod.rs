//! Built-in contributors for the seed systems' standard runtime sections.
//!
//! Each one declares its layer, phase, priority, stability, modes and paths through
//! [`StandardSection::meta`](crate::modes::StandardSection::meta) (ADR-0011). None of them
//! writes identity: workspace files such as `SOUL.md` and `IDENTITY.md` are layer 3 content,
//! never layers 1-2 (ADR-0006). Output depends only on the contribution context and on what
//! the contributor was built with (or, for detection and files, on the machine), so it is
//! reproducible: time comes from `ctx.now_ms`, never from the system clock (ADR-0013).

mod bootstrap;
mod calendar;
mod environment;
mod prompt;
mod request;
mod tools;
mod workspace;

use std::path::PathBuf;
use std::sync::Arc;

use strata_core::{Content, RuntimeLayer, Section};

pub use bootstrap::BootstrapFiles;
pub use calendar::{format_local, CivilTime};
pub use environment::{Environment, RuntimeCapabilities, RuntimeInfo, TemporalContext};
pub use prompt::{Activation, Prompt, TAG_SANITY};
pub use request::{
    ActiveSkills, BusinessContext, CustomInstructions, InboundContext, RecentFootprint,
    ResponseLanguage, ThinkingGuidance, VoiceMode,
};
pub use tools::{ToolCatalog, ToolGuidance};
pub use workspace::WorkspaceHints;

use crate::contributor::{ContributorError, ContributorMeta};
use crate::inputs::TimeZone;
use crate::registry::{Registry, RegistryError};

/// Build one section from a meta, turning an invalid id into a source error.
pub(crate) fn section(
    meta: &ContributorMeta,
    contributor: &str,
    layer: RuntimeLayer,
    id: &str,
    content: impl Into<Content>,
) -> Result<Section, ContributorError> {
    meta.section(contributor, layer, id, content)
        .map(|b| b.build())
        .map_err(|e| ContributorError::Source(e.to_string()))
}

/// Like [`section`], with a conflict key: a section of a higher layer (or of the signed
/// identity) that claims the same key wins over it in the assembler (ADR-0007).
pub(crate) fn keyed_section(
    meta: &ContributorMeta,
    contributor: &str,
    layer: RuntimeLayer,
    id: &str,
    key: &str,
    content: impl Into<Content>,
) -> Result<Section, ContributorError> {
    meta.section(contributor, layer, id, content)
        .and_then(|b| b.key(key))
        .map(|b| b.build())
        .map_err(|e| ContributorError::Source(e.to_string()))
}

/// What the standard set of built-in contributors is built with.
#[derive(Debug, Clone)]
pub struct Builtins {
    /// The working directory shown in the environment section.
    pub working_dir: PathBuf,
    /// The workspace folder holding bootstrap files; `None` leaves that contributor out.
    pub workspace: Option<PathBuf>,
    /// Custom instructions from configuration; empty leaves that contributor out.
    pub custom_instructions: String,
    /// The default time zone (a request may name its own).
    pub time_zone: TimeZone,
    /// The host name shown in the runtime section.
    pub host: Arc<str>,
    /// Longest bootstrap file kept, in characters.
    pub max_file_chars: usize,
}

impl Builtins {
    /// Values detected from this process: current directory, host name, UTC, no workspace,
    /// no custom instructions, files up to 20,000 characters.
    pub fn detect() -> Builtins {
        Builtins {
            working_dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            workspace: None,
            custom_instructions: String::new(),
            time_zone: TimeZone::utc(),
            host: environment::detect_host(),
            max_file_chars: BootstrapFiles::DEFAULT_MAX_CHARS,
        }
    }

    /// Register the standard set: environment, runtime capabilities, temporal context, runtime
    /// info, tool catalog, tool guidance, active skills, bootstrap files (when a workspace is
    /// set), custom instructions (when given), thinking guidance, inbound context, voice mode,
    /// response language, business context and recent footprint.
    pub fn register(self, registry: &Registry) -> Result<(), RegistryError> {
        registry.register(Arc::new(Environment::new(self.working_dir)))?;
        registry.register(Arc::new(RuntimeCapabilities::from_env()))?;
        registry.register(Arc::new(TemporalContext::new(self.time_zone)))?;
        registry.register(Arc::new(RuntimeInfo::new(self.host)))?;
        registry.register(Arc::new(ToolCatalog))?;
        registry.register(Arc::new(ToolGuidance))?;
        registry.register(Arc::new(ActiveSkills))?;
        if let Some(dir) = self.workspace {
            registry.register(Arc::new(
                BootstrapFiles::new(dir).with_max_chars(self.max_file_chars),
            ))?;
        }
        if !self.custom_instructions.trim().is_empty() {
            registry.register(Arc::new(CustomInstructions::new(self.custom_instructions)))?;
        }
        registry.register(Arc::new(ThinkingGuidance))?;
        registry.register(Arc::new(InboundContext))?;
        registry.register(Arc::new(VoiceMode))?;
        registry.register(Arc::new(ResponseLanguage))?;
        registry.register(Arc::new(BusinessContext))?;
        registry.register(Arc::new(RecentFootprint))?;
        Ok(())
    }
}
