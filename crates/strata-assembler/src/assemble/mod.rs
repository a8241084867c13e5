//! The assembly algorithm as named stages with typed hand-offs (ARCHITECTURE.md):
//! [`select`] (tools, mode and path, conflicts, tool pairs) -> [`Selected`];
//! [`measure`](Assembler::measure) (render, exact tokens in the request's frame, caps, units)
//! -> [`Measured`]; [`fit`](Assembler::fit) (sticky check, trimming, refill) -> [`Fitted`];
//! place (provider channels, or the plain-text layout) -> [`Laid`]; then the report.
//!
//! Architecture invariant: this module does no I/O and reads no clock; the same inputs give the
//! same bytes (I6, ADR-0013). Identity comes only from a `VerifiedAgent` and is copied into the
//! output first, byte for byte, exactly once (I1, ADR-0006); it is never trimmed (I2, ADR-0008).

use std::cmp::Reverse;
use std::collections::HashMap;

/// Hash maps keyed by caller-chosen strings on the per-call path: a fast keyed hash that is
/// still seeded per process, so crafted ids cannot force collisions.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::{Arc, Mutex};

use strata_agentdef::VerifiedAgent;
use strata_core::format::{self, Authority, Encoding, SectionHeader};
use strata_core::{
    ContentHash, Keep, Layer, Phase, Role, RuntimeLayer, Section, SectionId, SectionKey,
    SourceKind, Stability, Tokenizer, ToolName,
};

mod fit;
mod measure;
mod native;
mod place;
mod schema;
mod select;
mod whole;

use fit::{Fitted, Limits};
use measure::Measured;
use place::Laid;
use select::Selected;

use crate::error::AssembleError;
use crate::output::{AssembledContext, Contents};
use crate::per_layer::PerLayer;
use crate::provider::RequestTool;
use crate::report::{
    Breakpoint, DropReason, FilterReason, LayerReport, Report, RequestReport, SectionReport,
    SectionStatus,
};
use crate::request::{AssemblyRequest, BudgetSpec};

/// The tools of `announced` that an assembly of `agent` under `policy` keeps: in layer 1's
/// allowlist, permitted by the delegated policy, announced once, with a schema and description
/// that match a pinned signed entry (I4, ADR-0007), and with only identifiers for names in a
/// schema that is not pinned (under the default description policy; ADR-0032). The same
/// narrowing as assembly itself, for callers that must hand contributors only what the model
/// may see. The tools are returned as announced: contributors write what they take from them
/// into sections, which are fenced as data.
pub fn narrowed_tools(
    agent: &VerifiedAgent,
    announced: &[strata_core::AnnouncedTool],
    policy: &strata_core::ToolPolicy,
) -> Vec<strata_core::AnnouncedTool> {
    let req = AssemblyRequest {
        tools: announced.to_vec(),
        tool_policy: policy.clone(),
        ..AssemblyRequest::default()
    };
    let (report, _, _) = select::narrow_tools(agent, &req);
    let mut seen = std::collections::BTreeSet::new();
    announced
        .iter()
        .filter(|t| report.effective.contains(&t.name) && seen.insert(t.name.clone()))
        .cloned()
        .collect()
}

/// The id of the tool catalog section the assembler writes from announced tools.
pub const TOOL_CATALOG_ID: &str = "strata.tools";
/// The conflict key of the tool catalog; other catalogs claiming it lose to the assembler's.
pub const TOOL_CATALOG_KEY: &str = "tool_catalog";
/// Tokens allowed for a provider's wrapping of one tool definition (an estimate).
const TOOL_FRAME: u64 = 8;
/// Below this many tokens of slack, a dropped section is not re-added in cut form.
const MIN_CUT_TOKENS: u64 = 48;
/// Bytes the element cache may hold by default before it is cleared (ADR-0008).
pub const DEFAULT_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Bytes counted for one cache entry besides its text (key, counts, map overhead).
const ENTRY_OVERHEAD: usize = 160;
/// Tokens taken off the smallest element's count to make it a lower bound of any element.
const FLOOR_MARGIN: u64 = 4;

/// A rendered element with its exact cost.
#[derive(Debug, Default)]
struct Rendered {
    /// The element: a fenced section, or for native turns the turn's own text (a tool call's
    /// JSON arguments).
    text: String,
    /// Tokens of `text`, plus in provider frames the upper bound of its message framing.
    tokens: u64,
    chars: u64,
    /// Tokens of `text` alone.
    content_tokens: u64,
}

/// Where a cut section's text was cut: the kept head is `content[..at]`, the kept tail
/// `content[at..]`, and `elided` bytes of the original stood between them (ADR-0024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct CutAt {
    keep: Keep,
    at: usize,
    elided: u64,
}

/// How far past its resume point a kept walk's text is kept: what the tokenizer compares
/// before resuming there (64 bytes for the exact tokenizer), with room to spare.
const WALK_KEPT_PAST: usize = 128;

/// What stands in a native user message where a cut left text out: plain words on their own
/// line, no strata syntax (a native message is the user's channel, not a fenced element;
/// ADR-0030). Written by the wire format's module, whose neutralising of native text knows it
/// (ADR-0032).
fn native_elision(bytes: u64) -> String {
    let mut note = String::new();
    format::write_native_elision(&mut note, bytes);
    note
}

/// Bytes the cache counts for a kept walk.
fn walk_size(id: &SectionId, text: &str) -> usize {
    text.len() + id.as_str().len() + ENTRY_OVERHEAD
}

/// Bytes of content per token of the budget in the first window a head cut walks: more than
/// most text takes (English about 4.5, code and JSON 3, CJK 1.5-3), so one window is enough
/// but for dense text, and a window that is not grows four times (ADR-0024, amended).
const WALK_WINDOW_BYTES_PER_TOKEN: usize = 8;

/// The text a head cut walks (see `Assembler::element_walk`).
struct ElementWalk {
    text: String,
    body_start: usize,
    allow: usize,
    /// How much of `text` is written, and split by the tokenizer, as the walk of the whole
    /// content: all of it when the walk holds the whole content or stops at the walk bound,
    /// else up to the run of whitespace that ends its last complete line (the escaping of a
    /// line looks only within it; the tokenizer reads a run of whitespace to its end).
    stable: usize,
    /// The window of content the walk read (`usize::MAX` for the whole, or up to the bound).
    window: usize,
}

impl ElementWalk {
    /// Whether a prefix of `len` bytes of the walk is the prefix the walk of the whole content
    /// gives: it ends, with room for what the tokenizer reads past it (`look_ahead`, and at
    /// least 512 bytes), within the stable part of the walk.
    fn settles(&self, len: usize, look_ahead: usize) -> bool {
        self.window == usize::MAX
            || len.saturating_add(look_ahead.max(4 * WALK_KEPT_PAST)) <= self.stable
    }
}

/// What is known of another text when an element is counted: nothing, a walk over a text with
/// the same start up to a point ([`Tokenizer::count_resumed`]), or a text with the same end and
/// its exact count ([`Tokenizer::count_sharing_end`]).
#[derive(Clone, Copy)]
enum Known<'a> {
    Nothing,
    Start(&'a str, strata_core::Prefix),
    End(&'a str, usize),
}

/// The text a tail cut searches (see `Assembler::tail_walk`): the end of its element as a cut
/// writes it, from a window of the content.
struct TailWalk {
    /// The window of content encoded (escaped, or datamarked), then the element's end.
    text: String,
    /// Where the window starts in the content.
    start: usize,
    /// Bytes of `text` before the element's end.
    body_len: usize,
    /// Tokens the search may keep: the budget less the framing and the element's opening.
    allow: usize,
    /// Bytes of content the window was asked to hold.
    window: usize,
}

/// How far before a tail window's start a line break is looked for, so the window starts at a
/// line and is escaped as the whole content is.
const TAIL_LINE_SEARCH: usize = 4_096;

/// A section cut to a limit: its cut form, rendered, and where the cut is in the offered text.
#[derive(Debug, Clone)]
struct Cutting {
    section: Section,
    rendered: Arc<Rendered>,
    at: CutAt,
}

/// The cache key of a rendered element. Every part is a copy or a reference-counted clone, so
/// building one allocates nothing (ADR-0024).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ElementKey {
    content: ContentHash,
    id: SectionId,
    key: Option<SectionKey>,
    source: SourceKind,
    layer: RuntimeLayer,
    encoding: Encoding,
    cut: Option<CutAt>,
    /// Which end a cut keeps: part of the key of cut results.
    keep: Keep,
    native: bool,
    /// Role, call id and tool name of a working-memory turn: all rendered.
    turn: Option<(Role, Option<Arc<str>>, Option<ToolName>)>,
}

/// Counters of the element cache (ADR-0008: unchanged sections are never re-tokenized).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Elements served from the cache.
    pub hits: u64,
    /// Elements rendered and tokenized in full.
    pub misses: u64,
    /// Elements found larger than the room left by counting only up to that room (their full
    /// count is never taken; ADR-0024).
    pub probed_over: u64,
    /// Cut results served from the cache.
    pub cut_hits: u64,
    /// Bytes handed to the tokenizer for full counts (probes stop early and are not included;
    /// a cut element counted from a point of an earlier walk is included whole).
    pub tokenized_bytes: u64,
    /// Entries now held.
    pub entries: usize,
    /// Bytes now held (texts and keys, with a fixed overhead per entry).
    pub bytes: usize,
    /// Times the cache was emptied to stay within its byte limit.
    pub evictions: u64,
    /// Whole assemblies served from the last one kept, the request being exactly the same
    /// but for the time of the call (ADR-0024).
    pub assembly_hits: u64,
    /// Cuts whose walk resumed where the last cut of the same section's walk passed, its
    /// element having the same bytes up to there (ADR-0024).
    pub resumed_cuts: u64,
    /// Head cuts whose first window of a long content was too small for the prefix, so that a
    /// window four times larger was walked (ADR-0024, amended).
    pub walk_regrowths: u64,
    /// Probes that found an element over the room left from a walk of a window of it, without
    /// writing the rest of a long content (ADR-0024, amended).
    pub walked_probes: u64,
    /// Selections that found the ids of the sections taking part equal, in order, to the last
    /// call's, which were pairwise distinct, and so resolved conflicts on keys alone (ADR-0024,
    /// amended).
    pub known_ids: u64,
    /// Report entries left in place from the last output, which its caller had let go of, each
    /// equal to the entry the call would have written (ADR-0024, amended).
    pub reused_entries: u64,
}

#[derive(Default)]
struct Cache {
    elements: FastMap<ElementKey, Arc<Rendered>>,
    /// Elements known to take more than the stored number of tokens (a probe stopped there).
    over: FastMap<ElementKey, u64>,
    /// Cut results by the whole section's key and the tokens allowed.
    cuts: FastMap<(ElementKey, u64), Cutting>,
    /// The last head cut of each section id: the text walked and a point of the walk, where
    /// the next cut of the same id may resume if its element starts with the same bytes.
    walks: FastMap<SectionId, (String, strata_core::Prefix)>,
    texts: FastMap<ContentHash, (u64, u64)>,
    /// Lower bounds of one element's tokens, by layer, encoding and frame.
    floors: FastMap<(RuntimeLayer, Encoding, bool), u64>,
    stats: CacheStats,
    /// Bytes held: rendered texts, ids and sources, plus a fixed overhead per entry.
    bytes: usize,
}

/// What the last call leaves for the next one (ADR-0024). Its orders are where the next call's
/// sorts start, only a starting point: every sort breaks ties down to the input position, so its
/// result is the same from any start, and a hint of another length is ignored. What it learnt of
/// its ids is a fact about those ids, used only when the next call's are equal to them, text for
/// text. Its output is kept so that its report's entries can be written over in place once the
/// caller has let go of it; an entry is kept only where it equals, field for field and with the
/// same provenance, the one the next call would build. Memory: one index per section of the last
/// request, per order, its ids, and one output within the cache limit.
#[derive(Default)]
struct Hints {
    /// The canonical order of selection, as positions in the sections that take part, and
    /// what the last call learnt of their ids.
    select: select::SelectHint,
    /// The keep order of the units that are not sticky.
    keep: Vec<usize>,
    /// The last output of the stages, if it fitted in the cache limit.
    last: Option<AssembledContext>,
}

/// The Context Assembler: the single enforcement point for priority, immutability, budgets and
/// fencing (ADR-0006). Share one per tokenizer across sessions; it caches rendered elements and
/// their token counts by content hash.
pub struct Assembler {
    tokenizer: Arc<dyn Tokenizer>,
    cache: Mutex<Cache>,
    hints: Mutex<Hints>,
    whole: whole::Whole,
    cache_limit: usize,
    /// Bytes of content per token of the budget in a head cut's first window.
    walk_window: usize,
}

impl std::fmt::Debug for Assembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembler")
            .field("tokenizer", &self.tokenizer.name())
            .finish_non_exhaustive()
    }
}

struct Cand<'a> {
    /// The section as offered (borrowed from the request, or owned once stripped of invisible
    /// characters): the section its report describes.
    base: Base<'a>,
    /// The cut form, once cut: boxed, as few candidates are cut and every one is built.
    cut: Option<Box<CutForm>>,
    sticky: bool,
    /// The rendered element, once fitting has measured it (ADR-0024).
    element: Option<Arc<Rendered>>,
    unit: usize,
}

/// A candidate's cut form.
struct CutForm {
    /// The section in cut form.
    section: Section,
    /// Where the offered text was cut.
    at: CutAt,
    /// The tokens of the whole rendered section, when they were counted.
    full: Option<u64>,
}

/// What an unmeasured candidate reports: nothing rendered, nothing counted.
static UNMEASURED: Rendered = Rendered {
    text: String::new(),
    tokens: 0,
    chars: 0,
    content_tokens: 0,
};

impl Cand<'_> {
    /// The rendered element, or an empty one before fitting measures the candidate.
    fn rendered(&self) -> &Rendered {
        self.element.as_deref().unwrap_or(&UNMEASURED)
    }

    /// The section as it is rendered: cut, or as offered.
    fn section(&self) -> &Section {
        match &self.cut {
            Some(cut) => &cut.section,
            None => self.base.get(),
        }
    }
}

/// A section borrowed from the request, or owned when assembly had to change it. A pointer in
/// either case, so candidates stay small to build and move.
enum Base<'a> {
    Borrowed(&'a Section),
    Owned(Box<Section>),
}

impl Base<'_> {
    fn get(&self) -> &Section {
        match self {
            Base::Borrowed(s) => s,
            Base::Owned(s) => s,
        }
    }
}

/// The candidates of a unit: one for most units, more for a tool call with its result. The
/// first is held inline, so a unit of one section allocates nothing.
#[derive(Default)]
struct Members {
    first: usize,
    rest: Vec<usize>,
    len: usize,
}

impl Members {
    fn push(&mut self, c: usize) {
        if self.len == 0 {
            self.first = c;
        } else {
            self.rest.push(c);
        }
        self.len += 1;
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> MembersIter<'_> {
        (self.len > 0)
            .then_some(&self.first)
            .into_iter()
            .chain(self.rest.iter())
    }
}

type MembersIter<'a> =
    std::iter::Chain<std::option::IntoIter<&'a usize>, std::slice::Iter<'a, usize>>;

impl<'a> IntoIterator for &'a Members {
    type Item = &'a usize;
    type IntoIter = MembersIter<'a>;
    fn into_iter(self) -> MembersIter<'a> {
        self.iter()
    }
}

struct Unit {
    layer: RuntimeLayer,
    members: Members,
    sticky: bool,
    turn_seq: Option<u64>,
    score: u64,
    /// The smallest candidate index among the members: candidates come in the canonical order
    /// of selection (layer, score, id, hash), so this breaks ties as the id would, without
    /// comparing strings.
    first: usize,
    tokens: u64,
    chars: u64,
    /// Bytes of content of the members (known without rendering).
    bytes: u64,
    /// Separate ASCII words of the members as offered (known without rendering): part of the
    /// unit's lower bound of tokens (ADR-0024).
    words: u64,
    /// Fitting has measured a member (which may since be cut).
    measured: bool,
    dropped: bool,
    /// Kept in room left after a more important unit was dropped (ADR-0024).
    filled: bool,
}

impl Assembler {
    /// An assembler counting with `tokenizer`.
    pub fn new(tokenizer: Arc<dyn Tokenizer>) -> Assembler {
        Assembler {
            tokenizer,
            cache: Mutex::new(Cache::default()),
            hints: Mutex::new(Hints::default()),
            whole: whole::Whole::default(),
            cache_limit: DEFAULT_CACHE_BYTES,
            walk_window: WALK_WINDOW_BYTES_PER_TOKEN,
        }
    }

    /// Bytes of content per token of the budget in the first window a head cut of a long escaped or
    /// datamarked section walks (default 8; ADR-0024, amended). The cut is the same for any value
    /// (a window too small for the prefix is walked again four times larger, up to the walk's
    /// bound); only the work changes. Tests set it low to exercise regrown windows and high to walk
    /// up to the bound at once.
    pub fn with_walk_window(mut self, bytes_per_token: usize) -> Assembler {
        self.walk_window = bytes_per_token.max(1);
        self
    }

    /// Bound the element cache to `bytes` (default [`DEFAULT_CACHE_BYTES`]): when an insertion
    /// would pass it, the cache is emptied first, so memory stays bounded whatever sections
    /// arrive. Counts stay exact; only speed changes.
    pub fn with_cache_limit(mut self, bytes: usize) -> Assembler {
        self.cache_limit = bytes;
        self
    }

    /// An assembler with exact `o200k_base` counts.
    #[cfg(feature = "tiktoken")]
    pub fn o200k() -> Assembler {
        Assembler::new(Arc::new(strata_core::TiktokenTokenizer::o200k()))
    }

    /// The tokenizer's name.
    pub fn tokenizer_name(&self) -> &str {
        self.tokenizer.name()
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        let c = self.lock();
        CacheStats {
            entries: c.elements.len() + c.texts.len() + c.over.len() + c.cuts.len(),
            bytes: c.bytes,
            ..c.stats
        }
    }

    fn hints(&self) -> std::sync::MutexGuard<'_, Hints> {
        // Hints are only where sorts start: a poisoned value is still a valid start.
        self.hints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // A poisoned cache only means another assembly panicked; its entries are still valid.
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Token and character cost of a text, cached by content hash.
    fn text_cost(&self, text: &str) -> (u64, u64) {
        self.cost_by_hash(ContentHash::of(text), text)
    }

    /// Like [`Assembler::text_cost`] when the caller already holds the text's hash.
    fn cost_by_hash(&self, h: ContentHash, text: &str) -> (u64, u64) {
        if let Some(c) = self.lock().texts.get(&h) {
            return *c;
        }
        let cost = (
            self.tokenizer.count(text) as u64,
            text.chars().count() as u64,
        );
        let mut c = self.lock();
        c.stats.tokenized_bytes += text.len() as u64;
        self.make_room(&mut c, ENTRY_OVERHEAD);
        c.bytes += ENTRY_OVERHEAD;
        c.texts.insert(h, cost);
        cost
    }

    /// Tokens of one message's framing in the OpenAI encodings' published formula: three per
    /// message plus the role name (ADR-0015).
    fn frame_msg(&self, role: &str) -> u64 {
        3 + self.text_cost(role).0
    }

    /// The cache key of `s` rendered with `enc`, cut at `cut`, in a provider frame or not.
    fn element_key(s: &Section, enc: Encoding, cut: Option<CutAt>, native: bool) -> ElementKey {
        ElementKey {
            native,
            turn: s
                .turn()
                .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
                .map(|t| (t.role, t.call_id.clone(), t.name.clone())),
            content: s.content_hash(),
            id: s.id().clone(),
            key: s.key().cloned(),
            source: s.provenance().source.clone(),
            layer: s.layer(),
            encoding: enc,
            cut,
            keep: s.keep(),
        }
    }

    /// The element text of `s` and the tokens of its message framing (0 outside provider
    /// frames). Nothing is counted but the frame's role names (cached).
    fn element_text(
        &self,
        s: &Section,
        enc: Encoding,
        cut: Option<CutAt>,
        native: bool,
    ) -> (String, u64) {
        self.element_text_of(s, s.content().as_str(), enc, cut, native)
    }

    /// [`Assembler::element_text`] of `s` written with `body` in place of its content (a head
    /// cut's walk reads a window of a long content without building a section of it).
    fn element_text_of(
        &self,
        s: &Section,
        body: &str,
        enc: Encoding,
        cut: Option<CutAt>,
        native: bool,
    ) -> (String, u64) {
        let turn = s
            .turn()
            .filter(|_| s.layer() == RuntimeLayer::WorkingMemory);
        let role = turn.map(|t| t.role);
        match (native, turn) {
            // Native turns carry their own words in their own messages (ADR-0014), with every
            // form of the wire format in them neutralised (ADR-0032); this text is what is
            // counted and sent.
            // The newest user turn cut to fit: its head, a plain note of what was left out,
            // its tail (ADR-0030).
            (true, Some(t)) if t.role == Role::User => match cut {
                Some(c) => {
                    let mut text = String::with_capacity(body.len() + 96);
                    text.push_str(&native::words(&body[..c.at]));
                    text.push_str(&native_elision(c.elided));
                    text.push_str(&native::words(&body[c.at..]));
                    (text, self.frame_msg("user"))
                }
                None => (native::words(body).into_owned(), self.frame_msg("user")),
            },
            (true, Some(t)) if t.role == Role::Assistant => (
                native::words(body).into_owned(),
                self.frame_msg("assistant"),
            ),
            (true, Some(t)) if t.role == Role::ToolCall => {
                let name = t.name.as_ref().map_or("", |n| n.as_str());
                (
                    native::arguments(body).into_owned(),
                    3 + self.text_cost(name).0 + self.frame_msg("assistant"),
                )
            }
            _ => {
                let mut text = String::with_capacity(body.len() + 160);
                let source = s.provenance().source.label();
                let header = SectionHeader {
                    layer: s.layer().into(),
                    id: s.id().as_str(),
                    key: s.key().map(SectionKey::as_str),
                    source: Some(&source),
                    cut: cut.is_some(),
                    authority: Authority::of_runtime(s.layer(), role),
                    role,
                    call: turn.and_then(|t| t.call_id.as_deref()),
                };
                match cut {
                    Some(c) => format::write_untrusted_cut(
                        &mut text,
                        &header,
                        &body[..c.at],
                        c.elided,
                        &body[c.at..],
                        c.keep,
                        enc,
                    ),
                    None => format::write_untrusted(&mut text, &header, body, enc),
                }
                let frame = if native && role == Some(Role::ToolResult) {
                    self.frame_msg("tool")
                } else {
                    0
                };
                (text, frame)
            }
        }
    }

    /// Render `s` and count it in full, cached by its key.
    fn render(
        &self,
        s: &Section,
        enc: Encoding,
        cut: Option<CutAt>,
        native: bool,
    ) -> Arc<Rendered> {
        self.render_known(s, enc, cut, native, Known::Nothing)
    }

    /// [`Assembler::render`], counting with what is `known` of a text the element shares its
    /// start with (a walk's point, [`Tokenizer::count_resumed`]) or its end with (a suffix and
    /// its count, [`Tokenizer::count_sharing_end`]; ADR-0024).
    fn render_known(
        &self,
        s: &Section,
        enc: Encoding,
        cut: Option<CutAt>,
        native: bool,
        known: Known<'_>,
    ) -> Arc<Rendered> {
        let key = Self::element_key(s, enc, cut, native);
        {
            let mut c = self.lock();
            if let Some(r) = c.elements.get(&key).cloned() {
                c.stats.hits += 1;
                return r;
            }
        }
        let (text, frame) = self.element_text(s, enc, cut, native);
        let content_tokens = match known {
            Known::Start(w, from) => self.tokenizer.count_resumed(&text, w, from),
            Known::End(w, tokens) => self.tokenizer.count_sharing_end(&text, w, tokens),
            Known::Nothing => self.tokenizer.count(&text),
        } as u64;
        self.store(key, text, content_tokens, frame)
    }

    fn store(
        &self,
        key: ElementKey,
        text: String,
        content_tokens: u64,
        frame: u64,
    ) -> Arc<Rendered> {
        let chars = text.chars().count() as u64;
        let r = Arc::new(Rendered {
            text,
            tokens: content_tokens + frame,
            chars,
            content_tokens,
        });
        let mut c = self.lock();
        c.stats.misses += 1;
        c.stats.tokenized_bytes += r.text.len() as u64;
        let size = r.text.len() + key.id.as_str().len() + ENTRY_OVERHEAD;
        self.make_room(&mut c, size);
        c.bytes += size;
        c.over.remove(&key);
        c.elements.insert(key, r.clone());
        r
    }

    /// The rendered element of `s` if it takes at most `limit` tokens, else `None`; the count
    /// stops once `limit` is passed, so an element that does not fit costs what the limit
    /// allows, not what it holds (ADR-0024). Both answers are cached.
    fn probe(&self, s: &Section, enc: Encoding, native: bool, limit: u64) -> Option<Arc<Rendered>> {
        let key = Self::element_key(s, enc, None, native);
        {
            let mut c = self.lock();
            if let Some(r) = c.elements.get(&key).cloned() {
                c.stats.hits += 1;
                return (r.tokens <= limit).then_some(r);
            }
            if c.over.get(&key).is_some_and(|over| *over >= limit) {
                c.stats.hits += 1;
                return None;
            }
        }
        // An element holds its body, written no shorter than the content, so at least
        // `bytes / longest token` tokens: content that long is over the limit unread.
        if self.certainly_over(s.content().len(), limit) {
            self.note_over(key, limit);
            return None;
        }
        if self.over_by_walk(s, enc, native, limit) {
            self.lock().stats.walked_probes += 1;
            self.note_over(key, limit);
            return None;
        }
        let (text, frame) = self.element_text(s, enc, None, native);
        let counted = limit.checked_sub(frame).and_then(|room| {
            self.tokenizer
                .count_up_to(&text, usize::try_from(room).unwrap_or(usize::MAX))
        });
        match counted {
            Some(n) => Some(self.store(key, text, n as u64, frame)),
            None => {
                self.note_over(key, limit);
                None
            }
        }
    }

    /// Whether the element of `s` is over `limit` tokens, known from a walk of a window of it
    /// (`limit` times the head cut's first window, in bytes of content) without writing the
    /// rest: the longest prefix of the walk within the limit less the framing ends, with room
    /// for what the tokenizer reads past it, inside the part of the window written as the
    /// whole element writes it; that prefix is then the whole element's too, and being shorter
    /// than the element it says the element is over (ADR-0024, amended). Only for escaped or
    /// datamarked content more than twice the window long, with a tokenizer whose prefix looks
    /// a bounded way ahead; `false` (not known) otherwise, and when the prefix reaches further:
    /// then the element is written and counted up to the limit, as before. Escaped content of
    /// separate words rarely gets here (its words bound it first); datamarked content, whose
    /// marks join the words, and dense text do.
    #[inline(never)]
    fn over_by_walk(&self, s: &Section, enc: Encoding, native: bool, limit: u64) -> bool {
        // Most sections are shorter than the window: one comparison, before anything else.
        let window = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_mul(self.walk_window);
        if s.content().len() / 2 <= window || !matches!(enc, Encoding::Escaped | Encoding::Datamark)
        {
            return false;
        }
        let Some(look_ahead) = self.tokenizer.prefix_look_ahead() else {
            return false;
        };
        if window >= self.walk_bound(limit).unwrap_or(usize::MAX) {
            return false;
        }
        let empty = self.render(&s.with_content(""), enc, None, native);
        let frame = empty.tokens - empty.content_tokens;
        let Some(room) = limit.checked_sub(frame) else {
            return false;
        };
        let Some(w) = self.element_walk(s, &empty.text, enc, native, limit, window, false) else {
            return false;
        };
        // A walk that read up to the bound is not written as the whole element near its end.
        if w.window == usize::MAX {
            return false;
        }
        let start = strata_core::Prefix { len: 0, tokens: 0 };
        let (p, _) =
            self.tokenizer
                .prefix_from(&w.text, usize::try_from(room).unwrap_or(usize::MAX), start);
        w.settles(p.len, look_ahead)
    }

    /// Remember that the element of `key` takes more than `limit` tokens.
    fn note_over(&self, key: ElementKey, limit: u64) {
        let mut c = self.lock();
        c.stats.probed_over += 1;
        let size = key.id.as_str().len() + ENTRY_OVERHEAD;
        self.make_room(&mut c, size);
        c.bytes += size;
        let over = c.over.entry(key).or_insert(0);
        *over = (*over).max(limit);
    }

    /// Whether an element whose body holds `bytes` bytes of content takes more than `limit`
    /// tokens, known from the length alone: every encoding writes the body no shorter than the
    /// content, and no token covers more than the tokenizer's longest (ADR-0024).
    fn certainly_over(&self, bytes: usize, limit: u64) -> bool {
        self.tokenizer
            .longest_token_bytes()
            .is_some_and(|l| (bytes / l.max(1)) as u64 > limit)
    }

    /// Bytes of content that a walk for a head cut within `max_tokens` reads at most: more than
    /// any prefix within the budget can cover (`max_tokens + 2` longest tokens), plus room for
    /// what the tokenizer looks at past its last piece; `None` without a bound (ADR-0024).
    fn walk_bound(&self, max_tokens: u64) -> Option<usize> {
        let l = self.tokenizer.longest_token_bytes()?;
        usize::try_from(max_tokens.saturating_add(2))
            .ok()?
            .checked_mul(l.max(1))?
            .checked_add(4 * WALK_KEPT_PAST)
    }

    /// A lower bound of the tokens of any element of `layer` in encoding `enc`: the count of
    /// the smallest fenced element (one-letter id, no key, empty body) less a margin for
    /// merges at the edges of longer fields, or the framing alone for native turns. Used only
    /// to skip units that cannot fit without rendering them; a bound that is too high could only
    /// leave room unfilled, never pass the budget, since what is kept is always counted.
    fn floor(&self, layer: RuntimeLayer, enc: Encoding, native: bool) -> u64 {
        if native && layer == RuntimeLayer::WorkingMemory {
            return 3;
        }
        if let Some(f) = self.lock().floors.get(&(layer, enc, native)) {
            return *f;
        }
        let mut text = String::new();
        let header = SectionHeader {
            source: Some("store"),
            authority: Authority::of_runtime(layer, None),
            ..SectionHeader::new(layer.into(), "a")
        };
        format::write_untrusted(&mut text, &header, "", enc);
        let f = (self.tokenizer.count(&text) as u64).saturating_sub(FLOOR_MARGIN);
        self.lock().floors.insert((layer, enc, native), f);
        f
    }

    /// Empty the cache if adding `size` bytes would pass the limit.
    fn make_room(&self, c: &mut Cache, size: usize) {
        if c.bytes + size > self.cache_limit {
            tracing::debug!(
                bytes = c.bytes,
                limit = self.cache_limit,
                "element cache emptied"
            );
            c.elements.clear();
            c.texts.clear();
            c.over.clear();
            c.cuts.clear();
            c.walks.clear();
            c.floors.clear();
            c.bytes = 0;
            c.stats.evictions += 1;
            self.whole.clear();
        }
    }

    /// Cut `s` so that its rendered element takes at most `max_tokens`, keeping the end its
    /// [`Keep`] names; `None` if even an empty body does not fit. Cached by the whole section
    /// and the limit, so an unchanged section cut to the same room costs a lookup (ADR-0024).
    fn cut_to(&self, s: &Section, enc: Encoding, max_tokens: u64, native: bool) -> Option<Cutting> {
        if native && !select::cuttable_natively(s) {
            return None;
        }
        self.cut_section(s, enc, max_tokens, native)
    }

    /// [`Assembler::cut_to`] without asking whether a native turn may be cut: for the newest
    /// user turn, which a provider request carries cut rather than not at all (ADR-0030).
    fn cut_section(
        &self,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<Cutting> {
        let whole = Self::element_key(s, enc, None, native);
        let cache_key = (whole, max_tokens);
        {
            let mut c = self.lock();
            if let Some(hit) = c.cuts.get(&cache_key).cloned() {
                c.stats.cut_hits += 1;
                return Some(hit);
            }
        }
        let text = s.content().as_str();
        let keep = s.keep();
        let bound = CutAt {
            keep,
            at: 0,
            elided: text.len() as u64,
        };
        // The element with an empty body: its cost bounds the cut, and its text (cached) gives
        // where a walked element's body starts.
        let empty = self.render(&s.with_content(""), enc, Some(bound), native);
        let overhead = empty.tokens;
        if overhead >= max_tokens {
            return None;
        }
        let mut allow = (max_tokens - overhead) as usize;
        // Where the next, smaller, head search may start: the walk before it is not repeated.
        let mut resume = strata_core::Prefix { len: 0, tokens: 0 };
        // An escaped or datamarked head cut walks the element it becomes, written with its
        // whole body (up to the body's end), so the cut element is then counted only from the
        // walk's last resume point, not in full; the kept text is tokenized about once
        // (ADR-0024; datamarked too since its amendment: datamarking writes each space of the
        // escaping as a mark, which maps back by counting the marks, `format::escaped_len`).
        // Base64 rewrites the whole text, so its cuts search the content as offered.
        let escaping = matches!(enc, Encoding::Escaped | Encoding::Datamark);
        // Windows only where the tokenizer's prefix depends on a bounded stretch past its end;
        // otherwise the walk reads up to the bound at once.
        let first_window = match self.tokenizer.prefix_look_ahead() {
            Some(_) => usize::try_from(max_tokens)
                .unwrap_or(usize::MAX)
                .saturating_mul(self.walk_window),
            None => usize::MAX,
        };
        let mut walk = (keep == Keep::Head && escaping)
            .then(|| self.element_walk(s, &empty.text, enc, native, max_tokens, first_window, true))
            .flatten();
        // The walk of this section's last cut: where its element starts with the same bytes
        // (a turn that grew at its end), the walk resumes there (ADR-0024).
        let mut prior = None;
        if let Some(w) = &walk {
            allow = w.allow;
            let mut c = self.lock();
            prior = c.walks.remove(s.id());
            if let Some((t, _)) = &prior {
                c.bytes = c.bytes.saturating_sub(walk_size(s.id(), t));
            }
        }
        // An escaped (or datamarked) tail cut searches the end of the element it becomes (a window
        // at the end of the content, encoded, then the element's end), and the cut element is
        // counted from that search, only up to where their pieces line up: the kept text is
        // tokenized about once (ADR-0024, amended). The first window is about five eighths of a
        // head cut's (five bytes of content per token for the default of eight): the search splits
        // only what it needs of it, but the whole window is escaped; a window too small for the
        // tail is walked again four times larger.
        let tail_window = usize::try_from(max_tokens)
            .unwrap_or(usize::MAX)
            .saturating_mul(self.walk_window.div_ceil(2) + 1);
        let mut tail = (keep == Keep::Tail && escaping)
            .then(|| self.tail_walk(s, &empty, enc, max_tokens, tail_window))
            .flatten();
        let mut tail_allow = tail.as_ref().map_or(0, |w| w.allow);
        let look_ahead = self.tokenizer.prefix_look_ahead().unwrap_or(0);
        let mut tries = 0;
        while tries < 16 {
            // The tail search's answer: where the kept tail starts in the content, and the end
            // of the walk it keeps with that end's exact count.
            let mut known_end = None;
            if let (Keep::Tail, Some(w)) = (keep, &tail) {
                let p = self.tokenizer.suffix(&w.text, tail_allow);
                let st = w.text.len() - p.len;
                if st == 0 && w.start > 0 {
                    // All of the window fits: walk one four times larger.
                    let larger = w.window.saturating_mul(4);
                    self.lock().stats.walk_regrowths += 1;
                    tail = self.tail_walk(s, &empty, enc, max_tokens, larger);
                    continue;
                }
                let Some(body) = format::escaped_len(&w.text, st.min(w.body_len), enc) else {
                    // Not reached (a piece boundary is a character boundary): the content as
                    // offered is searched then.
                    tail = None;
                    continue;
                };
                known_end = Some((
                    w.start + format::escaped_prefix_len(&text[w.start..], body),
                    st,
                    p.tokens,
                ));
            }
            let (head, tail_start) = match (keep, &walk, known_end) {
                (Keep::Tail, _, Some((at, _, _))) => (0, at),
                (Keep::Head, Some(w), _) => {
                    let (p, next) = match &prior {
                        Some((before, from)) => {
                            self.tokenizer.prefix_after(&w.text, allow, before, *from)
                        }
                        None => self.tokenizer.prefix_from(&w.text, allow, resume),
                    };
                    if !w.settles(p.len, look_ahead) {
                        // The prefix reaches where the window may be written, or split,
                        // otherwise than the whole content: walk a window four times larger
                        // (up to the bound at once when the window holds no line break), from
                        // its start; the last cut's walk is still offered to it.
                        let window = if w.stable > w.body_start {
                            w.window.saturating_mul(4)
                        } else {
                            usize::MAX
                        };
                        self.lock().stats.walk_regrowths += 1;
                        match self.element_walk(
                            s,
                            &empty.text,
                            enc,
                            native,
                            max_tokens,
                            window,
                            true,
                        ) {
                            Some(larger) => walk = Some(larger),
                            None => {
                                // Not reached (the element's opening does not depend on its
                                // body); the content itself is walked then, with its room.
                                walk = None;
                                allow = (max_tokens - overhead) as usize;
                            }
                        }
                        resume = strata_core::Prefix { len: 0, tokens: 0 };
                        continue;
                    }
                    if let Some((before, from)) = prior.take() {
                        if self.tokenizer.resumes(&w.text, &before, from) {
                            self.lock().stats.resumed_cuts += 1;
                        }
                    }
                    resume = next;
                    let body = p.len.saturating_sub(w.body_start);
                    let body = format::escaped_len(&w.text[w.body_start..], body, enc)
                        .expect("a prefix ends on a character boundary");
                    (format::escaped_prefix_len(text, body), text.len())
                }
                (Keep::Head, None, _) => {
                    let (p, next) = self.tokenizer.prefix_from(text, allow, resume);
                    resume = next;
                    (p.len, text.len())
                }
                (Keep::Tail, _, None) => (0, text.len() - self.tokenizer.suffix(text, allow).len),
                (Keep::Both, _, _) => {
                    let h = self.tokenizer.prefix(text, allow / 2);
                    let rest = &text[h.len..];
                    let t = self.tokenizer.suffix(rest, allow - h.tokens);
                    (h.len, text.len() - t.len)
                }
            };
            let mut kept = String::with_capacity(head + text.len() - tail_start);
            kept.push_str(&text[..head]);
            kept.push_str(&text[tail_start..]);
            let cut = s.with_content(kept);
            let at = CutAt {
                keep,
                at: head,
                elided: (tail_start - head) as u64,
            };
            let known = match (known_end, &tail, &walk) {
                (Some((_, st, tokens)), Some(w), _) => Known::End(&w.text[st..], tokens),
                (_, _, Some(w)) => Known::Start(&w.text, resume),
                _ => Known::Nothing,
            };
            let r = self.render_known(&cut, enc, Some(at), native, known);
            if r.tokens <= max_tokens {
                let mut c = self.lock();
                let size = ENTRY_OVERHEAD + cache_key.0.id.as_str().len();
                self.make_room(&mut c, size);
                c.bytes += size;
                let done = Cutting {
                    section: cut,
                    rendered: r,
                    at,
                };
                c.cuts.insert(cache_key, done.clone());
                // Only the bytes a later walk compares are kept: the walked text up to a
                // little past the resume point (none when the walk offered no point).
                if let Some(mut w) = walk.filter(|_| resume.len > 0) {
                    let mut keep = (resume.len + WALK_KEPT_PAST).min(w.text.len());
                    while !w.text.is_char_boundary(keep) {
                        keep += 1;
                    }
                    w.text.truncate(keep);
                    w.text.shrink_to_fit();
                    let size = walk_size(s.id(), &w.text);
                    if size <= self.cache_limit / 8 {
                        self.make_room(&mut c, size);
                        c.bytes += size;
                        if let Some((old, _)) = c.walks.insert(s.id().clone(), (w.text, resume)) {
                            // Another thread cut the same id meanwhile: its entry is replaced.
                            c.bytes = c.bytes.saturating_sub(walk_size(s.id(), &old));
                        }
                    }
                }
                return Some(done);
            }
            let excess = (r.tokens - max_tokens) as usize;
            if known_end.is_some() {
                if tail_allow == 0 {
                    return None;
                }
                tail_allow = tail_allow.saturating_sub(excess.max(1));
                tries += 1;
                continue;
            }
            if allow == 0 {
                return None;
            }
            allow = allow.saturating_sub(excess.max(1));
            tries += 1;
        }
        None
    }

    /// The text a tail cut of `s` searches: the last `window` bytes of its content (from the line
    /// that holds the window's first byte, when that line starts within [`TAIL_LINE_SEARCH`] bytes
    /// before it), encoded for `enc` (escaped, or datamarked), then the end every cut element has;
    /// the tokens the search may keep, the budget of an element of `max_tokens` less its framing
    /// and its opening (written for the longest elision, which bounds the others). `None` where the
    /// element does not end that way. `empty` is the cut element of `s` with an empty body. Where
    /// the window starts only changes the work: the cut element is counted exactly, from the search
    /// only where their pieces line up (ADR-0024, amended).
    fn tail_walk(
        &self,
        s: &Section,
        empty: &Rendered,
        enc: Encoding,
        max_tokens: u64,
        window: usize,
    ) -> Option<TailWalk> {
        let content = s.content().as_str();
        let open = empty.text.strip_suffix(format::UNTRUSTED_END)?;
        let frame = empty.tokens.saturating_sub(empty.content_tokens);
        let allow = max_tokens.checked_sub(frame + self.text_cost(open).0)?;
        let mut start = content.len().saturating_sub(window);
        while !content.is_char_boundary(start) {
            start -= 1;
        }
        if start > 0 {
            let mut from = start.saturating_sub(TAIL_LINE_SEARCH);
            while !content.is_char_boundary(from) {
                from -= 1;
            }
            if let Some(i) = content[from..start].rfind('\n') {
                start = from + i + 1;
            }
        }
        let mut text = format::encode_untrusted(&content[start..], enc);
        let body_len = text.len();
        text.push_str(format::UNTRUSTED_END);
        Some(TailWalk {
            text,
            start,
            body_len,
            allow: usize::try_from(allow).unwrap_or(usize::MAX),
            window,
        })
    }

    /// The text a head cut of `s` walks: its element as a cut writes it (`as_cut`; otherwise
    /// whole, as a probe of the whole section reads it), with the whole body and without the
    /// end that follows the body, where the body starts, and the budget of a walk over it for
    /// an element of `max_tokens` (less the framing and the end). `None` where the element is
    /// not written that way (then the cut walks the content as offered). `empty` is the text of
    /// that element of `s` with an empty body: its opening, then its end.
    #[allow(clippy::too_many_arguments)]
    fn element_walk(
        &self,
        s: &Section,
        empty: &str,
        enc: Encoding,
        native: bool,
        max_tokens: u64,
        window: usize,
        as_cut: bool,
    ) -> Option<ElementWalk> {
        // Only as much of a long body as a walk within the budget can read: every prefix
        // longer than the bound is over it, so the walk reads no further, and its cost follows
        // the budget, not the content (ADR-0024). Within the bound, a window of the content is
        // walked first (`window` bytes): the prefix it gives is the whole content's when it
        // ends within the window's complete lines, since the escaping looks ahead only within a
        // line; the caller walks a larger window otherwise. At the bound, a line that crosses
        // it may be written otherwise from its start (a line of only `=` up to the bound),
        // which can move the cut but not past the budget: the cut element is always counted
        // exactly.
        let content = s.content().as_str();
        let bound = self.walk_bound(max_tokens).unwrap_or(usize::MAX);
        let (mut end, window) = if window >= bound {
            (bound, usize::MAX)
        } else {
            (window, window)
        };
        let whole_content = end >= content.len();
        if whole_content {
            end = content.len();
        }
        while !content.is_char_boundary(end) {
            end += 1;
        }
        let body = &content[..end];
        let whole = CutAt {
            keep: Keep::Head,
            at: body.len(),
            elided: 0,
        };
        let (mut text, frame) = self.element_text_of(s, body, enc, as_cut.then_some(whole), native);
        let open = empty.strip_suffix(format::UNTRUSTED_END)?;
        if !text.starts_with(open) || !text.ends_with(format::UNTRUSTED_END) {
            return None;
        }
        text.truncate(text.len() - format::UNTRUSTED_END.len());
        let end_cost = self.text_cost(format::UNTRUSTED_END).0;
        let allow = max_tokens.saturating_sub(frame + end_cost);
        // A line break is written as itself and nothing else is written as one, so the walk's
        // last line break ends the last line the window holds whole; the run of whitespace it
        // ends may go on past the window, so what is stable stops where that run starts. The
        // window's last line, which goes on past it, is relied on too where its start is
        // decided (`format::line_start_decided`): up to its last bytes, which may be written
        // otherwise once more of the line is read (each byte of content takes at most
        // `format::ESCAPED_PER_BYTE` bytes written), and before any run of whitespace there
        // (amended again: a window inside one long line, such as minified JSON, used to be
        // walked up to the bound at once).
        let (window, stable) = if whole_content || window == usize::MAX {
            (usize::MAX, text.len())
        } else {
            let body_text = &text[open.len()..];
            let mut stable = body_text.rfind('\n').map_or(open.len(), |at| {
                open.len() + body_text[..at].trim_end_matches(char::is_whitespace).len()
            });
            let last_line = &body[body.rfind('\n').map_or(0, |at| at + 1)..];
            if format::line_start_decided(last_line) {
                let mut within = text
                    .len()
                    .saturating_sub(format::ESCAPE_LOOK_AHEAD * format::ESCAPED_PER_BYTE);
                while !text.is_char_boundary(within) {
                    within -= 1;
                }
                let within = text[..within].trim_end_matches(char::is_whitespace).len();
                stable = stable.max(within);
            }
            (window, stable)
        };
        Some(ElementWalk {
            text,
            body_start: open.len(),
            allow: usize::try_from(allow).unwrap_or(usize::MAX),
            stable,
            window,
        })
    }

    /// Estimated tokens of one tool definition: its name, description and canonical schema
    /// plus a fixed allowance for the provider's wrapping (providers do not publish it).
    fn tool_cost(&self, t: &RequestTool) -> u64 {
        TOOL_FRAME
            + self.text_cost(t.name.as_str()).0
            + self.text_cost(&t.description).0
            + self.text_cost(t.parameters.as_json()).0
    }

    /// Assemble the context of one request (ADR-0006, ADR-0007, ADR-0008, ADR-0009, ADR-0013).
    pub fn assemble(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
    ) -> Result<AssembledContext, AssembleError> {
        let span = tracing::debug_span!(
            "assemble",
            agent = agent.agent_id(),
            sections = req.sections.len()
        );
        let _g = span.enter();
        // An agent past its validity assembles nothing, whenever it was loaded (ADR-0017).
        if let Some(now_ms) = req.now_ms {
            let policy = agent.loaded_under();
            policy.warn_if_weakened("assembling");
            if policy != strata_agentdef::Expiry::IgnoreDangerously {
                agent
                    .check_valid_at(policy.instant(now_ms.div_euclid(1000)))
                    .map_err(|e| AssembleError::AgentNotValid(e.to_string()))?;
            }
        }
        // The same request as the one kept, to the byte: its result again (ADR-0024).
        let fingerprint = match self.whole.get(agent, req) {
            Ok(out) => {
                self.lock().stats.assembly_hits += 1;
                return Ok(out);
            }
            Err(fingerprint) => fingerprint,
        };
        let out = self.assemble_stages(agent, req)?;
        self.whole
            .note(agent, req, fingerprint, &out, self.cache_limit);
        Ok(out)
    }

    /// The stages of one assembly, from the budget to the report.
    fn assemble_stages(
        &self,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
    ) -> Result<AssembledContext, AssembleError> {
        let (budget, tier) = req
            .budget
            .as_ref()
            .unwrap_or(&BudgetSpec::AgentDefault)
            .resolve(agent.budget());
        budget.validate()?;
        // Taken first, so that what the last output held besides its entries is released
        // before this call allocates its own.
        let last_entries = self.last_entries();
        let native = req.provider;
        let opts = &req.provider_options;
        let prompt_budget = u64::from(budget.prompt_tokens());
        // Without a public tokenizer, the budget is fitted to the count plus the margin.
        let margin = match native {
            Some(p) if !p.tokenizer_is_public() => opts.estimate_margin_pct,
            _ => 0,
        };
        let fit_budget = prompt_budget * 100 / (100 + u64::from(margin));
        let max_chars = budget.max_total_chars.map(|c| c as u64);

        // Layers 1-2: copied, never trimmed (I1, I2).
        let identity_text = agent.identity_text();
        // The identity digest is the BLAKE3 of exactly these bytes: no need to hash them again.
        let (id_tokens, id_chars) = self.cost_by_hash(agent.identity_digest(), identity_text);
        if id_tokens > fit_budget {
            return Err(AssembleError::IdentityExceedsBudget {
                agent: agent.agent_id().to_owned(),
                needed: id_tokens,
                budget: fit_budget,
            });
        }
        if let Some(mc) = max_chars.filter(|mc| id_chars > *mc) {
            return Err(AssembleError::CharsExceeded {
                needed: id_chars,
                limit: mc,
            });
        }

        // Tools: capabilities only narrow (I4, ADR-0007); schemas pinned (ADR-0015).
        let (tools_report, catalog, request_tools) = select::narrow_tools(agent, req);
        // The catalog's id and key belong to the assembler: a runtime section claiming either
        // is left out and reported, whatever its priority (I4). For a provider request the
        // tools travel in the request's own field, so no catalog section is written.
        let mut reserved = Vec::new();
        let mut input: Vec<&Section> = Vec::with_capacity(req.sections.len() + 1);
        for s in &req.sections {
            if s.id().as_str() == TOOL_CATALOG_ID
                || s.key().is_some_and(|k| k.as_str() == TOOL_CATALOG_KEY)
            {
                reserved.push(report_of(
                    s,
                    false,
                    SectionStatus::Filtered {
                        reason: FilterReason::Reserved,
                    },
                ));
            } else {
                input.push(s);
            }
        }
        let catalog = catalog.filter(|_| native.is_none());
        if let Some(c) = &catalog {
            input.push(c);
        }
        // The fixed cost of a provider frame: the system message, the reply priming, the tool
        // definitions and the framing of the two context messages (an upper bound).
        let (system_frame, tool_tokens) = match native {
            None => (0, 0),
            Some(_) => {
                let role = match opts.system_role {
                    crate::provider::SystemRole::System => "system",
                    crate::provider::SystemRole::Developer => "developer",
                };
                let tools: u64 = request_tools.iter().map(|t| self.tool_cost(t)).sum();
                (self.frame_msg(role) + 3, tools)
            }
        };
        let context_frames = if native.is_some() {
            2 * self.frame_msg("user")
        } else {
            0
        };
        let framed_identity = id_tokens + system_frame + context_frames;
        if framed_identity > fit_budget {
            return Err(AssembleError::IdentityExceedsBudget {
                agent: agent.agent_id().to_owned(),
                needed: framed_identity,
                budget: fit_budget,
            });
        }
        // Tool definitions that do not fit are the tools' failure, named as such (ADR-0032).
        if framed_identity + tool_tokens > fit_budget {
            return Err(AssembleError::ToolsExceedBudget {
                tools: request_tools.iter().map(|t| t.name.clone()).collect(),
                needed: tool_tokens,
                available: fit_budget - framed_identity,
                budget: fit_budget,
            });
        }
        let base_tokens = framed_identity + tool_tokens;

        // The stages, each with a typed hand-off (see ARCHITECTURE.md).
        let Selected {
            winners,
            mut reports,
            conflicts,
            ids_known,
        } = {
            let mut hint = std::mem::take(&mut self.hints().select);
            let selected = select::select(agent, req, input, &mut hint);
            self.hints().select = hint;
            selected?
        };
        reports.extend(reserved);
        if ids_known {
            self.lock().stats.known_ids += 1;
        }
        let mut measured = self.measure(winners, req);
        let Fitted {
            drops,
            dropped_bytes,
            mut dropped_reason,
        } = self.fit(
            &mut measured,
            req,
            &budget,
            &Limits {
                fit_budget,
                max_chars,
                base: (base_tokens, id_chars),
            },
        )?;
        let Measured {
            cands, mut units, ..
        } = measured;

        // Output order: layer, stable before dynamic, phase, then chronology for turns and
        // score for the rest, then the canonical order of selection (ADR-0007, ADR-0013).
        let mut kept: Vec<usize> = (0..cands.len())
            .filter(|c| !units[cands[*c].unit].dropped)
            .collect();
        // Keys are computed once per section and hold no strings (linear cost, ADR-0024).
        kept.sort_by_cached_key(|c| order_key(cands[*c].section(), *c));

        let laid = match native {
            Some(provider) => {
                let p = self.place(
                    provider,
                    opts,
                    identity_text,
                    (system_frame + id_tokens, tool_tokens),
                    request_tools,
                    &cands,
                    &kept,
                    &mut units,
                    &mut dropped_reason,
                    (drops, dropped_bytes),
                )?;
                let identity_end = Breakpoint {
                    byte: identity_text.len(),
                    token: id_tokens,
                    after_layer: Layer::Characteristics,
                };
                Laid {
                    text: identity_text.to_owned(),
                    tokens: p.total,
                    chars: id_chars + p.chars,
                    stable_prefix: identity_end,
                    breakpoints: vec![identity_end],
                    layer_out: p.layer_out,
                    kept_n: p.kept_n,
                    cut_n: p.cut_n,
                    conversation: Some(p.conversation),
                }
            }
            None => self.layout_text(
                identity_text,
                (id_tokens, id_chars),
                &cands,
                &kept,
                (drops, dropped_bytes),
            ),
        };
        let Laid {
            text,
            tokens: tokens_so_far,
            chars: chars_so_far,
            stable_prefix,
            breakpoints,
            layer_out,
            kept_n,
            cut_n,
            conversation: placed,
        } = laid;
        // Finish the report, in report order: the kept sections in output order, then the
        // other candidates in the canonical order of selection, then the sections filtered
        // before it, by layer and id (few; no other string is sorted per call). Each entry is
        // written once, where it belongs.
        let mut why_of: Vec<Option<DropReason>> = vec![None; cands.len()];
        for (u, why) in dropped_reason
            .iter()
            .enumerate()
            .filter_map(|(u, w)| w.map(|w| (u, w)))
        {
            for &m in &units[u].members {
                why_of[m] = Some(why);
            }
        }
        let cand_parts = |c: usize| cand_parts(&cands, &units, &why_of, c);
        let cand_report = |c: usize| {
            let (s, sticky, status, measured) = cand_parts(c);
            entry_of(s, sticky, status, measured)
        };
        let mut in_output = vec![false; cands.len()];
        for &c in &kept {
            in_output[c] = true;
        }
        let rest: Vec<usize> = (0..cands.len()).filter(|c| !in_output[*c]).collect();
        reports.sort_by(|a, b| (a.layer, &a.id).cmp(&(b.layer, &b.id)));
        let mut sections = last_entries;
        if sections.is_empty() {
            sections.reserve_exact(cands.len() + reports.len());
            // Written straight into the list, not built and then moved (entries are large);
            // from slices, so the list grows once and each entry is written in place.
            sections.extend(kept.iter().map(|&c| cand_report(c)));
            sections.extend(rest.iter().map(|&c| cand_report(c)));
            sections.extend(reports);
        } else {
            // The last report's entries, position by position: one equal to the entry this
            // call would write is left as it is (no reference count taken, none released),
            // any other is written over; the list is then cut or extended to this report.
            sections.truncate(kept.len() + rest.len() + reports.len());
            let mut reused = 0u64;
            let mut at = 0;
            for c in kept.iter().chain(&rest).copied() {
                match sections.get_mut(at) {
                    Some(old) => {
                        let (s, sticky, status, measured) = cand_parts(c);
                        if entry_is(old, s, sticky, &status, measured) {
                            reused += 1;
                        } else {
                            *old = entry_of(s, sticky, status, measured);
                        }
                    }
                    None => sections.push(cand_report(c)),
                }
                at += 1;
            }
            for r in reports {
                match sections.get_mut(at) {
                    // The same provenance allocation, as for the candidates' entries.
                    Some(old) if Arc::ptr_eq(&old.provenance, &r.provenance) && *old == r => {
                        reused += 1
                    }
                    Some(old) => *old = r,
                    None => sections.push(r),
                }
                at += 1;
            }
            self.lock().stats.reused_entries += reused;
        }
        // Sections and bytes dropped per layer, in one pass over the units.
        let mut dropped_per_layer = PerLayer::splat((0usize, 0u64));
        for u in units.iter().filter(|u| u.dropped) {
            let d = &mut dropped_per_layer[u.layer];
            d.0 += u.members.len();
            d.1 += u.bytes;
        }
        let dropped_any = dropped_per_layer.values().any(|d| d.0 > 0);
        let layers = dropped_per_layer
            .iter()
            .map(|(l, d)| LayerReport {
                layer: l.into(),
                tokens: layer_out[l],
                budget: budget.layers.get(l).map(u64::from),
                kept: kept_n[l],
                cut: cut_n[l],
                dropped: d.0,
                dropped_bytes: d.1,
            })
            .collect();
        let request = placed.as_ref().map(|c| {
            let model = opts.model.as_deref();
            let min = opts
                .min_cacheable_tokens
                .unwrap_or_else(|| crate::provider::min_cacheable_tokens(c.provider, model));
            let framed_tools = c.messages.iter().any(|m| {
                m.blocks
                    .iter()
                    .any(|b| !matches!(b, crate::provider::Block::Text { .. }))
            });
            let exact = c.provider.tokenizer_is_public() && c.tools.is_empty() && !framed_tools;
            RequestReport {
                provider: c.provider.name().to_owned(),
                count: if exact { "exact" } else { "estimate" }.to_owned(),
                system_tokens: c.system_tokens,
                tool_tokens: c.tool_tokens,
                message_tokens: c.messages.iter().map(|m| m.tokens).sum(),
                margin_pct: margin,
                total_tokens: tokens_so_far,
                messages: c.messages.len(),
                stable_prefix_tokens: c.stable_prefix_tokens(),
                expected_cached_tokens: c.expected_cached_tokens(model),
                min_cacheable_tokens: min,
            }
        });
        tracing::debug!(tokens = tokens_so_far, budget = prompt_budget, "assembled");
        let out = AssembledContext::new(Contents {
            serial: crate::output::next_serial(),
            identity_digest: agent.identity_digest(),
            tools: tools_report.effective.clone(),
            report: Report {
                agent_id: agent.agent_id().to_owned(),
                identity_digest: agent.identity_digest().to_string(),
                tokenizer: self.tokenizer.name().to_owned(),
                tier,
                total_tokens: u64::from(budget.total_tokens),
                response_reserve: u64::from(budget.response_reserve),
                prompt_budget,
                used_tokens: tokens_so_far,
                idle_tokens: if dropped_any {
                    prompt_budget.saturating_sub(tokens_so_far)
                } else {
                    0
                },
                chars: chars_so_far,
                max_total_chars: max_chars,
                identity_tokens: id_tokens,
                stable_prefix,
                breakpoints,
                layers,
                sections,
                conflicts,
                tools: tools_report,
                request,
                omissions: req.omissions.clone(),
            },
            text,
            conversation: placed,
        });
        self.keep_last(&out, req.sections.len());
        Ok(out)
    }

    /// Keep `out` for the next call, whose report may be written over this one's once the
    /// caller has let go of it, if it fits in the cache limit (counted as the kept whole
    /// assembly is).
    fn keep_last(&self, out: &AssembledContext, sections: usize) {
        let size = out.text().len() + whole::PER_SECTION * (sections + 1);
        self.hints().last = (size <= self.cache_limit).then(|| out.clone());
    }

    /// The entries of the last output's report, if its caller has let go of it (empty
    /// otherwise): the rest of that output is released here.
    fn last_entries(&self) -> Vec<SectionReport> {
        let last = self.hints().last.take();
        match last {
            Some(mut out) => Arc::get_mut(&mut out.inner)
                .map(|c| std::mem::take(&mut c.report.sections))
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

/// The output order of candidate `idx`: layer, stability, phase, turn chronology, score, then
/// the candidate's index, which follows the canonical order of selection (equal scores by id
/// and content hash), so no string is compared.
fn order_key(
    s: &Section,
    idx: usize,
) -> (RuntimeLayer, Stability, Phase, u64, Reverse<u64>, usize) {
    let seq = s
        .turn()
        .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
        .map_or(0, |t| t.seq);
    (
        s.layer(),
        s.stability(),
        s.phase(),
        seq,
        Reverse(s.score()),
        idx,
    )
}

/// An omission marker for `count` units of `l` holding `bytes` bytes of content (ADR-0024).
fn marker_text(l: RuntimeLayer, count: u64, bytes: u64) -> String {
    let mut m = String::new();
    let what = if count == 1 {
        "1 section".to_owned()
    } else {
        format!("{count} sections")
    };
    format::write_omitted(&mut m, l.into(), &what, "budget", bytes);
    m
}

fn report_of(s: &Section, sticky: bool, status: SectionStatus) -> SectionReport {
    entry_of(s, sticky, status, (0, 0, false))
}

/// A report entry with its tokens, characters and whether it filled the budget.
#[inline(always)]
fn entry_of(
    s: &Section,
    sticky: bool,
    status: SectionStatus,
    (tokens, chars, filled): (u64, u64, bool),
) -> SectionReport {
    SectionReport {
        id: s.id().clone(),
        layer: s.layer().into(),
        tokens,
        chars,
        bytes: s.content().as_str().len() as u64,
        filled,
        role: s
            .turn()
            .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
            .map(|t| t.role),
        sticky,
        stable: s.stability() == Stability::Stable,
        status,
        provenance: s.provenance_shared().clone(),
    }
}

/// What the report entry of candidate `c` is made of: its section as offered, whether it is
/// sticky, its status, and its tokens, characters and whether it filled the budget.
#[inline(always)]
fn cand_parts<'s>(
    cands: &'s [Cand<'_>],
    units: &[Unit],
    why_of: &[Option<DropReason>],
    c: usize,
) -> (&'s Section, bool, SectionStatus, (u64, u64, bool)) {
    let cand = &cands[c];
    let status = match (why_of[c], &cand.cut) {
        (Some(why), _) => SectionStatus::Dropped { reason: why },
        (None, Some(cut)) => {
            let kept = cand.section().content().len() as u64;
            let head = cut.at.at as u64;
            SectionStatus::Cut {
                full_tokens: cut.full,
                head_bytes: head,
                tail_bytes: kept - head,
            }
        }
        (None, None) => SectionStatus::Kept,
    };
    // Built in one piece, so the entry is written once, where it goes.
    let measured = match why_of[c] {
        Some(_) => (0, 0, false),
        None => (
            cand.rendered().tokens,
            cand.rendered().chars,
            units[cand.unit].filled,
        ),
    };
    (cand.base.get(), cand.sticky, status, measured)
}

/// Whether `e` is the entry [`entry_of`] would write for these arguments: every field equal,
/// and the provenance the section's own allocation (compared by address, so that a reused
/// entry shares it exactly as a new one would). Written out field by field, so a field added
/// to the entry must be considered here to compile.
#[inline(always)]
fn entry_is(
    e: &SectionReport,
    s: &Section,
    sticky: bool,
    status: &SectionStatus,
    (tokens, chars, filled): (u64, u64, bool),
) -> bool {
    let SectionReport {
        id: e_id,
        layer: e_layer,
        tokens: e_tokens,
        chars: e_chars,
        bytes: e_bytes,
        filled: e_filled,
        role: e_role,
        sticky: e_sticky,
        stable: e_stable,
        status: e_status,
        provenance: e_provenance,
    } = e;
    Arc::ptr_eq(e_provenance, s.provenance_shared())
        && *e_tokens == tokens
        && *e_chars == chars
        && *e_filled == filled
        && *e_sticky == sticky
        && same_status(e_status, status)
        && *e_bytes == s.content().as_str().len() as u64
        && *e_layer == Layer::from(s.layer())
        && *e_stable == (s.stability() == Stability::Stable)
        && *e_role
            == s.turn()
                .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
                .map(|t| t.role)
        && e_id == s.id()
}

/// `a == b`, with the common cases compared without a call.
#[inline(always)]
fn same_status(a: &SectionStatus, b: &SectionStatus) -> bool {
    match (a, b) {
        (SectionStatus::Kept, SectionStatus::Kept) => true,
        (SectionStatus::Dropped { reason: x }, SectionStatus::Dropped { reason: y }) => x == y,
        _ => a == b,
    }
}

fn strip_invisible(s: &Section) -> Section {
    let text = s.content().as_str();
    if !text.chars().any(format::is_invisible_or_control) {
        return s.clone();
    }
    s.with_content(
        text.chars()
            .filter(|c| !format::is_invisible_or_control(*c))
            .collect::<String>(),
    )
}

#[cfg(all(test, feature = "tiktoken"))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Verifies ADR-0024 (amended): the part of a windowed walk that a head cut may rely on
        /// without walking further (`stable`) is written exactly as the walk up to the bound
        /// writes it, for lines the escaping treats specially (underline-like runs of `=` or
        /// `-` that may end in a letter, headings, labels, list markers, markup, lookalikes),
        /// blank lines and runs of blanks, long lines (JSON-like text with markup, bracket
        /// tokens whole and cut, lookalikes, DEL and invisible characters; long runs of `=` and
        /// `-`, alone, after a list marker or ending in a letter; long blanks), and windows
        /// ending anywhere, also inside such a line or run; and a prefix of the window that
        /// settles is the prefix of the bounded walk; escaped or datamarked, and for the
        /// element as a cut writes it or whole (as a probe walks it). It fails if the window's
        /// last line is relied on before its start is decided, or up to its last byte.
        #[test]
        fn the_stable_part_of_a_window_is_the_bounded_walk(
            lines in proptest::collection::vec(
                "(={1,40}[a-z]?|-{1,40}[a-z]?|#+ [a-z ]{0,20}|[A-Za-z]{1,9}: [a-z ]{0,20}|[-*+] [a-z]{0,9}|1[.)] x|<b>&amp;\\[INST\\]|\u{FF1C}\u{2236}\u{200b}|[a-z ]{0,30}|[ \t]{0,40}|\n{0,30}|(\\[INST\\]|\\[/?[a-z]{1,4}\\]|\\[[a-z]{0,3}|[a-z ]{1,8}|[{}\":,<>&\\]]|\u{7f}|\u{200b}|\u{FF1C}|\u{2236}){40,300}|(={150,2000}|-{150,2000}|[-=]{150,400})[a-z]?|(- |1\\. |  )(={150,2000}|-{150,2000})[a-z ]{0,20}|[ \t]{150,300}[a-z]{0,3})",
                1..120,
            ),
            window in 1usize..6_000,
            allow in 1usize..300,
            datamark in any::<bool>(),
            as_cut in any::<bool>(),
        ) {
            let enc = if datamark { Encoding::Datamark } else { Encoding::Escaped };
            let content: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let a = Assembler::o200k();
            let s = Section::builder(RuntimeLayer::Delegated, "doc", content.as_str())
                .unwrap()
                .build();
            let bound = CutAt { keep: Keep::Head, at: 0, elided: content.len() as u64 };
            let empty = a.render(&s.with_content(""), enc, as_cut.then_some(bound), false);
            let max_tokens = 1_000;
            let full = a
                .element_walk(&s, &empty.text, enc, false, max_tokens, usize::MAX, as_cut)
                .unwrap();
            prop_assert_eq!(full.window, usize::MAX);
            let w = a
                .element_walk(&s, &empty.text, enc, false, max_tokens, window, as_cut)
                .unwrap();
            prop_assert!(w.stable <= w.text.len());
            prop_assert!(
                full.text.starts_with(&w.text[..w.stable]),
                "window {}: {:?} is not a start of {:?}",
                window,
                &w.text[..w.stable],
                full.text
            );
            if w.window == usize::MAX {
                prop_assert_eq!(&w.text, &full.text);
            }
            let look_ahead = a.tokenizer.prefix_look_ahead().unwrap();
            let none = strata_core::Prefix { len: 0, tokens: 0 };
            let (p, _) = a.tokenizer.prefix_from(&w.text, allow, none);
            if w.settles(p.len, look_ahead) {
                let (q, _) = a.tokenizer.prefix_from(&full.text, allow, none);
                prop_assert_eq!(p, q, "window {} settled on another prefix", window);
            }
        }
    }
}
