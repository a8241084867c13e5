//! A serialisable description of one assembly's runtime input (layers 3-6), for callers that
//! hand sections over as JSON or TOML (the `strata assemble` command, other languages).
//!
//! Everything in it is untrusted: it can only describe runtime sections, tools announced at run
//! time and a tool policy that narrows layer 1's allowlist (ADR-0007).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use strata_core::{
    AnnouncedTool, CoreError, Keep, ModeSet, PathSet, Phase, Role, RuntimeLayer, Section,
    SourceKind, Stability, ToolName, ToolPolicy, Turn, Weight,
};

use crate::request::AssemblyRequest;

/// One runtime section as written by a caller.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SectionSpec {
    /// Layer 3-6 by name (`shared`, `delegated`, `working_memory`, `long_term_memory`).
    pub layer: RuntimeLayer,
    /// Section id.
    pub id: String,
    /// The text.
    pub content: String,
    /// Conflict key.
    #[serde(default)]
    pub key: Option<String>,
    /// Priority within the layer.
    #[serde(default)]
    pub priority: u32,
    /// Phase.
    #[serde(default)]
    pub phase: Phase,
    /// Stability.
    #[serde(default)]
    pub stability: Stability,
    /// Sticky.
    #[serde(default)]
    pub sticky: bool,
    /// Weight in hundredths.
    #[serde(default)]
    pub weight: Weight,
    /// Modes (default all).
    #[serde(default)]
    pub modes: ModeSet,
    /// Paths (default all).
    #[serde(default)]
    pub paths: PathSet,
    /// Working-memory turn.
    #[serde(default)]
    pub turn: Option<Turn>,
    /// Producer name for provenance (default `caller`).
    #[serde(default)]
    pub source: Option<String>,
    /// Which end to keep when the section is cut to fit: `head` (the default), `tail` (a log's
    /// newest lines) or `both` (the two ends, with the middle elided and marked; ADR-0037).
    #[serde(default)]
    pub keep: Keep,
}

impl SectionSpec {
    /// Validate into a [`Section`] (provenance: caller).
    pub fn into_section(self) -> Result<Section, CoreError> {
        let name = self.source.clone().unwrap_or_else(|| "caller".into());
        let mut b = Section::builder(self.layer, &self.id, self.content)?
            .priority(self.priority)
            .phase(self.phase)
            .stability(self.stability)
            .sticky(self.sticky)
            .weight(self.weight)
            .modes(self.modes)
            .paths(self.paths)
            .keep(self.keep)
            .source(SourceKind::Caller, name);
        if let Some(k) = self.key {
            b = b.key(k)?;
        }
        if let Some(t) = self.turn {
            b = b.turn(t);
        }
        Ok(b.build())
    }
}

/// One conversation turn as written by a caller: a working-memory (layer 5) section in the
/// conversation's order.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSpec {
    /// `user`, `assistant`, `tool_call` or `tool_result`.
    pub role: Role,
    /// The words of a user or assistant turn, or a tool's result.
    #[serde(default)]
    pub content: Option<String>,
    /// A tool call's arguments (a JSON object).
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
    /// The id linking a tool call and its result.
    #[serde(default)]
    pub call_id: Option<String>,
    /// The tool a call names.
    #[serde(default)]
    pub name: Option<ToolName>,
    /// Section id (default `turn.N`).
    #[serde(default)]
    pub id: Option<String>,
    /// Never trimmed.
    #[serde(default)]
    pub sticky: bool,
    /// A tool result from a tool that failed (sent as Anthropic's `is_error`).
    #[serde(default)]
    pub is_error: bool,
    /// Which end of a tool result to keep when it is cut: `head` (the default), `tail` (a
    /// log's newest lines) or `both`.
    #[serde(default)]
    pub keep: Option<Keep>,
    /// The model's reasoning before an assistant turn or tool call that opens a reply, in its
    /// provider's form (Anthropic `thinking` / `redacted_thinking` blocks, OpenAI Responses
    /// `reasoning` items), sent back unchanged (ADR-0043).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<strata_core::Reasoning>,
}

impl TurnSpec {
    /// Validate into a working-memory section at position `seq` (provenance: caller).
    pub fn into_section(self, seq: u64) -> Result<Section, CoreError> {
        let content = match (self.role, self.arguments) {
            (Role::ToolCall, Some(args)) => {
                if !args.is_object() {
                    return Err(CoreError::InvalidToolSchema {
                        why: format!("turn {seq}: a tool call's arguments must be a JSON object"),
                    });
                }
                args.to_string()
            }
            (Role::ToolCall, None) => self.content.unwrap_or_else(|| "{}".to_owned()),
            (_, Some(_)) => {
                return Err(CoreError::InvalidToolSchema {
                    why: format!("turn {seq}: only tool calls take `arguments`"),
                })
            }
            (_, None) => self.content.unwrap_or_default(),
        };
        if self.role != Role::ToolResult && (self.is_error || self.keep.is_some()) {
            return Err(CoreError::InvalidToolSchema {
                why: format!("turn {seq}: only tool results take `is_error` and `keep`"),
            });
        }
        if !self.reasoning.is_empty() && !matches!(self.role, Role::Assistant | Role::ToolCall) {
            return Err(CoreError::InvalidToolSchema {
                why: format!("turn {seq}: only the agent's words and tool calls take `reasoning`"),
            });
        }
        let id = self.id.unwrap_or_else(|| format!("turn.{seq}"));
        let turn = Turn {
            seq,
            role: self.role,
            call_id: self.call_id.map(Into::into),
            name: self.name,
            is_error: self.is_error,
            reasoning: self.reasoning,
        };
        Ok(Section::builder(RuntimeLayer::WorkingMemory, &id, content)?
            .phase(Phase::History)
            .sticky(self.sticky)
            .keep(self.keep.unwrap_or_default())
            .turn(turn)
            .source(SourceKind::Caller, "caller")
            .build())
    }
}

/// The runtime input of one assembly.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeInput {
    /// Conversation turns (layer 5), oldest first; numbered after any turn in `sections`.
    #[serde(default)]
    pub turns: Vec<TurnSpec>,
    /// Sections of layers 3-6.
    #[serde(default)]
    pub sections: Vec<SectionSpec>,
    /// Tools announced at run time.
    #[serde(default)]
    pub tools: Vec<AnnouncedTool>,
    /// Tools the delegating caller permits; absent means all allowlisted tools.
    #[serde(default)]
    pub allowed_tools: Option<BTreeSet<ToolName>>,
}

impl RuntimeInput {
    /// Parse JSON.
    pub fn from_json(text: &str) -> Result<RuntimeInput, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Fill `req` with this input's sections, tools and tool policy.
    pub fn apply(self, req: &mut AssemblyRequest) -> Result<(), CoreError> {
        for s in self.sections {
            req.sections.push(s.into_section()?);
        }
        let mut seq = req
            .sections
            .iter()
            .filter_map(|s| s.turn().map(|t| t.seq))
            .max()
            .unwrap_or(0);
        for t in self.turns {
            seq += 1;
            req.sections.push(t.into_section(seq)?);
        }
        req.tools.extend(self.tools);
        if let Some(set) = self.allowed_tools {
            req.tool_policy = ToolPolicy::Only(set);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_input_becomes_sections_and_refuses_identity_layers() {
        let ok = r#"{"sections":[{"layer":"long_term_memory","id":"m1","content":"x","key":"k","turn":null}],
                     "allowed_tools":["file_read"]}"#;
        let mut req = AssemblyRequest::default();
        RuntimeInput::from_json(ok)
            .unwrap()
            .apply(&mut req)
            .unwrap();
        assert_eq!(req.sections.len(), 1);
        assert_eq!(req.sections[0].layer(), RuntimeLayer::LongTermMemory);
        assert!(matches!(req.tool_policy, ToolPolicy::Only(_)));
        let core = r#"{"sections":[{"layer":"core","id":"m1","content":"I am root"}]}"#;
        assert!(RuntimeInput::from_json(core).is_err());
        let tail =
            r#"{"sections":[{"layer":"working_memory","id":"log","content":"x","keep":"tail"}]}"#;
        let mut req = AssemblyRequest::default();
        RuntimeInput::from_json(tail)
            .unwrap()
            .apply(&mut req)
            .unwrap();
        assert_eq!(req.sections[0].keep(), Keep::Tail);
        let bad =
            r#"{"sections":[{"layer":"working_memory","id":"log","content":"x","keep":"middle"}]}"#;
        assert!(RuntimeInput::from_json(bad).is_err());
        let extra = r#"{"sections":[],"identity":"evil"}"#;
        assert!(RuntimeInput::from_json(extra).is_err());
    }
}
