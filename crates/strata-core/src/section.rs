//! Runtime sections: the unit of content that layers 3-6 contribute to an assembly.
//!
//! A [`Section`] is immutable once built. Its layer is a [`RuntimeLayer`], so a section can
//! never claim layer 1 or 2 (ADR-0004, I7).

use smol_str::SmolStr;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::content::{Content, ContentHash};
use crate::error::CoreError;
use crate::layer::RuntimeLayer;
use crate::mode::{ModeSet, PathSet};
use crate::provenance::{Provenance, SourceKind};

fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

/// A section id: 1-128 characters of `[A-Za-z0-9._:/-]`, so it can be written into the
/// rendered format without escaping. Ids of up to 23 bytes are held inline, so copying one (a
/// report entry per section, ADR-0037) reads no other allocation and touches no reference
/// count; longer ones share one allocation.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SectionId(SmolStr);

impl SectionId {
    /// Validate an id.
    pub fn new(id: impl AsRef<str>) -> Result<SectionId, CoreError> {
        let id = id.as_ref();
        if valid_name(id, 128) {
            Ok(SectionId(SmolStr::new(id)))
        } else {
            Err(CoreError::InvalidSectionId {
                given: id.chars().take(140).collect(),
            })
        }
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The first 64 bits of the BLAKE3 hash of an id. Equal ids have equal digests; different ids
/// have equal ones with odds of about one in 2^64 per pair, and finding such a pair takes
/// about 2^32 hashes, so a map keyed by digests stays balanced whatever ids it is given (its
/// hasher is seeded per process). Users still compare the texts where digests are equal.
pub fn id_digest(id: &str) -> u64 {
    let h = blake3::hash(id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// A conflict key: sections that claim the same key conflict, and the higher layer wins.
/// Held like [`SectionId`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SectionKey(SmolStr);

impl SectionKey {
    /// Validate a key (same alphabet as ids).
    pub fn new(key: impl AsRef<str>) -> Result<SectionKey, CoreError> {
        let key = key.as_ref();
        if valid_name(key, 128) {
            Ok(SectionKey(SmolStr::new(key)))
        } else {
            Err(CoreError::InvalidSectionKey {
                given: key.chars().take(140).collect(),
            })
        }
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! str_newtype_impls {
    ($t:ident) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::ops::Deref for $t {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }
        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        // Hash, Eq and Ord are those of the text, so the text can look it up in maps.
        impl std::borrow::Borrow<str> for $t {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                *self.0 == *other
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                *self.0 == **other
            }
        }
        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }
        impl PartialEq<$t> for String {
            fn eq(&self, other: &$t) -> bool {
                **self == *other.0
            }
        }
        impl PartialEq<$t> for str {
            fn eq(&self, other: &$t) -> bool {
                *self == *other.0
            }
        }
        impl PartialEq<$t> for &str {
            fn eq(&self, other: &$t) -> bool {
                **self == *other.0
            }
        }
        impl FromStr for $t {
            type Err = CoreError;
            fn from_str(s: &str) -> Result<Self, CoreError> {
                $t::new(s)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $t::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}
str_newtype_impls!(SectionId);
str_newtype_impls!(SectionKey);

/// The canonical phase order inside a layer (from the seeds): constraints first, user last.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Rules and constraints.
    Constraint,
    /// The current task or goal.
    #[default]
    Task,
    /// Retrieved or remembered facts.
    Memory,
    /// Tool catalog and guidance.
    Tools,
    /// Conversation history.
    History,
    /// The user's own input.
    User,
}

impl Phase {
    /// All phases in canonical order.
    pub const ALL: [Phase; 6] = [
        Phase::Constraint,
        Phase::Task,
        Phase::Memory,
        Phase::Tools,
        Phase::History,
        Phase::User,
    ];

    /// Stable lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Constraint => "constraint",
            Phase::Task => "task",
            Phase::Memory => "memory",
            Phase::Tools => "tools",
            Phase::History => "history",
            Phase::User => "user",
        }
    }
}

impl FromStr for Phase {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| CoreError::UnknownName {
                what: "phase",
                given: s.to_owned(),
                expected: "constraint task memory tools history user",
            })
    }
}

/// Whether a section's content changes between requests.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Stability {
    /// Rarely changes; cacheable and part of the stable (provider-cacheable) prefix.
    Stable,
    /// Recomputed every request; never cached; placed after every stable section.
    #[default]
    Dynamic,
}

/// A weight in hundredths (100 = 1.0). Score = priority x weight, in integers, so ordering is
/// exact and deterministic.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Weight(pub u16);

impl Default for Weight {
    fn default() -> Self {
        Weight(100)
    }
}

/// Who spoke a working-memory turn.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user.
    User,
    /// The assistant (the agent's own output).
    Assistant,
    /// A tool call made by the assistant.
    ToolCall,
    /// A tool's result (untrusted).
    ToolResult,
}

impl Role {
    /// Stable lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolCall => "tool_call",
            Role::ToolResult => "tool_result",
        }
    }

    /// Parse a name written by [`Role::name`].
    pub fn from_name(s: &str) -> Option<Role> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool_call" => Role::ToolCall,
            "tool_result" => Role::ToolResult,
            _ => return None,
        })
    }
}

/// Turn metadata of a working-memory section: its place in the session and, for tool calls and
/// results, the id that links them (the assembler never separates the two).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Turn {
    /// Position in the session log; larger is newer.
    pub seq: u64,
    /// Who spoke.
    pub role: Role,
    /// The tool call id linking a call and its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<Arc<str>>,
    /// The tool called, for a tool call (its content is the call's JSON arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<crate::ToolName>,
    /// For a tool result: the tool reported a failure. Providers that take the flag receive it
    /// with the result (Anthropic's `is_error`); the text is sent either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// For the agent's words or tool call that open a reply: the model's reasoning before them,
    /// in its provider's form, sent back unchanged where the provider requires it (ADR-0043).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<crate::Reasoning>,
}

impl Turn {
    /// A turn with no call id or tool name.
    pub fn new(seq: u64, role: Role) -> Turn {
        Turn {
            seq,
            role,
            call_id: None,
            name: None,
            is_error: false,
            reasoning: Vec::new(),
        }
    }

    /// A tool call of `name` with id `call_id`.
    pub fn tool_call(seq: u64, call_id: impl Into<Arc<str>>, name: crate::ToolName) -> Turn {
        Turn {
            seq,
            role: Role::ToolCall,
            call_id: Some(call_id.into()),
            name: Some(name),
            is_error: false,
            reasoning: Vec::new(),
        }
    }

    /// The result of the call `call_id`.
    pub fn tool_result(seq: u64, call_id: impl Into<Arc<str>>) -> Turn {
        Turn {
            seq,
            role: Role::ToolResult,
            call_id: Some(call_id.into()),
            name: None,
            is_error: false,
            reasoning: Vec::new(),
        }
    }

    /// The same turn marked as a failed tool's result.
    pub fn failed(mut self) -> Turn {
        self.is_error = true;
        self
    }
}

/// Which end of a section is kept when it is cut to fit its budget (ADR-0037).
///
/// A log's useful end is usually its tail; a document's is its head. Cutting `tail` or `both`
/// writes an elision marker (`<strata:elided bytes="N"/>`) on its own line where text was left
/// out, so a reader can see the cut; the marker cannot be forged by content, whose `<` is always
/// escaped (ADR-0009).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Keep {
    /// Keep the beginning (the default).
    #[default]
    Head,
    /// Keep the end; the elision marker comes first.
    Tail,
    /// Keep both ends, about half the room each; the elision marker stands in the middle.
    Both,
}

impl Keep {
    /// Stable lower-case name (`head`, `tail`, `both`).
    pub const fn name(self) -> &'static str {
        match self {
            Keep::Head => "head",
            Keep::Tail => "tail",
            Keep::Both => "both",
        }
    }

    /// Parse a name written by [`Keep::name`].
    pub fn from_name(s: &str) -> Option<Keep> {
        match s {
            "head" => Some(Keep::Head),
            "tail" => Some(Keep::Tail),
            "both" => Some(Keep::Both),
            _ => None,
        }
    }
}

/// One runtime section (layers 3-6). Immutable; clone is cheap.
#[derive(Clone, PartialEq)]
pub struct Section {
    id: SectionId,
    /// [`id_digest`] of the id, worked out when the section is built.
    id_digest: u64,
    layer: RuntimeLayer,
    key: Option<SectionKey>,
    priority: u32,
    phase: Phase,
    stability: Stability,
    sticky: bool,
    weight: Weight,
    modes: ModeSet,
    paths: PathSet,
    turn: Option<Turn>,
    keep: Keep,
    /// [`crate::tokenizer::separate_ascii_words`] of the content, worked out with its hash.
    words: usize,
    /// The content's hash, held inline as well as in the provenance: read per section on the
    /// assembler's paths, where the provenance is not.
    content_hash: ContentHash,
    /// Shared: a report entry holds it by reference rather than copying its fields, and the
    /// section stays small to walk (ADR-0037).
    provenance: Arc<Provenance>,
    content: Content,
}

impl fmt::Debug for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Section")
            .field("id", &self.id)
            .field("layer", &self.layer)
            .field("key", &self.key)
            .field("priority", &self.priority)
            .field("phase", &self.phase)
            .field("stability", &self.stability)
            .field("sticky", &self.sticky)
            .field("keep", &self.keep)
            .field("bytes", &self.content.len())
            .finish_non_exhaustive()
    }
}

impl Section {
    /// Start building a section of `layer` with `id` and `content`.
    ///
    /// The builder's defaults: priority 0, phase `task`, dynamic, not sticky, weight 1.0, every
    /// mode and path, provenance `caller` named after the id.
    pub fn builder(
        layer: RuntimeLayer,
        id: impl AsRef<str>,
        content: impl Into<Content>,
    ) -> Result<SectionBuilder, CoreError> {
        let id = SectionId::new(id)?;
        let content = content.into();
        let content_hash = content.hash();
        let provenance = Arc::new(Provenance {
            source: SourceKind::Caller,
            // The id's own text, shared: one allocation for both.
            name: id.0.clone(),
            content_hash,
            record: None,
            created_ms: None,
            score: None,
        });
        Ok(SectionBuilder {
            s: Section {
                id_digest: id_digest(id.as_str()),
                id,
                layer,
                key: None,
                priority: 0,
                phase: Phase::default(),
                stability: Stability::default(),
                sticky: false,
                weight: Weight::default(),
                modes: ModeSet::all(),
                paths: PathSet::all(),
                turn: None,
                keep: Keep::Head,
                words: crate::tokenizer::separate_ascii_words(content.as_str()),
                content_hash,
                provenance,
                content,
            },
        })
    }

    /// Whether `other` is the same section, field for field: the same answer as `==`, but a
    /// text held in the same shared allocation on both sides (a clone's id, key, provenance
    /// name or content) is recognised by its address and never read. Comparing a request's
    /// sections with clones of them kept from an earlier call so costs no visit to any text
    /// (ADR-0037: the kept whole assembly).
    pub fn same_as(&self, other: &Section) -> bool {
        // Every field named, so a field added to sections must be compared here to compile.
        let Section {
            id,
            id_digest,
            layer,
            key,
            priority,
            phase,
            stability,
            sticky,
            weight,
            modes,
            paths,
            turn,
            keep,
            words,
            content_hash,
            provenance,
            content,
        } = self;
        let Provenance {
            source,
            name,
            content_hash: provenance_hash,
            record,
            created_ms,
            score,
        } = &**provenance;
        let p = &other.provenance;
        same_text(&id.0, &other.id.0)
            && *id_digest == other.id_digest
            && *layer == other.layer
            && match (key, &other.key) {
                (Some(a), Some(b)) => same_text(&a.0, &b.0),
                (None, None) => true,
                _ => false,
            }
            && *priority == other.priority
            && *phase == other.phase
            && *stability == other.stability
            && *sticky == other.sticky
            && *weight == other.weight
            && *modes == other.modes
            && *paths == other.paths
            && *turn == other.turn
            && *keep == other.keep
            && *words == other.words
            && *content_hash == other.content_hash
            && (Arc::ptr_eq(provenance, p)
                || (*source == p.source
                    && same_text(name, &p.name)
                    && *provenance_hash == p.content_hash
                    && *record == p.record
                    && *created_ms == p.created_ms
                    && *score == p.score))
            && (std::ptr::eq(content.as_str(), other.content.as_str()) || *content == other.content)
    }

    /// The id.
    pub fn id(&self) -> &SectionId {
        &self.id
    }
    /// [`id_digest`] of the id, kept with the section: sections with equal ids have equal
    /// digests, so a check for equal ids reads the id texts only where digests are equal.
    pub fn id_digest(&self) -> u64 {
        self.id_digest
    }
    /// The runtime layer (3-6).
    pub fn layer(&self) -> RuntimeLayer {
        self.layer
    }
    /// The conflict key, if any.
    pub fn key(&self) -> Option<&SectionKey> {
        self.key.as_ref()
    }
    /// Priority within the layer (larger is more important).
    pub fn priority(&self) -> u32 {
        self.priority
    }
    /// Phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// Stability.
    pub fn stability(&self) -> Stability {
        self.stability
    }
    /// Sticky sections are never trimmed; if they do not fit, assembly fails.
    pub fn sticky(&self) -> bool {
        self.sticky
    }
    /// Weight.
    pub fn weight(&self) -> Weight {
        self.weight
    }
    /// Score = priority x weight (integers).
    pub fn score(&self) -> u64 {
        u64::from(self.priority) * u64::from(self.weight.0)
    }
    /// Modes it takes part in.
    pub fn modes(&self) -> ModeSet {
        self.modes
    }
    /// Paths it takes part in.
    pub fn paths(&self) -> PathSet {
        self.paths
    }
    /// Working-memory turn metadata.
    pub fn turn(&self) -> Option<&Turn> {
        self.turn.as_ref()
    }
    /// Which end is kept when the section is cut (ADR-0037).
    pub fn keep(&self) -> Keep {
        self.keep
    }
    /// Separate ASCII words in the content ([`crate::tokenizer::separate_ascii_words`]): a
    /// lower bound of its tokens with the tiktoken encodings, known without tokenizing it.
    pub fn ascii_words(&self) -> usize {
        self.words
    }
    /// Provenance.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }
    /// Provenance, shared: a clone is a reference count, not a copy of its fields.
    pub fn provenance_shared(&self) -> &Arc<Provenance> {
        &self.provenance
    }
    /// Content hash (same as `provenance().content_hash`).
    pub fn content_hash(&self) -> ContentHash {
        self.content_hash
    }
    /// Content.
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// A copy with other turn metadata; the rest kept.
    pub fn with_turn(&self, turn: Turn) -> Section {
        let mut s = self.clone();
        s.turn = Some(turn);
        s
    }

    /// A copy that keeps the other end when cut; the rest kept.
    pub fn with_keep(&self, keep: Keep) -> Section {
        let mut s = self.clone();
        s.keep = keep;
        s
    }

    /// A copy with other content (used for truncation); the hash is recomputed, the rest kept.
    pub fn with_content(&self, content: impl Into<Content>) -> Section {
        let mut s = self.clone();
        s.content = content.into();
        s.content_hash = s.content.hash();
        Arc::make_mut(&mut s.provenance).content_hash = s.content_hash;
        s.words = crate::tokenizer::separate_ascii_words(s.content.as_str());
        s
    }
}

/// Builder for [`Section`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SectionBuilder {
    s: Section,
}

impl SectionBuilder {
    /// Conflict key.
    pub fn key(mut self, key: impl AsRef<str>) -> Result<Self, CoreError> {
        self.s.key = Some(SectionKey::new(key)?);
        Ok(self)
    }
    /// Conflict key, already validated.
    pub fn key_value(mut self, key: Option<SectionKey>) -> Self {
        self.s.key = key;
        self
    }
    /// Priority within the layer.
    pub fn priority(mut self, p: u32) -> Self {
        self.s.priority = p;
        self
    }
    /// Phase.
    pub fn phase(mut self, p: Phase) -> Self {
        self.s.phase = p;
        self
    }
    /// Stability.
    pub fn stability(mut self, s: Stability) -> Self {
        self.s.stability = s;
        self
    }
    /// Sticky.
    pub fn sticky(mut self, sticky: bool) -> Self {
        self.s.sticky = sticky;
        self
    }
    /// Weight.
    pub fn weight(mut self, w: Weight) -> Self {
        self.s.weight = w;
        self
    }
    /// Modes.
    pub fn modes(mut self, m: ModeSet) -> Self {
        self.s.modes = m;
        self
    }
    /// Paths.
    pub fn paths(mut self, p: PathSet) -> Self {
        self.s.paths = p;
        self
    }
    /// Which end is kept when the section is cut (default [`Keep::Head`]; ADR-0037).
    pub fn keep(mut self, k: Keep) -> Self {
        self.s.keep = k;
        self
    }
    /// Turn metadata (working memory).
    pub fn turn(mut self, t: Turn) -> Self {
        self.s.turn = Some(t);
        self
    }
    /// Source kind and producer name; the content hash is kept.
    pub fn source(mut self, source: SourceKind, name: impl AsRef<str>) -> Self {
        let p = Arc::make_mut(&mut self.s.provenance);
        p.source = source;
        p.name = SmolStr::new(name.as_ref());
        self
    }
    /// Record id, creation time and score of the provenance.
    pub fn record(
        mut self,
        record: Option<&str>,
        created_ms: Option<i64>,
        score: Option<f64>,
    ) -> Self {
        let p = Arc::make_mut(&mut self.s.provenance);
        p.record = record.map(SmolStr::new);
        p.created_ms = created_ms;
        p.score = score.filter(|s| s.is_finite());
        self
    }
    /// Finish.
    pub fn build(self) -> Section {
        self.s
    }
}

/// Two texts are equal: the same shared allocation, or the same characters.
fn same_text(a: &SmolStr, b: &SmolStr) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Verifies ADR-0037: `same_as` answers as `==` does, for sections that share texts
        /// (clones) and for sections built separately from equal or different fields; ids, keys
        /// and names short enough to be held inline and long enough to be shared.
        #[test]
        fn same_as_agrees_with_equality(
            a in (0usize..4, 0usize..2, 0usize..3, 0u32..2, proptest::bool::ANY, 0usize..4),
            b in (0usize..4, 0usize..2, 0usize..3, 0u32..2, proptest::bool::ANY, 0usize..4),
        ) {
            // Two short texts, and two of 40 bytes that differ only in their last byte.
            let long = |c: char| format!("{}{c}", "x".repeat(39));
            let texts = ["a".to_owned(), "b".to_owned(), long('a'), long('b')];
            let build = |(id, text, key, prio, sticky, name): (usize, usize, usize, u32, bool, usize)| {
                let mut s = Section::builder(RuntimeLayer::Shared, &texts[id], ["x y", "x z"][text])
                    .unwrap()
                    .priority(prio)
                    .sticky(sticky)
                    .source(SourceKind::Store, &texts[name]);
                if key > 0 {
                    s = s.key(&texts[key + 1]).unwrap();
                }
                s.build()
            };
            let (x, y) = (build(a), build(b));
            proptest::prop_assert_eq!(x.same_as(&y), x == y);
            proptest::prop_assert!(x.same_as(&x.clone()));
            proptest::prop_assert_eq!(x.clone().same_as(&y.clone()), x == y);
        }
    }

    /// Verifies ADR-0037: `same_as` tells apart sections that differ only in the text of their
    /// id, key or producer name, for each pair of short (inline) and long (shared) texts of equal
    /// length, and sees sections built apart from the same texts as the same.
    #[test]
    fn same_as_compares_every_text_field() {
        let long = |c: char| format!("{}{c}", "x".repeat(39));
        let texts = ["a".to_owned(), "b".to_owned(), long('a'), long('b')];
        let build = |field: usize, t: &str| {
            let (id, key, name) = match field {
                0 => (t, "k", "n"),
                1 => ("i", t, "n"),
                _ => ("i", "k", t),
            };
            Section::builder(RuntimeLayer::Shared, id, "text")
                .unwrap()
                .key(key)
                .unwrap()
                .source(SourceKind::Store, name)
                .build()
        };
        for field in 0..3 {
            for a in &texts {
                for b in &texts {
                    let (x, y) = (build(field, a), build(field, b));
                    assert_eq!(x.same_as(&y), a == b, "field {field}: {a:?} and {b:?}");
                    assert_eq!(x == y, a == b, "field {field}: {a:?} and {b:?}");
                    assert!(x.same_as(&x.clone()));
                }
            }
        }
    }

    proptest::proptest! {
        /// Ids and keys compare, order and hash exactly as their texts do, whether held inline
        /// (up to 23 bytes) or shared (longer), so maps keyed by them can be looked up by text
        /// (`Borrow<str>`); the reference is `str`'s own order and hash.
        #[test]
        fn ids_and_keys_behave_as_their_texts(
            a in "[A-Za-z0-9._:/-]{1,128}",
            b in "[A-Za-z0-9._:/-]{1,128}",
            cut in 0usize..128,
        ) {
            use std::collections::hash_map::DefaultHasher;
            use std::hash::{Hash, Hasher};
            let hash = |h: &dyn Fn(&mut DefaultHasher)| {
                let mut s = DefaultHasher::new();
                h(&mut s);
                s.finish()
            };
            // A pair that shares a prefix, often across the 23-byte inline limit.
            let b = format!("{}{b}", &a[..cut.min(a.len())]);
            let b = &b[..b.len().min(128)];
            let (x, y) = (SectionId::new(&a).unwrap(), SectionId::new(b).unwrap());
            proptest::prop_assert_eq!(x.as_str(), a.as_str());
            proptest::prop_assert_eq!(x == y, a.as_str() == b);
            proptest::prop_assert_eq!(x.cmp(&y), a.as_str().cmp(b));
            proptest::prop_assert_eq!(
                hash(&|s| x.hash(s)),
                hash(&|s| std::borrow::Borrow::<str>::borrow(&x).hash(s))
            );
            proptest::prop_assert_eq!(hash(&|s| x.hash(s)), hash(&|s| a.as_str().hash(s)));
            let (k, l) = (SectionKey::new(&a).unwrap(), SectionKey::new(b).unwrap());
            proptest::prop_assert_eq!(k.cmp(&l), a.as_str().cmp(b));
            proptest::prop_assert_eq!(hash(&|s| k.hash(s)), hash(&|s| a.as_str().hash(s)));
            let map: std::collections::HashMap<SectionId, usize> = [(x.clone(), 1), (y.clone(), 2)].into();
            proptest::prop_assert_eq!(map.get(a.as_str()), Some(&if a.as_str() == b { 2 } else { 1 }));
            // Serialized as the text, read back equal.
            let json = serde_json::to_string(&x).unwrap();
            proptest::prop_assert_eq!(&json, &serde_json::to_string(a.as_str()).unwrap());
            proptest::prop_assert_eq!(serde_json::from_str::<SectionId>(&json).unwrap(), x);
        }
    }

    #[test]
    fn ids_are_validated() {
        assert!(SectionId::new("memory.search/1:a-b_c").is_ok());
        for bad in ["", "has space", "x".repeat(129).as_str(), "<tag>", "a\nb"] {
            assert!(SectionId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn builder_sets_hash_and_defaults() {
        let s = Section::builder(RuntimeLayer::Shared, "biz", "facts")
            .unwrap()
            .priority(7)
            .build();
        assert_eq!(s.layer(), RuntimeLayer::Shared);
        assert_eq!(s.content_hash(), Content::from("facts").hash());
        assert_eq!(s.score(), 700);
        assert!(!s.sticky());
        let t = s.with_content("other");
        assert_eq!(t.content_hash(), Content::from("other").hash());
        assert_eq!(t.id(), s.id());
    }

    /// The content hash held inline and the one in the shared provenance agree on every way a
    /// section is made (built, given a source and a record, given new content), and new
    /// content leaves the original's provenance as it was (ADR-0037).
    #[test]
    fn the_inline_hash_is_the_provenance_hash() {
        let s = Section::builder(RuntimeLayer::Shared, "facts", "first")
            .unwrap()
            .source(SourceKind::Store, "memory")
            .record(Some("r1"), Some(7), Some(0.5))
            .build();
        let t = s.with_content("second");
        let u = t.with_turn(Turn::new(3, Role::User));
        for (x, text) in [(&s, "first"), (&t, "second"), (&u, "second")] {
            assert_eq!(x.content_hash(), Content::from(text).hash());
            assert_eq!(x.provenance().content_hash, Content::from(text).hash());
            assert_eq!(x.provenance().name.as_str(), "memory");
            assert_eq!(x.provenance().record.as_deref(), Some("r1"));
        }
        assert!(Arc::ptr_eq(t.provenance_shared(), u.provenance_shared()));
        assert!(!s.same_as(&t) && s != t);
        assert!(!t.same_as(&u) && t != u);
        assert!(t.same_as(&t.clone()));
    }

    #[test]
    fn phase_order_is_canonical() {
        let mut v = vec![
            Phase::User,
            Phase::Memory,
            Phase::Constraint,
            Phase::History,
        ];
        v.sort();
        assert_eq!(
            v,
            [
                Phase::Constraint,
                Phase::Memory,
                Phase::History,
                Phase::User
            ]
        );
    }
}
