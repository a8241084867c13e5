//! Why a goal operation failed.

use std::path::PathBuf;

use super::model::GoalStatus;

/// Why a goal operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoalError {
    /// No goal has this id.
    #[error("no goal with id `{0}`: check the id against the goals the session has")]
    GoalNotFound(String),
    /// The goal has no checkpoint with this id.
    #[error("goal `{goal}` has no checkpoint {checkpoint}")]
    CheckpointNotFound {
        /// The goal.
        goal: String,
        /// The checkpoint.
        checkpoint: u32,
    },
    /// The goal has no decision with this id.
    #[error("goal `{goal}` has no decision {decision}")]
    DecisionNotFound {
        /// The goal.
        goal: String,
        /// The decision.
        decision: u32,
    },
    /// The decision is locked and cannot change.
    #[error("decision {decision} of goal `{goal}` is locked and cannot be changed; record a new decision on another subject instead")]
    DecisionLocked {
        /// The goal.
        goal: String,
        /// The decision.
        decision: u32,
    },
    /// The goal is not in a state that allows the operation.
    #[error("goal `{goal}` is {status:?}: cannot {operation}")]
    InvalidState {
        /// The goal.
        goal: String,
        /// Its status.
        status: GoalStatus,
        /// What was attempted.
        operation: &'static str,
    },
    /// The goal file could not be read or written.
    #[error("goal file {path}: {source}; check that the folder exists and is writable")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The goal file is not valid.
    #[error("goal file {path} is not valid: {reason}; move it aside to start afresh")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The store holding the goals failed or holds something that is not a goal book.
    #[error("goal store {store}: {reason}")]
    Store {
        /// The store (and the session the goals belong to).
        store: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// Other writers kept changing the goals while this update was being applied.
    #[error("goals of {store} changed {attempts} times while an update was applied; retry the operation")]
    Contended {
        /// The store.
        store: String,
        /// How many times the update was tried.
        attempts: u32,
    },
    /// A change the caller asked for is not valid.
    #[error("{0}")]
    Invalid(String),
    /// The decision has no lock proposed by the model to confirm or refuse.
    #[error("decision {decision} of goal `{goal}` has no proposed lock to confirm or refuse; only a lock the model proposed (`[DECISION] ... - LOCKED`) waits for the caller")]
    NoLockProposed {
        /// The goal.
        goal: String,
        /// The decision.
        decision: u32,
    },
    /// An operation key was used before for a different change (ADR-0031).
    #[error("operation key `{key}` was already used for a different request on this session; use a new key for a new request")]
    KeyReused {
        /// The key.
        key: String,
    },
}
