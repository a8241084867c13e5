//! The assembly algorithm: filter, resolve conflicts, narrow tools, count, trim, fence, render.
//!
//! Architecture invariant: this module does no I/O and reads no clock; the same inputs give the
//! same bytes (I6, ADR-0013). Identity comes only from a `VerifiedAgent` and is copied into the
//! output first, byte for byte, exactly once (I1, ADR-0006); it is never trimmed (I2, ADR-0008).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use strata_agentdef::VerifiedAgent;
use strata_core::format::{self, Authority, Encoding, SectionHeader};
use strata_core::{
    Budget, ContentHash, Layer, Phase, Role, RuntimeLayer, Section, SectionId, SectionKey,
    SourceKind, Stability, Tier, Tokenizer, ToolName, ToolPolicy, ToolSchema,
};

use crate::error::AssembleError;
use crate::output::AssembledContext;
use crate::provider::{
    Block, Conversation, Message, MessageKind, MessageRole, PairPolicy, Provider, ProviderOptions,
    RequestTool, ToolDescriptions,
};
use crate::report::{
    Breakpoint, Conflict, LayerReport, Report, RequestReport, SectionReport, SectionStatus,
    ToolsReport,
};
use crate::request::{AssemblyRequest, BudgetSpec, Invisible};

/// The id of the tool catalog section the assembler writes from announced tools.
pub const TOOL_CATALOG_ID: &str = "strata.tools";
/// The conflict key of the tool catalog; other catalogs claiming it lose to the assembler's.
pub const TOOL_CATALOG_KEY: &str = "tool_catalog";
/// Tokens allowed for a provider's wrapping of one tool definition (an estimate).
const TOOL_FRAME: u64 = 8;
/// Below this many tokens of slack, a dropped section is not re-added in cut form.
const MIN_CUT_TOKENS: u64 = 48;
/// Entries kept in the element cache before it is cleared.
const CACHE_CAPACITY: usize = 100_000;

/// A rendered element with its exact cost.
#[derive(Debug)]
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

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ElementKey {
    content: ContentHash,
    id: SectionId,
    key: Option<SectionKey>,
    source: String,
    layer: RuntimeLayer,
    encoding: Encoding,
    cut: bool,
    native: bool,
    /// Role, call id and tool name of a working-memory turn: all rendered.
    turn: Option<(Role, Option<Arc<str>>, Option<ToolName>)>,
}

/// Counters of the element cache (ADR-0008: unchanged sections are never re-tokenized).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Elements served from the cache.
    pub hits: u64,
    /// Elements rendered and tokenized.
    pub misses: u64,
    /// Bytes handed to the tokenizer in total.
    pub tokenized_bytes: u64,
    /// Entries now held.
    pub entries: usize,
}

#[derive(Default)]
struct Cache {
    elements: HashMap<ElementKey, Arc<Rendered>>,
    texts: HashMap<ContentHash, (u64, u64)>,
    stats: CacheStats,
}

/// The Context Assembler: the single enforcement point for priority, immutability, budgets and
/// fencing (ADR-0006). Share one per tokenizer across sessions; it caches rendered elements and
/// their token counts by content hash.
pub struct Assembler {
    tokenizer: Arc<dyn Tokenizer>,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Assembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembler")
            .field("tokenizer", &self.tokenizer.name())
            .finish_non_exhaustive()
    }
}

struct Cand {
    section: Section,
    sticky: bool,
    rendered: Arc<Rendered>,
    cut_from: Option<u64>,
    unit: usize,
    report_idx: usize,
}

struct Unit {
    layer: RuntimeLayer,
    members: Vec<usize>,
    sticky: bool,
    turn_seq: Option<u64>,
    score: u64,
    first_id: SectionId,
    tokens: u64,
    chars: u64,
    dropped: bool,
}

impl Assembler {
    /// An assembler counting with `tokenizer`.
    pub fn new(tokenizer: Arc<dyn Tokenizer>) -> Assembler {
        Assembler {
            tokenizer,
            cache: Mutex::new(Cache::default()),
        }
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
            entries: c.elements.len() + c.texts.len(),
            ..c.stats
        }
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
        c.texts.insert(h, cost);
        cost
    }

    /// Tokens of one message's framing in the OpenAI encodings' published formula: three per
    /// message plus the role name (ADR-0015).
    fn frame_msg(&self, role: &str) -> u64 {
        3 + self.text_cost(role).0
    }

    fn render(&self, s: &Section, enc: Encoding, cut: bool, native: bool) -> Arc<Rendered> {
        let key = ElementKey {
            native,
            turn: s
                .turn()
                .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
                .map(|t| (t.role, t.call_id.clone(), t.name.clone())),
            content: s.content_hash(),
            id: s.id().clone(),
            key: s.key().cloned(),
            source: s.provenance().source.label(),
            layer: s.layer(),
            encoding: enc,
            cut,
        };
        {
            let mut c = self.lock();
            if let Some(r) = c.elements.get(&key).cloned() {
                c.stats.hits += 1;
                return r;
            }
        }
        let turn = s
            .turn()
            .filter(|_| s.layer() == RuntimeLayer::WorkingMemory);
        let role = turn.map(|t| t.role);
        let (text, frame) = match (native, turn) {
            // Native turns carry their own words in their own messages (ADR-0014).
            (true, Some(t)) if t.role == Role::User => {
                (s.content().as_str().to_owned(), self.frame_msg("user"))
            }
            (true, Some(t)) if t.role == Role::Assistant => {
                (s.content().as_str().to_owned(), self.frame_msg("assistant"))
            }
            (true, Some(t)) if t.role == Role::ToolCall => {
                let name = t.name.as_ref().map_or("", |n| n.as_str());
                (
                    s.content().as_str().to_owned(),
                    3 + self.text_cost(name).0 + self.frame_msg("assistant"),
                )
            }
            _ => {
                let mut text = String::new();
                let header = SectionHeader {
                    layer: s.layer().into(),
                    id: s.id().as_str(),
                    key: s.key().map(SectionKey::as_str),
                    source: Some(&key.source),
                    cut,
                    authority: Authority::of_runtime(s.layer(), role),
                    role,
                    call: turn.and_then(|t| t.call_id.as_deref()),
                };
                format::write_untrusted(&mut text, &header, s.content().as_str(), enc);
                let frame = if native && role == Some(Role::ToolResult) {
                    self.frame_msg("tool")
                } else {
                    0
                };
                (text, frame)
            }
        };
        let content_tokens = self.tokenizer.count(&text) as u64;
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
        if c.elements.len() >= CACHE_CAPACITY {
            c.elements.clear();
        }
        c.elements.insert(key, r.clone());
        r
    }

    /// Cut `s` so that its rendered element takes at most `max_tokens`; `None` if even an empty
    /// body does not fit.
    fn cut_to(
        &self,
        s: &Section,
        enc: Encoding,
        max_tokens: u64,
        native: bool,
    ) -> Option<(Section, Arc<Rendered>)> {
        if native && !cuttable_natively(s) {
            return None;
        }
        let overhead = self.render(&s.with_content(""), enc, true, native).tokens;
        if overhead >= max_tokens {
            return None;
        }
        let text = s.content().as_str();
        let mut allow = (max_tokens - overhead) as usize;
        for _ in 0..16 {
            let n = self.tokenizer.prefix_len(text, allow);
            let cut = s.with_content(&text[..n]);
            let r = self.render(&cut, enc, true, native);
            if r.tokens <= max_tokens {
                return Some((cut, r));
            }
            let excess = (r.tokens - max_tokens) as usize;
            if allow == 0 {
                return None;
            }
            allow = allow.saturating_sub(excess.max(1));
        }
        None
    }

    /// Estimated tokens of one tool definition: its name, description and canonical schema
    /// plus a fixed allowance for the provider's wrapping (providers do not publish it).
    fn tool_cost(&self, t: &RequestTool) -> u64 {
        TOOL_FRAME
            + self.text_cost(t.name.as_str()).0
            + self.text_cost(&t.description).0
            + self.text_cost(t.parameters.as_json()).0
    }

    /// Place the kept sections into a provider's channels (ADR-0014): the system channel gets
    /// the signed text alone; then, in cache order, fenced stable context, the history as
    /// native turns, fenced per-turn context with the omission markers, and the newest user
    /// turn. Where no stable context leads, history turns before the first user turn are left
    /// out (`history_start`), since providers want the conversation to open with the user.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        provider: Provider,
        opts: &ProviderOptions,
        identity_text: &str,
        (system_tokens, tool_tokens): (u64, u64),
        tools: Vec<RequestTool>,
        cands: &[Cand],
        kept: &[usize],
        units: &mut [Unit],
        dropped_reason: &mut HashMap<usize, &'static str>,
        (drops, dropped_tokens): ([u64; 4], [u64; 4]),
    ) -> Result<Placed, AssembleError> {
        let is_turn = |c: &Cand| {
            c.section.layer() == RuntimeLayer::WorkingMemory && c.section.turn().is_some()
        };
        let seq = |c: &Cand| c.section.turn().map_or(0, |t| t.seq);
        let mut turns: Vec<usize> = kept
            .iter()
            .copied()
            .filter(|c| is_turn(&cands[*c]))
            .collect();
        turns.sort_by_cached_key(|c| (seq(&cands[*c]), cands[*c].section.id().clone()));
        let (stable, dynamic): (Vec<usize>, Vec<usize>) = kept
            .iter()
            .copied()
            .filter(|c| !is_turn(&cands[*c]))
            .partition(|c| cands[*c].section.stability() == Stability::Stable);
        if stable.is_empty() {
            while let Some(&first) = turns.first() {
                if cands[first].section.turn().map(|t| t.role) == Some(Role::User) {
                    break;
                }
                let u = cands[first].unit;
                units[u].dropped = true;
                dropped_reason.insert(u, "history_start");
                turns.retain(|c| cands[*c].unit != u);
            }
        }
        let newest = turns
            .last()
            .copied()
            .filter(|c| cands[*c].section.turn().map(|t| t.role) == Some(Role::User));
        if newest.is_some() {
            turns.pop();
        }
        let user_frame = self.frame_msg("user");
        let mut placed = Placed {
            conversation: Conversation {
                provider,
                system: identity_text.to_owned(),
                messages: Vec::new(),
                tools,
                system_tokens,
                tool_tokens,
                system_role: opts.system_role,
            },
            total: 0,
            chars: 0,
            layer_out: [0; 4],
            kept_n: [0; 4],
            cut_n: [0; 4],
        };
        let count = |placed: &mut Placed, c: &Cand| {
            let i = c.section.layer().index();
            placed.layer_out[i] += c.rendered.tokens;
            placed.chars += c.rendered.chars;
            if c.cut_from.is_some() {
                placed.cut_n[i] += 1;
            } else {
                placed.kept_n[i] += 1;
            }
        };
        // Stable context: one user message of fenced elements.
        if !stable.is_empty() {
            let mut text = String::new();
            let mut tokens = user_frame;
            for &c in &stable {
                text.push_str(&cands[c].rendered.text);
                tokens += cands[c].rendered.content_tokens;
                count(&mut placed, &cands[c]);
            }
            placed.conversation.messages.push(Message {
                role: MessageRole::User,
                kind: MessageKind::StableContext,
                blocks: vec![Block::Text { text }],
                tokens,
            });
        }
        // History: native turns; tool calls join the assistant message before them, results
        // share one user-position message.
        for &c in &turns {
            let cand = &cands[c];
            count(&mut placed, cand);
            let Some(t) = cand.section.turn() else {
                continue;
            };
            let text = cand.rendered.text.clone();
            let msgs = &mut placed.conversation.messages;
            let last = msgs.last_mut().filter(|m| m.kind == MessageKind::History);
            match t.role {
                Role::User | Role::Assistant => {
                    let role = if t.role == Role::User {
                        MessageRole::User
                    } else {
                        MessageRole::Assistant
                    };
                    msgs.push(Message {
                        role,
                        kind: MessageKind::History,
                        blocks: vec![Block::Text { text }],
                        tokens: cand.rendered.tokens,
                    });
                }
                Role::ToolCall => {
                    let block = Block::ToolUse {
                        id: t.call_id.as_deref().unwrap_or_default().to_owned(),
                        name: t.name.clone().unwrap_or_else(|| {
                            ToolName::new("unnamed").expect("a valid literal name")
                        }),
                        arguments: text,
                    };
                    let call_tokens = cand.rendered.tokens - self.frame_msg("assistant");
                    match last.filter(|m| m.role == MessageRole::Assistant) {
                        Some(m) => {
                            m.blocks.push(block);
                            m.tokens += call_tokens;
                        }
                        None => msgs.push(Message {
                            role: MessageRole::Assistant,
                            kind: MessageKind::History,
                            blocks: vec![block],
                            tokens: cand.rendered.tokens,
                        }),
                    }
                }
                Role::ToolResult => {
                    let block = Block::ToolResult {
                        id: t.call_id.as_deref().unwrap_or_default().to_owned(),
                        content: text,
                    };
                    let only_results = |m: &Message| {
                        m.role == MessageRole::User
                            && m.blocks
                                .iter()
                                .all(|b| matches!(b, Block::ToolResult { .. }))
                    };
                    match last.filter(|m| only_results(m)) {
                        Some(m) => {
                            m.blocks.push(block);
                            m.tokens += cand.rendered.tokens;
                        }
                        None => msgs.push(Message {
                            role: MessageRole::User,
                            kind: MessageKind::History,
                            blocks: vec![block],
                            tokens: cand.rendered.tokens,
                        }),
                    }
                }
            }
        }
        // Per-turn context and the omission markers, layer by layer.
        let mut text = String::new();
        let mut tokens = user_frame;
        let mut pos = 0;
        for l in RuntimeLayer::ALL {
            let i = l.index();
            while pos < dynamic.len() && cands[dynamic[pos]].section.layer() == l {
                let c = &cands[dynamic[pos]];
                text.push_str(&c.rendered.text);
                tokens += c.rendered.content_tokens;
                count(&mut placed, c);
                pos += 1;
            }
            if drops[i] > 0 {
                let m = marker_text(l, drops[i], dropped_tokens[i]);
                let (mt, mc) = self.text_cost(&m);
                text.push_str(&m);
                tokens += mt;
                placed.layer_out[i] += mt;
                placed.chars += mc;
            }
        }
        if !text.is_empty() {
            placed.conversation.messages.push(Message {
                role: MessageRole::User,
                kind: MessageKind::DynamicContext,
                blocks: vec![Block::Text { text }],
                tokens,
            });
        }
        if let Some(c) = newest {
            let cand = &cands[c];
            count(&mut placed, cand);
            placed.conversation.messages.push(Message {
                role: MessageRole::User,
                kind: MessageKind::NewestUser,
                blocks: vec![Block::Text {
                    text: cand.rendered.text.clone(),
                }],
                tokens: cand.rendered.tokens,
            });
        }
        if placed.conversation.messages.is_empty() {
            return Err(AssembleError::EmptyConversation);
        }
        let raw = system_tokens
            + tool_tokens
            + placed
                .conversation
                .messages
                .iter()
                .map(|m| m.tokens)
                .sum::<u64>();
        let margin = if provider.tokenizer_is_public() {
            0
        } else {
            u64::from(opts.estimate_margin_pct)
        };
        placed.total = (raw * (100 + margin)).div_ceil(100);
        Ok(placed)
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
        let (budget, tier) = resolve_budget(agent, req.budget.as_ref());
        budget.validate()?;
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

        let mut reports: Vec<SectionReport> = Vec::new();
        let mut conflicts = Vec::new();

        // Tools: capabilities only narrow (I4, ADR-0007); schemas pinned (ADR-0015).
        let (tools_report, catalog, request_tools) = narrow_tools(agent, req);
        let mut input: Vec<Section> = req.sections.clone();
        if let Some(c) = catalog.filter(|_| native.is_none()) {
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
        let base_tokens = id_tokens + system_frame + tool_tokens + context_frames;
        if base_tokens > fit_budget {
            return Err(AssembleError::IdentityExceedsBudget {
                agent: agent.agent_id().to_owned(),
                needed: base_tokens,
                budget: fit_budget,
            });
        }

        // Mode and path filtering.
        let mut live = Vec::new();
        for s in input {
            let reason = if !s.modes().contains(req.mode) {
                Some("mode")
            } else if !s.paths().contains(req.path) {
                Some("path")
            } else {
                None
            };
            match reason {
                Some(r) => reports.push(report_of(
                    &s,
                    false,
                    SectionStatus::Filtered { reason: r.into() },
                )),
                None => live.push(s),
            }
        }

        // Canonical order for conflict resolution: higher layer first, then score, id, hash.
        live.sort_by(|a, b| {
            (a.layer(), Reverse(a.score()), a.id(), a.content_hash()).cmp(&(
                b.layer(),
                Reverse(b.score()),
                b.id(),
                b.content_hash(),
            ))
        });

        // Conflicts: the higher layer wins; identity always wins (I4, ADR-0007).
        let identity = agent.identity();
        let mut by_key: BTreeMap<SectionKey, (Layer, String)> = BTreeMap::new();
        let mut by_id: BTreeMap<SectionId, (Layer, String)> = BTreeMap::new();
        for s in identity.sections() {
            if let Some(k) = s.key() {
                by_key.insert(k.clone(), (s.layer().into(), s.id().to_string()));
            }
            by_id.insert(s.id().clone(), (s.layer().into(), s.id().to_string()));
        }
        let mut winners = Vec::new();
        for s in live {
            let lost = by_id
                .get(s.id())
                .map(|w| (w.clone(), format!("id:{}", s.id())))
                .or_else(|| {
                    s.key()
                        .and_then(|k| by_key.get(k).map(|w| (w.clone(), k.to_string())))
                });
            if let Some(((wl, wid), on)) = lost {
                conflicts.push(Conflict {
                    on: on.clone(),
                    winner: (wl, wid.clone()),
                    loser: (s.layer().into(), s.id().to_string()),
                });
                reports.push(report_of(
                    &s,
                    false,
                    SectionStatus::Overridden {
                        by_layer: wl,
                        by_id: wid,
                        on,
                    },
                ));
                continue;
            }
            by_id.insert(s.id().clone(), (s.layer().into(), s.id().to_string()));
            if let Some(k) = s.key() {
                by_key.insert(k.clone(), (s.layer().into(), s.id().to_string()));
            }
            winners.push(s);
        }
        if native.is_some() {
            winners = check_pairs(winners, opts.pairs, &mut reports)?;
            // Providers refuse empty text blocks: a user or assistant turn with nothing to say
            // is left out and reported (ADR-0015).
            winners.retain(|s| {
                let empty = s
                    .turn()
                    .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
                    .is_some_and(|t| matches!(t.role, Role::User | Role::Assistant))
                    && s.content().as_str().trim().is_empty();
                if empty {
                    reports.push(report_of(
                        s,
                        false,
                        SectionStatus::Filtered {
                            reason: "empty".into(),
                        },
                    ));
                }
                !empty
            });
        }

        // Render, apply section caps, build trimming units.
        let mut cands: Vec<Cand> = Vec::with_capacity(winners.len());
        let mut units: Vec<Unit> = Vec::new();
        let mut unit_of_call: HashMap<Arc<str>, usize> = HashMap::new();
        for s in winners {
            let sticky = s.sticky() || req.protected_priorities.contains(&s.priority());
            let enc = req.render.encodings[s.layer().index()];
            let s = match req.render.invisible {
                Invisible::Escape => s,
                Invisible::Strip => strip_invisible(&s),
            };
            let mut rendered = self.render(&s, enc, false, native.is_some());
            let mut section = s;
            let mut cut_from = None;
            if let Some(cap) = budget.section_cap.map(u64::from) {
                if rendered.tokens > cap && !sticky {
                    match self.cut_to(&section, enc, cap, native.is_some()) {
                        Some((c, r)) => {
                            cut_from = Some(rendered.tokens);
                            section = c;
                            rendered = r;
                        }
                        None => {
                            reports.push(report_of(
                                &section,
                                sticky,
                                SectionStatus::Dropped {
                                    reason: "section_cap".into(),
                                },
                            ));
                            continue;
                        }
                    }
                }
            }
            let call = section
                .turn()
                .filter(|_| section.layer() == RuntimeLayer::WorkingMemory)
                .and_then(|t| t.call_id.clone());
            let unit = match call.as_ref().and_then(|c| unit_of_call.get(c)) {
                Some(u) => *u,
                None => {
                    units.push(Unit {
                        layer: section.layer(),
                        members: Vec::new(),
                        sticky: false,
                        turn_seq: None,
                        score: 0,
                        first_id: section.id().clone(),
                        tokens: 0,
                        chars: 0,
                        dropped: false,
                    });
                    if let Some(c) = call {
                        unit_of_call.insert(c, units.len() - 1);
                    }
                    units.len() - 1
                }
            };
            let u = &mut units[unit];
            u.members.push(cands.len());
            u.sticky |= sticky;
            u.score = u.score.max(section.score());
            if section.layer() == RuntimeLayer::WorkingMemory {
                if let Some(t) = section.turn() {
                    u.turn_seq = Some(u.turn_seq.map_or(t.seq, |q| q.min(t.seq)));
                }
            }
            u.first_id = u.first_id.clone().min(section.id().clone());
            u.tokens += rendered.tokens;
            u.chars += rendered.chars;
            reports.push(report_of(&section, sticky, SectionStatus::Kept));
            cands.push(Cand {
                section,
                sticky,
                rendered,
                cut_from,
                unit,
                report_idx: reports.len() - 1,
            });
        }

        // Sticky sections must fit with identity, or the assembly fails (I2).
        let sticky_tokens: u64 = units.iter().filter(|u| u.sticky).map(|u| u.tokens).sum();
        let sticky_chars: u64 = units.iter().filter(|u| u.sticky).map(|u| u.chars).sum();
        let sticky_count = cands.iter().filter(|c| c.sticky).count();
        if base_tokens + sticky_tokens > fit_budget {
            return Err(AssembleError::StickyExceedsBudget {
                count: sticky_count,
                needed: base_tokens + sticky_tokens,
                budget: fit_budget,
            });
        }
        if let Some(mc) = max_chars.filter(|mc| id_chars + sticky_chars > *mc) {
            return Err(AssembleError::CharsExceeded {
                needed: id_chars + sticky_chars,
                limit: mc,
            });
        }

        // Upper bounds of each layer's omission marker, reserved once the layer drops anything.
        let mut marker_bound = [(0u64, 0u64); 4];
        for l in RuntimeLayer::ALL {
            let n = units.iter().filter(|u| u.layer == l).count() as u64;
            let t: u64 = units
                .iter()
                .filter(|u| u.layer == l)
                .map(|u| u.tokens)
                .sum();
            if n > 0 {
                marker_bound[l.index()] =
                    self.text_cost(&marker_text(l, n.max(10) * 10, t.max(10) * 10));
            }
        }

        // Removal order: lowest layer first; inside a layer the lowest score first, and for
        // working-memory turns the oldest first (a tool call and its result go together).
        let mut order: Vec<usize> = (0..units.len()).filter(|u| !units[*u].sticky).collect();
        order.sort_by(|a, b| {
            let (ua, ub) = (&units[*a], &units[*b]);
            let ka = (
                Reverse(ua.layer),
                ua.turn_seq.is_some(),
                ua.turn_seq.unwrap_or(0),
                ua.score,
            );
            let kb = (
                Reverse(ub.layer),
                ub.turn_seq.is_some(),
                ub.turn_seq.unwrap_or(0),
                ub.score,
            );
            ka.cmp(&kb).then_with(|| ub.first_id.cmp(&ua.first_id))
        });

        let mut tally = Tally {
            tokens: [0; 4],
            chars: [0; 4],
            drops: [0; 4],
            base: (base_tokens, id_chars),
            marker: marker_bound,
        };
        for u in &units {
            tally.tokens[u.layer.index()] += u.tokens;
            tally.chars[u.layer.index()] += u.chars;
        }
        let mut dropped_reason: HashMap<usize, &'static str> = HashMap::new();

        // Per-layer soft budgets.
        for l in RuntimeLayer::ALL {
            let Some(lb) = budget.layers.get(l).map(u64::from) else {
                continue;
            };
            let in_layer: Vec<usize> = order
                .iter()
                .copied()
                .filter(|u| units[*u].layer == l)
                .collect();
            for u in in_layer {
                if tally.layer_used(l) <= lb {
                    break;
                }
                tally.drop(&mut units[u]);
                dropped_reason.insert(u, "layer_budget");
            }
        }
        // The total budget and the character cap.
        let fits = |(t, c): (u64, u64)| t <= fit_budget && max_chars.is_none_or(|mc| c <= mc);
        let mut last_budget_drop = None;
        for &u in &order {
            let (t, _) = tally.total();
            if fits(tally.total()) {
                break;
            }
            if units[u].dropped {
                continue;
            }
            tally.drop(&mut units[u]);
            dropped_reason.insert(
                u,
                if t > fit_budget {
                    "budget"
                } else {
                    "max_total_chars"
                },
            );
            last_budget_drop = Some(u);
        }
        if !fits(tally.total()) {
            return Err(AssembleError::StickyExceedsBudget {
                count: sticky_count,
                needed: tally.total().0,
                budget: fit_budget,
            });
        }

        // Use the slack: re-add the last dropped single section in cut form.
        if let Some(u) = last_budget_drop.filter(|u| units[*u].members.len() == 1) {
            let i = units[u].layer.index();
            let mut trial = tally.clone();
            trial.undrop_marker(units[u].layer);
            let (t, c) = trial.total();
            let slack = fit_budget.saturating_sub(t);
            if slack >= MIN_CUT_TOKENS {
                let ci = units[u].members[0];
                let enc = req.render.encodings[i];
                if let Some((cut, r)) =
                    self.cut_to(&cands[ci].section, enc, slack, native.is_some())
                {
                    if max_chars.is_none_or(|mc| c + r.chars <= mc) {
                        let full = cands[ci].rendered.tokens;
                        cands[ci].section = cut;
                        cands[ci].cut_from = Some(cands[ci].cut_from.unwrap_or(full));
                        cands[ci].rendered = r.clone();
                        units[u].dropped = false;
                        units[u].tokens = r.tokens;
                        units[u].chars = r.chars;
                        tally = trial;
                        tally.tokens[i] += r.tokens;
                        tally.chars[i] += r.chars;
                        dropped_reason.remove(&u);
                    }
                }
            }
        }
        let drops = tally.drops;

        // Output order: layer, stable before dynamic, phase, then chronology for turns and
        // score for the rest (ADR-0007, ADR-0013).
        let mut kept: Vec<usize> = (0..cands.len())
            .filter(|c| !units[cands[*c].unit].dropped)
            .collect();
        // Keys are computed once per section, not per comparison (linear cost, ADR-0008).
        kept.sort_by_cached_key(|c| order_key(&cands[*c].section));

        let mut dropped_tokens = [0u64; 4];
        for u in &units {
            if u.dropped {
                dropped_tokens[u.layer.index()] += u.tokens;
            }
        }
        let (
            text,
            tokens_so_far,
            chars_so_far,
            stable_prefix,
            breakpoints,
            layer_out,
            kept_n,
            cut_n,
            placed,
        ) = if let Some(provider) = native {
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
                (drops, dropped_tokens),
            )?;
            let identity_end = Breakpoint {
                byte: identity_text.len(),
                token: id_tokens,
                after_layer: Layer::Characteristics,
            };
            (
                identity_text.to_owned(),
                p.total,
                id_chars + p.chars,
                identity_end,
                vec![identity_end],
                p.layer_out,
                p.kept_n,
                p.cut_n,
                Some(p.conversation),
            )
        } else {
            let mut text = String::with_capacity(
                identity_text.len()
                    + cands.iter().map(|c| c.rendered.text.len()).sum::<usize>()
                    + 256,
            );
            text.push_str(identity_text);
            let identity_end = Breakpoint {
                byte: text.len(),
                token: id_tokens,
                after_layer: Layer::Characteristics,
            };
            let mut tokens_so_far = id_tokens;
            let mut chars_so_far = id_chars;
            let mut stable_prefix = identity_end;
            let mut stable_run = true;
            let mut breakpoints = vec![identity_end];
            let mut layer_out = [0u64; 4];
            let mut kept_n = [0usize; 4];
            let mut cut_n = [0usize; 4];
            let mut pos = 0;
            for l in RuntimeLayer::ALL {
                let i = l.index();
                while pos < kept.len() && cands[kept[pos]].section.layer() == l {
                    let cand = &cands[kept[pos]];
                    if cand.section.stability() != Stability::Stable {
                        stable_run = false;
                    }
                    text.push_str(&cand.rendered.text);
                    tokens_so_far += cand.rendered.tokens;
                    chars_so_far += cand.rendered.chars;
                    layer_out[i] += cand.rendered.tokens;
                    if cand.cut_from.is_some() {
                        cut_n[i] += 1;
                    } else {
                        kept_n[i] += 1;
                    }
                    if stable_run {
                        stable_prefix = Breakpoint {
                            byte: text.len(),
                            token: tokens_so_far,
                            after_layer: l.into(),
                        };
                    }
                    pos += 1;
                }
                if drops[i] > 0 {
                    stable_run = false;
                    let m = marker_text(l, drops[i], dropped_tokens[i]);
                    let (mt, mc) = self.text_cost(&m);
                    text.push_str(&m);
                    tokens_so_far += mt;
                    chars_so_far += mc;
                    layer_out[i] += mt;
                }
                if layer_out[i] > 0 && text.len() > stable_prefix.byte {
                    breakpoints.push(Breakpoint {
                        byte: text.len(),
                        token: tokens_so_far,
                        after_layer: l.into(),
                    });
                }
            }
            if stable_prefix.byte > identity_end.byte {
                breakpoints.insert(1, stable_prefix);
            }
            breakpoints.truncate(4);
            (
                text,
                tokens_so_far,
                chars_so_far,
                stable_prefix,
                breakpoints,
                layer_out,
                kept_n,
                cut_n,
                None,
            )
        };
        // Finish the report.
        for (u, why) in &dropped_reason {
            for &m in &units[*u].members {
                reports[cands[m].report_idx].status = SectionStatus::Dropped {
                    reason: (*why).into(),
                };
            }
        }
        for c in &cands {
            let r = &mut reports[c.report_idx];
            if matches!(r.status, SectionStatus::Kept) {
                r.tokens = c.rendered.tokens;
                r.chars = c.rendered.chars;
                if let Some(full) = c.cut_from {
                    r.status = SectionStatus::Cut { full_tokens: full };
                }
            }
        }
        let rank: HashMap<usize, usize> = kept
            .iter()
            .enumerate()
            .map(|(r, c)| (cands[*c].report_idx, r))
            .collect();
        let mut indexed: Vec<(usize, SectionReport)> = reports.into_iter().enumerate().collect();
        indexed.sort_by(|(i, r), (j, q)| {
            let ri = rank.get(i).copied().unwrap_or(usize::MAX);
            let rj = rank.get(j).copied().unwrap_or(usize::MAX);
            (ri, r.layer, &r.id).cmp(&(rj, q.layer, &q.id))
        });
        let sections = indexed.into_iter().map(|(_, r)| r).collect();
        let layers = RuntimeLayer::ALL
            .iter()
            .map(|l| {
                let i = l.index();
                LayerReport {
                    layer: (*l).into(),
                    tokens: layer_out[i],
                    budget: budget.layers.get(*l).map(u64::from),
                    kept: kept_n[i],
                    cut: cut_n[i],
                    dropped: units
                        .iter()
                        .filter(|u| u.dropped && u.layer == *l)
                        .map(|u| u.members.len())
                        .sum(),
                }
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
        Ok(AssembledContext {
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
        })
    }
}

/// The outcome of placing an assembly into a provider's channels.
struct Placed {
    conversation: Conversation,
    total: u64,
    chars: u64,
    layer_out: [u64; 4],
    kept_n: [usize; 4],
    cut_n: [usize; 4],
}

/// Running totals of the trimming loop: tokens and characters kept per layer, drops per layer,
/// identity cost, and the reserved upper bound of each layer's omission marker.
#[derive(Clone)]
struct Tally {
    tokens: [u64; 4],
    chars: [u64; 4],
    drops: [u64; 4],
    base: (u64, u64),
    marker: [(u64, u64); 4],
}

impl Tally {
    fn total(&self) -> (u64, u64) {
        let (mut t, mut c) = self.base;
        for i in 0..4 {
            t += self.tokens[i];
            c += self.chars[i];
            if self.drops[i] > 0 {
                t += self.marker[i].0;
                c += self.marker[i].1;
            }
        }
        (t, c)
    }

    fn layer_used(&self, l: RuntimeLayer) -> u64 {
        let i = l.index();
        self.tokens[i]
            + if self.drops[i] > 0 {
                self.marker[i].0
            } else {
                0
            }
    }

    fn drop(&mut self, unit: &mut Unit) {
        unit.dropped = true;
        let i = unit.layer.index();
        self.tokens[i] -= unit.tokens;
        self.chars[i] -= unit.chars;
        self.drops[i] += 1;
    }

    /// Count one drop of layer `l` as undone (the unit's cost is added back by the caller).
    fn undrop_marker(&mut self, l: RuntimeLayer) {
        self.drops[l.index()] -= 1;
    }
}

fn order_key(
    s: &Section,
) -> (
    RuntimeLayer,
    Stability,
    Phase,
    u64,
    Reverse<u64>,
    SectionId,
    ContentHash,
) {
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
        s.id().clone(),
        s.content_hash(),
    )
}

fn marker_text(l: RuntimeLayer, count: u64, tokens: u64) -> String {
    let mut m = String::new();
    let what = if count == 1 {
        "1 section".to_owned()
    } else {
        format!("{count} sections")
    };
    format::write_omitted(&mut m, l.into(), &what, "budget", tokens);
    m
}

fn report_of(s: &Section, sticky: bool, status: SectionStatus) -> SectionReport {
    SectionReport {
        id: s.id().to_string(),
        layer: s.layer().into(),
        tokens: 0,
        chars: 0,
        sticky,
        stable: s.stability() == Stability::Stable,
        status,
        provenance: s.provenance().clone(),
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

/// The budget and tier of a request.
fn resolve_budget(agent: &VerifiedAgent, spec: Option<&BudgetSpec>) -> (Budget, Tier) {
    match spec.unwrap_or(&BudgetSpec::AgentDefault) {
        BudgetSpec::AgentDefault => {
            let b = agent.budget().clone();
            let tier = Tier::for_context_window(b.total_tokens);
            (b, tier)
        }
        BudgetSpec::Explicit(b) => (b.clone(), Tier::for_context_window(b.total_tokens)),
        BudgetSpec::ContextWindow(w) => {
            let base = agent.budget();
            let b = Budget {
                total_tokens: *w,
                response_reserve: base.response_reserve.max(w / 8),
                ..base.clone()
            };
            (b, Tier::for_context_window(*w))
        }
    }
}

/// Narrow the tool set: layer 1's allowlist, intersected with the caller's policy, intersected
/// with what is announced (I4, ADR-0007). A tool whose signed entry pins a schema is refused when
/// the announcement carries another schema or another description ("definition changed");
/// otherwise it takes the announced schema. Descriptions follow [`ToolDescriptions`]: by default
/// the signed one replaces the announced one (ADR-0015). For the plain-text format the effective
/// tools are also listed in a fenced layer-3 catalog section.
fn narrow_tools(
    agent: &VerifiedAgent,
    req: &AssemblyRequest,
) -> (ToolsReport, Option<Section>, Vec<RequestTool>) {
    let identity = agent.identity();
    let policy = req.provider_options.tool_descriptions;
    let mut report = ToolsReport::default();
    if let ToolPolicy::Only(set) = &req.tool_policy {
        for name in set {
            if !identity.allows(name) {
                report.refused.push((
                    name.to_string(),
                    "not in layer 1's allowlist; delegated context cannot widen it".into(),
                ));
            }
        }
    }
    let mut effective: BTreeMap<ToolName, RequestTool> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for t in &req.tools {
        if !seen.insert(t.name.clone()) {
            report.refused.push((
                t.name.to_string(),
                "announced more than once; the first announcement is used".into(),
            ));
            continue;
        }
        let by = t
            .server
            .as_deref()
            .map_or_else(|| "the runtime".to_owned(), |s| format!("MCP server `{s}`"));
        let Some(signed) = identity.tools().iter().find(|a| a.name == t.name) else {
            report.refused.push((
                t.name.to_string(),
                format!("announced by {by} but not in layer 1's allowlist"),
            ));
            continue;
        };
        if !req.tool_policy.permits(&t.name) {
            report.refused.push((
                t.name.to_string(),
                "restricted by the delegated tool policy".into(),
            ));
            continue;
        }
        let (parameters, schema_source) = match (&signed.parameters, &t.parameters) {
            (Some(pinned), Some(announced)) if pinned != announced => {
                report.refused.push((
                    t.name.to_string(),
                    format!(
                        "definition changed: {by} announced a schema ({}) that differs from the signed one ({})",
                        announced.digest(),
                        pinned.digest()
                    ),
                ));
                continue;
            }
            (Some(pinned), _) => {
                let announced = t.description.as_str();
                if !announced.is_empty() && announced != signed.description {
                    report.refused.push((
                        t.name.to_string(),
                        format!("definition changed: {by} announced a description that differs from the signed one"),
                    ));
                    continue;
                }
                (pinned.clone(), "signed")
            }
            (None, Some(announced)) => (announced.clone(), "announced"),
            (None, None) => (empty_schema(), "none"),
        };
        let description = match policy {
            ToolDescriptions::Signed => signed.description.clone(),
            ToolDescriptions::Withheld => String::new(),
            ToolDescriptions::AnnouncedDangerously => t.description.as_str().to_owned(),
        };
        effective.insert(
            t.name.clone(),
            RequestTool {
                name: t.name.clone(),
                description,
                parameters,
                schema_source: schema_source.to_owned(),
            },
        );
    }
    report.refused.sort();
    report.effective = effective.keys().cloned().collect();
    let tools: Vec<RequestTool> = effective.into_values().collect();
    if tools.is_empty() {
        return (report, None, tools);
    }
    let body: Vec<String> = tools
        .iter()
        .map(|t| {
            if t.description.is_empty() {
                format!("- {}", t.name)
            } else {
                format!("- {}: {}", t.name, t.description)
            }
        })
        .collect();
    let section = Section::builder(
        RuntimeLayer::Shared,
        TOOL_CATALOG_ID,
        format!("Tools available now:\n{}", body.join("\n")),
    )
    .and_then(|b| b.key(TOOL_CATALOG_KEY))
    .map(|b| {
        // The highest priority: among layer-3 catalogs claiming the key, this one wins (I4).
        b.phase(Phase::Tools)
            .stability(Stability::Stable)
            .priority(u32::MAX)
            .source(SourceKind::Static, "assembler")
            .build()
    })
    .ok();
    (report, section, tools)
}

/// `{"type":"object","properties":{}}`: the schema of a tool whose arguments nobody described.
fn empty_schema() -> ToolSchema {
    let v = serde_json::json!({ "type": "object", "properties": {} });
    ToolSchema::from_value(&v).expect("an object literal is a tool schema")
}

/// Native turns that are the user's or the agent's own words are never cut; fenced data and
/// tool results may be (ADR-0015).
fn cuttable_natively(s: &Section) -> bool {
    match s
        .turn()
        .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
    {
        Some(t) => t.role == Role::ToolResult,
        None => true,
    }
}

/// Check the working-memory history of a provider-native request: every tool call has a name,
/// an id, JSON-object arguments and exactly one result after it, with no user or assistant turn
/// in between; every result answers a call. Unpaired turns fail the assembly, or are filtered
/// under [`PairPolicy::DropUnpaired`] (ADR-0015).
fn check_pairs(
    winners: Vec<Section>,
    policy: PairPolicy,
    reports: &mut Vec<SectionReport>,
) -> Result<Vec<Section>, AssembleError> {
    let turn_of = |s: &Section| {
        s.turn()
            .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
            .cloned()
    };
    let mut calls: BTreeMap<Arc<str>, u64> = BTreeMap::new();
    let mut results: BTreeMap<Arc<str>, u64> = BTreeMap::new();
    for s in &winners {
        let Some(t) = turn_of(s) else { continue };
        let dup = |what: &str, id: &str| AssembleError::History {
            why: format!(
                "two tool {what}s share the call id `{id}`; call ids must be unique in a session"
            ),
        };
        match t.role {
            Role::ToolCall => {
                let id = t.call_id.clone().ok_or_else(|| AssembleError::History {
                    why: format!("tool call `{}` has no call id", s.id()),
                })?;
                if t.name.is_none() {
                    return Err(AssembleError::History {
                        why: format!("tool call `{}` has no tool name", s.id()),
                    });
                }
                match serde_json::from_str::<serde_json::Value>(s.content().as_str()) {
                    Ok(v) if v.is_object() => {}
                    _ => {
                        return Err(AssembleError::History {
                            why: format!(
                                "tool call `{}` has arguments that are not a JSON object",
                                s.id()
                            ),
                        })
                    }
                }
                if calls.insert(id.clone(), t.seq).is_some() {
                    return Err(dup("call", &id));
                }
            }
            Role::ToolResult => {
                let id = t.call_id.clone().ok_or_else(|| AssembleError::History {
                    why: format!("tool result `{}` has no call id", s.id()),
                })?;
                if results.insert(id.clone(), t.seq).is_some() {
                    return Err(dup("result", &id));
                }
            }
            Role::User | Role::Assistant => {}
        }
    }
    let mut unpaired: BTreeSet<Arc<str>> = BTreeSet::new();
    for (id, seq) in &calls {
        match results.get(id) {
            Some(r) if r > seq => {}
            Some(_) => {
                return Err(AssembleError::History {
                    why: format!("the result of tool call `{id}` comes before the call"),
                })
            }
            None => {
                unpaired.insert(id.clone());
            }
        }
    }
    for id in results.keys() {
        if !calls.contains_key(id) {
            unpaired.insert(id.clone());
        }
    }
    if let (Some(id), PairPolicy::Error) = (unpaired.iter().next(), policy) {
        return Err(AssembleError::History {
            why: format!(
                "tool call `{id}` has no {}; record the missing turn, or set the pair policy to drop_unpaired",
                if calls.contains_key(id) { "result" } else { "call" }
            ),
        });
    }
    // No user or assistant turn may stand between a call and its result.
    let mut turns: Vec<(u64, Role, Option<Arc<str>>)> = winners
        .iter()
        .filter_map(|s| turn_of(s).map(|t| (t.seq, t.role, t.call_id)))
        .filter(|(_, _, c)| c.as_ref().is_none_or(|c| !unpaired.contains(c)))
        .collect();
    turns.sort();
    let mut pending: BTreeSet<Arc<str>> = BTreeSet::new();
    for (seq, role, call) in turns {
        match (role, call) {
            (Role::ToolCall, Some(c)) => {
                pending.insert(c);
            }
            (Role::ToolResult, Some(c)) => {
                pending.remove(&c);
            }
            _ => {
                if let Some(c) = pending.iter().next() {
                    return Err(AssembleError::History {
                        why: format!("turn {seq} stands between tool call `{c}` and its result; results must follow their calls"),
                    });
                }
            }
        }
    }
    let mut out = Vec::with_capacity(winners.len());
    for s in winners {
        let drop = turn_of(&s)
            .and_then(|t| t.call_id)
            .is_some_and(|c| unpaired.contains(&c));
        if drop {
            reports.push(report_of(
                &s,
                false,
                SectionStatus::Filtered {
                    reason: "unpaired".into(),
                },
            ));
        } else {
            out.push(s);
        }
    }
    Ok(out)
}
