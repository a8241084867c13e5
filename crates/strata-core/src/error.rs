//! Errors of the core types. Each message says what was wrong and what to do about it.

/// An error from building or validating core values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A tool's parameters are not a JSON object.
    #[error("invalid tool schema: {why}")]
    InvalidToolSchema {
        /// What is wrong.
        why: String,
    },
    /// Runtime code named layer 1 or 2.
    #[error("layer `{given}` is an identity layer: layers 1-2 come only from a verified signed agent definition; runtime content belongs in layers 3-6 (shared, delegated, working_memory, long_term_memory)")]
    IdentityLayerNotRuntime {
        /// What was given.
        given: String,
    },
    /// A layer name or number that does not exist.
    #[error(
        "unknown layer `{given}`: use 3-6 or shared, delegated, working_memory, long_term_memory"
    )]
    UnknownLayer {
        /// What was given.
        given: String,
    },
    /// A section id that is empty, too long or has characters outside `[A-Za-z0-9._:/-]`.
    #[error(
        "invalid section id `{given}`: ids are 1-128 characters of letters, digits and . _ : / -"
    )]
    InvalidSectionId {
        /// What was given.
        given: String,
    },
    /// A conflict key that is empty, too long or has characters outside `[A-Za-z0-9._:/-]`.
    #[error(
        "invalid section key `{given}`: keys are 1-128 characters of letters, digits and . _ : / -"
    )]
    InvalidSectionKey {
        /// What was given.
        given: String,
    },
    /// A tool name outside `[A-Za-z0-9._-]{1,64}`.
    #[error(
        "invalid tool name `{given}`: tool names are 1-64 characters of letters, digits and . _ -"
    )]
    InvalidToolName {
        /// What was given.
        given: String,
    },
    /// A tool listed more than once in an allowlist.
    #[error("tool `{name}` is listed twice in the allowlist; list each tool once, with its description, schema and server in that one entry")]
    DuplicateTool {
        /// The tool.
        name: String,
    },
    /// An identity section id used more than once.
    #[error(
        "section id `{id}` is used twice in the identity layers; give every section its own id"
    )]
    DuplicateSectionId {
        /// The id.
        id: String,
    },
    /// A budget whose parts do not add up.
    #[error("invalid budget: {reason}")]
    InvalidBudget {
        /// What is wrong with it.
        reason: String,
    },
    /// A name of a mode, path, phase or similar enumeration that does not exist.
    #[error("unknown {what} `{given}`: expected one of {expected}")]
    UnknownName {
        /// Which enumeration.
        what: &'static str,
        /// What was given.
        given: String,
        /// The accepted names.
        expected: &'static str,
    },
    /// Trusted (identity) text that contains the wire format's reserved tag prefix.
    #[error("identity section `{id}` contains the reserved marker `<strata:` or `</strata:`; remove it from the agent definition")]
    ReservedMarkerInIdentity {
        /// The section.
        id: String,
    },
}
