//! Built-in contributors for what the caller asked in this request: active skills, thinking
//! level, inbound context, voice mode, response language (layer 4), and configured custom
//! instructions (layer 3).

use std::sync::Arc;

use strata_core::{ContentHash, RuntimeLayer, Section, SourceKind};

use super::{keyed_section, section};
use crate::contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
use crate::inputs::{Fingerprint, ThinkingLevel};
use crate::modes::StandardSection;
use crate::registry::TAG_SKILLS;

/// The instructions of the skills the caller activated, one section each (`skill/<id>`),
/// in id order (layer 4, tagged `skills`, stable and keyed by the skills).
#[derive(Debug, Clone, Copy, Default)]
pub struct ActiveSkills;

impl ActiveSkills {
    /// The contributor id.
    pub const ID: &'static str = "builtin.skills";
}

impl Contributor for ActiveSkills {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            tags: vec![Arc::from(TAG_SKILLS)],
            source: SourceKind::Caller,
            ..StandardSection::SkillInstructions.meta()
        }
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let mut f = Fingerprint::new(Self::ID);
        for s in &ctx.inputs.active_skills {
            f.add(&s.id).add(s.instructions.as_str());
        }
        Some(f.finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let meta = self.meta();
        let mut skills: Vec<_> = ctx.inputs.active_skills.iter().collect();
        skills.sort_by(|a, b| a.id.cmp(&b.id));
        skills.dedup_by(|a, b| a.id == b.id);
        skills
            .into_iter()
            .filter(|s| !s.instructions.as_str().trim().is_empty())
            .map(|s| {
                section(
                    &meta,
                    Self::ID,
                    RuntimeLayer::Delegated,
                    &format!("skill/{}", s.id),
                    s.instructions.clone(),
                )
            })
            .collect()
    }
}

/// Custom instructions from configuration (layer 3, source config, stable).
#[derive(Debug, Clone)]
pub struct CustomInstructions {
    text: Arc<str>,
}

impl CustomInstructions {
    /// The contributor id.
    pub const ID: &'static str = "builtin.instructions";

    /// Custom instructions with `text`.
    pub fn new(text: impl Into<Arc<str>>) -> CustomInstructions {
        CustomInstructions { text: text.into() }
    }
}

impl Contributor for CustomInstructions {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Config,
            ..StandardSection::CustomInstructions.meta()
        }
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let text = self.text.trim();
        if text.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "instructions.custom",
            text,
        )?])
    }
}

/// Reasoning guidance for the thinking level the caller asked for (layer 4, stable, keyed by
/// the level; nothing at level `off`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThinkingGuidance;

impl ThinkingGuidance {
    /// The contributor id.
    pub const ID: &'static str = "builtin.thinking";

    /// The guidance text of a level, `None` for `off`.
    pub fn text(level: ThinkingLevel) -> Option<&'static str> {
        match level {
            ThinkingLevel::Off => None,
            ThinkingLevel::Low => Some(
                "Thinking level: low. Think briefly before answering; keep reasoning short.",
            ),
            ThinkingLevel::Medium => Some(
                "Thinking level: medium. Reason step by step for anything that is not trivial, then answer.",
            ),
            ThinkingLevel::High => Some(
                "Thinking level: high. Reason thoroughly: restate the problem, consider alternatives, check each step and the result, then answer.",
            ),
        }
    }
}

impl Contributor for ThinkingGuidance {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Caller,
            ..StandardSection::ThinkingGuidance.meta()
        }
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let level = ctx.inputs.thinking.unwrap_or_default();
        Some(Fingerprint::new(Self::ID).add(level.name()).finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        match Self::text(ctx.inputs.thinking.unwrap_or_default()) {
            None => Ok(Vec::new()),
            Some(text) => Ok(vec![section(
                &self.meta(),
                Self::ID,
                RuntimeLayer::Delegated,
                "thinking",
                text,
            )?]),
        }
    }
}

/// Sender, channel and metadata of the inbound message (layer 4, dynamic).
#[derive(Debug, Clone, Copy, Default)]
pub struct InboundContext;

impl InboundContext {
    /// The contributor id.
    pub const ID: &'static str = "builtin.inbound";
}

impl Contributor for InboundContext {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Caller,
            ..StandardSection::InboundContext.meta()
        }
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let Some(inbound) = &ctx.inputs.inbound else {
            return Ok(Vec::new());
        };
        let mut lines = Vec::new();
        if let Some(s) = &inbound.sender {
            lines.push(format!("Sender: {s}"));
        }
        if let Some(c) = &inbound.channel {
            lines.push(format!("Channel: {c}"));
        }
        for (k, v) in &inbound.metadata {
            lines.push(format!("{k}: {v}"));
        }
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Delegated,
            "inbound",
            lines.join("\n"),
        )?])
    }
}

/// Instructions for answers that will be spoken (layer 4, dynamic; nothing unless the request
/// is in voice mode).
#[derive(Debug, Clone, Copy, Default)]
pub struct VoiceMode;

impl VoiceMode {
    /// The contributor id.
    pub const ID: &'static str = "builtin.voice";

    /// The instructions given in voice mode.
    pub const TEXT: &'static str = "This answer will be spoken aloud. Use short, plain sentences; no markdown, tables, lists, code blocks or links; spell out symbols and numbers the way they are said.";
}

impl Contributor for VoiceMode {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Caller,
            ..StandardSection::VoiceMode.meta()
        }
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        if !ctx.inputs.voice {
            return Ok(Vec::new());
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Delegated,
            "voice",
            Self::TEXT,
        )?])
    }
}

/// The language the caller wants answers in (layer 4, stable, keyed by the language).
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseLanguage;

impl ResponseLanguage {
    /// The contributor id.
    pub const ID: &'static str = "builtin.language";
}

impl Contributor for ResponseLanguage {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Caller,
            ..StandardSection::ResponseLanguage.meta()
        }
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        Some(
            Fingerprint::new(Self::ID)
                .add_opt(ctx.inputs.language.as_deref())
                .finish(),
        )
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let Some(lang) = ctx.inputs.language.as_deref().map(str::trim) else {
            return Ok(Vec::new());
        };
        if lang.is_empty() {
            return Ok(Vec::new());
        }
        // Keyed `language`: when the signed definition fixes the language, it wins (I4).
        Ok(vec![keyed_section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Delegated,
            "language",
            "language",
            format!("Write your answers in {lang}."),
        )?])
    }
}

/// The caller's recent footprint, what the agent did most recently, one line per action,
/// oldest first (layer 5, `recent-footprint`, dynamic; nothing when none was given). The
/// lines are data: they are fenced like any other runtime section.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecentFootprint;

impl RecentFootprint {
    /// The contributor id.
    pub const ID: &'static str = "builtin.footprint";
}

impl Contributor for RecentFootprint {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::WorkingMemory
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Caller,
            ..StandardSection::SessionContext.meta()
        }
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let mut f = Fingerprint::new(Self::ID);
        for entry in &ctx.inputs.recent_footprint {
            f.add(entry);
        }
        Some(f.finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let lines: Vec<&str> = ctx
            .inputs
            .recent_footprint
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .collect();
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        let mut text = String::from("What you did most recently, oldest first:");
        for line in lines {
            text.push_str("\n- ");
            text.push_str(line);
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::WorkingMemory,
            "recent-footprint",
            text,
        )?])
    }
}

/// The business or project context the platform keeps for the session, given with each
/// request (layer 3, `business-context`, stable; nothing when none was given).
#[derive(Debug, Clone, Copy, Default)]
pub struct BusinessContext;

impl BusinessContext {
    /// The contributor id.
    pub const ID: &'static str = "builtin.business";
}

impl Contributor for BusinessContext {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            source: SourceKind::Caller,
            ..StandardSection::WorkspaceProfile.meta()
        }
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        Some(
            Fingerprint::new(Self::ID)
                .add_opt(ctx.inputs.business_context.as_ref().map(|c| c.as_str()))
                .finish(),
        )
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let Some(text) = ctx.inputs.business_context.as_ref() else {
            return Ok(Vec::new());
        };
        if text.as_str().trim().is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![section(
            &self.meta(),
            Self::ID,
            RuntimeLayer::Shared,
            "business-context",
            text.clone(),
        )?])
    }
}
