//! Per-request inputs that built-in contributors read: announced tools and their usage hints,
//! active skills, the inbound message's sender and channel, voice mode, response language,
//! thinking level, model and time zone.
//!
//! All of it is runtime data from layers 3-6 and is treated as untrusted text: contributors put
//! it into sections, and the assembler fences those sections (ADR-0009). Nothing here can name
//! layer 1 or 2 (ADR-0006).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_core::{AnnouncedTool, Content, ContentHash, ToolName, ToolUsageHint};

/// The inputs of one request, shared by reference between the contributors of one gathering.
///
/// Every field has an empty default, so a caller sets only what it has:
/// `RequestInputs { language: Some("French".into()), ..RequestInputs::default() }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestInputs {
    /// Tools announced for this request (built in or by MCP servers), after the allowlist and
    /// the delegated policy were applied. Descriptions are untrusted.
    #[serde(default)]
    pub tools: Vec<AnnouncedTool>,
    /// Usage hints of allowlisted tools (from the verified definition), from which tool-usage
    /// guidance is generated.
    #[serde(default)]
    pub tool_hints: BTreeMap<ToolName, ToolUsageHint>,
    /// Skills the caller activated for this task, with their instructions.
    #[serde(default)]
    pub active_skills: Vec<ActiveSkill>,
    /// Who sent the inbound message, through which channel.
    #[serde(default)]
    pub inbound: Option<Inbound>,
    /// Whether the answer will be spoken rather than read.
    #[serde(default)]
    pub voice: bool,
    /// The language the answer should be written in (a name or a BCP 47 tag).
    #[serde(default)]
    pub language: Option<Arc<str>>,
    /// How much explicit reasoning the caller asked for.
    #[serde(default)]
    pub thinking: Option<ThinkingLevel>,
    /// The model this request goes to.
    #[serde(default)]
    pub model: Option<Arc<str>>,
    /// The caller's time zone; when absent, the temporal contributor's configured zone is used.
    #[serde(default)]
    pub time_zone: Option<TimeZone>,
}

/// A skill activated for the current task (layer 4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActiveSkill {
    /// The skill's id (used in the section id, so `[A-Za-z0-9._:/-]`, 1-100 characters).
    pub id: Arc<str>,
    /// What the skill tells the agent to do.
    pub instructions: Content,
}

/// The inbound message's origin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Inbound {
    /// Who sent it (a user name, an address, another agent's id).
    pub sender: Option<Arc<str>>,
    /// The channel it came through (`cli`, `slack`, `email`...).
    pub channel: Option<Arc<str>>,
    /// Further session metadata, rendered in key order.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// How much explicit reasoning is asked for (the seeds' `/think` levels).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingLevel {
    /// No extra reasoning guidance.
    #[default]
    Off,
    /// Brief reasoning before answering.
    Low,
    /// Step-by-step reasoning for non-trivial requests.
    Medium,
    /// Thorough reasoning: alternatives, checks, then the answer.
    High,
}

impl ThinkingLevel {
    /// The stable lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            ThinkingLevel::Off => "off",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
        }
    }
}

impl fmt::Display for ThinkingLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`ThinkingLevel`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown thinking level `{0}`: use off, low, medium or high")]
pub struct UnknownThinkingLevel(pub String);

impl FromStr for ThinkingLevel {
    type Err = UnknownThinkingLevel;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(ThinkingLevel::Off),
            "low" => Ok(ThinkingLevel::Low),
            "medium" => Ok(ThinkingLevel::Medium),
            "high" => Ok(ThinkingLevel::High),
            _ => Err(UnknownThinkingLevel(s.to_owned())),
        }
    }
}

/// A fixed-offset time zone with a display name (`UTC`, `Europe/Paris (+01:00)`...).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimeZone {
    /// The name shown to the model.
    pub name: Arc<str>,
    /// Offset from UTC in minutes (east is positive), -1,440 to 1,440 exclusive.
    pub offset_minutes: i32,
}

impl TimeZone {
    /// Coordinated Universal Time.
    pub fn utc() -> TimeZone {
        TimeZone {
            name: Arc::from("UTC"),
            offset_minutes: 0,
        }
    }
}

impl Default for TimeZone {
    fn default() -> Self {
        TimeZone::utc()
    }
}

/// Builds a fingerprint of the inputs a contributor's output depends on, for cache keys.
///
/// Each part is length-prefixed, so `("ab", "c")` and `("a", "bc")` differ (ADR-0011).
#[derive(Debug, Clone)]
pub struct Fingerprint(blake3::Hasher);

impl Fingerprint {
    /// A fingerprint under a domain name (use the contributor id).
    pub fn new(domain: &str) -> Fingerprint {
        let mut f = Fingerprint(blake3::Hasher::new());
        f.add(domain);
        f
    }

    /// Add a text part.
    pub fn add(&mut self, part: &str) -> &mut Self {
        self.add_bytes(part.as_bytes())
    }

    /// Add a byte part.
    pub fn add_bytes(&mut self, part: &[u8]) -> &mut Self {
        self.0.update(&(part.len() as u64).to_le_bytes());
        self.0.update(part);
        self
    }

    /// Add an optional text part (absent and empty differ).
    pub fn add_opt(&mut self, part: Option<&str>) -> &mut Self {
        match part {
            Some(p) => {
                self.0.update(&[1]);
                self.add(p)
            }
            None => {
                self.0.update(&[0]);
                self
            }
        }
    }

    /// The finished hash.
    pub fn finish(&self) -> ContentHash {
        ContentHash::from_bytes(*self.0.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_parts_are_delimited() {
        let a = Fingerprint::new("x").add("ab").add("c").finish();
        let b = Fingerprint::new("x").add("a").add("bc").finish();
        assert_ne!(a, b);
        let c = Fingerprint::new("x").add_opt(None).finish();
        let d = Fingerprint::new("x").add_opt(Some("")).finish();
        assert_ne!(c, d);
        assert_eq!(a, Fingerprint::new("x").add("ab").add("c").finish());
    }

    #[test]
    fn thinking_levels_parse() {
        assert_eq!(
            "High".parse::<ThinkingLevel>().unwrap(),
            ThinkingLevel::High
        );
        let e = "max".parse::<ThinkingLevel>().unwrap_err().to_string();
        assert!(e.contains("off, low, medium or high"), "{e}");
    }
}
