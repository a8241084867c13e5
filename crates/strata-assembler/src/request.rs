//! What one assembly takes as input.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use strata_core::format::Encoding;
use strata_core::{
    AnnouncedTool, AssemblyPath, Budget, PromptMode, RuntimeLayer, Section, Tier, ToolPolicy,
};

/// The budget of an assembly: given directly, or derived from a model's context window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSpec {
    /// Use the agent definition's default budget.
    AgentDefault,
    /// Use this budget.
    Explicit(Budget),
    /// A model context window in tokens: the total is the window, the response reserve is the
    /// larger of the agent's default reserve and an eighth of the window, and the tier follows
    /// from the window (see `strata_core::Tier::for_context_window`).
    ContextWindow(u32),
}

impl BudgetSpec {
    /// The budget this spec gives an agent whose definition's budget is `agent_default`, and
    /// the tier that follows from its context window: the one rule both gathering and assembly
    /// use, so a turn is gathered and assembled under the same tier.
    pub fn resolve(&self, agent_default: &Budget) -> (Budget, Tier) {
        let budget = match self {
            BudgetSpec::AgentDefault => agent_default.clone(),
            BudgetSpec::Explicit(b) => b.clone(),
            BudgetSpec::ContextWindow(w) => Budget {
                total_tokens: *w,
                response_reserve: agent_default.response_reserve.max(w / 8),
                ..agent_default.clone()
            },
        };
        let tier = Tier::for_context_window(budget.total_tokens);
        (budget, tier)
    }
}

/// What to do with invisible and bidirectional-control characters in untrusted text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Invisible {
    /// Write them as visible numeric entities (reversible; the default).
    #[default]
    Escape,
    /// Remove them before fencing (lossy: the parsed text lacks them).
    Strip,
}

/// How untrusted layers are rendered (ADR-0009).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderOptions {
    /// Spotlighting per runtime layer, indexed by `RuntimeLayer::index()` (default: escaped).
    pub encodings: [Encoding; 4],
    /// Invisible characters.
    pub invisible: Invisible,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            encodings: [Encoding::Escaped; 4],
            invisible: Invisible::Escape,
        }
    }
}

impl RenderOptions {
    /// Set the spotlighting of one layer.
    pub fn with_encoding(mut self, layer: RuntimeLayer, enc: Encoding) -> RenderOptions {
        self.encodings[layer.index()] = enc;
        self
    }

    /// The spotlighting of one layer.
    pub fn encoding(&self, layer: RuntimeLayer) -> Encoding {
        self.encodings[layer.index()]
    }
}

/// One assembly's runtime input (layers 3-6) and settings. Identity comes only from the
/// `VerifiedAgent` passed to `Assembler::assemble`.
#[derive(Debug, Clone, Default)]
pub struct AssemblyRequest {
    /// Sections of layers 3-6, in any order.
    pub sections: Vec<Section>,
    /// Tools announced at run time (built-in or by MCP servers).
    pub tools: Vec<AnnouncedTool>,
    /// What the delegating caller permits (only narrows layer 1's allowlist).
    pub tool_policy: ToolPolicy,
    /// Prompt mode.
    pub mode: PromptMode,
    /// Assembly path.
    pub path: AssemblyPath,
    /// Budget.
    pub budget: Option<BudgetSpec>,
    /// Priorities treated as sticky (the seeds' protected priorities).
    pub protected_priorities: BTreeSet<u32>,
    /// Rendering.
    pub render: RenderOptions,
    /// Omissions reported by the gathering step (failed or slow contributors), carried into
    /// the report.
    pub omissions: Vec<crate::report::Omission>,
    /// The provider whose request is placed and counted; `None` for the plain-text format
    /// (one string: identity, then fenced layers 3-6).
    pub provider: Option<crate::provider::Provider>,
    /// Settings of provider-native assemblies.
    pub provider_options: crate::provider::ProviderOptions,
    /// Count a cut section's whole rendered form for its report entry
    /// (`SectionStatus::Cut { full_tokens }`). Off by default: the part of a section left out
    /// is then never tokenized, and the report gives its size in bytes (ADR-0037). Diagnostic
    /// views such as `strata explain` turn it on.
    pub count_cut_sections: bool,
    /// The time of this assembly (Unix milliseconds). When given, the agent must be valid then,
    /// under the time policy it was loaded with (ADR-0017); the session API always gives it.
    /// The assembler reads no clock of its own.
    pub now_ms: Option<i64>,
}

impl AssemblyRequest {
    /// Refuse a working-memory history whose tool turns do not pair up: a call without a
    /// result after it, or a result without a call before it (ADR-0015). A provider-native
    /// assembly checks this itself (with the rest of its history rules, honouring
    /// [`crate::assemble::PairPolicy`]); a caller that wants the plain-text and JSON outputs to refuse
    /// the same histories calls this before assembling, so that the output format does not
    /// decide whether an input is accepted.
    pub fn check_tool_pairs(&self) -> Result<(), crate::assemble::AssembleError> {
        use std::collections::BTreeMap;
        use strata_core::Role;
        let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
        let mut results: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &self.sections {
            let Some(t) = s
                .turn()
                .filter(|_| s.layer() == RuntimeLayer::WorkingMemory)
            else {
                continue;
            };
            let Some(id) = t.call_id.as_deref() else {
                continue;
            };
            match t.role {
                Role::ToolCall => calls.insert(id, t.seq),
                Role::ToolResult => results.insert(id, t.seq),
                Role::User | Role::Assistant => None,
            };
        }
        let unpaired = calls
            .iter()
            .filter(|(id, seq)| results.get(*id).is_none_or(|r| r < seq))
            .map(|(id, _)| (*id, "result"))
            .chain(
                results
                    .keys()
                    .filter(|id| !calls.contains_key(*id))
                    .map(|id| (*id, "call")),
            )
            .min();
        match unpaired {
            None => Ok(()),
            Some((id, missing)) => Err(crate::assemble::AssembleError::History {
                why: format!(
                    "tool call `{id}` has no {missing}; record the missing turn, or leave unpaired tool turns out with `--drop-unpaired`"
                ),
            }),
        }
    }
}
