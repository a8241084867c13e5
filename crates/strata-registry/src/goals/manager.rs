//! [`GoalManager`]: a scope's goals kept in memory, a file or a shared store, changed only as a
//! whole (a failed change leaves nothing), and contributed as the sticky goal section.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use strata_core::{RuntimeLayer, Section, SourceKind};

use super::error::GoalError;
use super::markers::{
    apply_marker, clip, parse_markers, AssistantOutput, Authority, MarkerOutcome, MarkerReport,
};
use super::model::{
    add_artifact, add_checkpoint, add_decision, set_checkpoint, ArtifactAction, ArtifactKind,
    Checkpoint, CheckpointStatus, Decision, Goal, GoalBook, GoalPriority, GoalStatus, Progress,
    BOOK_VERSION,
};
use super::store::{parse_book, save_atomically, GoalStore, StoreLink, STORE_ATTEMPTS};
use crate::cache::{Clock, SystemClock};
use crate::contributor::CachePolicy;
use crate::contributor::{ContributionContext, Contributor, ContributorError, ContributorMeta};
use crate::modes::StandardSection;

/// Goals of one scope (an agent, or one session with [`GoalManager::for_session`]), persisted
/// to a JSON file when opened with one. Thread-safe.
///
/// It is also the contributor of the goal section: the active goal, rendered, sticky, layer 4,
/// phase task (ADR-0011).
pub struct GoalManager {
    id: Arc<str>,
    session: Option<Arc<str>>,
    path: Option<PathBuf>,
    book: Mutex<GoalBook>,
    clock: Arc<dyn Clock>,
    /// Where the book lives when it is kept in a shared store, with the version last read.
    store: Option<StoreLink>,
}

impl std::fmt::Debug for GoalManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoalManager")
            .field("id", &self.id)
            .field("session", &self.session)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl GoalManager {
    /// The default contributor id.
    pub const ID: &'static str = "builtin.goal";

    /// A manager that keeps goals in memory only, on the system clock.
    pub fn in_memory() -> GoalManager {
        GoalManager::with_clock(None, GoalBook::default(), Arc::new(SystemClock::new()))
    }

    fn with_clock(path: Option<PathBuf>, book: GoalBook, clock: Arc<dyn Clock>) -> GoalManager {
        GoalManager {
            id: Arc::from(Self::ID),
            session: None,
            path,
            book: Mutex::new(book),
            clock,
            store: None,
        }
    }

    /// Open (or start) the goal file at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<GoalManager, GoalError> {
        GoalManager::open_with_clock(path, Arc::new(SystemClock::new()))
    }

    /// Open (or start) the goal file at `path`, stamping times from `clock`.
    pub fn open_with_clock(
        path: impl Into<PathBuf>,
        clock: Arc<dyn Clock>,
    ) -> Result<GoalManager, GoalError> {
        let path = path.into();
        let book = match std::fs::read(&path) {
            Ok(bytes) => {
                let book: GoalBook =
                    serde_json::from_slice(&bytes).map_err(|e| GoalError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                if book.version != BOOK_VERSION {
                    return Err(GoalError::Corrupt {
                        path,
                        reason: format!(
                            "version {} is not the supported version {BOOK_VERSION}",
                            book.version
                        ),
                    });
                }
                book
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => GoalBook {
                version: BOOK_VERSION,
                ..GoalBook::default()
            },
            Err(source) => return Err(GoalError::Io { path, source }),
        };
        Ok(GoalManager::with_clock(Some(path), book, clock))
    }

    /// In memory, on `clock` (for tests and simulations).
    pub fn in_memory_with_clock(clock: Arc<dyn Clock>) -> GoalManager {
        GoalManager::with_clock(
            None,
            GoalBook {
                version: BOOK_VERSION,
                ..GoalBook::default()
            },
            clock,
        )
    }

    /// The same manager contributing only to gatherings of `session`, under the id
    /// `goal:<session>` (so one registry can hold one manager per session).
    #[must_use]
    pub fn for_session(mut self, session: impl Into<Arc<str>>) -> GoalManager {
        let session = session.into();
        self.id = Arc::from(format!("goal:{session}"));
        self.session = Some(session);
        self
    }

    /// Goals kept in `store` (for example one session's goals in the runtime's database):
    /// every read sees what the store holds now, and every update is written with a version
    /// check, retried when another process changed the goals in between (ADR-0016).
    pub fn in_store(
        store: Arc<dyn GoalStore>,
        clock: Arc<dyn Clock>,
    ) -> Result<GoalManager, GoalError> {
        let mut m = GoalManager::with_clock(
            None,
            GoalBook {
                version: BOOK_VERSION,
                ..GoalBook::default()
            },
            clock,
        );
        m.store = Some((store, Mutex::new(None)));
        m.refresh()?;
        Ok(m)
    }

    /// Read the goals again from the store (a no-op for files and memory).
    pub fn refresh(&self) -> Result<(), GoalError> {
        let Some((store, seen)) = &self.store else {
            return Ok(());
        };
        let loaded = store.load()?;
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut book = self.book.lock().unwrap_or_else(PoisonError::into_inner);
        match loaded {
            Some((json, version)) => {
                if *seen != Some(version) {
                    *book = parse_book(&json).map_err(|reason| GoalError::Store {
                        store: store.describe(),
                        reason: format!("{reason}; remove the stored goals to start afresh"),
                    })?;
                    *seen = Some(version);
                }
            }
            None => {
                *book = GoalBook {
                    version: BOOK_VERSION,
                    ..GoalBook::default()
                };
                *seen = None;
            }
        }
        Ok(())
    }

    /// The file it persists to, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The book, read again from the store first when there is one. A store that cannot be
    /// read leaves the last book read (and says so in the log); [`GoalManager::refresh`] and
    /// the contributor report the error instead.
    /// Now, on the manager's clock.
    pub(super) fn now_ms(&self) -> i64 {
        self.clock.unix_ms()
    }

    /// A copy of the book as last read, without reading the store again.
    pub(super) fn book(&self) -> GoalBook {
        self.book
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn lock(&self) -> MutexGuard<'_, GoalBook> {
        if let Err(e) = self.refresh() {
            tracing::warn!(error = %e, "could not read the goals again; using the last read");
        }
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Apply `f` to a copy of the goals, persist it, then keep it. On any error nothing
    /// changes, in memory or on disk.
    pub(super) fn mutate<T>(
        &self,
        mut f: impl FnMut(&mut GoalBook, i64) -> Result<T, GoalError>,
    ) -> Result<T, GoalError> {
        if let Some((store, seen)) = &self.store {
            return self.mutate_in_store(&**store, seen, f);
        }
        let now = self.clock.unix_ms();
        let mut guard = self.lock();
        let mut next = guard.clone();
        next.version = BOOK_VERSION;
        let out = f(&mut next, now)?;
        if next != *guard {
            if let Some(path) = &self.path {
                save_atomically(path, &next)?;
            }
            *guard = next;
        }
        Ok(out)
    }

    /// [`GoalManager::mutate`] against a shared store: read, apply, write if the version is
    /// unchanged; when another writer came first, read again and apply again.
    fn mutate_in_store<T>(
        &self,
        store: &dyn GoalStore,
        seen: &Mutex<Option<u64>>,
        mut f: impl FnMut(&mut GoalBook, i64) -> Result<T, GoalError>,
    ) -> Result<T, GoalError> {
        for attempt in 1..=STORE_ATTEMPTS {
            self.refresh()?;
            let now = self.clock.unix_ms();
            let current = self
                .book
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let expected = *seen.lock().unwrap_or_else(PoisonError::into_inner);
            let mut next = current.clone();
            next.version = BOOK_VERSION;
            let out = f(&mut next, now)?;
            if next == current {
                return Ok(out);
            }
            let json = serde_json::to_string(&next).map_err(|e| GoalError::Store {
                store: store.describe(),
                reason: e.to_string(),
            })?;
            if let Some(version) = store.save(&json, expected)? {
                *self.book.lock().unwrap_or_else(PoisonError::into_inner) = next;
                *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(version);
                return Ok(out);
            }
            tracing::debug!(store = %store.describe(), attempt, "goals changed meanwhile; applying the update again");
        }
        Err(GoalError::Contended {
            store: store.describe(),
            attempts: STORE_ATTEMPTS,
        })
    }

    pub(super) fn goal_mut<'a>(
        book: &'a mut GoalBook,
        id: &str,
    ) -> Result<&'a mut Goal, GoalError> {
        book.goals
            .iter_mut()
            .find(|g| g.id == id)
            .ok_or_else(|| GoalError::GoalNotFound(id.to_owned()))
    }

    fn pause_active(book: &mut GoalBook, now: i64, except: &str) {
        for g in book
            .goals
            .iter_mut()
            .filter(|g| g.status == GoalStatus::Active && g.id != except)
        {
            g.status = GoalStatus::Paused;
            g.log(now, "paused: another goal became active".into());
        }
    }

    pub(super) fn create_in(
        book: &mut GoalBook,
        now: i64,
        description: &str,
        priority: GoalPriority,
    ) -> Goal {
        book.next_goal += 1;
        let id = format!("goal-{}", book.next_goal);
        Self::pause_active(book, now, &id);
        let mut goal = Goal {
            id,
            description: clip(description),
            priority,
            status: GoalStatus::Active,
            created_ms: now,
            completed_ms: None,
            summary: None,
            checkpoints: Vec::new(),
            decisions: Vec::new(),
            artifacts: Vec::new(),
            next: None,
            history: Vec::new(),
        };
        goal.log(now, "created".into());
        book.goals.push(goal.clone());
        goal
    }

    /// Create a goal and make it the active one (an active goal is paused).
    pub fn create_goal(
        &self,
        description: &str,
        priority: GoalPriority,
    ) -> Result<Goal, GoalError> {
        self.mutate(|b, now| Ok(Self::create_in(b, now, description, priority)))
    }

    /// The active goal.
    pub fn active_goal(&self) -> Option<Goal> {
        self.lock()
            .goals
            .iter()
            .find(|g| g.status == GoalStatus::Active)
            .cloned()
    }

    /// A goal by id.
    pub fn goal(&self, id: &str) -> Option<Goal> {
        self.lock().goals.iter().find(|g| g.id == id).cloned()
    }

    /// Every goal, oldest first.
    pub fn history(&self) -> Vec<Goal> {
        self.lock().goals.clone()
    }

    /// Pause an active goal.
    pub fn pause_goal(&self, id: &str) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, id)?;
            match g.status {
                GoalStatus::Active => {
                    g.status = GoalStatus::Paused;
                    g.log(now, "paused".into());
                    Ok(())
                }
                GoalStatus::Paused => Ok(()),
                status => Err(GoalError::InvalidState {
                    goal: id.into(),
                    status,
                    operation: "pause it",
                }),
            }
        })
    }

    /// Resume a paused goal, making it the active one (an active goal is paused).
    pub fn resume_goal(&self, id: &str) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let status = Self::goal_mut(b, id)?.status;
            match status {
                GoalStatus::Paused => {
                    Self::pause_active(b, now, id);
                    let g = Self::goal_mut(b, id)?;
                    g.status = GoalStatus::Active;
                    g.log(now, "resumed".into());
                    Ok(())
                }
                GoalStatus::Active => Ok(()),
                status => Err(GoalError::InvalidState {
                    goal: id.into(),
                    status,
                    operation: "resume it",
                }),
            }
        })
    }

    /// Complete a goal with a summary.
    pub fn complete_goal(&self, id: &str, summary: &str) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, id)?;
            if g.status == GoalStatus::Completed {
                return Err(GoalError::InvalidState {
                    goal: id.into(),
                    status: g.status,
                    operation: "complete it again",
                });
            }
            g.status = GoalStatus::Completed;
            g.completed_ms = Some(now);
            g.summary = Some(summary.to_owned());
            g.log(now, "completed".into());
            Ok(())
        })
    }

    /// Add a pending checkpoint.
    pub fn create_checkpoint(
        &self,
        goal: &str,
        description: &str,
    ) -> Result<Checkpoint, GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, goal)?;
            Ok(add_checkpoint(
                g,
                now,
                description,
                CheckpointStatus::Pending,
            ))
        })
    }

    /// Set a checkpoint's status.
    pub fn update_checkpoint(
        &self,
        goal: &str,
        checkpoint: u32,
        status: CheckpointStatus,
    ) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, goal)?;
            let idx = g
                .checkpoints
                .iter()
                .position(|c| c.id == checkpoint)
                .ok_or_else(|| GoalError::CheckpointNotFound {
                    goal: goal.into(),
                    checkpoint,
                })?;
            set_checkpoint(g, idx, now, status);
            Ok(())
        })
    }

    /// Record an unlocked decision.
    pub fn record_decision(
        &self,
        goal: &str,
        description: &str,
        rationale: &str,
    ) -> Result<Decision, GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, goal)?;
            Ok(add_decision(g, now, description, rationale, false))
        })
    }

    /// Change an unlocked decision's text and rationale.
    pub fn update_decision(
        &self,
        goal: &str,
        decision: u32,
        description: &str,
        rationale: &str,
    ) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, goal)?;
            let d = g
                .decisions
                .iter_mut()
                .find(|d| d.id == decision)
                .ok_or_else(|| GoalError::DecisionNotFound {
                    goal: goal.into(),
                    decision,
                })?;
            if d.locked {
                return Err(GoalError::DecisionLocked {
                    goal: goal.into(),
                    decision,
                });
            }
            d.description = clip(description);
            d.rationale = rationale.to_owned();
            g.log(now, format!("decision {decision} changed"));
            Ok(())
        })
    }

    /// Lock a decision; it can no longer change.
    pub fn lock_decision(&self, goal: &str, decision: u32) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, goal)?;
            let d = g
                .decisions
                .iter_mut()
                .find(|d| d.id == decision)
                .ok_or_else(|| GoalError::DecisionNotFound {
                    goal: goal.into(),
                    decision,
                })?;
            d.lock_proposed = false;
            if !d.locked {
                d.locked = true;
                g.log(now, format!("decision {decision} locked by the caller"));
            }
            Ok(())
        })
    }

    /// Record an artifact.
    pub fn record_artifact(
        &self,
        goal: &str,
        kind: ArtifactKind,
        path: &str,
        action: ArtifactAction,
    ) -> Result<(), GoalError> {
        self.mutate(|b, now| {
            let g = Self::goal_mut(b, goal)?;
            add_artifact(g, now, kind, path, action);
            Ok(())
        })
    }

    /// Name the next step.
    pub fn set_next(&self, goal: &str, next: &str) -> Result<(), GoalError> {
        self.mutate(|b, _| {
            Self::goal_mut(b, goal)?.next = Some(clip(next));
            Ok(())
        })
    }

    /// A goal's progress.
    pub fn progress(&self, goal: &str) -> Result<Progress, GoalError> {
        self.goal(goal)
            .map(|g| g.progress())
            .ok_or_else(|| GoalError::GoalNotFound(goal.to_owned()))
    }

    /// Apply the markers of the model's output to the active goal, persisting once.
    /// Markers that would change a locked decision, start a second goal while one is active,
    /// or update a goal when none is active are refused and reported. A `- LOCKED` marker
    /// only proposes the lock (ADR-0011): nothing the model writes alone becomes permanent.
    pub fn apply(&self, output: &AssistantOutput) -> Result<MarkerReport, GoalError> {
        self.apply_with(output, Authority::Model)
    }

    /// Apply markers that carry the caller's authority: the runtime vouches for this output
    /// (a human reviewed it, or it came from the operator), so `- LOCKED` locks. Never call this
    /// on the model's response as it came.
    pub fn apply_confirmed(&self, output: &AssistantOutput) -> Result<MarkerReport, GoalError> {
        tracing::info!(target: "strata_registry", "applying goal markers with the caller's authority");
        self.apply_with(output, Authority::Caller)
    }

    /// Decisions of the active goal whose lock the model proposed and the caller has not
    /// confirmed, for the runtime to confirm with [`GoalManager::lock_decision`].
    pub fn pending_locks(&self) -> Vec<(String, Decision)> {
        self.active_goal()
            .map(|g| {
                g.decisions
                    .iter()
                    .filter(|d| d.lock_proposed && !d.locked)
                    .map(|d| (g.id.clone(), d.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn apply_with(
        &self,
        output: &AssistantOutput,
        authority: Authority,
    ) -> Result<MarkerReport, GoalError> {
        let parsed = parse_markers(output);
        self.mutate(|b, now| {
            let mut report = MarkerReport {
                outcomes: Vec::with_capacity(parsed.markers.len()),
                malformed: parsed.malformed.clone(),
            };
            for (_, marker) in &parsed.markers {
                let outcome = apply_marker(b, now, marker, authority);
                if let MarkerOutcome::Refused(reason) = &outcome {
                    tracing::info!(target: "strata_registry", ?marker, reason = %reason,
                        "goal marker refused");
                }
                report.outcomes.push((marker.clone(), outcome));
            }
            Ok(report)
        })
    }
}

impl Contributor for GoalManager {
    fn id(&self) -> &str {
        &self.id
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Delegated
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            sticky: true,
            source: SourceKind::Caller,
            ..StandardSection::Goal.meta()
        }
    }
    /// A session's goals are never cached: the section cache's keys name no session. (The
    /// goal is stable: it leads the context, before the skills and the conversation, and a
    /// change of it is a change of the stable prefix.)
    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::Never
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        if self.session.as_ref().is_some_and(|s| *s != ctx.session_id) {
            return Ok(Vec::new());
        }
        // A store that cannot be read fails the gathering: the goal is sticky, never silently
        // left out.
        self.refresh()
            .map_err(|e| ContributorError::Source(e.to_string()))?;
        let Some(goal) = self.active_goal() else {
            return Ok(Vec::new());
        };
        let section = self
            .meta()
            .section(&self.id, RuntimeLayer::Delegated, "goal", goal.render())
            .map_err(|e| ContributorError::Source(e.to_string()))?
            .build();
        Ok(vec![section])
    }
}
