//! Stage 5 of assembly: place the kept sections, in output order, into the channels of a
//! provider request (system, stable context, history, dynamic context, newest user turn) or
//! into the plain-text layout (identity, then fenced layers 3-6 with omission markers). What is
//! kept was decided by fitting; placing only places and counts.
//!
//! Hand-off: [`Laid`], the output with its exact counts.

use strata_agentdef::VerifiedAgent;
use strata_core::{Layer, Role, RuntimeLayer, Stability, ToolName};

use super::fit::Fitted;
use super::frame::Framed;
use super::{marker_text, order_key, Cand};
use crate::assemble::element::Meter;
use crate::error::AssembleError;
use crate::per_layer::PerLayer;
use crate::provider::{
    Block, Conversation, Message, MessageKind, MessageRole, Provider, ProviderOptions,
};
use crate::report::{Breakpoint, DropReason};

/// A laid-out assembly: the output with its exact counts.
pub(super) struct Laid {
    /// The plain text, or for provider requests the system channel.
    pub text: String,
    /// Tokens of what is sent.
    pub tokens: u64,
    /// Characters of what is sent.
    pub chars: u64,
    /// End of the stable prefix of the text.
    pub stable_prefix: Breakpoint,
    /// Cache breakpoints of the text.
    pub breakpoints: Vec<Breakpoint>,
    /// Per runtime layer: tokens, sections kept whole, sections cut.
    pub counts: Counts,
    /// The kept candidates in output order, with the turns fitting left out at the start of a
    /// provider history where they stood: the first part of the report's order.
    pub kept: Vec<usize>,
    /// The provider conversation, if one was placed.
    pub conversation: Option<Conversation>,
}

/// What a layout holds per runtime layer.
#[derive(Default)]
pub(super) struct Counts {
    /// Tokens per runtime layer, omission markers included.
    pub tokens: PerLayer<u64>,
    /// Sections kept whole per runtime layer.
    pub kept: PerLayer<usize>,
    /// Sections cut per runtime layer.
    pub cut: PerLayer<usize>,
    /// Characters of the runtime layers.
    pub chars: u64,
}

impl Counts {
    /// Count kept candidate `c`.
    fn add(&mut self, c: &Cand<'_>) {
        let l = c.section().layer();
        self.tokens[l] += c.rendered().tokens;
        self.chars += c.rendered().chars;
        if c.cut.is_some() {
            self.cut[l] += 1;
        } else {
            self.kept[l] += 1;
        }
    }
}

/// Place what fitting kept: the kept candidates in output order (layer, stable before dynamic,
/// phase, then chronology for turns and score for the rest, then the canonical order of
/// selection; ADR-0007, ADR-0013), laid out for the request's provider or as plain text.
pub(super) fn place(
    m: &Meter<'_>,
    agent: &VerifiedAgent,
    framed: &Framed<'_>,
    fitted: &Fitted<'_>,
) -> Result<Laid, AssembleError> {
    let settings = &framed.settings;
    let (cands, units) = (&fitted.cands, &fitted.units);
    // The turns left out at a provider history's start are listed where they stood.
    let mut listed: Vec<usize> = (0..cands.len())
        .filter(|c| {
            let u = cands[*c].unit;
            !units[u].dropped || fitted.dropped_reason[u] == Some(DropReason::HistoryStart)
        })
        .collect();
    // Keys are computed once per section and hold no strings (linear cost, ADR-0037).
    listed.sort_by_cached_key(|c| order_key(cands[*c].section(), *c));
    let kept: Vec<usize> = listed
        .iter()
        .copied()
        .filter(|c| !units[cands[*c].unit].dropped)
        .collect();
    let markers = Markers {
        drops: &fitted.drops,
        bytes: &fitted.dropped_bytes,
        reasons: PerLayer::from_fn(|l| fitted.marker_reason(l)),
    };
    let identity_text = agent.identity_text();
    let (id_tokens, id_chars) = framed.identity;
    let Some(provider) = settings.provider else {
        let laid = layout_text(m, identity_text, framed.identity, cands, &kept, &markers);
        return Ok(Laid {
            kept: listed,
            ..laid
        });
    };
    let channels = Channels {
        provider,
        opts: settings.provider_options,
        system: identity_text,
        system_tokens: framed.system_frame + id_tokens,
        tool_tokens: framed.tool_tokens,
    };
    let (conversation, counts, total) =
        provider_request(m, &channels, framed, cands, &kept, &markers)?;
    let identity_end = Breakpoint {
        byte: identity_text.len(),
        token: id_tokens,
        after_layer: Layer::Characteristics,
    };
    Ok(Laid {
        text: identity_text.to_owned(),
        tokens: total,
        chars: id_chars + counts.chars,
        stable_prefix: identity_end,
        breakpoints: vec![identity_end],
        counts,
        kept: listed,
        conversation: Some(conversation),
    })
}

/// The omission markers to write: units dropped per layer, and their bytes.
struct Markers<'f> {
    drops: &'f PerLayer<u64>,
    bytes: &'f PerLayer<u64>,
    reasons: PerLayer<&'static str>,
}

impl Markers<'_> {
    /// Layer `l`'s marker with its tokens and characters, if it drops anything.
    fn of(&self, m: &Meter<'_>, l: RuntimeLayer) -> Option<(String, (u64, u64))> {
        (self.drops[l] > 0).then(|| {
            let text = marker_text(l, self.drops[l], self.bytes[l], self.reasons[l]);
            let cost = m.text_cost(&text);
            (text, cost)
        })
    }
}

/// The fixed parts of a provider request.
struct Channels<'c> {
    provider: Provider,
    opts: &'c ProviderOptions,
    system: &'c str,
    system_tokens: u64,
    tool_tokens: u64,
}

/// Place the kept sections into a provider's channels (ADR-0014): the system channel gets the
/// signed text alone; then, in cache order, fenced stable context, the history as native turns,
/// fenced per-turn context with the omission markers, and the newest user turn. The total
/// counts the margin of a provider without a public tokenizer.
fn provider_request(
    m: &Meter<'_>,
    ch: &Channels<'_>,
    framed: &Framed<'_>,
    cands: &[Cand<'_>],
    kept: &[usize],
    markers: &Markers<'_>,
) -> Result<(Conversation, Counts, u64), AssembleError> {
    let mut turns: Vec<usize> = kept
        .iter()
        .copied()
        .filter(|c| cands[*c].turn().is_some())
        .collect();
    turns.sort_by_cached_key(|c| {
        (
            cands[*c].turn().map_or(0, |t| t.seq),
            cands[*c].section().id().clone(),
        )
    });
    let (stable, dynamic): (Vec<usize>, Vec<usize>) = kept
        .iter()
        .copied()
        .filter(|c| cands[*c].turn().is_none())
        .partition(|c| cands[*c].section().stability() == Stability::Stable);
    let newest = turns
        .last()
        .copied()
        .filter(|c| cands[*c].turn().map(|t| t.role) == Some(Role::User));
    if newest.is_some() {
        turns.pop();
    }
    let mut counts = Counts::default();
    let mut messages = Vec::new();
    let user_frame = m.frame_msg("user");
    messages.extend(stable_message(cands, &stable, user_frame, &mut counts));
    for &c in &turns {
        counts.add(&cands[c]);
        push_turn(m, &mut messages, &cands[c]);
    }
    messages.extend(dynamic_message(m, cands, &dynamic, markers, &mut counts));
    if let Some(c) = newest {
        let cand = &cands[c];
        counts.add(cand);
        messages.push(Message {
            role: MessageRole::User,
            kind: MessageKind::NewestUser,
            blocks: vec![Block::Text {
                text: cand.rendered().text.clone(),
            }],
            tokens: cand.rendered().tokens,
        });
    }
    if messages.is_empty() {
        return Err(AssembleError::EmptyConversation);
    }
    let raw = ch.system_tokens + ch.tool_tokens + messages.iter().map(|m| m.tokens).sum::<u64>();
    let margin = if ch.provider.tokenizer_is_public() {
        0
    } else {
        u64::from(ch.opts.estimate_margin_pct)
    };
    let conversation = Conversation {
        provider: ch.provider,
        system: ch.system.to_owned(),
        messages,
        tools: framed.request_tools.clone(),
        system_tokens: ch.system_tokens,
        tool_tokens: ch.tool_tokens,
        system_role: ch.opts.system_role,
    };
    Ok((conversation, counts, (raw * (100 + margin)).div_ceil(100)))
}

/// The stable context: one user-position message of the fenced elements of `list`, if any.
fn stable_message(
    cands: &[Cand<'_>],
    list: &[usize],
    user_frame: u64,
    counts: &mut Counts,
) -> Option<Message> {
    if list.is_empty() {
        return None;
    }
    let mut text = String::new();
    let mut tokens = user_frame;
    for &c in list {
        text.push_str(&cands[c].rendered().text);
        tokens += cands[c].rendered().content_tokens;
        counts.add(&cands[c]);
    }
    Some(Message {
        role: MessageRole::User,
        kind: MessageKind::StableContext,
        blocks: vec![Block::Text { text }],
        tokens,
    })
}

/// The per-turn context: one user-position message of the fenced elements of `dynamic` (in
/// layer order), each layer's omission marker after its elements; `None` if it is empty.
fn dynamic_message(
    m: &Meter<'_>,
    cands: &[Cand<'_>],
    dynamic: &[usize],
    markers: &Markers<'_>,
    counts: &mut Counts,
) -> Option<Message> {
    let mut text = String::new();
    let mut tokens = m.frame_msg("user");
    let mut pos = 0;
    for l in RuntimeLayer::ALL {
        while pos < dynamic.len() && cands[dynamic[pos]].section().layer() == l {
            let c = &cands[dynamic[pos]];
            text.push_str(&c.rendered().text);
            tokens += c.rendered().content_tokens;
            counts.add(c);
            pos += 1;
        }
        if let Some((mt, (mtokens, mchars))) = markers.of(m, l) {
            text.push_str(&mt);
            tokens += mtokens;
            counts.tokens[l] += mtokens;
            counts.chars += mchars;
        }
    }
    (!text.is_empty()).then(|| Message {
        role: MessageRole::User,
        kind: MessageKind::DynamicContext,
        blocks: vec![Block::Text { text }],
        tokens,
    })
}

/// Add one history turn as a native message (ADR-0014): user and assistant words as their own
/// messages, a tool call joining the assistant message before it, tool results sharing one
/// user-position message. A turn with reasoning opens its own message with it (ADR-0043).
fn push_turn(meter: &Meter<'_>, msgs: &mut Vec<Message>, cand: &Cand<'_>) {
    let Some(t) = cand.turn() else {
        return;
    };
    let text = cand.rendered().text.clone();
    let tokens = cand.rendered().tokens;
    let last = msgs.last_mut().filter(|m| m.kind == MessageKind::History);
    let (role, block, joins) = match t.role {
        Role::User | Role::Assistant => {
            let role = if t.role == Role::User {
                MessageRole::User
            } else {
                MessageRole::Assistant
            };
            (role, Block::Text { text }, None)
        }
        Role::ToolCall => {
            let block = Block::ToolUse {
                id: t.call_id.as_deref().unwrap_or_default().to_owned(),
                name: t
                    .name
                    .clone()
                    .unwrap_or_else(|| ToolName::new("unnamed").expect("a valid literal name")),
                arguments: text,
            };
            let joined =
                last.filter(|m| m.role == MessageRole::Assistant && t.reasoning.is_empty());
            let call_tokens = tokens - meter.frame_msg("assistant");
            (
                MessageRole::Assistant,
                block,
                joined.map(|m| (m, call_tokens)),
            )
        }
        Role::ToolResult => {
            let block = Block::ToolResult {
                id: t.call_id.as_deref().unwrap_or_default().to_owned(),
                content: text,
                is_error: t.is_error,
            };
            let only_results = |m: &Message| {
                m.role == MessageRole::User
                    && m.blocks
                        .iter()
                        .all(|b| matches!(b, Block::ToolResult { .. }))
            };
            (
                MessageRole::User,
                block,
                last.filter(|m| only_results(m)).map(|m| (m, tokens)),
            )
        }
    };
    match joins {
        Some((msg, added)) => {
            msg.blocks.push(block);
            msg.tokens += added;
        }
        None => {
            let mut blocks: Vec<Block> = t
                .reasoning
                .iter()
                .map(|r| Block::Reasoning { block: r.clone() })
                .collect();
            blocks.push(block);
            msgs.push(Message {
                role,
                kind: MessageKind::History,
                blocks,
                tokens,
            });
        }
    }
}

/// Lay the kept candidates (in output order) out as one string: identity, then each runtime
/// layer's fenced sections followed by its omission marker (ADR-0009, ADR-0013).
fn layout_text(
    m: &Meter<'_>,
    identity_text: &str,
    (id_tokens, id_chars): (u64, u64),
    cands: &[Cand<'_>],
    kept: &[usize],
    markers: &Markers<'_>,
) -> Laid {
    let mut text = String::with_capacity(
        identity_text.len() + cands.iter().map(|c| c.rendered().text.len()).sum::<usize>() + 256,
    );
    text.push_str(identity_text);
    let identity_end = Breakpoint {
        byte: text.len(),
        token: id_tokens,
        after_layer: Layer::Characteristics,
    };
    let mut tokens = id_tokens;
    let mut counts = Counts::default();
    let mut stable_prefix = identity_end;
    let mut stable_run = true;
    let mut breakpoints = vec![identity_end];
    let mut pos = 0;
    for l in RuntimeLayer::ALL {
        while pos < kept.len() && cands[kept[pos]].section().layer() == l {
            let cand = &cands[kept[pos]];
            stable_run &= cand.section().stability() == Stability::Stable;
            text.push_str(&cand.rendered().text);
            tokens += cand.rendered().tokens;
            counts.add(cand);
            if stable_run {
                stable_prefix = Breakpoint {
                    byte: text.len(),
                    token: tokens,
                    after_layer: l.into(),
                };
            }
            pos += 1;
        }
        if let Some((mt, (mtokens, mchars))) = markers.of(m, l) {
            stable_run = false;
            text.push_str(&mt);
            tokens += mtokens;
            counts.chars += mchars;
            counts.tokens[l] += mtokens;
        }
        if counts.tokens[l] > 0 && text.len() > stable_prefix.byte {
            breakpoints.push(Breakpoint {
                byte: text.len(),
                token: tokens,
                after_layer: l.into(),
            });
        }
    }
    if stable_prefix.byte > identity_end.byte {
        breakpoints.insert(1, stable_prefix);
    }
    breakpoints.truncate(4);
    Laid {
        text,
        tokens,
        chars: id_chars + counts.chars,
        stable_prefix,
        breakpoints,
        counts,
        kept: Vec::new(),
        conversation: None,
    }
}
