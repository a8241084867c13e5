//! `[[prompts]]`: fixed text of the runtime's own, registered as prompts of a standard kind
//! (the Prompts System's prompts of source `config`, Aleph's heartbeat, protocol tokens,
//! operational guidelines and the like). Each is layer-3 or layer-4 data with source
//! `config`: it can never write identity (ADR-0006, ADR-0050).
//!
//! ```toml
//! [[prompts]]
//! id = "sanity-reality-check"
//! kind = "operational_guidelines"  # a standard section of layer 3 or 4
//! when = "sanity_check"            # always (default), sanity_check, or skill:<id>
//! text = "Check each claim against what a tool returned before you state it."
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_core::SourceKind;

use crate::builtins::{Activation, Prompt, TAG_SANITY};
use crate::inputs::ActiveSkill;
use crate::modes::{Owner, StandardSection};

/// Longest configured prompt text, in bytes.
pub const MAX_PROMPT_TEXT: usize = 64 * 1024;

/// One `[[prompts]]` entry.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfiguredPrompt {
    /// The prompt's id: 1-64 characters of letters, digits, `.`, `_` and `-`. Its section
    /// is `config:<id>`.
    pub id: String,
    /// The standard kind it is shaped like (its layer, modes, paths, phase, priority and
    /// stability), in snake case: `operational_guidelines`, `heartbeat`, `protocol_tokens`,
    /// `special_actions`, `generation_models`, `skill_mode`, `skill_instructions`...
    pub kind: String,
    /// When it takes part: `always` (the default), `sanity_check` (unless a turn turns sanity
    /// checks off) or `skill:<id>` (while that skill is active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The text.
    pub text: String,
}

/// Kinds a configured prompt may not take: identity (signed only) and the kinds the runtime
/// fills itself.
const RESERVED: &[StandardSection] = &[StandardSection::Goal, StandardSection::OperationalTemplate];

impl ConfiguredPrompt {
    /// The kind, or why it is not one a configured prompt may take.
    pub fn standard_kind(&self) -> Result<StandardSection, String> {
        let kind = StandardSection::ALL
            .iter()
            .copied()
            .find(|k| k.name() == self.kind)
            .ok_or_else(|| {
                format!(
                    "`{}` is not a standard section kind; use one of {}",
                    self.kind,
                    allowed().join(", ")
                )
            })?;
        if !allowed().contains(&kind.name()) {
            return Err(format!(
                "a configured prompt cannot be of kind `{}` (it is signed identity or filled by the runtime); use one of {}",
                self.kind,
                allowed().join(", ")
            ));
        }
        Ok(kind)
    }

    /// When it takes part, or why `when` is not understood.
    pub fn activation(&self) -> Result<Activation, String> {
        match self.when.as_deref().map(str::trim) {
            None | Some("always") => Ok(Activation::Always),
            Some("sanity_check") => Ok(Activation::SanityCheck),
            Some(w) => match w.strip_prefix("skill:") {
                Some(skill) => {
                    ActiveSkill::new(skill, "-").map_err(|e| e.to_string())?;
                    Ok(Activation::WhenSkillActive(Arc::from(skill)))
                }
                None => Err(format!(
                    "`{w}` is not understood; use always, sanity_check or skill:<id>"
                )),
            },
        }
    }

    /// Check the entry: id, kind, activation and text. The error is the key and the reason.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let id_ok = (1..=64).contains(&self.id.len())
            && self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !id_ok {
            return Err((
                "prompts.id",
                format!(
                    "`{}` is not a prompt id: 1-64 characters of letters, digits, . _ and -",
                    self.id.chars().take(80).collect::<String>()
                ),
            ));
        }
        self.standard_kind().map_err(|r| ("prompts.kind", r))?;
        self.activation().map_err(|r| ("prompts.when", r))?;
        if self.text.trim().is_empty() {
            return Err(("prompts.text", format!("prompt `{}` has no text", self.id)));
        }
        if self.text.len() > MAX_PROMPT_TEXT {
            return Err((
                "prompts.text",
                format!("prompt `{}` is longer than 64 KiB", self.id),
            ));
        }
        Ok(())
    }

    /// The registered prompt: id `config:<id>`, source `config`, tagged `sanity` when it is
    /// a sanity check.
    pub fn to_prompt(&self) -> Result<Prompt, (&'static str, String)> {
        self.check()?;
        let kind = self.standard_kind().map_err(|r| ("prompts.kind", r))?;
        let activation = self.activation().map_err(|r| ("prompts.when", r))?;
        let Owner::Runtime(layer) = kind.owner() else {
            return Err(("prompts.kind", "identity kinds are signed".into()));
        };
        let sanity = activation == Activation::SanityCheck;
        let mut prompt = Prompt::new(
            format!("config:{}", self.id),
            layer,
            kind,
            self.text.as_str(),
        )
        .with_source(SourceKind::Config)
        .with_activation(activation);
        if sanity {
            prompt = prompt.with_tags([TAG_SANITY]);
        }
        Ok(prompt)
    }
}

/// The kind names a configured prompt may take: those of layers 3 and 4, less the reserved.
fn allowed() -> Vec<String> {
    StandardSection::ALL
        .iter()
        .filter(|k| {
            matches!(
                k.owner(),
                Owner::Runtime(
                    strata_core::RuntimeLayer::Shared | strata_core::RuntimeLayer::Delegated
                )
            ) && !RESERVED.contains(k)
        })
        .map(|k| k.name())
        .collect()
}

/// Check every entry, and that no id is used twice.
pub(crate) fn check_all(prompts: &[ConfiguredPrompt]) -> Result<(), (&'static str, String)> {
    let mut seen = std::collections::BTreeSet::new();
    for p in prompts {
        p.check()?;
        if !seen.insert(p.id.as_str()) {
            return Err((
                "prompts.id",
                format!("prompt `{}` is configured twice", p.id),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, when: Option<&str>) -> ConfiguredPrompt {
        ConfiguredPrompt {
            id: "p1".into(),
            kind: kind.into(),
            when: when.map(Into::into),
            text: "Say so when unsure.".into(),
        }
    }

    #[test]
    fn kinds_and_activations_are_checked() {
        assert!(entry("operational_guidelines", None).check().is_ok());
        assert!(entry("heartbeat", Some("always")).check().is_ok());
        assert!(entry("skill_mode", Some("skill:release")).check().is_ok());
        let (key, why) = entry("soul", None).check().unwrap_err();
        assert_eq!(key, "prompts.kind");
        assert!(why.contains("signed identity"), "{why}");
        let (key, why) = entry("goal", None).check().unwrap_err();
        assert_eq!(key, "prompts.kind");
        assert!(why.contains("filled by the runtime"), "{why}");
        let (key, _) = entry("memory", None).check().unwrap_err();
        assert_eq!(key, "prompts.kind");
        let (key, why) = entry("heartbeats", None).check().unwrap_err();
        assert_eq!(key, "prompts.kind");
        assert!(why.contains("operational_guidelines"), "{why}");
        let (key, _) = entry("heartbeat", Some("sometimes")).check().unwrap_err();
        assert_eq!(key, "prompts.when");
        let (key, _) = entry("heartbeat", Some("skill:bad id"))
            .check()
            .unwrap_err();
        assert_eq!(key, "prompts.when");
        let mut blank = entry("heartbeat", None);
        blank.text = " \n".into();
        assert_eq!(blank.check().unwrap_err().0, "prompts.text");
        let mut bad_id = entry("heartbeat", None);
        bad_id.id = "a/b".into();
        assert_eq!(bad_id.check().unwrap_err().0, "prompts.id");
        let twice = [entry("heartbeat", None), entry("heartbeat", None)];
        assert!(check_all(&twice).unwrap_err().1.contains("twice"));
    }

    #[test]
    fn a_sanity_check_prompt_is_tagged_and_from_config() {
        use crate::contributor::Contributor as _;
        let p = entry("operational_guidelines", Some("sanity_check"))
            .to_prompt()
            .unwrap();
        assert_eq!(p.id(), "config:p1");
        let meta = p.meta();
        assert_eq!(meta.source, SourceKind::Config);
        assert!(meta.tags.iter().any(|t| &**t == TAG_SANITY));
        assert_eq!(p.layer(), strata_core::RuntimeLayer::Shared);
    }
}
