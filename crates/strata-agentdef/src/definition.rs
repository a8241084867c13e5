//! The agent-definition format (TOML, strict) and its conversion into identity layers.
//!
//! ```toml
//! id = "ada"                       # agent id
//! name = "Ada"
//! version = 3                      # only grows (rollback guard)
//! not_before = "2026-01-01T00:00:00Z"
//! not_after = "2027-01-01T00:00:00Z"
//! default_mode = "assistant"       # operational mode
//! default_prompt_mode = "full"
//!
//! [budget]                         # strata_core::Budget
//! total_tokens = 16384
//!
//! [core]                           # layer 1
//! identity = "You are Ada..."      # or { file = "SOUL.md", sha256 = "<hex>" }
//! role = "..."
//! safety_rules = ["...", "..."]
//! hard_constraints = ["..."]
//! response_format = "..."
//! language = "English"
//!
//! [[core.role_blocks]]             # named role headers and protocol blocks, in this order
//! name = "researcher_protocol"
//! text = "..."                     # or { file = "PROTOCOL.md", sha256 = "<hex>" }
//!
//! [[core.tools]]                   # the allowlist
//! name = "file_read"
//! description = "Read a file"
//! prefer_for = ["reading files"]
//! prefer_over = ["shell"]
//!
//! [characteristics]                # layer 2
//! personality = "..."
//! style = "..."
//! guidelines = ["..."]
//! citation_rules = "..."
//!
//! [templates]                      # operational-mode templates per tier, and the fallback
//! fallback = "..."
//! [templates.developer]
//! tier3 = "..."
//! ```
//!
//! Unknown fields and duplicate keys are refused. Files are referenced only by path (relative to
//! the definition, no `..`) plus SHA-256; the loader refuses a file whose digest differs.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use strata_core::identity::AllowedTool;
use strata_core::{
    Budget, Content, IdentityLayer, IdentityLayers, IdentitySection, OperationalMode, Phase,
    PromptMode, SectionId, SectionKey, Tier, ToolName, ToolSchema, ToolUsageHint,
};

use crate::error::AgentDefError;
use crate::time::parse_rfc3339;

/// Largest referenced file accepted.
pub const MAX_REFERENCED_FILE_BYTES: u64 = 1024 * 1024;

/// Text given inline or by a file reference with its digest.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Text {
    /// Inline text.
    Inline(String),
    /// A file next to the definition, pinned by SHA-256.
    File(FileRef),
}

/// A referenced file, pinned by digest.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRef {
    /// Path relative to the definition file.
    pub file: String,
    /// Lower-case hex SHA-256 of the file's bytes.
    pub sha256: String,
}

/// A tool on the allowlist, as written.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    /// Name.
    pub name: ToolName,
    /// Description (trusted; from the signed definition).
    #[serde(default)]
    pub description: String,
    /// Tasks it is preferred for.
    #[serde(default)]
    pub prefer_for: Vec<String>,
    /// Tools it is preferred over.
    #[serde(default)]
    pub prefer_over: Vec<ToolName>,
    /// The JSON Schema of its arguments (a TOML table), pinned by the signature: a tool announced
    /// at run time with a different schema is refused (ADR-0015).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<ToolSchema>,
    /// The MCP server that provides the tool, pinned by the signature: the same tool announced
    /// by another server, or by the runtime itself, is refused as a changed definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

/// A named block of the role: a sub-agent's role header or one of its protocols
/// (`explore_constraints`, `coder_guidelines`, `researcher_protocol`...). Each becomes its own
/// signed layer-1 section, `core.role.<name>`, after the base role (ADR-0025).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleBlock {
    /// The block's name: 1-64 characters of `a-z 0-9 _ -`, unique in the definition.
    pub name: String,
    /// Its text, inline or a pinned file.
    pub text: Text,
}

/// Longest role-block name.
pub const MAX_ROLE_BLOCK_NAME: usize = 64;

/// Layer 1, as written.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreDef {
    /// Identity / soul.
    pub identity: Text,
    /// Role.
    #[serde(default)]
    pub role: Option<Text>,
    /// Named role headers and protocol blocks, rendered in order after the role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub role_blocks: Vec<RoleBlock>,
    /// Safety rules.
    #[serde(default)]
    pub safety_rules: Vec<String>,
    /// Hard constraints.
    #[serde(default)]
    pub hard_constraints: Vec<String>,
    /// Response format.
    #[serde(default)]
    pub response_format: Option<Text>,
    /// Response language.
    #[serde(default)]
    pub language: Option<String>,
    /// The tool allowlist.
    #[serde(default)]
    pub tools: Vec<ToolDef>,
}

impl Default for Text {
    fn default() -> Self {
        Text::Inline(String::new())
    }
}

/// Layer 2, as written.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CharacteristicsDef {
    /// Personality.
    #[serde(default)]
    pub personality: Option<Text>,
    /// Style.
    #[serde(default)]
    pub style: Option<Text>,
    /// Guidelines.
    #[serde(default)]
    pub guidelines: Vec<String>,
    /// Citation rules.
    #[serde(default)]
    pub citation_rules: Option<Text>,
}

/// Templates of one operational mode, per tier.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierTemplates {
    /// Tier 1 (2-4K windows).
    #[serde(default)]
    pub tier1: Option<String>,
    /// Tier 2 (8K).
    #[serde(default)]
    pub tier2: Option<String>,
    /// Tier 3 (16K).
    #[serde(default)]
    pub tier3: Option<String>,
    /// Tier 4 (32K).
    #[serde(default)]
    pub tier4: Option<String>,
    /// Tier 5 (64-128K).
    #[serde(default)]
    pub tier5: Option<String>,
}

impl TierTemplates {
    fn get(&self, tier: Tier) -> Option<&str> {
        match tier {
            Tier::T1 => self.tier1.as_deref(),
            Tier::T2 => self.tier2.as_deref(),
            Tier::T3 => self.tier3.as_deref(),
            Tier::T4 => self.tier4.as_deref(),
            Tier::T5 => self.tier5.as_deref(),
        }
    }
}

/// Operational-mode templates, as written.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplatesDef {
    /// Used when no template of the mode fits.
    #[serde(default)]
    pub fallback: Option<String>,
    /// Assistant mode.
    #[serde(default)]
    pub assistant: TierTemplates,
    /// Developer mode.
    #[serde(default)]
    pub developer: TierTemplates,
    /// Planning mode.
    #[serde(default)]
    pub planning: TierTemplates,
    /// Debugger mode.
    #[serde(default)]
    pub debugger: TierTemplates,
    /// User mode.
    #[serde(default)]
    pub user: TierTemplates,
}

/// The agent definition, as written in the signed payload.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDefinition {
    /// Agent id (1-64 of `[a-z0-9._-]`).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Version; must grow with every change.
    pub version: u64,
    /// Start of validity (RFC 3339).
    #[serde(default)]
    pub not_before: Option<String>,
    /// End of validity (RFC 3339).
    #[serde(default)]
    pub not_after: Option<String>,
    /// Default operational mode.
    #[serde(default)]
    pub default_mode: OperationalMode,
    /// Default prompt mode.
    #[serde(default)]
    pub default_prompt_mode: PromptMode,
    /// Default budget.
    #[serde(default)]
    pub budget: Budget,
    /// Layer 1.
    pub core: CoreDef,
    /// Layer 2.
    #[serde(default)]
    pub characteristics: CharacteristicsDef,
    /// Operational-mode templates.
    #[serde(default)]
    pub templates: TemplatesDef,
    /// The referenced files, by path, embedded by `strata sign` so that the signed payload is
    /// all a runtime needs; the loader never reads a referenced file from disk.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub embedded: BTreeMap<String, EmbeddedFile>,
}

/// A referenced file's text, embedded in the signed definition.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedFile {
    /// Lower-case hex SHA-256 of the text's bytes (the reference's pin).
    pub sha256: String,
    /// The file's text.
    pub text: String,
}

/// The operational-mode templates of a verified definition (read-only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeTemplates(TemplatesDef);

/// A template chosen by [`ModeTemplates::resolve`], with where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedTemplate<'a> {
    /// Template text (from the signed definition).
    pub text: &'a str,
    /// The mode it belongs to, or `None` for the fallback template.
    pub mode: Option<OperationalMode>,
    /// The tier it belongs to, or `None` for the fallback template.
    pub tier: Option<Tier>,
    /// True when it is not the exact mode and tier asked for.
    pub fell_back: bool,
}

impl ModeTemplates {
    fn of(&self, mode: OperationalMode) -> &TierTemplates {
        match mode {
            OperationalMode::Assistant => &self.0.assistant,
            OperationalMode::Developer => &self.0.developer,
            OperationalMode::Planning => &self.0.planning,
            OperationalMode::Debugger => &self.0.debugger,
            OperationalMode::User => &self.0.user,
        }
    }

    /// The exact template of `mode` at `tier`, if written.
    pub fn get(&self, mode: OperationalMode, tier: Tier) -> Option<&str> {
        self.of(mode).get(tier)
    }

    /// The template for `mode` at `tier` through the fallback chain: the exact one; the same mode
    /// at the nearest lower tier, then the nearest higher tier; the `user` mode falls back to
    /// `assistant` (its default copy); then the definition's `fallback`; then developer tier 3.
    pub fn resolve(&self, mode: OperationalMode, tier: Tier) -> Option<ResolvedTemplate<'_>> {
        let mut modes = vec![mode];
        if mode == OperationalMode::User {
            modes.push(OperationalMode::Assistant);
        }
        for m in modes {
            let lower = Tier::ALL.iter().rev().filter(|t| **t <= tier);
            let higher = Tier::ALL.iter().filter(|t| **t > tier);
            for t in lower.chain(higher) {
                if let Some(text) = self.get(m, *t) {
                    let fell_back = m != mode || *t != tier;
                    return Some(ResolvedTemplate {
                        text,
                        mode: Some(m),
                        tier: Some(*t),
                        fell_back,
                    });
                }
            }
        }
        if let Some(text) = self.0.fallback.as_deref() {
            return Some(ResolvedTemplate {
                text,
                mode: None,
                tier: None,
                fell_back: true,
            });
        }
        self.get(OperationalMode::Developer, Tier::T3)
            .map(|text| ResolvedTemplate {
                text,
                mode: Some(OperationalMode::Developer),
                tier: Some(Tier::T3),
                fell_back: true,
            })
    }
}

/// Everything read from a verified payload.
pub(crate) struct Parsed {
    pub def: AgentDefinition,
    pub identity: IdentityLayers,
    pub templates: ModeTemplates,
    pub not_before: Option<i64>,
    pub not_after: Option<i64>,
}

fn invalid(msg: impl Into<String>) -> AgentDefError {
    AgentDefError::InvalidDefinition(msg.into())
}

fn safe_relative(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    (!p.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir)))
    .then(|| path.to_path_buf())
}

/// Where referenced files come from: the definition's embedded texts, and, only when a signer
/// checks a definition before embedding them, the directory next to it.
#[derive(Clone, Copy)]
struct Files<'a> {
    embedded: &'a BTreeMap<String, EmbeddedFile>,
    base: Option<&'a Path>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn resolve_text(t: &Text, files: Files<'_>, what: &str) -> Result<String, AgentDefError> {
    match t {
        Text::Inline(s) => Ok(s.clone()),
        Text::File(f) => {
            if let Some(e) = files.embedded.get(&f.file) {
                // The embedded text must be the one the reference pins.
                let found = sha256_hex(e.text.as_bytes());
                let pinned = f.sha256.to_ascii_lowercase();
                if found != pinned || e.sha256.to_ascii_lowercase() != pinned {
                    return Err(AgentDefError::DigestMismatch {
                        path: PathBuf::from(&f.file),
                        expected: f.sha256.clone(),
                        found,
                    });
                }
                return Ok(e.text.clone());
            }
            let base = files.base;
            let rel = safe_relative(&f.file).ok_or_else(|| {
                invalid(format!(
                    "{what}: file `{}` must be a relative path without `..`",
                    f.file
                ))
            })?;
            let base = base.ok_or_else(|| {
                invalid(format!(
                    "{what}: references file `{}`, which the signed definition does not embed; sign it again with `strata sign` (which embeds referenced files), so that the envelope and the trust store are all a runtime needs",
                    f.file
                ))
            })?;
            let path = base.join(rel);
            let bytes = crate::read_limited(&path, MAX_REFERENCED_FILE_BYTES, "referenced file")?;
            let found = sha256_hex(&bytes);
            if found != f.sha256.to_ascii_lowercase() {
                return Err(AgentDefError::DigestMismatch {
                    path,
                    expected: f.sha256.clone(),
                    found,
                });
            }
            String::from_utf8(bytes).map_err(|_| invalid(format!("{what}: file is not UTF-8")))
        }
    }
}

fn bullets(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("- {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parse the verified payload bytes. Called only after signature verification.
pub(crate) fn parse_payload(payload: &[u8], base: Option<&Path>) -> Result<Parsed, AgentDefError> {
    let text = std::str::from_utf8(payload).map_err(|_| invalid("payload is not UTF-8"))?;
    let def: AgentDefinition = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    check_embedded(&def.embedded)?;
    check_id_name_budget(&def)?;
    let (not_before, not_after) = validity_window(&def)?;
    let files = Files {
        embedded: &def.embedded,
        base,
    };
    let mut sections = Vec::new();
    let tools = core_sections(&mut sections, &def.core, files)?;
    characteristics_sections(&mut sections, &def.characteristics, files)?;
    check_templates(&def.templates)?;
    let identity = IdentityLayers::new(sections, tools).map_err(|e| invalid(e.to_string()))?;
    let templates = ModeTemplates(def.templates.clone());
    Ok(Parsed {
        def,
        identity,
        templates,
        not_before,
        not_after,
    })
}

/// Every embedded file has a relative path without `..` and is within the size limit of a
/// referenced file.
fn check_embedded(embedded: &BTreeMap<String, EmbeddedFile>) -> Result<(), AgentDefError> {
    for (path, e) in embedded {
        if safe_relative(path).is_none() {
            return Err(invalid(format!(
                "embedded file `{path}` must be a relative path without `..`"
            )));
        }
        if e.text.len() as u64 > MAX_REFERENCED_FILE_BYTES {
            return Err(invalid(format!(
                "embedded file `{path}` is over {MAX_REFERENCED_FILE_BYTES} bytes"
            )));
        }
    }
    Ok(())
}

/// The id is 1-64 characters of `[a-z0-9._-]`, the name is not blank and the budget is valid.
fn check_id_name_budget(def: &AgentDefinition) -> Result<(), AgentDefError> {
    if def.id.is_empty()
        || def.id.len() > 64
        || !def.id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
    {
        return Err(invalid(format!(
            "id `{}` must be 1-64 characters of a-z 0-9 . _ -",
            def.id
        )));
    }
    if def.name.trim().is_empty() {
        return Err(invalid("name must not be empty"));
    }
    def.budget.validate().map_err(|e| invalid(e.to_string()))
}

/// The definition's `not_before` and `not_after`, in seconds since the Unix epoch, in order.
fn validity_window(def: &AgentDefinition) -> Result<(Option<i64>, Option<i64>), AgentDefError> {
    let not_before = def
        .not_before
        .as_deref()
        .map(parse_rfc3339)
        .transpose()
        .map_err(invalid)?;
    let not_after = def
        .not_after
        .as_deref()
        .map(parse_rfc3339)
        .transpose()
        .map_err(invalid)?;
    if let (Some(a), Some(b)) = (not_before, not_after) {
        if a > b {
            return Err(invalid("not_before is after not_after"));
        }
    }
    Ok((not_before, not_after))
}

/// Add an identity section to `sections`, unless its text is blank.
fn push_section(
    sections: &mut Vec<IdentitySection>,
    layer: IdentityLayer,
    id: &str,
    key: &str,
    phase: Phase,
    text: String,
) -> Result<(), AgentDefError> {
    if text.trim().is_empty() {
        return Ok(());
    }
    let s = IdentitySection::new(
        layer,
        SectionId::new(id).map_err(|e| invalid(e.to_string()))?,
        Some(SectionKey::new(key).map_err(|e| invalid(e.to_string()))?),
        phase,
        Content::from(text),
    )
    .map_err(|e| invalid(e.to_string()))?;
    sections.push(s);
    Ok(())
}

/// The layer-1 sections of `[core]`, in their order, added to `sections`; and the allowed
/// tools.
fn core_sections(
    sections: &mut Vec<IdentitySection>,
    c: &CoreDef,
    files: Files<'_>,
) -> Result<Vec<AllowedTool>, AgentDefError> {
    use IdentityLayer::Core as L1;
    let identity = resolve_text(&c.identity, files, "core.identity")?;
    if identity.trim().is_empty() {
        return Err(invalid(
            "core.identity must not be empty: it says who the agent is",
        ));
    }
    push_section(
        sections,
        L1,
        "core.identity",
        "identity",
        Phase::Constraint,
        identity,
    )?;
    if let Some(r) = &c.role {
        push_section(
            sections,
            L1,
            "core.role",
            "role",
            Phase::Constraint,
            resolve_text(r, files, "core.role")?,
        )?;
    }
    role_block_sections(sections, &c.role_blocks, files)?;
    push_section(
        sections,
        L1,
        "core.safety",
        "safety",
        Phase::Constraint,
        bullets(&c.safety_rules),
    )?;
    push_section(
        sections,
        L1,
        "core.constraints",
        "constraints",
        Phase::Constraint,
        bullets(&c.hard_constraints),
    )?;
    let tools = tool_section(sections, &c.tools)?;
    if let Some(r) = &c.response_format {
        let t = resolve_text(r, files, "core.response_format")?;
        push_section(
            sections,
            L1,
            "core.response_format",
            "response_format",
            Phase::Constraint,
            t,
        )?;
    }
    if let Some(l) = &c.language {
        push_section(
            sections,
            L1,
            "core.language",
            "language",
            Phase::Constraint,
            format!("Respond in {l}."),
        )?;
    }
    Ok(tools)
}

/// Named role blocks, in the order written, each its own layer-1 section (ADR-0025), added
/// to `sections`: each name well-formed and used once, each text not blank.
fn role_block_sections(
    sections: &mut Vec<IdentitySection>,
    blocks: &[RoleBlock],
    files: Files<'_>,
) -> Result<(), AgentDefError> {
    let mut names = std::collections::BTreeSet::new();
    for b in blocks {
        let ok = !b.name.is_empty()
            && b.name.len() <= MAX_ROLE_BLOCK_NAME
            && b.name
                .bytes()
                .all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'_' | b'-'));
        if !ok {
            return Err(invalid(format!(
                "core.role_blocks: name `{}` must be 1-{MAX_ROLE_BLOCK_NAME} characters of a-z 0-9 _ -",
                b.name.chars().take(80).collect::<String>()
            )));
        }
        if !names.insert(b.name.as_str()) {
            return Err(invalid(format!(
                "core.role_blocks: the name `{}` is used twice; give every block its own name",
                b.name
            )));
        }
        let what = format!("core.role_blocks.{}", b.name);
        let text = resolve_text(&b.text, files, &what)?;
        if text.trim().is_empty() {
            return Err(invalid(format!(
                "{what} is empty: give it a text or remove it"
            )));
        }
        push_section(
            sections,
            IdentityLayer::Core,
            &format!("core.role.{}", b.name),
            &format!("role.{}", b.name),
            Phase::Constraint,
            text,
        )?;
    }
    Ok(())
}

/// The allowed tools, in the order written; and, when there are any, the layer-1 section that
/// lists them by name with their usage hints, added to `sections`.
fn tool_section(
    sections: &mut Vec<IdentitySection>,
    defs: &[ToolDef],
) -> Result<Vec<AllowedTool>, AgentDefError> {
    let mut tools = Vec::new();
    let mut tool_lines = Vec::new();
    for t in defs {
        tools.push(AllowedTool {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
            server: t.server.as_deref().map(std::sync::Arc::from),
            usage: ToolUsageHint {
                prefer_for: t.prefer_for.clone(),
                prefer_over: t.prefer_over.clone(),
            },
        });
    }
    let mut sorted: Vec<&ToolDef> = defs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for t in &sorted {
        let mut line = format!("- {}", t.name);
        if !t.description.is_empty() {
            line.push_str(": ");
            line.push_str(&t.description);
        }
        for p in &t.prefer_for {
            line.push_str(&format!("\n  - prefer `{}` for {p}", t.name));
        }
        for o in &t.prefer_over {
            line.push_str(&format!("\n  - prefer `{}` over `{o}`", t.name));
        }
        tool_lines.push(line);
    }
    if !tool_lines.is_empty() {
        let text = format!(
            "Allowed tools (no others may be used):\n{}",
            tool_lines.join("\n")
        );
        push_section(
            sections,
            IdentityLayer::Core,
            "core.tools",
            "tools",
            Phase::Tools,
            text,
        )?;
    }
    Ok(tools)
}

/// The layer-2 sections of `[characteristics]`, in their order, added to `sections`.
fn characteristics_sections(
    sections: &mut Vec<IdentitySection>,
    ch: &CharacteristicsDef,
    files: Files<'_>,
) -> Result<(), AgentDefError> {
    use IdentityLayer::Characteristics as L2;
    if let Some(p) = &ch.personality {
        let t = resolve_text(p, files, "characteristics.personality")?;
        push_section(
            sections,
            L2,
            "characteristics.personality",
            "personality",
            Phase::Constraint,
            t,
        )?;
    }
    if let Some(s) = &ch.style {
        let t = resolve_text(s, files, "characteristics.style")?;
        push_section(
            sections,
            L2,
            "characteristics.style",
            "style",
            Phase::Constraint,
            t,
        )?;
    }
    push_section(
        sections,
        L2,
        "characteristics.guidelines",
        "guidelines",
        Phase::Constraint,
        bullets(&ch.guidelines),
    )?;
    if let Some(r) = &ch.citation_rules {
        let t = resolve_text(r, files, "characteristics.citation_rules")?;
        push_section(
            sections,
            L2,
            "characteristics.citation_rules",
            "citation_rules",
            Phase::Constraint,
            t,
        )?;
    }
    Ok(())
}

/// No operational-mode template, nor the fallback, holds a reserved `<strata:` marker.
fn check_templates(templates: &TemplatesDef) -> Result<(), AgentDefError> {
    for (m, tiers) in [
        ("assistant", &templates.assistant),
        ("developer", &templates.developer),
        ("planning", &templates.planning),
        ("debugger", &templates.debugger),
        ("user", &templates.user),
    ] {
        for t in Tier::ALL {
            if tiers
                .get(t)
                .is_some_and(strata_core::format::contains_reserved_marker)
            {
                return Err(invalid(format!(
                    "template {m}.tier{} holds a reserved `<strata:` marker",
                    t.number()
                )));
            }
        }
    }
    if templates
        .fallback
        .as_deref()
        .is_some_and(strata_core::format::contains_reserved_marker)
    {
        return Err(invalid(
            "template fallback holds a reserved `<strata:` marker",
        ));
    }
    Ok(())
}

/// Check a definition's TOML text without a signature (for `strata sign`, which refuses to sign
/// an invalid definition). Referenced files are resolved against `base`.
pub fn check_definition(text: &str, base: Option<&Path>) -> Result<AgentDefinition, AgentDefError> {
    parse_payload(text.as_bytes(), base).map(|p| p.def)
}

/// Every file `def` references, in the order written (each once).
fn referenced_files(def: &AgentDefinition) -> Vec<&FileRef> {
    let mut texts: Vec<&Text> = vec![&def.core.identity];
    texts.extend(def.core.role.iter());
    texts.extend(def.core.role_blocks.iter().map(|b| &b.text));
    texts.extend(def.core.response_format.iter());
    texts.extend(def.characteristics.personality.iter());
    texts.extend(def.characteristics.style.iter());
    texts.extend(def.characteristics.citation_rules.iter());
    let mut out: Vec<&FileRef> = Vec::new();
    for t in texts {
        if let Text::File(f) = t {
            if !out.iter().any(|o| o.file == f.file) {
                out.push(f);
            }
        }
    }
    out
}

/// The definition `text` with every file it references, read from `base` and checked against
/// its pin, embedded at its end (an `[embedded."<path>"]` table each), so that the signed payload
/// is all a runtime needs (ADR-0035). Files already embedded are left as they are; a definition
/// that references none is returned unchanged.
pub fn embed_files(text: &str, base: &Path) -> Result<String, AgentDefError> {
    let def = check_definition(text, Some(base))?;
    let missing: Vec<&FileRef> = referenced_files(&def)
        .into_iter()
        .filter(|f| !def.embedded.contains_key(&f.file))
        .collect();
    if missing.is_empty() {
        return Ok(text.to_owned());
    }
    let files = Files {
        embedded: &def.embedded,
        base: Some(base),
    };
    let mut embedded = BTreeMap::new();
    for f in missing {
        let body = resolve_text(&Text::File(f.clone()), files, &f.file)?;
        embedded.insert(
            f.file.clone(),
            EmbeddedFile {
                sha256: f.sha256.to_ascii_lowercase(),
                text: body,
            },
        );
    }
    #[derive(Serialize)]
    struct Tables {
        embedded: BTreeMap<String, EmbeddedFile>,
    }
    let tables = toml::to_string(&Tables { embedded })
        .map_err(|e| invalid(format!("embedding the referenced files: {e}")))?;
    let mut out = text.to_owned();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("\n# The files referenced above, embedded by `strata sign`: the signed envelope is\n# all a runtime needs.\n");
    out.push_str(&tables);
    // What was embedded must read back as the same definition, now self-contained.
    check_definition(&out, None)?;
    Ok(out)
}

/// Templates grouped by mode, for display.
pub fn template_inventory(t: &ModeTemplates) -> BTreeMap<&'static str, Vec<u8>> {
    let mut out = BTreeMap::new();
    for m in OperationalMode::ALL {
        let tiers: Vec<u8> = Tier::ALL
            .iter()
            .filter(|x| t.get(*m, **x).is_some())
            .map(|x| x.number())
            .collect();
        out.insert(m.name(), tiers);
    }
    out
}
