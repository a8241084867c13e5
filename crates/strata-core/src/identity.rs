//! Identity data of layers 1-2.
//!
//! These are inert, immutable values: they carry no authority by themselves. The only way to
//! hand identity to the assembler is `strata_agentdef::VerifiedAgent`, whose constructor is
//! private to the verifying loader (ADR-0004, I5, I7). No type here offers `&mut` access,
//! interior mutability or a setter.

use std::sync::Arc;

use serde::Serialize;

use crate::content::Content;
use crate::error::CoreError;
use crate::format;
use crate::layer::IdentityLayer;
use crate::section::{Phase, SectionId, SectionKey};
use crate::tools::{ToolName, ToolUsageHint};

/// One section of layer 1 or 2.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct IdentitySection {
    id: SectionId,
    layer: IdentityLayer,
    key: Option<SectionKey>,
    phase: Phase,
    content: Content,
}

impl IdentitySection {
    /// A section; refuses content holding the wire format's reserved markers, which would make
    /// the rendered output ambiguous.
    pub fn new(
        layer: IdentityLayer,
        id: SectionId,
        key: Option<SectionKey>,
        phase: Phase,
        content: Content,
    ) -> Result<IdentitySection, CoreError> {
        if format::contains_reserved_marker(content.as_str()) {
            return Err(CoreError::ReservedMarkerInIdentity { id: id.to_string() });
        }
        Ok(IdentitySection {
            id,
            layer,
            key,
            phase,
            content,
        })
    }
    /// Id.
    pub fn id(&self) -> &SectionId {
        &self.id
    }
    /// Layer 1 or 2.
    pub fn layer(&self) -> IdentityLayer {
        self.layer
    }
    /// Conflict key: a runtime section with the same key is dropped (I4).
    pub fn key(&self) -> Option<&SectionKey> {
        self.key.as_ref()
    }
    /// Phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// Content.
    pub fn content(&self) -> &Content {
        &self.content
    }
}

/// A tool on layer 1's allowlist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AllowedTool {
    /// Name.
    pub name: ToolName,
    /// Trusted description from the signed definition.
    pub description: String,
    /// The argument schema pinned by the signed definition, if it gives one (ADR-0015).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<crate::ToolSchema>,
    /// The MCP server the signed definition pins the tool to, if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<std::sync::Arc<str>>,
    /// Usage hints.
    pub usage: ToolUsageHint,
}

/// The sections of layers 1 and 2 and the tool allowlist, in canonical order, immutable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdentityLayers {
    sections: Arc<[IdentitySection]>,
    tools: Arc<[AllowedTool]>,
}

impl IdentityLayers {
    /// Identity layers from sections (sorted here: layer, then phase, then given order) and
    /// the tool allowlist (sorted by name; duplicates refused).
    pub fn new(
        mut sections: Vec<IdentitySection>,
        mut tools: Vec<AllowedTool>,
    ) -> Result<IdentityLayers, CoreError> {
        sections.sort_by_key(|s| (s.layer, s.phase));
        let mut seen = std::collections::BTreeSet::new();
        for s in &sections {
            if !seen.insert(s.id.clone()) {
                return Err(CoreError::DuplicateSectionId {
                    id: s.id.to_string(),
                });
            }
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = tools.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(CoreError::DuplicateTool {
                name: w[0].name.to_string(),
            });
        }
        Ok(IdentityLayers {
            sections: sections.into(),
            tools: tools.into(),
        })
    }
    /// All identity sections, layer 1 first.
    pub fn sections(&self) -> &[IdentitySection] {
        &self.sections
    }
    /// Sections of one layer.
    pub fn layer(&self, layer: IdentityLayer) -> impl Iterator<Item = &IdentitySection> {
        self.sections.iter().filter(move |s| s.layer == layer)
    }
    /// The tool allowlist, sorted by name.
    pub fn tools(&self) -> &[AllowedTool] {
        &self.tools
    }
    /// Whether `name` is allowlisted.
    pub fn allows(&self, name: &ToolName) -> bool {
        self.tools.binary_search_by(|t| t.name.cmp(name)).is_ok()
    }
    /// Whether any identity section claims `key`.
    pub fn claims(&self, key: &SectionKey) -> bool {
        self.sections.iter().any(|s| s.key.as_ref() == Some(key))
    }
}
