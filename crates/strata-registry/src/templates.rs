//! Operational-mode templates: a template text from the signed agent definition, chosen for
//! the operational mode and tier through the definition's fallback chain, rendered with
//! runtime values, and handed to the assembler as a layer-4 section (ADR-0010, ADR-0011).
//!
//! The template text itself is trusted: a [`SignedTemplate`] can only be made from a
//! `strata_agentdef::VerifiedAgent`. The values come from layers 3-6 and are untrusted: they
//! are passed to the template engine only as string data, never parsed as templates, so a
//! value holding `{{ ... }}` or `{% ... %}` comes out literally. Rendering is strict: a name the
//! template uses but the values do not give is an error, never an empty string. The rendered
//! text is a runtime section (layer 4, fenced like other runtime content, ADR-0009), because it
//! carries runtime values.

use std::collections::BTreeMap;
use std::sync::Arc;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use strata_agentdef::VerifiedAgent;
use strata_core::{ContentHash, OperationalMode, RuntimeLayer, Section, SourceKind, Tier};

use crate::contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
use crate::inputs::Fingerprint;
use crate::modes::StandardSection;

/// A template text taken from a verified agent definition. There is no other way to make one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTemplate {
    text: Arc<str>,
    mode: Option<OperationalMode>,
    tier: Option<Tier>,
    fell_back: bool,
    definition: ContentHash,
}

impl SignedTemplate {
    /// The template of `agent` for `mode` at `tier`, through the definition's fallback chain
    /// (the same mode at the nearest tier, `user` to `assistant`, the definition's fallback,
    /// then developer tier 3). `None` when the definition has no template at all.
    pub fn resolve(agent: &VerifiedAgent, mode: OperationalMode, tier: Tier) -> Option<Self> {
        agent
            .templates()
            .resolve(mode, tier)
            .map(|r| SignedTemplate {
                text: Arc::from(r.text),
                mode: r.mode,
                tier: r.tier,
                fell_back: r.fell_back,
                definition: agent.identity_digest(),
            })
    }

    /// The template text.
    pub fn text(&self) -> &str {
        &self.text
    }
    /// The mode it was written for (`None` for the definition's fallback template).
    pub fn mode(&self) -> Option<OperationalMode> {
        self.mode
    }
    /// The tier it was written for (`None` for the definition's fallback template).
    pub fn tier(&self) -> Option<Tier> {
        self.tier
    }
    /// Whether it is not the exact mode and tier asked for.
    pub fn fell_back(&self) -> bool {
        self.fell_back
    }
    /// The identity digest of the definition it came from.
    pub fn definition(&self) -> ContentHash {
        self.definition
    }

    /// The section id: `template/<mode>/tier<n>`, or `template/fallback`.
    pub fn section_id(&self) -> String {
        match (self.mode, self.tier) {
            (Some(m), Some(t)) => format!("template/{m}/tier{}", t.number()),
            _ => "template/fallback".into(),
        }
    }
}

/// Runtime values for a template: names to strings. Values are data only: they are never
/// parsed as templates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateValues(BTreeMap<String, String>);

impl TemplateValues {
    /// No values.
    pub fn new() -> TemplateValues {
        TemplateValues::default()
    }

    /// Set `name` (letters, digits and `_`, not starting with a digit) to `value`.
    pub fn set(&mut self, name: &str, value: impl Into<String>) -> Result<(), TemplateError> {
        let ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(TemplateError::InvalidName(name.chars().take(80).collect()));
        }
        self.0.insert(name.to_owned(), value.into());
        Ok(())
    }

    /// The same values plus `name` = `value`.
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Result<Self, TemplateError> {
        self.set(name, value)?;
        Ok(self)
    }

    /// The values, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// A value name that templates cannot refer to.
    #[error(
        "invalid template value name `{0}`: use letters, digits and _ (not starting with a digit)"
    )]
    InvalidName(String),
    /// The signed template does not parse.
    #[error("the operational-mode template `{id}` of the agent definition does not parse: {message}; fix it in the definition and sign it again")]
    Syntax {
        /// The template's section id.
        id: String,
        /// The engine's message.
        message: String,
    },
    /// Rendering failed, for example on a name the values do not give.
    #[error("the operational-mode template `{id}` could not be rendered: {message}; give every value the template uses")]
    Render {
        /// The template's section id.
        id: String,
        /// The engine's message (it names the missing value).
        message: String,
    },
    /// The section could not be built.
    #[error("the rendered template could not become a section: {0}")]
    Section(String),
}

fn engine() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_recursion_limit(32);
    env
}

/// Check that `text` is a template the engine can compile, without rendering it: what
/// `strata sign` runs on every template of a definition, so that a syntax error is found by the
/// operator who signs, not by a runtime at its first turn. The error names the line.
pub fn check_syntax(text: &str) -> Result<(), String> {
    engine()
        .template_from_str(text)
        .map(|_| ())
        .map_err(|e| describe(&e))
}

/// The names a template may use: the values [`OperationalTemplate::values`] gives. `agent_id`,
/// `agent_name`, `mode`, `tier`, `prompt_mode` and `date` are always given, `model` whenever
/// the runtime names its model; `language`, `channel` and `sender` only when the turn has them
/// (test them with `is defined` to make them optional).
pub const VALUE_NAMES: &[&str] = &[
    "agent_id",
    "agent_name",
    "mode",
    "tier",
    "prompt_mode",
    "date",
    "language",
    "model",
    "channel",
    "sender",
];

/// The names `text` uses that no input provides (sorted), besides the engine's own functions
/// (`range`, `namespace`...): what `strata sign` refuses, so that a template cannot ask for a
/// value that a runtime will never give. `Err` when the text does not compile.
pub fn unknown_names(text: &str) -> Result<Vec<String>, String> {
    let env = engine();
    let tmpl = env.template_from_str(text).map_err(|e| describe(&e))?;
    let globals: std::collections::BTreeSet<&str> = env.globals().map(|(k, _)| k).collect();
    let mut unknown: Vec<String> = tmpl
        .undeclared_variables(false)
        .into_iter()
        .filter(|n| !VALUE_NAMES.contains(&n.as_str()) && !globals.contains(n.as_str()))
        .collect();
    unknown.sort();
    Ok(unknown)
}

/// Render `template` with `values` (strict: every name used must be given).
pub fn render(template: &SignedTemplate, values: &TemplateValues) -> Result<String, TemplateError> {
    let id = template.section_id();
    let env = engine();
    let tmpl = env
        .template_from_str(template.text())
        .map_err(|e| TemplateError::Syntax {
            id: id.clone(),
            message: describe(&e),
        })?;
    tmpl.render(&values.0).map_err(|e| TemplateError::Render {
        id,
        message: describe(&e),
    })
}

fn describe(e: &minijinja::Error) -> String {
    let mut msg = e.to_string();
    if let Some(line) = e.line() {
        if !msg.contains("line") {
            msg.push_str(&format!(" (line {line})"));
        }
    }
    msg
}

/// Render `template` with `values` into a layer-4 section of phase task, source static, shaped
/// like the standard operational-template section (ADR-0011).
pub fn render_section(
    template: &SignedTemplate,
    values: &TemplateValues,
    contributor: &str,
) -> Result<Section, TemplateError> {
    let text = render(template, values)?;
    StandardSection::OperationalTemplate
        .meta()
        .section(
            contributor,
            RuntimeLayer::Delegated,
            template.section_id(),
            text,
        )
        .map(|b| b.source(SourceKind::Static, contributor).build())
        .map_err(|e| TemplateError::Section(e.to_string()))
}

/// The contributor of the operational-mode template: picks the verified agent's template for
/// the context's operational mode and tier and renders it with values from the context.
///
/// Values given to every template: `agent_id`, `agent_name`, `mode`, `tier`, `prompt_mode`,
/// `date` (UTC, from `ctx.now_ms`), and, when the request has them, `language`, `model`,
/// `channel` and `sender` ([`VALUE_NAMES`]); plus any fixed values the contributor was built
/// with.
#[derive(Debug, Clone)]
pub struct OperationalTemplate {
    agent: VerifiedAgent,
    fixed: TemplateValues,
}

impl OperationalTemplate {
    /// The contributor id.
    pub const ID: &'static str = "builtin.template";

    /// The template contributor of `agent`.
    pub fn new(agent: VerifiedAgent) -> OperationalTemplate {
        OperationalTemplate {
            agent,
            fixed: TemplateValues::new(),
        }
    }

    /// Also give these values to every rendering (context values win on a clash).
    #[must_use]
    pub fn with_values(mut self, values: TemplateValues) -> OperationalTemplate {
        self.fixed = values;
        self
    }

    /// The values for one context.
    pub fn values(&self, ctx: &ContributionContext) -> TemplateValues {
        let mut v = self.fixed.clone();
        let mut put = |k: &str, s: String| {
            v.0.insert(k.to_owned(), s);
        };
        put("agent_id", ctx.agent_id.to_string());
        put("agent_name", self.agent.name().to_owned());
        put("mode", ctx.operational_mode.to_string());
        put("tier", ctx.tier.number().to_string());
        put("prompt_mode", ctx.mode.to_string());
        put("date", crate::builtins::CivilTime::at(ctx.now_ms, 0).date());
        let i = &ctx.inputs;
        if let Some(l) = &i.language {
            put("language", l.to_string());
        }
        if let Some(m) = &i.model {
            put("model", m.to_string());
        }
        if let Some(inbound) = &i.inbound {
            if let Some(c) = &inbound.channel {
                put("channel", c.to_string());
            }
            if let Some(s) = &inbound.sender {
                put("sender", s.to_string());
            }
        }
        v
    }
}

impl Contributor for OperationalTemplate {
    fn id(&self) -> &str {
        Self::ID
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        StandardSection::OperationalTemplate.meta()
    }
    fn cache_fingerprint(&self, ctx: &ContributionContext) -> Option<ContentHash> {
        let mut f = Fingerprint::new(Self::ID);
        for (k, v) in self.values(ctx).iter() {
            f.add(k).add(v);
        }
        Some(f.finish())
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        if ctx.identity_digest != self.agent.identity_digest() {
            return Err(ContributorError::Source(format!(
                "the template contributor holds definition {} but the assembly is for {}; register the contributor of the definition in use",
                self.agent.identity_digest(),
                ctx.identity_digest
            )));
        }
        let Some(template) = SignedTemplate::resolve(&self.agent, ctx.operational_mode, ctx.tier)
        else {
            return Ok(Vec::new());
        };
        render_section(&template, &self.values(ctx), Self::ID)
            .map(|s| vec![s])
            .map_err(|e| ContributorError::Source(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_are_found() {
        assert_eq!(
            unknown_names("{{ model }} {% for i in range(2) %}{{ i }}{% endfor %}").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            unknown_names("{{ model }} {{ user_name }} {% if mood %}x{% endif %}").unwrap(),
            vec!["mood".to_owned(), "user_name".to_owned()]
        );
    }
}
