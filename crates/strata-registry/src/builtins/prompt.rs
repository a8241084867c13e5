//! Registered prompts: fixed text from a static, configuration or MCP source (the seeds'
//! prompt registry of mandates, sanity checks and skills), as a contributor of one runtime
//! layer. A prompt may be active always, or only while a skill of the same id is active.

use std::sync::Arc;

use strata_core::{Content, ContentHash, RuntimeLayer, Section, SourceKind};

use crate::contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
use crate::inputs::Fingerprint;
use crate::modes::StandardSection;
use crate::registry::TAG_SKILLS;

/// When a registered prompt takes part.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Activation {
    /// Whenever its mode and path take part.
    Always,
    /// Only while the caller has activated the skill with this id.
    WhenSkillActive(Arc<str>),
    /// A sanity check: whenever its mode and path take part, unless the request turned
    /// sanity checks off (the Prompts System's `useSanityChecks`, on by default).
    SanityCheck,
}

/// The tag of sanity-check prompts.
pub const TAG_SANITY: &str = "sanity";

/// A registered prompt: fixed text under an id, with the source it came from.
#[derive(Debug, Clone)]
pub struct Prompt {
    id: Arc<str>,
    layer: RuntimeLayer,
    text: Content,
    meta: ContributorMeta,
    activation: Activation,
    required_tools: Vec<Arc<str>>,
}

impl Prompt {
    /// A prompt `id` of `layer` with `text`, shaped like the standard section `kind` (its
    /// modes, paths, phase, priority and stability). Its source is static until changed.
    pub fn new(
        id: impl Into<Arc<str>>,
        layer: RuntimeLayer,
        kind: StandardSection,
        text: impl Into<Content>,
    ) -> Prompt {
        Prompt {
            id: id.into(),
            layer,
            text: text.into(),
            meta: kind.meta(),
            activation: Activation::Always,
            required_tools: Vec::new(),
        }
    }

    /// A skill prompt announced by MCP server `server`: layer 4, tagged `skills`, active only
    /// while the skill `skill` is active. Its id is `mcp:<server>/<skill>`.
    pub fn mcp_skill(server: &str, skill: &str, text: impl Into<Content>) -> Prompt {
        Prompt::new(
            format!("mcp:{server}/{skill}"),
            RuntimeLayer::Delegated,
            StandardSection::SkillInstructions,
            text,
        )
        .with_source(SourceKind::Mcp(Arc::from(server)))
        .with_tags([TAG_SKILLS])
        .with_activation(Activation::WhenSkillActive(Arc::from(skill)))
    }

    /// A sanity-check prompt `id` (layer 3, shaped like operational guidelines, tagged
    /// `sanity`): it takes part unless the request turned sanity checks off.
    pub fn sanity_check(id: impl Into<Arc<str>>, text: impl Into<Content>) -> Prompt {
        Prompt::new(
            id,
            RuntimeLayer::Shared,
            StandardSection::OperationalGuidelines,
            text,
        )
        .with_tags([TAG_SANITY])
        .with_activation(Activation::SanityCheck)
    }

    /// Set the source.
    #[must_use]
    pub fn with_source(mut self, source: SourceKind) -> Prompt {
        self.meta.source = source;
        self
    }

    /// Add tags.
    #[must_use]
    pub fn with_tags<'a>(mut self, tags: impl IntoIterator<Item = &'a str>) -> Prompt {
        self.meta.tags.extend(tags.into_iter().map(Arc::from));
        self
    }

    /// Set when it takes part.
    #[must_use]
    pub fn with_activation(mut self, activation: Activation) -> Prompt {
        self.activation = activation;
        self
    }

    /// Change any part of the meta.
    #[must_use]
    pub fn with_meta(mut self, f: impl FnOnce(&mut ContributorMeta)) -> Prompt {
        f(&mut self.meta);
        self
    }

    /// Tools the prompt needs; it takes part only while all of them are announced.
    #[must_use]
    pub fn requiring_tools<'a>(mut self, tools: impl IntoIterator<Item = &'a str>) -> Prompt {
        self.required_tools = tools.into_iter().map(Arc::from).collect();
        self
    }

    /// The text.
    pub fn text(&self) -> &Content {
        &self.text
    }

    fn active(&self, ctx: &ContributionContext) -> bool {
        let skill_ok = match &self.activation {
            Activation::Always => true,
            Activation::WhenSkillActive(skill) => {
                ctx.inputs.active_skills.iter().any(|s| s.id == *skill)
            }
            Activation::SanityCheck => !ctx.inputs.skip_sanity_checks,
        };
        skill_ok
            && self.required_tools.iter().all(|needed| {
                ctx.inputs
                    .tools
                    .iter()
                    .any(|t| t.name.as_str() == &**needed)
            })
    }
}

impl Contributor for Prompt {
    fn id(&self) -> &str {
        &self.id
    }
    fn layer(&self) -> RuntimeLayer {
        self.layer
    }
    fn meta(&self) -> ContributorMeta {
        self.meta.clone()
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let active = if self.active(ctx) { "on" } else { "off" };
        Some(Fingerprint::new(&self.id).add(active).finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        if !self.active(ctx) || self.text.as_str().trim().is_empty() {
            return Ok(Vec::new());
        }
        let section = self
            .meta
            .section(&self.id, self.layer, &*self.id, self.text.clone())
            .map_err(|e| ContributorError::Source(e.to_string()))?
            .build();
        Ok(vec![section])
    }
}
