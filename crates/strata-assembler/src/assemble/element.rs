//! Elements: one section rendered for its place (fenced, or as a native turn), counted
//! exactly in the request's frame, probed against a limit, or cut to one (ADR-0008, ADR-0009,
//! ADR-0037, ADR-0030, ADR-0032). These are the measurements the kernel's stages make; a
//! [`Meter`] makes them with the tokenizer, and asks the engine first when there is one (an
//! answer the engine kept is the answer the measurement gives).

use std::sync::Arc;

use strata_core::format::{self, Authority, Encoding, SectionHeader};
use strata_core::{
    ContentHash, CountedSuffix, Keep, Prefix, Reasoning, ResumableTokenizer, ResumePoint, Role,
    RuntimeLayer, Section, SectionId, SectionKey, SourceKind, Tokenizer, ToolName,
};

use super::engine::{CacheStats, Engine};
use super::kernel::cuttable_natively;
use super::native;
use crate::provider::RequestTool;

/// Tokens allowed for a provider's wrapping of one tool definition (an estimate).
pub(super) const TOOL_FRAME: u64 = 8;
/// Below this many tokens of slack, a dropped section is not re-added in cut form.
pub(super) const MIN_CUT_TOKENS: u64 = 48;
/// Bytes counted for one cache entry besides its text (key, counts, map overhead).
pub(super) const ENTRY_OVERHEAD: usize = 160;
/// Tokens taken off the smallest element's count to make it a lower bound of any element.
const FLOOR_MARGIN: u64 = 4;

/// A rendered element with its exact cost.
#[derive(Debug, Default)]
pub(super) struct Rendered {
    /// The element: a fenced section, or for native turns the turn's own text (a tool call's
    /// JSON arguments).
    pub(super) text: String,
    /// Tokens of `text`, plus in provider frames the upper bound of its message framing.
    pub(super) tokens: u64,
    pub(super) chars: u64,
    /// Tokens of `text` alone.
    pub(super) content_tokens: u64,
}

/// Where a cut section's text was cut: the kept head is `content[..at]`, the kept tail
/// `content[at..]`, and `elided` bytes of the original stood between them (ADR-0037).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct CutAt {
    pub(super) keep: Keep,
    pub(super) at: usize,
    pub(super) elided: u64,
}

/// A quarter of the least a windowed head walk's prefix must end before the stable part of its
/// window (see [`ElementWalk::settles`]).
const WALK_KEPT_PAST: usize = 128;

/// The hash of a turn's reasoning blocks, when it has some (part of an element's key).
fn reasoning_hash(reasoning: &[Reasoning]) -> Option<ContentHash> {
    if reasoning.is_empty() {
        return None;
    }
    let json = serde_json::to_string(reasoning).expect("reasoning blocks are plain JSON values");
    Some(ContentHash::of(&json))
}

/// What stands in a native user message where a cut left text out: plain words on their own
/// line, no strata syntax (a native message is the user's channel, not a fenced element;
/// ADR-0030). Written by the wire format's module, whose neutralising of native text knows it
/// (ADR-0032).
pub(super) fn native_elision(bytes: u64) -> String {
    let mut note = String::new();
    format::write_native_elision(&mut note, bytes);
    note
}

/// Bytes the cache counts for a kept walk's resume point.
pub(super) fn walk_size(id: &SectionId, point: &ResumePoint) -> usize {
    point.held_bytes() + id.as_str().len() + ENTRY_OVERHEAD
}

/// Bytes of content per token of the budget in the first window a head cut walks: more than
/// most text takes (English about 4.5, code and JSON 3, CJK 1.5-3), so one window is enough
/// but for dense text, and a window that is not grows four times (ADR-0037).
pub(super) const WALK_WINDOW_BYTES_PER_TOKEN: usize = 8;

/// The text a head cut walks (see `Meter::element_walk`).
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

/// What is known of another text when an element is counted: nothing, a point of a walk over a
/// text with the same start ([`ResumableTokenizer::count_resumed`]), or a suffix with the same
/// end and its exact count ([`ResumableTokenizer::count_sharing_end`]). Both are minted by the
/// tokenizer and checked by it against the element before it relies on them (ADR-0040).
#[derive(Clone, Copy)]
enum Known<'a> {
    Nothing,
    Start(&'a ResumePoint),
    End(&'a CountedSuffix),
}

/// The text a tail cut searches (see `Meter::tail_walk`): the end of its element as a cut
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
pub(super) struct Cutting {
    pub(super) section: Section,
    pub(super) rendered: Arc<Rendered>,
    pub(super) at: CutAt,
}

/// A tail search's answer: where the kept tail starts in the content, and, with a resumable
/// tokenizer, the kept end of the searched walk with its exact count.
struct KnownEnd {
    at: usize,
    end: Option<CountedSuffix>,
}

/// The state of one cut search (see [`Meter::cut_section`]).
struct CutSearch {
    /// The element with an empty body, in cut form.
    empty: Arc<Rendered>,
    /// Its tokens.
    overhead: u64,
    /// Tokens the head (or both-ends) search may keep.
    allow: usize,
    /// Where the next, smaller, head search may start: the walk before it is not repeated.
    resume: Option<ResumePoint>,
    /// The element a head cut walks.
    walk: Option<ElementWalk>,
    /// The point of this section's last cut's walk, which the head search may resume from.
    prior: Option<ResumePoint>,
    /// The end of the element a tail cut searches.
    tail: Option<TailWalk>,
    /// Tokens the tail search may keep.
    tail_allow: usize,
}

/// What of a working-memory turn an element's key holds: role, call id, tool name and the hash
/// of its reasoning.
pub(super) type TurnKey = (
    Role,
    Option<Arc<str>>,
    Option<ToolName>,
    Option<ContentHash>,
);

/// The cache key of a rendered element. Every part is a copy or a reference-counted clone, so
/// building one allocates nothing (ADR-0037).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ElementKey {
    pub(super) content: ContentHash,
    pub(super) id: SectionId,
    pub(super) key: Option<SectionKey>,
    pub(super) source: SourceKind,
    pub(super) layer: RuntimeLayer,
    pub(super) encoding: Encoding,
    pub(super) cut: Option<CutAt>,
    /// Which end a cut keeps: part of the key of cut results.
    pub(super) keep: Keep,
    pub(super) native: bool,
    /// Role, call id and tool name of a working-memory turn: all rendered; and the hash of
    /// its reasoning, which is sent and counted with it (ADR-0043).
    pub(super) turn: Option<TurnKey>,
}

/// What measures elements: the tokenizer (and its resumable walks, when it has them), the first
/// window of a head cut's walk, and the engine whose kept answers it may use (none for the plain
/// kernel).
#[derive(Clone, Copy)]
pub(super) struct Meter<'a> {
    pub(super) tokenizer: &'a dyn Tokenizer,
    /// The tokenizer's resumable walks and bounds; `None` for a tokenizer that has none (the
    /// estimator, a user's), which is then asked only for plain counts and searches (ADR-0040).
    resumable: Option<&'a dyn ResumableTokenizer>,
    /// Bytes of content per token of the budget in a head cut's first window.
    pub(super) walk_window: usize,
    pub(super) memo: Option<&'a Engine>,
}

impl<'a> Meter<'a> {
    /// A meter counting with `tokenizer`, taking the shortcuts of its resumable walks if it
    /// has them.
    pub(super) fn new(
        tokenizer: &'a dyn Tokenizer,
        walk_window: usize,
        memo: Option<&'a Engine>,
    ) -> Meter<'a> {
        Meter {
            tokenizer,
            resumable: tokenizer.resumable(),
            walk_window,
            memo,
        }
    }
}

impl Meter<'_> {
    /// Whether separate ASCII words bound the tokenizer's counts from below (ADR-0037); false
    /// without resumable walks.
    pub(super) fn splits_ascii_words(&self) -> bool {
        self.resumable.is_some_and(|r| r.splits_ascii_words())
    }

    /// The most bytes one token covers, when the tokenizer says (ADR-0037).
    fn longest_token_bytes(&self) -> Option<usize> {
        self.resumable.map(|r| r.longest_token_bytes())
    }

    /// How far past its end a longest prefix depends on the text, when the tokenizer says.
    fn prefix_look_ahead(&self) -> Option<usize> {
        self.resumable.map(|r| r.prefix_look_ahead())
    }

    /// The longest prefix of `text` within `max_tokens`, walked from `from` where it holds for
    /// `text`; a point a later walk may start from; and whether this walk resumed. Without
    /// resumable walks, the tokenizer's plain search, which offers no point (ADR-0040).
    fn walk(
        &self,
        text: &str,
        max_tokens: usize,
        from: Option<&ResumePoint>,
    ) -> (Prefix, Option<ResumePoint>, bool) {
        match self.resumable {
            Some(r) => {
                let w = r.walk(text, max_tokens, from);
                (w.prefix, w.point, w.resumed)
            }
            None => (self.tokenizer.prefix(text, max_tokens), None, false),
        }
    }

    /// Token and character cost of a text, cached by content hash.
    pub(super) fn text_cost(&self, text: &str) -> (u64, u64) {
        self.cost_by_hash(ContentHash::of(text), text)
    }

    /// Like [`Meter::text_cost`] when the caller already holds the text's hash.
    pub(super) fn cost_by_hash(&self, h: ContentHash, text: &str) -> (u64, u64) {
        if let Some(c) = self.memo.and_then(|e| e.text_cost(h)) {
            return c;
        }
        let cost = (
            self.tokenizer.count(text) as u64,
            text.chars().count() as u64,
        );
        if let Some(e) = self.memo {
            e.keep_text_cost(h, cost, text.len());
        }
        cost
    }

    /// Tokens of one message's framing in the OpenAI encodings' published formula: three per
    /// message plus the role name (ADR-0015).
    pub(super) fn frame_msg(&self, role: &str) -> u64 {
        3 + self.text_cost(role).0
    }

    /// Tokens of a turn's reasoning as sent: every string each block carries and three for
    /// each block's framing, as a message's (ADR-0043). Zero for a turn without reasoning.
    fn reasoning_cost(&self, reasoning: &[Reasoning]) -> u64 {
        reasoning
            .iter()
            .map(|r| {
                3 + r
                    .strings()
                    .into_iter()
                    .map(|s| self.text_cost(s).0)
                    .sum::<u64>()
            })
            .sum()
    }

    /// The cache key of `s` rendered with `enc`, cut at `cut`, in a provider frame or not.
    fn element_key(s: &Section, enc: Encoding, cut: Option<CutAt>, native: bool) -> ElementKey {
        ElementKey {
            native,
            turn: s
                .turn()
                .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
                .map(|t| {
                    (
                        t.role,
                        t.call_id.clone(),
                        t.name.clone(),
                        reasoning_hash(&t.reasoning),
                    )
                }),
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

    /// [`Meter::element_text`] of `s` written with `body` in place of its content (a head
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
                self.frame_msg("assistant") + self.reasoning_cost(&t.reasoning),
            ),
            (true, Some(t)) if t.role == Role::ToolCall => {
                let name = t.name.as_ref().map_or("", |n| n.as_str());
                (
                    native::arguments(body).into_owned(),
                    3 + self.text_cost(name).0
                        + self.frame_msg("assistant")
                        + self.reasoning_cost(&t.reasoning),
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
    pub(super) fn render(
        &self,
        s: &Section,
        enc: Encoding,
        cut: Option<CutAt>,
        native: bool,
    ) -> Arc<Rendered> {
        self.render_known(s, enc, cut, native, Known::Nothing)
    }

    /// [`Meter::render`], counting with what is `known` of a text the element shares its
    /// start with (a walk's point, [`ResumableTokenizer::count_resumed`]) or its end with (a
    /// suffix and its count, [`ResumableTokenizer::count_sharing_end`]; ADR-0037, ADR-0040).
    fn render_known(
        &self,
        s: &Section,
        enc: Encoding,
        cut: Option<CutAt>,
        native: bool,
        known: Known<'_>,
    ) -> Arc<Rendered> {
        let key = Self::element_key(s, enc, cut, native);
        if let Some(r) = self.memo.and_then(|e| e.element(&key)) {
            return r;
        }
        let (text, frame) = self.element_text(s, enc, cut, native);
        let content_tokens = match (known, self.resumable) {
            (Known::Start(from), Some(r)) => r.count_resumed(&text, from),
            (Known::End(end), Some(r)) => r.count_sharing_end(&text, end),
            _ => self.tokenizer.count(&text),
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
        if let Some(e) = self.memo {
            e.keep_element(key, &r);
        }
        r
    }

    /// The rendered element of `s` if it takes at most `limit` tokens, else `None`; the count
    /// stops once `limit` is passed, so an element that does not fit costs what the limit
    /// allows, not what it holds (ADR-0037). Both answers are cached.
    pub(super) fn probe(
        &self,
        s: &Section,
        enc: Encoding,
        native: bool,
        limit: u64,
    ) -> Option<Arc<Rendered>> {
        let key = Self::element_key(s, enc, None, native);
        if let Some(e) = self.memo {
            if let Some(r) = e.element(&key) {
                return (r.tokens <= limit).then_some(r);
            }
            if e.known_over(&key, limit) {
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
            self.count(|s| s.walked_probes += 1);
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
    /// than the element it says the element is over (ADR-0037). Only for escaped or
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
        let Some(look_ahead) = self.prefix_look_ahead() else {
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
        let p = self
            .tokenizer
            .prefix(&w.text, usize::try_from(room).unwrap_or(usize::MAX));
        w.settles(p.len, look_ahead)
    }

    /// Remember that the element of `key` takes more than `limit` tokens.
    fn note_over(&self, key: ElementKey, limit: u64) {
        if let Some(e) = self.memo {
            e.note_over(key, limit);
        }
    }

    /// Add to a counter of the engine, if there is one.
    pub(super) fn count(&self, f: impl FnOnce(&mut CacheStats)) {
        if let Some(e) = self.memo {
            e.count(f);
        }
    }

    /// Whether an element whose body holds `bytes` bytes of content takes more than `limit`
    /// tokens, known from the length alone: every encoding writes the body no shorter than the
    /// content, and no token covers more than the tokenizer's longest (ADR-0037).
    fn certainly_over(&self, bytes: usize, limit: u64) -> bool {
        self.longest_token_bytes()
            .is_some_and(|l| (bytes / l.max(1)) as u64 > limit)
    }

    /// Bytes of content that a walk for a head cut within `max_tokens` reads at most: more than
    /// any prefix within the budget can cover (`max_tokens + 2` longest tokens), plus room for
    /// what the tokenizer looks at past its last piece; `None` without a bound (ADR-0037).
    fn walk_bound(&self, max_tokens: u64) -> Option<usize> {
        let l = self.longest_token_bytes()?;
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
    pub(super) fn floor(&self, layer: RuntimeLayer, enc: Encoding, native: bool) -> u64 {
        if native && layer == RuntimeLayer::WorkingMemory {
            return 3;
        }
        if let Some(f) = self.memo.and_then(|e| e.floor((layer, enc, native))) {
            return f;
        }
        let mut text = String::new();
        let header = SectionHeader {
            source: Some("store"),
            authority: Authority::of_runtime(layer, None),
            ..SectionHeader::new(layer.into(), "a")
        };
        format::write_untrusted(&mut text, &header, "", enc);
        let f = (self.tokenizer.count(&text) as u64).saturating_sub(FLOOR_MARGIN);
        if let Some(e) = self.memo {
            e.keep_floor((layer, enc, native), f);
        }
        f
    }

    /// Cut `s` so that its rendered element takes at most `max_tokens`, keeping the end its
    /// [`Keep`] names; `None` if even an empty body does not fit. Cached by the whole section
    /// and the limit, so an unchanged section cut to the same room costs a lookup (ADR-0037).
    pub(super) fn cut_to(
        &self,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<Cutting> {
        if native && !cuttable_natively(s) {
            return None;
        }
        self.cut_section(s, enc, max_tokens, native)
    }

    /// [`Meter::cut_to`] without asking whether a native turn may be cut: for the newest
    /// user turn, which a provider request carries cut rather than not at all (ADR-0030).
    pub(super) fn cut_section(
        &self,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<Cutting> {
        let cache_key = (Self::element_key(s, enc, None, native), max_tokens);
        if let Some(hit) = self.memo.and_then(|e| e.cut(&cache_key)) {
            return Some(hit);
        }
        let mut c = self.cut_search(s, enc, max_tokens, native)?;
        let text = s.content().as_str();
        let mut tries = 0;
        while tries < 16 {
            let Some((head, tail_start, known_end)) =
                self.cut_bounds(&mut c, s, enc, max_tokens, native)
            else {
                // A walk was regrown or given up: search again.
                continue;
            };
            let mut kept = String::with_capacity(head + text.len() - tail_start);
            kept.push_str(&text[..head]);
            kept.push_str(&text[tail_start..]);
            let cut = s.with_content(kept);
            let at = CutAt {
                keep: s.keep(),
                at: head,
                elided: (tail_start - head) as u64,
            };
            let known = match (&known_end, &c.resume) {
                (Some(KnownEnd { end: Some(end), .. }), _) => Known::End(end),
                (None, Some(point)) if c.walk.is_some() => Known::Start(point),
                _ => Known::Nothing,
            };
            let r = self.render_known(&cut, enc, Some(at), native, known);
            if r.tokens <= max_tokens {
                let done = Cutting {
                    section: cut,
                    rendered: r,
                    at,
                };
                return Some(self.keep_cut(cache_key, s, done, c.walk.is_some(), c.resume));
            }
            // Over by a token or two (the marker, or merges at the cut): search with less room.
            let excess = ((r.tokens - max_tokens) as usize).max(1);
            let room = if known_end.is_some() {
                &mut c.tail_allow
            } else {
                &mut c.allow
            };
            if *room == 0 {
                return None;
            }
            *room = room.saturating_sub(excess);
            tries += 1;
        }
        None
    }

    /// The search for a cut of `s` within `max_tokens`: the element with an empty body (its
    /// cost bounds the cut, and its text gives where a walked element's body starts), the room
    /// for the body, and the walks a head or tail cut of escaped or datamarked text searches.
    /// `None` if even an empty body does not fit.
    fn cut_search(
        &self,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<CutSearch> {
        let keep = s.keep();
        let bound = CutAt {
            keep,
            at: 0,
            elided: s.content().len() as u64,
        };
        let empty = self.render(&s.with_content(""), enc, Some(bound), native);
        let overhead = empty.tokens;
        if overhead >= max_tokens {
            return None;
        }
        let mut allow = (max_tokens - overhead) as usize;
        // An escaped or datamarked head cut walks the element it becomes, written with its
        // whole body (up to the body's end), so the cut element is then counted only from the
        // walk's last resume point, not in full; the kept text is tokenized about once
        // (ADR-0037; datamarked too: datamarking writes each space of the escaping as a mark,
        // which maps back by counting the marks, `format::escaped_len`). Base64 rewrites the
        // whole text, so its cuts search the content as offered.
        let escaping = matches!(enc, Encoding::Escaped | Encoding::Datamark);
        // Windows only where the tokenizer's prefix depends on a bounded stretch past its end;
        // otherwise the walk reads up to the bound at once.
        let budget = usize::try_from(max_tokens).unwrap_or(usize::MAX);
        let first_window = match self.prefix_look_ahead() {
            Some(_) => budget.saturating_mul(self.walk_window),
            None => usize::MAX,
        };
        let walk = (keep == Keep::Head && escaping)
            .then(|| self.element_walk(s, &empty.text, enc, native, max_tokens, first_window, true))
            .flatten();
        // The walk of this section's last cut: where its element starts with the same bytes
        // (a turn that grew at its end), the walk resumes there (ADR-0037).
        let mut prior = None;
        if let Some(w) = &walk {
            allow = w.allow;
            prior = self.memo.and_then(|e| e.take_walk(s.id()));
        }
        // An escaped (or datamarked) tail cut searches the end of the element it becomes (a
        // window at the end of the content, encoded, then the element's end), and the cut
        // element is counted from that search, only up to where their pieces line up: the kept
        // text is tokenized about once (ADR-0037). The first window is about five eighths of a
        // head cut's (five bytes of content per token for the default of eight): the search
        // splits only what it needs of it, but the whole window is escaped; a window too small
        // for the tail is walked again four times larger.
        let tail_window = budget.saturating_mul(self.walk_window.div_ceil(2) + 1);
        let tail = (keep == Keep::Tail && escaping)
            .then(|| self.tail_walk(s, &empty, enc, max_tokens, tail_window))
            .flatten();
        Some(CutSearch {
            tail_allow: tail.as_ref().map_or(0, |w| w.allow),
            empty,
            overhead,
            allow,
            resume: None,
            walk,
            prior,
            tail,
        })
    }

    /// One attempt of search `c`: where the kept head ends and the kept tail starts in the
    /// content of `s`, with, for a tail search, the start of the kept end in its walk and that
    /// end's exact count; `None` when a walk was regrown or given up (search again).
    fn cut_bounds(
        &self,
        c: &mut CutSearch,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<(usize, usize, Option<KnownEnd>)> {
        let text = s.content().as_str();
        let known_end = match s.keep() {
            Keep::Tail => self.tail_step(c, s, enc, max_tokens)?,
            _ => None,
        };
        let (head, tail_start) = match (s.keep(), c.walk.is_some(), &known_end) {
            (Keep::Tail, _, Some(k)) => (0, k.at),
            (Keep::Head, true, _) => self.head_step(c, s, enc, max_tokens, native)?,
            (Keep::Head, false, _) => {
                let (p, next, _) = self.walk(text, c.allow, c.resume.as_ref());
                c.resume = next;
                (p.len, text.len())
            }
            (Keep::Tail, _, None) => (0, text.len() - self.tokenizer.suffix(text, c.allow).len),
            (Keep::Both, _, _) => {
                let h = self.tokenizer.prefix(text, c.allow / 2);
                let rest = &text[h.len..];
                let t = self.tokenizer.suffix(rest, c.allow - h.tokens);
                (h.len, text.len() - t.len)
            }
        };
        Some((head, tail_start, known_end))
    }

    /// The tail search's answer, when there is a tail walk: where the kept tail starts in the
    /// content, and the start of the kept end in the walk with its exact count. `None` when the
    /// window was regrown or given up (search again); `Some(None)` without a tail walk.
    #[allow(clippy::option_option)] // Three outcomes, each named in the comment above.
    fn tail_step(
        &self,
        c: &mut CutSearch,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
    ) -> Option<Option<KnownEnd>> {
        let Some(w) = &c.tail else {
            return Some(None);
        };
        let (p, end) = match self.resumable {
            Some(r) => {
                let end = r.suffix_counted(&w.text, c.tail_allow);
                (end.answer(), Some(end))
            }
            None => (self.tokenizer.suffix(&w.text, c.tail_allow), None),
        };
        let st = w.text.len() - p.len;
        if st == 0 && w.start > 0 {
            // All of the window fits: walk one four times larger.
            let larger = w.window.saturating_mul(4);
            self.count(|s| s.walk_regrowths += 1);
            c.tail = self.tail_walk(s, &c.empty, enc, max_tokens, larger);
            return None;
        }
        let Some(body) = format::escaped_len(&w.text, st.min(w.body_len), enc) else {
            // Not reached (a piece boundary is a character boundary): the content as offered
            // is searched then.
            c.tail = None;
            return None;
        };
        let text = s.content().as_str();
        let at = w.start + format::escaped_prefix_len(&text[w.start..], body);
        Some(Some(KnownEnd { at, end }))
    }

    /// The head search's answer from its walk: where the kept head ends in the content (the
    /// kept tail is empty); `None` when the walk was regrown or given up (search again).
    fn head_step(
        &self,
        c: &mut CutSearch,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<(usize, usize)> {
        let text = s.content().as_str();
        let look_ahead = self.prefix_look_ahead().unwrap_or(0);
        let w = c.walk.as_ref()?;
        // The last cut's point while it is offered, else this search's own (ADR-0040).
        let (p, next, resumed) =
            self.walk(&w.text, c.allow, c.prior.as_ref().or(c.resume.as_ref()));
        if !w.settles(p.len, look_ahead) {
            // The prefix reaches where the window may be written, or split, otherwise than the
            // whole content: walk a window four times larger (up to the bound at once when the
            // window holds no line break), from its start; the last cut's walk is still offered
            // to it.
            let window = if w.stable > w.body_start {
                w.window.saturating_mul(4)
            } else {
                usize::MAX
            };
            self.count(|s| s.walk_regrowths += 1);
            c.walk = self.element_walk(s, &c.empty.text, enc, native, max_tokens, window, true);
            if c.walk.is_none() {
                // Not reached (the element's opening does not depend on its body); the content
                // itself is walked then, with its room.
                c.allow = (max_tokens - c.overhead) as usize;
            }
            c.resume = None;
            return None;
        }
        if c.prior.take().is_some() && resumed {
            self.count(|s| s.resumed_cuts += 1);
        }
        c.resume = next;
        let body = p.len.saturating_sub(w.body_start);
        let body = format::escaped_len(&w.text[w.body_start..], body, enc)
            .expect("a prefix ends on a character boundary");
        Some((format::escaped_prefix_len(text, body), text.len()))
    }

    /// Hand a cut that fits to the engine, if there is one: the cut, and the last point of the
    /// element walk that found it (it holds the walked bytes a later cut of the same section is
    /// compared with; none when the cut walked no element or the walk offered no point).
    fn keep_cut(
        &self,
        key: (ElementKey, u64),
        s: &Section,
        done: Cutting,
        walked_element: bool,
        resume: Option<ResumePoint>,
    ) -> Cutting {
        let Some(e) = self.memo else {
            return done;
        };
        e.keep_cut(key, &done);
        if let Some(point) = resume.filter(|_| walked_element) {
            e.keep_walk(s.id(), point);
        }
        done
    }

    /// The text a tail cut of `s` searches: the last `window` bytes of its content (from the line
    /// that holds the window's first byte, when that line starts within [`TAIL_LINE_SEARCH`] bytes
    /// before it), encoded for `enc` (escaped, or datamarked), then the end every cut element has;
    /// the tokens the search may keep, the budget of an element of `max_tokens` less its framing
    /// and its opening (written for the longest elision, which bounds the others). `None` where the
    /// element does not end that way. `empty` is the cut element of `s` with an empty body. Where
    /// the window starts only changes the work: the cut element is counted exactly, from the search
    /// only where their pieces line up (ADR-0037).
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
        // the budget, not the content (ADR-0037). Within the bound, a window of the content is
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
    pub(super) fn tool_cost(&self, t: &RequestTool) -> u64 {
        TOOL_FRAME
            + self.text_cost(t.name.as_str()).0
            + self.text_cost(&t.description).0
            + self.text_cost(t.parameters.as_json()).0
    }
}

#[cfg(all(test, feature = "tiktoken"))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Verifies ADR-0037: the part of a windowed walk that a head cut may rely on
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
            let tok = strata_core::TiktokenTokenizer::o200k();
            let a = Meter::new(&tok, WALK_WINDOW_BYTES_PER_TOKEN, None);
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
            let look_ahead = a.prefix_look_ahead().unwrap();
            let p = a.tokenizer.prefix(&w.text, allow);
            if w.settles(p.len, look_ahead) {
                let q = a.tokenizer.prefix(&full.text, allow);
                prop_assert_eq!(p, q, "window {} settled on another prefix", window);
            }
        }
    }
}
