//! Stage 5 of assembly: place the kept sections, in output order, into the channels of a
//! provider request (system, stable context, history, dynamic context, newest user turn) or
//! into the plain-text layout (identity, then fenced layers 3-6 with omission markers).
//!
//! Hand-off: [`Laid`], the output with its exact counts.

use strata_core::{Layer, Role, RuntimeLayer, Stability, ToolName};

use super::{marker_text, Assembler, Cand, Unit};
use crate::error::AssembleError;
use crate::per_layer::PerLayer;
use crate::provider::{
    Block, Conversation, Message, MessageKind, MessageRole, Provider, ProviderOptions, RequestTool,
};
use crate::report::{Breakpoint, DropReason};

impl Assembler {
    /// Place the kept sections into a provider's channels (ADR-0014): the system channel gets
    /// the signed text alone; then, in cache order, fenced stable context, the history as
    /// native turns, fenced per-turn context with the omission markers, and the newest user
    /// turn. Where no stable context leads, history turns before the first user turn are left
    /// out (`history_start`), since providers want the conversation to open with the user.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place(
        &self,
        provider: Provider,
        opts: &ProviderOptions,
        identity_text: &str,
        (system_tokens, tool_tokens): (u64, u64),
        tools: Vec<RequestTool>,
        cands: &[Cand<'_>],
        kept: &[usize],
        units: &mut [Unit],
        dropped_reason: &mut [Option<DropReason>],
        (drops, dropped_bytes): (PerLayer<u64>, PerLayer<u64>),
    ) -> Result<Placed, AssembleError> {
        let is_turn = |c: &Cand<'_>| {
            c.section().layer() == RuntimeLayer::WorkingMemory && c.section().turn().is_some()
        };
        let seq = |c: &Cand<'_>| c.section().turn().map_or(0, |t| t.seq);
        let mut turns: Vec<usize> = kept
            .iter()
            .copied()
            .filter(|c| is_turn(&cands[*c]))
            .collect();
        turns.sort_by_cached_key(|c| (seq(&cands[*c]), cands[*c].section().id().clone()));
        let (stable, dynamic): (Vec<usize>, Vec<usize>) = kept
            .iter()
            .copied()
            .filter(|c| !is_turn(&cands[*c]))
            .partition(|c| cands[*c].section().stability() == Stability::Stable);
        if stable.is_empty() {
            while let Some(&first) = turns.first() {
                if cands[first].section().turn().map(|t| t.role) == Some(Role::User) {
                    break;
                }
                let u = cands[first].unit;
                units[u].dropped = true;
                dropped_reason[u] = Some(DropReason::HistoryStart);
                turns.retain(|c| cands[*c].unit != u);
            }
        }
        let newest = turns
            .last()
            .copied()
            .filter(|c| cands[*c].section().turn().map(|t| t.role) == Some(Role::User));
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
            layer_out: PerLayer::default(),
            kept_n: PerLayer::default(),
            cut_n: PerLayer::default(),
        };
        let count = |placed: &mut Placed, c: &Cand<'_>| {
            let i = c.section().layer();
            placed.layer_out[i] += c.rendered().tokens;
            placed.chars += c.rendered().chars;
            if c.cut.is_some() {
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
                text.push_str(&cands[c].rendered().text);
                tokens += cands[c].rendered().content_tokens;
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
            let Some(t) = cand.section().turn() else {
                continue;
            };
            let text = cand.rendered().text.clone();
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
                        tokens: cand.rendered().tokens,
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
                    let call_tokens = cand.rendered().tokens - self.frame_msg("assistant");
                    match last.filter(|m| m.role == MessageRole::Assistant) {
                        Some(m) => {
                            m.blocks.push(block);
                            m.tokens += call_tokens;
                        }
                        None => msgs.push(Message {
                            role: MessageRole::Assistant,
                            kind: MessageKind::History,
                            blocks: vec![block],
                            tokens: cand.rendered().tokens,
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
                            m.tokens += cand.rendered().tokens;
                        }
                        None => msgs.push(Message {
                            role: MessageRole::User,
                            kind: MessageKind::History,
                            blocks: vec![block],
                            tokens: cand.rendered().tokens,
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
            let i = l;
            while pos < dynamic.len() && cands[dynamic[pos]].section().layer() == l {
                let c = &cands[dynamic[pos]];
                text.push_str(&c.rendered().text);
                tokens += c.rendered().content_tokens;
                count(&mut placed, c);
                pos += 1;
            }
            if drops[i] > 0 {
                let m = marker_text(l, drops[i], dropped_bytes[i]);
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
                    text: cand.rendered().text.clone(),
                }],
                tokens: cand.rendered().tokens,
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
}

/// The outcome of placing an assembly into a provider's channels.
pub(super) struct Placed {
    pub(super) conversation: Conversation,
    pub(super) total: u64,
    pub(super) chars: u64,
    pub(super) layer_out: PerLayer<u64>,
    pub(super) kept_n: PerLayer<usize>,
    pub(super) cut_n: PerLayer<usize>,
}

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
    /// Tokens per runtime layer.
    pub layer_out: PerLayer<u64>,
    /// Sections kept whole per runtime layer.
    pub kept_n: PerLayer<usize>,
    /// Sections cut per runtime layer.
    pub cut_n: PerLayer<usize>,
    /// The provider conversation, if one was placed.
    pub conversation: Option<Conversation>,
}

impl Assembler {
    /// Lay the kept candidates (in output order) out as one string: identity, then each runtime
    /// layer's fenced sections followed by its omission marker (ADR-0009, ADR-0013).
    pub(super) fn layout_text(
        &self,
        identity_text: &str,
        (id_tokens, id_chars): (u64, u64),
        cands: &[Cand<'_>],
        kept: &[usize],
        (drops, dropped_bytes): (PerLayer<u64>, PerLayer<u64>),
    ) -> Laid {
        let mut text = String::with_capacity(
            identity_text.len()
                + cands.iter().map(|c| c.rendered().text.len()).sum::<usize>()
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
        let mut layer_out = PerLayer::splat(0u64);
        let mut kept_n = PerLayer::splat(0usize);
        let mut cut_n = PerLayer::splat(0usize);
        let mut pos = 0;
        for l in RuntimeLayer::ALL {
            let i = l;
            while pos < kept.len() && cands[kept[pos]].section().layer() == l {
                let cand = &cands[kept[pos]];
                if cand.section().stability() != Stability::Stable {
                    stable_run = false;
                }
                text.push_str(&cand.rendered().text);
                tokens_so_far += cand.rendered().tokens;
                chars_so_far += cand.rendered().chars;
                layer_out[i] += cand.rendered().tokens;
                if cand.cut.is_some() {
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
                let m = marker_text(l, drops[i], dropped_bytes[i]);
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
        Laid {
            text,
            tokens: tokens_so_far,
            chars: chars_so_far,
            stable_prefix,
            breakpoints,
            layer_out,
            kept_n,
            cut_n,
            conversation: None,
        }
    }
}
