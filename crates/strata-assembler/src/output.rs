//! The assembled context and its provider formats (ADR-0013).

use serde::Serialize;
use serde_json::{json, Value};
use strata_core::{ContentHash, ToolName};

use crate::provider::{Conversation, Provider, RequestError, RequestParams};
use crate::report::Report;

/// The result of one assembly.
#[derive(Debug, Clone, Serialize)]
pub struct AssembledContext {
    /// The system prompt text: rendered layers 1-2, byte for byte, then fenced layers 3-6.
    pub text: String,
    /// BLAKE3 of the rendered layers 1-2.
    pub identity_digest: ContentHash,
    /// Tools the model may be offered.
    pub tools: Vec<ToolName>,
    /// What was kept, cut and dropped.
    pub report: Report,
    /// The conversation placed into a provider's channels, when the request named a provider
    /// (then `text` holds the system channel alone: the signed text).
    pub conversation: Option<Conversation>,
}

impl AssembledContext {
    /// Bytes of the stable prefix (layers 1-2 and the stable sections that lead the rest).
    pub fn stable_prefix(&self) -> &str {
        &self.text[..self.report.stable_prefix.byte]
    }

    /// The complete request body for `provider` (which must be the provider the assembly was
    /// placed for), with the caller's model, output limit and other parameters (ADR-0015).
    pub fn request_body(
        &self,
        provider: Provider,
        params: &RequestParams,
    ) -> Result<Value, RequestError> {
        match &self.conversation {
            Some(c) => c.body(provider, params),
            None => Err(RequestError::WrongProvider {
                placed: "the plain-text format".into(),
                asked: provider.name().into(),
            }),
        }
    }

    /// OpenAI chat messages: one system message holding the whole plain-text context. For
    /// native turns and tools, assemble with a provider and use [`Self::request_body`].
    pub fn openai_messages(&self) -> Value {
        json!([{ "role": "system", "content": self.text }])
    }

    /// Anthropic `system` blocks split at the breakpoints, each prefix block marked with
    /// `cache_control` (at most 4, as the API allows).
    pub fn anthropic_system(&self) -> Value {
        let mut blocks = Vec::new();
        let mut start = 0;
        for bp in &self.report.breakpoints {
            if bp.byte > start {
                blocks.push(json!({
                    "type": "text",
                    "text": &self.text[start..bp.byte],
                    "cache_control": { "type": "ephemeral" }
                }));
                start = bp.byte;
            }
        }
        if start < self.text.len() {
            blocks.push(json!({ "type": "text", "text": &self.text[start..] }));
        }
        Value::Array(blocks)
    }
}
