//! Provider-native requests: the conversation placed into channels, and the request bodies of
//! OpenAI Chat Completions, OpenAI Responses and Anthropic Messages (ADR-0014, ADR-0015).
//!
//! Architecture invariant (I8): the system channel of every body holds exactly the signed text
//! of layers 1-2 ([`Conversation::system`]); nothing from layers 3-6 is placed in a channel with
//! more authority than the user's. Tool results sit in the provider's tool-result slot, still
//! fenced; shared facts, memories and per-turn context are fenced data in user messages.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use strata_core::{ToolName, ToolSchema};

/// The request format an assembly is placed and counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`/v1/responses`).
    OpenAiResponses,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

impl Provider {
    /// Stable name (`openai-chat`, `openai-responses`, `anthropic`).
    pub const fn name(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai-chat",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
        }
    }

    /// Whether the provider's tokenizer is public (its counts can be exact).
    pub const fn tokenizer_is_public(self) -> bool {
        !matches!(self, Provider::Anthropic)
    }
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Provider, String> {
        match s {
            "openai-chat" | "openai" => Ok(Provider::OpenAiChat),
            "openai-responses" => Ok(Provider::OpenAiResponses),
            "anthropic" => Ok(Provider::Anthropic),
            _ => Err(format!(
                "unknown provider `{s}`: use openai-chat, openai-responses or anthropic"
            )),
        }
    }
}

/// Which OpenAI Chat role carries the signed text. Both count as the system channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemRole {
    /// `system`.
    #[default]
    System,
    /// `developer` (the reasoning models' name for the same channel).
    Developer,
}

/// What description a tool carries in the request (ADR-0015), and whether an unpinned tool's
/// announced schema keeps its free text (ADR-0032). Announced descriptions and schemas are
/// untrusted text from the runtime or an MCP server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolDescriptions {
    /// The signed description from layer 1 (empty if the definition gives none); an
    /// announced schema without its free text.
    #[default]
    Signed,
    /// No description at all; an announced schema without its free text.
    Withheld,
    /// The announced description and schema, as announced: untrusted text in fields the model
    /// reads as instructions about the tool. Only for servers you control.
    AnnouncedDangerously,
}

/// What to do with a tool call that has no result, or a result that has no call (ADR-0015).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairPolicy {
    /// Fail the assembly with [`crate::assemble::AssembleError::History`].
    #[default]
    Error,
    /// Leave the unpaired turn out and report it as filtered (`unpaired`).
    DropUnpaired,
}

/// Settings of a provider-native assembly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderOptions {
    /// OpenAI Chat: `system` or `developer`.
    pub system_role: SystemRole,
    /// Tool descriptions.
    pub tool_descriptions: ToolDescriptions,
    /// Unpaired tool calls and results.
    pub pairs: PairPolicy,
    /// Percent added to counts for providers without a public tokenizer (Anthropic); the budget
    /// is fitted to the count with this margin.
    pub estimate_margin_pct: u32,
    /// Model name, used for the minimum cacheable prefix of Anthropic models.
    pub model: Option<String>,
    /// Overrides the minimum cacheable prefix in tokens.
    pub min_cacheable_tokens: Option<u64>,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            system_role: SystemRole::System,
            tool_descriptions: ToolDescriptions::Signed,
            pairs: PairPolicy::Error,
            estimate_margin_pct: 10,
            model: None,
            min_cacheable_tokens: None,
        }
    }
}

/// The smallest prefix, in tokens, that a provider caches for `model` (documented figures;
/// overridable with [`ProviderOptions::min_cacheable_tokens`]).
pub fn min_cacheable_tokens(provider: Provider, model: Option<&str>) -> u64 {
    match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses => 1024,
        Provider::Anthropic => {
            let m = model.unwrap_or("");
            if m.contains("opus-4-5") || m.contains("haiku-4-5") {
                4096
            } else if m.contains("haiku") {
                2048
            } else {
                1024
            }
        }
    }
}

/// Who speaks a placed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// The user position: user turns, tool results and fenced data.
    User,
    /// The agent's own earlier output.
    Assistant,
}

/// Why a message is where it is (cache order: stable context, history, dynamic context, the
/// newest user turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// Fenced stable sections of layers 3, 4 and 6.
    StableContext,
    /// Turns of the append-only history.
    History,
    /// Fenced per-turn sections and omission markers.
    DynamicContext,
    /// The newest user turn.
    NewestUser,
}

/// One content block of a placed message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Block {
    /// Text: a user's or the agent's own words, or fenced data.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call made by the agent.
    ToolUse {
        /// Call id.
        id: String,
        /// Tool name.
        name: ToolName,
        /// The call's JSON arguments, exactly as recorded (a JSON object).
        arguments: String,
    },
    /// A tool's result: a fenced, escaped element.
    ToolResult {
        /// The call id it answers.
        id: String,
        /// The fenced result.
        content: String,
        /// The tool reported a failure: sent as Anthropic's `is_error`; the OpenAI formats have
        /// no such field and send the result alone.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// The model's reasoning before the blocks that follow it, in its provider's form, sent
    /// unchanged (ADR-0043).
    Reasoning {
        /// The block or item, as the provider returned it.
        block: strata_core::Reasoning,
    },
}

/// One placed message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Role.
    pub role: MessageRole,
    /// Place in the cache order.
    pub kind: MessageKind,
    /// Blocks, in order.
    pub blocks: Vec<Block>,
    /// Tokens counted for this message in the request frame.
    pub tokens: u64,
}

/// A tool as offered in a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestTool {
    /// Name.
    pub name: ToolName,
    /// Description, chosen by [`ToolDescriptions`].
    pub description: String,
    /// Argument schema: pinned by the signed definition; else the announced one, stripped of
    /// its free text unless the policy is [`ToolDescriptions::AnnouncedDangerously`]
    /// (ADR-0032); else an empty object schema.
    pub parameters: ToolSchema,
    /// Where the schema came from: `signed`, `announced` or `none`.
    pub schema_source: String,
}

/// The conversation of one provider-native assembly, before it is written as a body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// The provider it was placed and counted for.
    pub provider: Provider,
    /// The system channel: exactly the signed text of layers 1-2.
    pub system: String,
    /// Messages in cache order.
    pub messages: Vec<Message>,
    /// Tools with their schemas.
    pub tools: Vec<RequestTool>,
    /// Tokens of the system message in the request frame.
    pub system_tokens: u64,
    /// Tokens of the tool definitions (an estimate: providers do not publish the format).
    pub tool_tokens: u64,
    /// OpenAI Chat: the system role.
    pub system_role: SystemRole,
}

/// Caller-supplied parameters of a request body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestParams {
    /// Model name (required by every provider).
    pub model: String,
    /// Maximum output tokens (required by Anthropic).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Other top-level parameters, passed through unchanged (`temperature`, `metadata`, ...).
    /// They may not name the fields strata writes.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// Why a request body could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The assembly was made for the plain-text format or another provider.
    #[error("this assembly was placed for {placed}, not {asked}; assemble again with `provider` set to {asked}")]
    WrongProvider {
        /// What it was placed for.
        placed: String,
        /// What was asked.
        asked: String,
    },
    /// A required parameter is missing.
    #[error("{provider} requests need `{param}`: give it with `--{}` (`strata assemble`, `strata receipt assemble`, `strata serve`)", .param.replace('_', "-"))]
    Missing {
        /// Provider.
        provider: &'static str,
        /// Parameter.
        param: &'static str,
    },
    /// An extra parameter names a field strata writes.
    #[error("extra parameter `{0}` would replace a field strata writes (system channel, messages or tools); remove it")]
    Reserved(String),
    /// A tool call's arguments are not a JSON object.
    #[error("tool call `{id}` has arguments that are not a JSON object: {why}")]
    Arguments {
        /// Call id.
        id: String,
        /// Parser message.
        why: String,
    },
}

const RESERVED: &[&str] = &[
    "model",
    "max_tokens",
    "max_output_tokens",
    "messages",
    "system",
    "tools",
    "instructions",
    "input",
];

impl Conversation {
    /// The request body for `provider` with the caller's parameters.
    pub fn body(&self, provider: Provider, params: &RequestParams) -> Result<Value, RequestError> {
        if provider != self.provider {
            return Err(RequestError::WrongProvider {
                placed: self.provider.name().into(),
                asked: provider.name().into(),
            });
        }
        if params.model.is_empty() {
            return Err(RequestError::Missing {
                provider: provider.name(),
                param: "model",
            });
        }
        if let Some(k) = params.extra.keys().find(|k| RESERVED.contains(&k.as_str())) {
            return Err(RequestError::Reserved(k.clone()));
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(params.model));
        match provider {
            Provider::OpenAiChat => self.openai_chat(&mut body, params),
            Provider::OpenAiResponses => self.openai_responses(&mut body, params),
            Provider::Anthropic => self.anthropic(&mut body, params)?,
        }
        for (k, v) in &params.extra {
            body.insert(k.clone(), v.clone());
        }
        Ok(Value::Object(body))
    }

    fn openai_chat(&self, body: &mut Map<String, Value>, params: &RequestParams) {
        let role = match self.system_role {
            SystemRole::System => "system",
            SystemRole::Developer => "developer",
        };
        let mut msgs = vec![json!({ "role": role, "content": self.system })];
        for m in &self.messages {
            match m.role {
                MessageRole::User => {
                    let mut text = String::new();
                    for b in &m.blocks {
                        match b {
                            Block::Text { text: t } => text.push_str(t),
                            Block::ToolResult { id, content, .. } => msgs.push(json!({
                                "role": "tool", "tool_call_id": id, "content": content
                            })),
                            // Chat Completions takes no reasoning back; an assembly for it
                            // refuses a history that holds some (ADR-0043).
                            Block::ToolUse { .. } | Block::Reasoning { .. } => {}
                        }
                    }
                    if !text.is_empty() {
                        msgs.push(json!({ "role": "user", "content": text }));
                    }
                }
                MessageRole::Assistant => {
                    let mut text = String::new();
                    let mut calls = Vec::new();
                    for b in &m.blocks {
                        match b {
                            Block::Text { text: t } => text.push_str(t),
                            Block::ToolUse {
                                id,
                                name,
                                arguments,
                            } => calls.push(json!({
                                "id": id, "type": "function",
                                "function": { "name": name, "arguments": arguments }
                            })),
                            Block::ToolResult { .. } | Block::Reasoning { .. } => {}
                        }
                    }
                    let mut msg = Map::new();
                    msg.insert("role".into(), json!("assistant"));
                    msg.insert(
                        "content".into(),
                        if text.is_empty() && !calls.is_empty() {
                            Value::Null
                        } else {
                            json!(text)
                        },
                    );
                    if !calls.is_empty() {
                        msg.insert("tool_calls".into(), Value::Array(calls));
                    }
                    msgs.push(Value::Object(msg));
                }
            }
        }
        body.insert("messages".into(), Value::Array(msgs));
        if let Some(n) = params.max_tokens {
            body.insert("max_completion_tokens".into(), json!(n));
        }
        if !self.tools.is_empty() {
            let tools: Vec<Value> = self
                .tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters.to_value()
                    }})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
    }

    fn openai_responses(&self, body: &mut Map<String, Value>, params: &RequestParams) {
        body.insert("instructions".into(), json!(self.system));
        let mut input = Vec::new();
        for m in &self.messages {
            let role = match m.role {
                MessageRole::User => "user",
                MessageRole::Assistant => "assistant",
            };
            let mut text = String::new();
            let flush = |text: &mut String, input: &mut Vec<Value>| {
                if !text.is_empty() {
                    input.push(
                        json!({ "type": "message", "role": role, "content": std::mem::take(text) }),
                    );
                }
            };
            for b in &m.blocks {
                match b {
                    Block::Text { text: t } => text.push_str(t),
                    Block::ToolUse {
                        id,
                        name,
                        arguments,
                    } => {
                        flush(&mut text, &mut input);
                        input.push(json!({
                            "type": "function_call", "call_id": id, "name": name, "arguments": arguments
                        }));
                    }
                    Block::ToolResult { id, content, .. } => {
                        flush(&mut text, &mut input);
                        input.push(json!({
                            "type": "function_call_output", "call_id": id, "output": content
                        }));
                    }
                    // A reasoning item goes before the items it led to, as returned.
                    Block::Reasoning { block } => {
                        flush(&mut text, &mut input);
                        input.push(reasoning_value(block));
                    }
                }
            }
            flush(&mut text, &mut input);
        }
        body.insert("input".into(), Value::Array(input));
        if let Some(n) = params.max_tokens {
            body.insert("max_output_tokens".into(), json!(n));
        }
        if !self.tools.is_empty() {
            let tools: Vec<Value> = self
                .tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "name": t.name, "description": t.description,
                            "parameters": t.parameters.to_value(), "strict": false })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
    }

    fn anthropic(
        &self,
        body: &mut Map<String, Value>,
        params: &RequestParams,
    ) -> Result<(), RequestError> {
        let max = params.max_tokens.ok_or(RequestError::Missing {
            provider: "anthropic",
            param: "max_tokens",
        })?;
        body.insert("max_tokens".into(), json!(max));
        let breakpoints = self.anthropic_breakpoints(Some(&params.model));
        let mut system = json!({ "type": "text", "text": self.system });
        if breakpoints.system {
            system["cache_control"] = json!({ "type": "ephemeral" });
        }
        body.insert("system".into(), json!([system]));
        // Adjacent messages of one role are merged: the API wants strict alternation.
        let mut merged: Vec<(MessageRole, Vec<Value>)> = Vec::new();
        for (i, m) in self.messages.iter().enumerate() {
            let mut blocks = m
                .blocks
                .iter()
                .map(anthropic_block)
                .collect::<Result<Vec<Value>, RequestError>>()?;
            if breakpoints.messages.contains(&i) {
                if let Some(last) = blocks.last_mut() {
                    last["cache_control"] = json!({ "type": "ephemeral" });
                }
            }
            match merged.last_mut() {
                Some((r, bs)) if *r == m.role => bs.extend(blocks),
                _ => merged.push((m.role, blocks)),
            }
        }
        let messages: Vec<Value> = merged
            .into_iter()
            .map(|(r, content)| {
                json!({ "role": match r { MessageRole::User => "user", MessageRole::Assistant => "assistant" },
                        "content": content })
            })
            .collect();
        body.insert("messages".into(), Value::Array(messages));
        if !self.tools.is_empty() {
            let tools: Vec<Value> = self
                .tools
                .iter()
                .map(|t| {
                    json!({ "name": t.name, "description": t.description,
                            "input_schema": t.parameters.to_value() })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        Ok(())
    }

    /// Tokens before the end of message `i` (system, tools and messages `..=i`).
    fn prefix_tokens(&self, i: usize) -> u64 {
        self.system_tokens
            + self.tool_tokens
            + self.messages[..=i].iter().map(|m| m.tokens).sum::<u64>()
    }

    /// Where Anthropic cache breakpoints go: at most 4, only on stable boundaries (the end of
    /// the system prompt, of the stable context and of the history), and never on a prefix
    /// shorter than the model's minimum cacheable length.
    pub fn anthropic_breakpoints(&self, model: Option<&str>) -> AnthropicBreakpoints {
        let min = min_cacheable_tokens(Provider::Anthropic, model);
        let mut out = AnthropicBreakpoints {
            system: self.system_tokens + self.tool_tokens >= min,
            messages: Vec::new(),
        };
        let stable_end = self
            .messages
            .iter()
            .rposition(|m| m.kind == MessageKind::StableContext);
        let history_end = self
            .messages
            .iter()
            .rposition(|m| m.kind == MessageKind::History);
        for i in [stable_end, history_end].into_iter().flatten() {
            if self.prefix_tokens(i) >= min && !out.messages.contains(&i) {
                out.messages.push(i);
            }
        }
        out
    }

    /// Tokens of the longest prefix that stays byte-identical on the next turn: system, tools,
    /// stable context and history.
    pub fn stable_prefix_tokens(&self) -> u64 {
        self.system_tokens
            + self.tool_tokens
            + self
                .messages
                .iter()
                .filter(|m| matches!(m.kind, MessageKind::StableContext | MessageKind::History))
                .map(|m| m.tokens)
                .sum::<u64>()
    }

    /// Tokens the provider can be expected to serve from its prompt cache on the next turn:
    /// OpenAI caches the first 1,024 tokens and then 128-token increments of a repeated prefix;
    /// Anthropic caches up to the last breakpoint at or above the model's minimum.
    pub fn expected_cached_tokens(&self, model: Option<&str>) -> u64 {
        let stable = self.stable_prefix_tokens();
        match self.provider {
            Provider::OpenAiChat | Provider::OpenAiResponses => {
                if stable < 1024 {
                    0
                } else {
                    1024 + (stable - 1024) / 128 * 128
                }
            }
            Provider::Anthropic => {
                let bp = self.anthropic_breakpoints(model);
                let mut best = if bp.system {
                    self.system_tokens + self.tool_tokens
                } else {
                    0
                };
                for i in bp.messages {
                    best = best.max(self.prefix_tokens(i));
                }
                best
            }
        }
    }
}

/// Cache breakpoints of an Anthropic request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnthropicBreakpoints {
    /// On the system block (caches tools and system).
    pub system: bool,
    /// On the last block of these messages (indices into [`Conversation::messages`]).
    pub messages: Vec<usize>,
}

/// One block of a message as Anthropic's Messages API takes it; a tool call's arguments must
/// be a JSON object.
fn anthropic_block(b: &Block) -> Result<Value, RequestError> {
    Ok(match b {
        Block::Text { text } => json!({ "type": "text", "text": text }),
        Block::Reasoning { block } => reasoning_value(block),
        Block::ToolUse {
            id,
            name,
            arguments,
        } => {
            let input: Value =
                serde_json::from_str(arguments).map_err(|e| RequestError::Arguments {
                    id: id.clone(),
                    why: e.to_string(),
                })?;
            if !input.is_object() {
                return Err(RequestError::Arguments {
                    id: id.clone(),
                    why: "not an object".into(),
                });
            }
            json!({ "type": "tool_use", "id": id, "name": name, "input": input })
        }
        Block::ToolResult {
            id,
            content,
            is_error,
        } => {
            let mut block = json!({ "type": "tool_result", "tool_use_id": id, "content": content });
            if *is_error {
                block["is_error"] = Value::Bool(true);
            }
            block
        }
    })
}

/// A reasoning block as its provider wrote it (ADR-0043).
fn reasoning_value(block: &strata_core::Reasoning) -> Value {
    serde_json::to_value(block).expect("a reasoning block is plain JSON")
}
