//! Errors of assembly. Budget failures are typed, never silent (I2, ADR-0008).

use strata_core::{CoreError, ToolName};

/// Why an assembly failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssembleError {
    /// The budget itself is invalid (its message says so).
    #[error("{0}")]
    Budget(#[from] CoreError),
    /// Layers 1-2 alone exceed the prompt budget; they are never trimmed.
    #[error("layers 1-2 of agent `{agent}` need {needed} tokens but the prompt budget is {budget}; raise the budget or shorten the signed definition (identity is never trimmed)")]
    IdentityExceedsBudget {
        /// Agent id.
        agent: String,
        /// Identity tokens.
        needed: u64,
        /// Prompt budget (total less reserve).
        budget: u64,
    },
    /// The definitions of the tools offered do not fit in what layers 1-2 and the request's
    /// framing leave of the prompt budget (ADR-0032). Their count is an estimate (ADR-0015).
    #[error("the definitions of the offered tools {} need about {needed} tokens, but layers 1-2 and the request's framing leave {available} of the prompt budget's {budget}; offer fewer tools (narrow the tool policy or announce fewer), shorten their schemas, or raise the budget", names(.tools))]
    ToolsExceedBudget {
        /// The tools offered, by name.
        tools: Vec<ToolName>,
        /// Estimated tokens of their definitions.
        needed: u64,
        /// Tokens left for them.
        available: u64,
        /// Prompt budget.
        budget: u64,
    },
    /// Layers 1-2 plus the sticky sections exceed the prompt budget.
    #[error("layers 1-2 and {count} sticky section(s) need {needed} tokens but the prompt budget is {budget}; raise the budget or make fewer sections sticky (sticky sections are never trimmed)")]
    StickyExceedsBudget {
        /// Sticky sections.
        count: usize,
        /// Tokens needed.
        needed: u64,
        /// Prompt budget.
        budget: u64,
    },
    /// The newest user turn cannot be sent even cut to its head and tail: what layers 1-2
    /// and the other sticky sections leave is too small for it (ADR-0030).
    #[error("the newest user message holds {tokens} tokens and cannot be cut to fit: layers 1-2 and the other sticky sections leave {available} of the prompt budget's {budget}, and a cut keeps at least {minimum}; send a shorter message or raise the budget")]
    MessageTooLarge {
        /// Tokens of the message as sent whole.
        tokens: u64,
        /// Tokens left for it.
        available: u64,
        /// Prompt budget.
        budget: u64,
        /// The least a cut keeps.
        minimum: u64,
    },
    /// The working-memory history cannot be sent as native turns (ADR-0015).
    #[error("invalid history: {why}")]
    History {
        /// What is wrong and how to repair it.
        why: String,
    },
    /// The agent is not valid at the time of the assembly (expired, not yet valid, or too few
    /// of its signing keys valid).
    #[error("agent not valid at the time of assembly: {0}; load a current definition (the running one is refused past its validity)")]
    AgentNotValid(String),
    /// A provider-native request would hold nothing after the system prompt.
    #[error(
        "nothing to send after the system prompt: give at least one user turn or context section"
    )]
    EmptyConversation,
    /// Layers 1-2 plus the sticky sections exceed `max_total_chars`.
    #[error("layers 1-2 and sticky sections need {needed} characters but max_total_chars is {limit}; raise max_total_chars")]
    CharsExceeded {
        /// Characters needed.
        needed: u64,
        /// The limit.
        limit: u64,
    },
}

/// Tool names as a message lists them: `a`, `b`, `c`.
fn names(tools: &[ToolName]) -> String {
    tools
        .iter()
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
