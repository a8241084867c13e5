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
use std::sync::{Arc, Mutex};

use strata_agentdef::VerifiedAgent;
use strata_core::format::{self, Authority, Encoding, SectionHeader};
use strata_core::{
    Budget, ContentHash, Layer, Phase, Role, RuntimeLayer, Section, SectionId, SectionKey,
    Stability, Tier, Tokenizer, ToolName,
};

mod fit;
mod measure;
mod place;
mod select;

use fit::{Fitted, Limits};
use measure::Measured;
use place::Laid;
use select::Selected;

use crate::error::AssembleError;
use crate::output::AssembledContext;
use crate::provider::RequestTool;
use crate::report::{Breakpoint, LayerReport, Report, RequestReport, SectionReport, SectionStatus};
use crate::request::{AssemblyRequest, BudgetSpec};

/// The tools of `announced` that an assembly of `agent` under `policy` keeps: in layer 1's
/// allowlist, permitted by the delegated policy, announced once, with a schema and description
/// that match a pinned signed entry (I4, ADR-0007). The same narrowing as assembly itself, for
/// callers that must hand contributors only what the model may see.
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
    /// Bytes now held (texts and keys, with a fixed overhead per entry).
    pub bytes: usize,
    /// Times the cache was emptied to stay within its byte limit.
    pub evictions: u64,
}

#[derive(Default)]
struct Cache {
    elements: HashMap<ElementKey, Arc<Rendered>>,
    texts: HashMap<ContentHash, (u64, u64)>,
    stats: CacheStats,
    /// Bytes held: rendered texts, ids and sources, plus a fixed overhead per entry.
    bytes: usize,
}

/// The Context Assembler: the single enforcement point for priority, immutability, budgets and
/// fencing (ADR-0006). Share one per tokenizer across sessions; it caches rendered elements and
/// their token counts by content hash.
pub struct Assembler {
    tokenizer: Arc<dyn Tokenizer>,
    cache: Mutex<Cache>,
    cache_limit: usize,
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
            cache_limit: DEFAULT_CACHE_BYTES,
        }
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
            entries: c.elements.len() + c.texts.len(),
            bytes: c.bytes,
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
        let size = r.text.len() + key.id.as_str().len() + key.source.len() + ENTRY_OVERHEAD;
        self.make_room(&mut c, size);
        c.bytes += size;
        c.elements.insert(key, r.clone());
        r
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
            c.bytes = 0;
            c.stats.evictions += 1;
        }
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
        if native && !select::cuttable_natively(s) {
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

        // Tools: capabilities only narrow (I4, ADR-0007); schemas pinned (ADR-0015).
        let (tools_report, catalog, request_tools) = select::narrow_tools(agent, req);
        // The catalog's id and key belong to the assembler: a runtime section claiming either
        // is left out and reported, whatever its priority (I4). For a provider request the
        // tools travel in the request's own field, so no catalog section is written.
        let mut reserved = Vec::new();
        let mut input: Vec<Section> = Vec::with_capacity(req.sections.len() + 1);
        for s in &req.sections {
            if s.id().as_str() == TOOL_CATALOG_ID
                || s.key().is_some_and(|k| k.as_str() == TOOL_CATALOG_KEY)
            {
                reserved.push(report_of(
                    s,
                    false,
                    SectionStatus::Filtered {
                        reason: "reserved".into(),
                    },
                ));
            } else {
                input.push(s.clone());
            }
        }
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

        // The stages, each with a typed hand-off (see ARCHITECTURE.md).
        let Selected {
            winners,
            mut reports,
            conflicts,
        } = select::select(agent, req, input)?;
        reports.extend(reserved);
        let mut measured = self.measure(winners, req, &budget, &mut reports);
        let Fitted {
            drops,
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
        let Measured { cands, mut units } = measured;

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
                    (drops, dropped_tokens),
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
                (drops, dropped_tokens),
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
