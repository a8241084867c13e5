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
    /// What the agent did most recently (commands run, files touched, their outcome), one
    /// short line each, oldest first: the "recent footprint" shown in the working memory.
    #[serde(default)]
    pub recent_footprint: Vec<Arc<str>>,
    /// The business or project context the platform keeps for this session (layer 3).
    #[serde(default)]
    pub business_context: Option<Content>,
    /// Leave out the registered sanity-check prompts for this request (they take part by
    /// default).
    #[serde(default)]
    pub skip_sanity_checks: bool,
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

/// Why a per-turn input was refused. The messages are the ones every interface shows (the
/// library's error, the service's error body, the command line's standard error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A thinking level that is not one of the four.
    #[error(transparent)]
    Thinking(#[from] UnknownThinkingLevel),
    /// A time zone that is neither `UTC` nor an offset within a day, with an optional name.
    #[error("time zone `{0}` is not valid: give `UTC`, an offset such as `+01:00`, or a name and an offset such as `Europe/Paris +01:00` (offsets from -23:59 to +23:59)")]
    TimeZone(String),
    /// A skill whose id or instructions are not usable.
    #[error("skill `{id}`: {reason}")]
    Skill {
        /// The id as given (at most 100 characters of it).
        id: String,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// An entry of the recent footprint that is empty, too long or not one line, or too many.
    #[error("recent footprint entry {entry}: {reason}")]
    Footprint {
        /// The entry's position, from 1.
        entry: usize,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// A business context that is blank or too long.
    #[error("business context: {0}")]
    BusinessContext(String),
    /// A text input (sender, channel, language, model) that is empty or too long.
    #[error("{field} `{value}`: {reason}")]
    Text {
        /// Which input.
        field: &'static str,
        /// The value as given (at most 100 characters of it).
        value: String,
        /// What is wrong, and what to do.
        reason: String,
    },
}

/// Longest skill id, in bytes.
pub const MAX_SKILL_ID: usize = 100;
/// Longest sender, channel, language or model name, in bytes.
pub const MAX_INPUT_TEXT: usize = 200;
/// Most entries in a recent footprint.
pub const MAX_FOOTPRINT_ENTRIES: usize = 50;
/// Longest entry of a recent footprint, in bytes.
pub const MAX_FOOTPRINT_ENTRY: usize = 500;
/// Longest business context, in bytes.
pub const MAX_BUSINESS_CONTEXT: usize = 32 * 1024;

fn shown(s: &str) -> String {
    s.chars().take(100).collect()
}

impl ActiveSkill {
    /// A skill with its instructions, checked as [`ActiveSkill::check`] does.
    pub fn new(
        id: impl Into<Arc<str>>,
        instructions: impl Into<Content>,
    ) -> Result<ActiveSkill, InputError> {
        let skill = ActiveSkill {
            id: id.into(),
            instructions: instructions.into(),
        };
        skill.check()?;
        Ok(skill)
    }

    /// Check the id (1-100 characters of `[A-Za-z0-9._:/-]`, it becomes part of a section id)
    /// and that the instructions say something.
    pub fn check(&self) -> Result<(), InputError> {
        let id = &*self.id;
        let bad = |reason: &str| InputError::Skill {
            id: shown(id),
            reason: reason.to_owned(),
        };
        if id.is_empty() || id.len() > MAX_SKILL_ID {
            return Err(bad("a skill id has 1-100 characters"));
        }
        if !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-'))
        {
            return Err(bad(
                "a skill id holds only letters, digits and . _ : / - (it becomes part of a section id)",
            ));
        }
        if self.instructions.as_str().trim().is_empty() {
            return Err(bad(
                "the skill's instructions are empty; give what the skill tells the agent to do",
            ));
        }
        Ok(())
    }
}

/// Check a short text input (sender, channel, language, model): not blank, at most
/// [`MAX_INPUT_TEXT`] bytes, no control characters.
pub fn check_text(field: &'static str, value: &str) -> Result<(), InputError> {
    let bad = |reason: &str| InputError::Text {
        field,
        value: shown(value),
        reason: reason.to_owned(),
    };
    if value.trim().is_empty() {
        return Err(bad("is empty; leave it out instead"));
    }
    if value.len() > MAX_INPUT_TEXT {
        return Err(bad("is longer than 200 bytes"));
    }
    if value.chars().any(char::is_control) {
        return Err(bad("holds a control character"));
    }
    Ok(())
}

impl TimeZone {
    /// Check the offset (within a day) and the name (as [`check_text`] does).
    pub fn check(&self) -> Result<(), InputError> {
        if self.offset_minutes.abs() >= 24 * 60 {
            return Err(InputError::TimeZone(shown(&self.to_string())));
        }
        check_text("time zone name", &self.name)
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.offset_minutes < 0 { '-' } else { '+' };
        let m = self.offset_minutes.unsigned_abs();
        write!(f, "{} {sign}{:02}:{:02}", self.name, m / 60, m % 60)
    }
}

/// `UTC`, `Z`, `+HH:MM`, `-HH:MM`, `UTC+HH:MM` or `<name> +HH:MM` (the name is shown to the
/// model; an offset alone is named `UTC+HH:MM`).
impl FromStr for TimeZone {
    type Err = InputError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InputError::TimeZone(shown(s));
        let t = s.trim();
        if t.eq_ignore_ascii_case("utc") || t == "Z" {
            return Ok(TimeZone::utc());
        }
        // The offset is the text from the last sign on.
        let at = t.rfind(['+', '-']).ok_or_else(bad)?;
        let (name, offset) = t.split_at(at);
        let (sign, hm) = offset.split_at(1);
        let (h, m) = hm.split_once(':').ok_or_else(bad)?;
        let digits = |x: &str| x.len() == 2 && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(h) || !digits(m) {
            return Err(bad());
        }
        let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if h > 23 || m > 59 {
            return Err(bad());
        }
        let minutes = (h * 60 + m) * if sign == "-" { -1 } else { 1 };
        let name = name.trim();
        let name = if name.is_empty() || name.eq_ignore_ascii_case("utc") {
            format!("UTC{offset}")
        } else {
            name.to_owned()
        };
        let zone = TimeZone {
            name: Arc::from(name),
            offset_minutes: minutes,
        };
        zone.check().map_err(|_| bad())?;
        Ok(zone)
    }
}

impl RequestInputs {
    /// Check every input a caller gives (skills, texts, time zone); tools are checked where
    /// they are narrowed.
    pub fn check(&self) -> Result<(), InputError> {
        for s in &self.active_skills {
            s.check()?;
        }
        if let Some(i) = &self.inbound {
            if let Some(s) = &i.sender {
                check_text("sender", s)?;
            }
            if let Some(c) = &i.channel {
                check_text("channel", c)?;
            }
        }
        if let Some(l) = &self.language {
            check_text("language", l)?;
        }
        if let Some(m) = &self.model {
            check_text("model", m)?;
        }
        if let Some(z) = &self.time_zone {
            z.check()?;
        }
        check_footprint(&self.recent_footprint)?;
        if let Some(b) = &self.business_context {
            check_business_context(b.as_str())?;
        }
        Ok(())
    }
}

/// Check a recent footprint: at most [`MAX_FOOTPRINT_ENTRIES`] entries, each one line of 1 to
/// [`MAX_FOOTPRINT_ENTRY`] bytes (ADR-0050).
pub fn check_footprint(entries: &[Arc<str>]) -> Result<(), InputError> {
    if entries.len() > MAX_FOOTPRINT_ENTRIES {
        return Err(InputError::Footprint {
            entry: MAX_FOOTPRINT_ENTRIES + 1,
            reason: format!(
                "a footprint holds at most {MAX_FOOTPRINT_ENTRIES} entries; send the most recent ones"
            ),
        });
    }
    for (i, e) in entries.iter().enumerate() {
        let bad = |reason: &str| InputError::Footprint {
            entry: i + 1,
            reason: reason.to_owned(),
        };
        if e.trim().is_empty() {
            return Err(bad("is empty; leave it out instead"));
        }
        if e.len() > MAX_FOOTPRINT_ENTRY {
            return Err(bad(
                "is longer than 500 bytes; summarise the action in one line",
            ));
        }
        if e.chars()
            .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
        {
            return Err(bad(
                "holds a line break or another control character; give one line per action",
            ));
        }
    }
    Ok(())
}

/// Check a business context: not blank, at most [`MAX_BUSINESS_CONTEXT`] bytes, no control
/// characters other than line breaks and tabs.
pub fn check_business_context(text: &str) -> Result<(), InputError> {
    let bad = |reason: &str| Err(InputError::BusinessContext(reason.to_owned()));
    if text.trim().is_empty() {
        return bad("is empty; leave it out instead");
    }
    if text.len() > MAX_BUSINESS_CONTEXT {
        return bad(
            "is longer than 32 KiB; keep the facts every turn needs and move the rest to memory",
        );
    }
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return bad("holds a control character other than a line break or a tab");
    }
    Ok(())
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

    /// Add what the file at `path` holds, for a cache validator: that it is missing, not a
    /// regular file (a FIFO or a device is never opened, so a validator cannot block on one),
    /// or could not be read; else its length, its modification time and its first `max_bytes`
    /// bytes (what a contributor that shows at most that much can show). A rewrite that keeps
    /// the length and the time and changes only bytes past `max_bytes` is not seen; bound
    /// `max_bytes` by what the contributor reads.
    pub fn add_file(&mut self, path: &std::path::Path, max_bytes: u64) -> &mut Self {
        use std::io::Read as _;
        let meta = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => m,
            Ok(_) => return self.add("not a file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return self.add("none"),
            Err(e) => return self.add("error").add(&e.kind().to_string()),
        };
        let file = match std::fs::File::open(path) {
            // Checked again on the opened file: the path may have been replaced meanwhile.
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
            Ok(_) => return self.add("not a file"),
            Err(e) => return self.add("error").add(&e.kind().to_string()),
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let mut head = Vec::new();
        if let Err(e) = file.take(max_bytes).read_to_end(&mut head) {
            return self.add("error").add(&e.kind().to_string());
        }
        self.add("file")
            .add_bytes(&meta.len().to_le_bytes())
            .add_bytes(&modified.to_le_bytes())
            .add_bytes(&head)
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
    fn a_footprint_entry_is_one_line() {
        let lines = |v: &[&str]| v.iter().map(|l| Arc::from(*l)).collect::<Vec<Arc<str>>>();
        assert!(check_footprint(&lines(&["ran make: ok", "edited a.rs"])).is_ok());
        for bad in [
            "a\nb",
            "a\rb",
            "a\u{2028}b",
            "a\u{2029}b",
            " ",
            &"x".repeat(501),
        ] {
            let e = check_footprint(&lines(&["fine", bad]))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("recent footprint entry 2:"), "{bad:?}: {e}");
        }
        let many: Vec<String> = (0..51).map(|i| format!("step {i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(check_footprint(&lines(&many)).is_err());
        assert!(check_business_context("Plan: Enterprise.\n\tRenewal in March.").is_ok());
        assert!(check_business_context("a\u{0}b").is_err());
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

    #[test]
    fn time_zones_parse() {
        let z: TimeZone = "Europe/Paris +01:00".parse().unwrap();
        assert_eq!((&*z.name, z.offset_minutes), ("Europe/Paris", 60));
        let z: TimeZone = "-05:30".parse().unwrap();
        assert_eq!((&*z.name, z.offset_minutes), ("UTC-05:30", -330));
        assert_eq!("utc".parse::<TimeZone>().unwrap(), TimeZone::utc());
        for bad in [
            "Mars",
            "+24:00",
            "+1:00",
            "Paris +01:60",
            "",
            "+01:00\u{7}x",
        ] {
            let e = bad.parse::<TimeZone>().unwrap_err().to_string();
            assert!(e.starts_with("time zone `"), "{bad}: {e}");
        }
        let far = TimeZone {
            name: "x".into(),
            offset_minutes: 1440,
        };
        assert!(matches!(far.check(), Err(InputError::TimeZone(_))));
    }

    #[test]
    fn skills_and_texts_are_checked() {
        assert!(ActiveSkill::new("review/rust", "Review carefully.").is_ok());
        let e = ActiveSkill::new("a b", "x").unwrap_err().to_string();
        assert!(e.starts_with("skill `a b`: a skill id holds only"), "{e}");
        let e = ActiveSkill::new("ok", "  ").unwrap_err().to_string();
        assert!(e.contains("instructions are empty"), "{e}");
        assert!(check_text("sender", "").is_err());
        assert!(check_text("sender", &"x".repeat(201)).is_err());
        assert!(check_text("model", "gpt-5").is_ok());
    }
}
