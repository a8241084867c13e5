//! The goal manager: goals with checkpoints, locked decisions, artifacts, progress and
//! history, persisted as JSON, and rendered as a sticky layer-4 section that budget pressure
//! never compresses (ADR-0011, ADR-0008).
//!
//! The model may update its goal with markers in its own output:
//!
//! ```text
//! [GOAL] Implement user authentication
//! [CHECKPOINT] Design authentication flow - COMPLETED
//! [DECISION] Tokens: use JWT - LOCKED
//! [ARTIFACT] Created src/auth/login.rs
//! [NEXT] Add token refresh
//! ```
//!
//! Markers are read only from an [`AssistantOutput`], a type the runtime builds from the
//! model's own response. There is no conversion into it from tool output, memory, sections or
//! deserialised data, so text from layers 3-6 cannot steer the goal (ADR-0006). A locked
//! decision cannot be changed by a later marker; such a marker is reported as refused. The
//! parser is total: it never panics, whatever the text.
//!
//! Locking is permanent, so it needs the caller's authority, not the model's output alone
//! (ADR-0011): a `- LOCKED` marker in [`GoalManager::apply`] only *proposes* the lock
//! ([`Decision::lock_proposed`], shown as not yet locked). One injection that makes the model
//! echo a marker therefore changes nothing permanent. The runtime locks with
//! [`GoalManager::lock_decision`] (for example after the user confirmed
//! [`GoalManager::pending_locks`]), or applies output it vouches for with
//! [`GoalManager::apply_confirmed`].
//!
//! One job per file: `model.rs` (goals, checkpoints, decisions, artifacts and the edits of a
//! goal), `markers.rs` (reading markers from the model's output and applying them under an
//! authority), `manager.rs` (`GoalManager`: persistence, the caller's operations and the goal
//! section), `change.rs` (the caller's changes, retry-safe with an operation key), `store.rs`
//! (the goal file and the versioned `GoalStore`), `error.rs` (`GoalError`).

mod change;
mod error;
mod manager;
mod markers;
mod model;
mod store;

pub use change::{parse_name, ChangeOutcome, GoalChange};
pub use error::GoalError;
pub use manager::GoalManager;
pub use markers::{
    parse_markers, AssistantOutput, Malformed, Marker, MarkerOutcome, MarkerReport, ParsedMarkers,
};
pub use model::{
    Artifact, ArtifactAction, ArtifactKind, Checkpoint, CheckpointStatus, Decision, Goal,
    GoalEvent, GoalPriority, GoalStatus, Progress,
};
pub use store::GoalStore;

/// Longest description kept from a marker, in characters.
pub const MAX_MARKER_TEXT: usize = 500;
/// Most markers read from one output; the rest are reported as malformed.
pub const MAX_MARKERS_PER_OUTPUT: usize = 64;
