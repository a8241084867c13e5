//! Gathering: running the contributors that take part in one assembly (ADR-0011).
//!
//! Contributors run concurrently, each on its own thread under its own timeout. A contributor
//! that runs over is abandoned (its thread finishes on its own; while it does, the contributor
//! is not started again) and reported; a panic is caught. Every returned section must be of
//! the contributor's declared layer, and a contributor registered by an MCP server may only
//! produce sections that name that server as their source; anything else is dropped and
//! reported. A failing non-sticky contributor becomes a marked omission; a failing sticky one
//! fails the gathering. Cached output of a contributor with a validator is served only while
//! its sources still give the validator it was computed under, and output whose sources changed
//! while it was computed is not cached. The result is in a deterministic order: by layer, then contributor id,
//! then section id (ADR-0013).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use strata_core::{ContentHash, RuntimeLayer, Section, SectionId, SourceKind};

use crate::cache::{CacheKey, Lookup, SectionCache, Ticket};
use crate::contributor::{CachePolicy, ContributionContext, Contributor, ContributorError};
use crate::registry::{Registered, Registry};

/// Why a contributor's output, or part of it, is missing from a gathering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OmissionReason {
    /// The contributor failed, timed out or panicked.
    #[error(transparent)]
    Failed(#[from] ContributorError),
    /// A returned section was of another layer than the contributor declared; it was dropped.
    #[error("section `{section}` is of layer {produced}, not the declared layer: it was dropped; build sections with the contributor's own layer")]
    WrongLayer {
        /// The section.
        section: SectionId,
        /// The layer it claimed.
        produced: RuntimeLayer,
    },
    /// A section from an MCP server's contributor named another source; it was dropped.
    #[error("section `{section}` claims source `{claimed}`, but its contributor belongs to MCP server `{server}`: it was dropped")]
    ForeignSource {
        /// The section.
        section: SectionId,
        /// The source it claimed.
        claimed: String,
        /// The server the contributor was registered by.
        server: String,
    },
    /// An earlier run of the contributor timed out and has not finished yet, so it was not
    /// started again.
    #[error("an earlier run timed out and is still going: not started again until it ends; check the contributor's source")]
    StillRunning,
}

/// Something missing from a gathering, marked so the report can say what and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Omission {
    /// The contributor.
    pub contributor: Arc<str>,
    /// Its layer.
    pub layer: RuntimeLayer,
    /// Why.
    pub reason: OmissionReason,
}

/// How a contributor's output was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum RunOutcome {
    /// It ran now.
    Computed,
    /// Fresh output from the cache.
    Cached,
    /// Expired output from the cache, refreshed in the background.
    Stale,
    /// Nothing usable (see the omissions).
    Omitted,
}

/// One contributor's part in a gathering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The contributor.
    pub contributor: Arc<str>,
    /// How its output was obtained.
    pub outcome: RunOutcome,
    /// How many of its sections were kept.
    pub sections: usize,
}

/// The result of a gathering.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// The sections, by layer, then contributor id, then section id.
    pub sections: Vec<Section>,
    /// What is missing and why, by layer then contributor id.
    pub omissions: Vec<Omission>,
    /// Every contributor that took part, by id.
    pub runs: Vec<Run>,
}

/// A gathering that could not produce a usable result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GatherError {
    /// A sticky contributor failed; sticky content must be present, so the assembly fails.
    #[error("sticky contributor `{contributor}` (layer {layer}) failed: {reason}; sticky content is never left out, so fix its source or make it non-sticky")]
    Sticky {
        /// The contributor.
        contributor: Arc<str>,
        /// Its layer.
        layer: RuntimeLayer,
        /// What went wrong.
        reason: OmissionReason,
    },
}

/// Counts background refreshes under way, so a caller can wait for them.
#[derive(Debug, Default)]
pub(crate) struct RefreshTracker {
    running: Mutex<usize>,
    idle: Condvar,
}

impl RefreshTracker {
    fn start(&self) {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }
    fn finish(&self) {
        let mut n = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.idle.notify_all();
        }
    }
    fn wait(&self, timeout: Duration) -> bool {
        let n = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let (n, _) = self
            .idle
            .wait_timeout_while(n, timeout, |n| *n > 0)
            .unwrap_or_else(PoisonError::into_inner);
        *n == 0
    }
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// Run `contributor` on the current thread, turning a panic into an error.
fn run_caught(
    contributor: &dyn Contributor,
    ctx: &ContributionContext,
) -> Result<Vec<Section>, ContributorError> {
    match catch_unwind(AssertUnwindSafe(|| contributor.contribute(ctx))) {
        Ok(r) => r,
        Err(_) => Err(ContributorError::Panicked),
    }
}

/// Whether `contributor`'s sources still give `expected`, the validator its lookup was made
/// with (always, when there is none). Called after it ran: output whose sources changed
/// meanwhile may have been read from either state, so it is not cached. A panicking validator
/// counts as changed.
fn sources_unchanged(
    contributor: &dyn Contributor,
    ctx: &ContributionContext,
    expected: Option<ContentHash>,
) -> bool {
    expected.is_none()
        || catch_unwind(AssertUnwindSafe(|| contributor.cache_validator(ctx)))
            .is_ok_and(|now| now == expected)
}

/// Keep the sections that are of the declared layer and source; report the rest.
fn validate(entry: &Registered, sections: Vec<Section>) -> (Vec<Section>, Vec<OmissionReason>) {
    let mut kept = Vec::with_capacity(sections.len());
    let mut dropped = Vec::new();
    for s in sections {
        if s.layer() != entry.layer {
            dropped.push(OmissionReason::WrongLayer {
                section: s.id().clone(),
                produced: s.layer(),
            });
            continue;
        }
        if let SourceKind::Mcp(server) = &entry.meta.source {
            if s.provenance().source != entry.meta.source {
                dropped.push(OmissionReason::ForeignSource {
                    section: s.id().clone(),
                    claimed: s.provenance().source.label(),
                    server: server.to_string(),
                });
                continue;
            }
        }
        kept.push(s);
    }
    (kept, dropped)
}

/// Run `entry`'s contributor on a thread of its own, which reports its result on `tx` with
/// `idx` (and whether its sources still give `validator`, see [`sources_unchanged`]) and then
/// marks the returned state done (or, when the run was abandoned meanwhile, counts itself off
/// the contributor's abandoned runs).
fn spawn_run(
    idx: usize,
    entry: &Registered,
    ctx: &Arc<ContributionContext>,
    validator: Option<ContentHash>,
    tx: &mpsc::Sender<Report>,
) -> std::io::Result<Arc<AtomicU8>> {
    let state = Arc::new(AtomicU8::new(RUNNING));
    let thread_state = state.clone();
    let abandoned = entry.abandoned.clone();
    let contributor = entry.contributor.clone();
    let thread_ctx = ctx.clone();
    let tx = tx.clone();
    std::thread::Builder::new()
        .name(format!("strata-contrib-{}", entry.id))
        .spawn(move || {
            let result = run_caught(&*contributor, &thread_ctx);
            let unchanged = sources_unchanged(&*contributor, &thread_ctx, validator);
            let _ = tx.send((idx, result, unchanged));
            if thread_state
                .compare_exchange(RUNNING, DONE, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                abandoned.fetch_sub(1, Ordering::SeqCst);
            }
        })?;
    Ok(state)
}

/// The result of a gathering from each contributor's output (`None` when it was omitted):
/// a run for each, the sections by layer, contributor id and section id, the omissions by
/// layer and contributor id.
fn collect(
    entries: &[Registered],
    outputs: Vec<Option<(Vec<Section>, RunOutcome)>>,
    mut omissions: Vec<Omission>,
) -> Gathered {
    let mut runs = Vec::with_capacity(entries.len());
    let mut collected: Vec<(RuntimeLayer, Arc<str>, Section)> = Vec::new();
    for (entry, output) in entries.iter().zip(outputs) {
        match output {
            Some((sections, outcome)) => {
                runs.push(Run {
                    contributor: entry.id.clone(),
                    outcome,
                    sections: sections.len(),
                });
                collected.extend(
                    sections
                        .into_iter()
                        .map(|s| (entry.layer, entry.id.clone(), s)),
                );
            }
            None => runs.push(Run {
                contributor: entry.id.clone(),
                outcome: RunOutcome::Omitted,
                sections: 0,
            }),
        }
    }
    collected.sort_by(|a, b| (a.0, &a.1, a.2.id()).cmp(&(b.0, &b.1, b.2.id())));
    omissions.sort_by(|a, b| (a.layer, &a.contributor).cmp(&(b.layer, &b.contributor)));
    Gathered {
        sections: collected.into_iter().map(|(_, _, s)| s).collect(),
        omissions,
        runs,
    }
}

enum Plan {
    Ready(Arc<[Section]>, RunOutcome),
    Compute(Option<(CacheKey, Ticket)>),
    Failed(OmissionReason),
}

struct Pending {
    idx: usize,
    deadline: Instant,
    state: Arc<AtomicU8>,
}

/// What a contributor's thread reports: its index in the gathering, its result, and whether
/// its sources were unchanged while it ran.
type Report = (usize, Result<Vec<Section>, ContributorError>, bool);

/// One gathering under way: for each contributor (by its index in the gathering) its output
/// and its cache ticket, the omissions so far, and the runs still in flight.
struct Gathering {
    outputs: Vec<Option<(Vec<Section>, RunOutcome)>>,
    tickets: Vec<Option<(CacheKey, Ticket)>>,
    omissions: Vec<Omission>,
    pending: Vec<Pending>,
}

impl Registry {
    /// Wait until no background refresh is under way, at most `timeout`. Returns whether all
    /// refreshes ended.
    pub fn wait_for_refreshes(&self, timeout: Duration) -> bool {
        self.refreshes.wait(timeout)
    }

    /// Run the contributors that take part in `ctx`'s mode and path and collect their
    /// sections (ADR-0011). Cached output is used where the contributor's cache policy allows.
    ///
    /// Fails only when a sticky contributor fails; any other failure is an [`Omission`].
    pub fn gather(&self, ctx: &ContributionContext) -> Result<Gathered, GatherError> {
        let entries: Vec<Registered> = self
            .read()
            .values()
            .filter(|e| e.meta.takes_part(ctx.mode, ctx.path))
            .cloned()
            .collect();
        let shared_ctx = Arc::new(ctx.clone());

        let mut g = Gathering {
            outputs: vec![None; entries.len()],
            tickets: vec![None; entries.len()],
            omissions: Vec::new(),
            pending: Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<Report>();
        let started = Instant::now();
        for (idx, entry) in entries.iter().enumerate() {
            self.start(idx, entry, &shared_ctx, &tx, started, &mut g)?;
        }
        drop(tx);

        while !g.pending.is_empty() {
            let now = Instant::now();
            let next_deadline = g.pending.iter().map(|p| p.deadline).min().unwrap_or(now);
            let received = rx.recv_timeout(next_deadline.saturating_duration_since(now));
            match received {
                Ok((idx, result, unchanged)) => {
                    self.take_report(&entries, idx, result, unchanged, &mut g)?;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => self.abandon_overdue(&entries, &mut g)?,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Every thread has ended; any left pending died without reporting.
                    for p in g.pending.drain(..) {
                        let entry = &entries[p.idx];
                        self.omit(
                            entry,
                            OmissionReason::Failed(ContributorError::Panicked),
                            &mut g.omissions,
                        )?;
                    }
                }
            }
        }
        Ok(collect(&entries, g.outputs, g.omissions))
    }

    /// Start the contributor `entry`, the `idx`th of the gathering: take its output from the
    /// cache, or run it on its own thread that reports on `tx`, with a deadline of its timeout
    /// after `started`; or omit it (a failed plan, a run still abandoned, no thread).
    fn start(
        &self,
        idx: usize,
        entry: &Registered,
        ctx: &Arc<ContributionContext>,
        tx: &mpsc::Sender<Report>,
        started: Instant,
        g: &mut Gathering,
    ) -> Result<(), GatherError> {
        match self.plan(entry, ctx) {
            Plan::Ready(sections, outcome) => {
                g.outputs[idx] = Some((sections.to_vec(), outcome));
            }
            Plan::Failed(reason) => {
                self.omit(entry, reason, &mut g.omissions)?;
            }
            Plan::Compute(ticket) => {
                if entry.abandoned.load(Ordering::SeqCst) > 0 {
                    return self.omit(entry, OmissionReason::StillRunning, &mut g.omissions);
                }
                let validator = ticket.as_ref().and_then(|(_, t)| t.validator());
                g.tickets[idx] = ticket;
                match spawn_run(idx, entry, ctx, validator, tx) {
                    Ok(state) => g.pending.push(Pending {
                        idx,
                        deadline: started + entry.meta.timeout,
                        state,
                    }),
                    Err(e) => {
                        let reason = OmissionReason::Failed(ContributorError::Source(format!(
                            "could not start a thread for it: {e}"
                        )));
                        self.omit(entry, reason, &mut g.omissions)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Take the report of the `idx`th contributor's thread, if its run is still pending: keep
    /// its valid sections (and cache them when all were valid and its sources `unchanged`
    /// while it ran), or omit it.
    fn take_report(
        &self,
        entries: &[Registered],
        idx: usize,
        result: Result<Vec<Section>, ContributorError>,
        unchanged: bool,
        g: &mut Gathering,
    ) -> Result<(), GatherError> {
        let Some(pos) = g.pending.iter().position(|p| p.idx == idx) else {
            return Ok(());
        };
        g.pending.swap_remove(pos);
        let entry = &entries[idx];
        match result {
            Ok(sections) => {
                let (kept, dropped) = validate(entry, sections);
                let clean = dropped.is_empty();
                for reason in dropped {
                    self.omit(entry, reason, &mut g.omissions)?;
                }
                if clean && unchanged {
                    if let (Some(cache), Some((key, ticket))) = (&self.cache, g.tickets[idx].take())
                    {
                        cache.store(
                            ticket,
                            key,
                            Arc::from(kept.clone()),
                            entry.contributor.cache_policy(),
                            entry.meta.source.clone(),
                            Arc::from(entry.meta.tags.clone()),
                        );
                    }
                }
                g.outputs[idx] = Some((kept, RunOutcome::Computed));
            }
            Err(e) => self.omit(entry, OmissionReason::Failed(e), &mut g.omissions)?,
        }
        Ok(())
    }

    /// Abandon every pending run whose deadline has passed, and omit it as timed out.
    fn abandon_overdue(
        &self,
        entries: &[Registered],
        g: &mut Gathering,
    ) -> Result<(), GatherError> {
        let now = Instant::now();
        let mut i = 0;
        while i < g.pending.len() {
            if g.pending[i].deadline > now {
                i += 1;
                continue;
            }
            let p = g.pending.swap_remove(i);
            let entry = &entries[p.idx];
            entry.abandoned.fetch_add(1, Ordering::SeqCst);
            if p.state
                .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // It finished just now; its thread will not count itself.
                entry.abandoned.fetch_sub(1, Ordering::SeqCst);
            }
            let reason = OmissionReason::Failed(ContributorError::Timeout(entry.meta.timeout));
            self.omit(entry, reason, &mut g.omissions)?;
        }
        Ok(())
    }

    /// Record an omission, or fail the gathering when the contributor is sticky.
    fn omit(
        &self,
        entry: &Registered,
        reason: OmissionReason,
        omissions: &mut Vec<Omission>,
    ) -> Result<(), GatherError> {
        if entry.meta.sticky {
            tracing::error!(target: "strata_registry", contributor = %entry.id, %reason,
                "sticky contributor failed");
            return Err(GatherError::Sticky {
                contributor: entry.id.clone(),
                layer: entry.layer,
                reason,
            });
        }
        tracing::warn!(target: "strata_registry", contributor = %entry.id, %reason,
            "contributor output omitted");
        omissions.push(Omission {
            contributor: entry.id.clone(),
            layer: entry.layer,
            reason,
        });
        Ok(())
    }

    /// Decide whether a contributor's output comes from the cache or must be computed.
    fn plan(&self, entry: &Registered, ctx: &Arc<ContributionContext>) -> Plan {
        let Some(cache) = &self.cache else {
            return Plan::Compute(None);
        };
        let policy = entry.contributor.cache_policy();
        if policy == CachePolicy::Never {
            return Plan::Compute(None);
        }
        let fingerprint = match catch_unwind(AssertUnwindSafe(|| {
            entry.contributor.cache_fingerprint(ctx)
        })) {
            Ok(f) => f,
            Err(_) => return Plan::Failed(OmissionReason::Failed(ContributorError::Panicked)),
        };
        let validator =
            match catch_unwind(AssertUnwindSafe(|| entry.contributor.cache_validator(ctx))) {
                Ok(v) => v,
                Err(_) => return Plan::Failed(OmissionReason::Failed(ContributorError::Panicked)),
            };
        let key = CacheKey::for_context(&entry.id, ctx, fingerprint);
        match cache.lookup_validated(&key, validator, entry.meta.timeout) {
            Lookup::Hit(sections) => Plan::Ready(sections, RunOutcome::Cached),
            Lookup::Stale { sections, refresh } => {
                if let Some(ticket) = refresh {
                    self.spawn_refresh(cache.clone(), entry.clone(), ctx.clone(), key, ticket);
                }
                Plan::Ready(sections, RunOutcome::Stale)
            }
            Lookup::Miss(ticket) => Plan::Compute(Some((key, ticket))),
        }
    }

    /// Refresh expired output on a background thread (stale-while-revalidate).
    fn spawn_refresh(
        &self,
        cache: Arc<SectionCache>,
        entry: Registered,
        ctx: Arc<ContributionContext>,
        key: CacheKey,
        ticket: Ticket,
    ) {
        let tracker = self.refreshes.clone();
        tracker.start();
        let thread_tracker = tracker.clone();
        let failed_key = key.clone();
        let failed_cache = cache.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("strata-refresh-{}", entry.id))
            .spawn(move || {
                let result = run_caught(&*entry.contributor, &ctx);
                let unchanged = sources_unchanged(&*entry.contributor, &ctx, ticket.validator());
                let stored = match result {
                    Ok(sections) => {
                        let (kept, dropped) = validate(&entry, sections);
                        dropped.is_empty()
                            && unchanged
                            && cache.store(
                                ticket,
                                key.clone(),
                                Arc::from(kept),
                                entry.contributor.cache_policy(),
                                entry.meta.source.clone(),
                                Arc::from(entry.meta.tags.clone()),
                            )
                    }
                    Err(e) => {
                        tracing::warn!(target: "strata_registry", contributor = %entry.id,
                            error = %e, "background refresh failed; the expired output stays");
                        false
                    }
                };
                if !stored {
                    cache.refresh_failed(&key);
                }
                thread_tracker.finish();
            });
        if let Err(e) = spawned {
            tracing::warn!(target: "strata_registry", error = %e,
                "could not start a background refresh");
            failed_cache.refresh_failed(&failed_key);
            tracker.finish();
        }
    }
}

/// Counts abandoned runs of one contributor (shared by every gathering).
pub(crate) type AbandonedRuns = Arc<AtomicUsize>;
