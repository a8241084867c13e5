//! Built-in contributors about tools: the catalog of announced tools and tool-usage guidance
//! generated from usage hints (layer 3, tagged `tools`, stable and keyed by the tools).
//!
//! Guidance is generated only from the hints of the verified definition's allowlist
//! (`prefer_for`, `prefer_over`); there are no hard-coded rules. Descriptions announced by MCP
//! servers are untrusted text and end up in a fenced layer 3 section (ADR-0007, ADR-0009).

use std::sync::Arc;

use strata_core::{ContentHash, RuntimeLayer, Section, ToolName};

use super::{keyed_section, section};
use crate::contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
use crate::inputs::Fingerprint;
use crate::modes::StandardSection;
use crate::registry::TAG_TOOLS;

fn tools_meta(kind: StandardSection) -> ContributorMeta {
    ContributorMeta {
        tags: vec![Arc::from(TAG_TOOLS)],
        ..kind.meta()
    }
}

fn announced(ctx: &ContributionContext) -> Vec<&strata_core::AnnouncedTool> {
    let mut tools: Vec<_> = ctx.inputs.tools.iter().collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    tools
}

/// The catalog of tools announced for this request, sorted by name.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolCatalog;

impl ToolCatalog {
    /// The contributor id.
    pub const ID: &'static str = "builtin.tools.catalog";
}

impl Contributor for ToolCatalog {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        tools_meta(StandardSection::ToolCatalog)
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let mut f = Fingerprint::new(Self::ID);
        for t in announced(ctx) {
            f.add(t.name.as_str())
                .add(t.description.as_str())
                .add_opt(t.server.as_deref());
        }
        Some(f.finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let tools = announced(ctx);
        if tools.is_empty() {
            return Ok(Vec::new());
        }
        let mut text = String::from("Tools available in this session:");
        for t in tools {
            let description = t.description.as_str().trim();
            text.push_str(&format!("\n- `{}`", t.name));
            if let Some(server) = &t.server {
                text.push_str(&format!(" (from MCP server `{server}`)"));
            }
            if !description.is_empty() {
                text.push_str(&format!(": {description}"));
            }
        }
        // Keyed `tool_catalog`: the assembler writes the authoritative catalog, narrowed to the
        // allowlist, under the same key and a higher priority, so this one only shows when the
        // assembler has none (ADR-0007).
        Ok(vec![keyed_section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "tools.catalog",
            "tool_catalog",
            text,
        )?])
    }
}

/// Tool-usage guidance generated from the usage hints of the tools announced for this request:
/// "use `file_read` for reading files", "prefer `file_read` over `shell`" (only when both are
/// available).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolGuidance;

impl ToolGuidance {
    /// The contributor id.
    pub const ID: &'static str = "builtin.tools.guidance";

    /// The guidance lines, in tool-name order, then in the order of the hints.
    pub fn lines(ctx: &ContributionContext) -> Vec<String> {
        let available: Vec<&ToolName> = announced(ctx).into_iter().map(|t| &t.name).collect();
        let mut lines = Vec::new();
        for (tool, hint) in &ctx.inputs.tool_hints {
            if !available.contains(&tool) {
                continue;
            }
            for task in &hint.prefer_for {
                let task = task.trim();
                if !task.is_empty() {
                    lines.push(format!("Use `{tool}` for {task}."));
                }
            }
            for other in &hint.prefer_over {
                if other != tool && available.contains(&other) {
                    lines.push(format!("Prefer `{tool}` over `{other}`."));
                }
            }
        }
        lines
    }
}

impl Contributor for ToolGuidance {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        tools_meta(StandardSection::ToolGuidance)
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let mut f = Fingerprint::new(Self::ID);
        for line in Self::lines(ctx) {
            f.add(&line);
        }
        Some(f.finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let lines = Self::lines(ctx);
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        let mut text = String::from("Tool usage:");
        for l in lines {
            text.push_str("\n- ");
            text.push_str(&l);
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "tools.guidance",
            text,
        )?])
    }
}
