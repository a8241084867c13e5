//! The assembled context and its provider formats (ADR-0013).

use serde::Serialize;
use serde_json::{json, Value};
use strata_core::{ContentHash, ToolName};

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
}

impl AssembledContext {
    /// Bytes of the stable prefix (layers 1-2 and the stable sections that lead the rest).
    pub fn stable_prefix(&self) -> &str {
        &self.text[..self.report.stable_prefix.byte]
    }

    /// OpenAI chat messages: one system message holding the whole context.
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
