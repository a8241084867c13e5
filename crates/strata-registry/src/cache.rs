//! The section cache: contributors' output kept between gatherings (ADR-0011, ADR-0013).
//!
//! Stable output is kept until it is invalidated (by contributor id, by source, by tag, or
//! all). Dynamic output is never kept, unless its contributor opts into a time to live, in
//! which case expired output is served once more while a background thread refreshes it
//! (stale-while-revalidate). Keys include the identity digest, prompt mode, assembly path,
//! tier, operational mode and the contributor's input fingerprint, so a new agent definition
//! never sees entries of an old one.
//!
//! An entry may carry its contributor's validator, a digest of the outside state it was computed
//! from (bootstrap files, for instance): a lookup passes the current one, and an entry whose
//! validator differs is dropped and answered as a miss, so a changed source reaches the very
//! next gathering while an unchanged one is still served from here.
//!
//! Invariant: the cache never serves output across an invalidation. Every invalidation bumps an
//! epoch, and output computed under an older epoch is refused when it is stored, so a slow
//! computation that started before an invalidation cannot put old output back.
//!
//! Time comes from an injected [`Clock`], so TTL behaviour is tested without sleeping.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use strata_core::{
    AssemblyPath, ContentHash, OperationalMode, PromptMode, Section, SourceKind, Tier,
};

use crate::contributor::{CachePolicy, ContributionContext};

/// A source of time. Monotonic time drives TTLs; wall time stamps records.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since an arbitrary fixed origin; never goes backwards.
    fn monotonic_ms(&self) -> u64;
    /// Wall-clock time, Unix milliseconds.
    fn unix_ms(&self) -> i64;
}

/// The real clock.
#[derive(Debug, Clone)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn monotonic_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
    fn unix_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to (for tests and simulations).
#[derive(Debug, Default)]
pub struct ManualClock {
    mono: AtomicU64,
    unix: AtomicI64,
}

impl ManualClock {
    /// A clock at monotonic 0 and the given wall time.
    pub fn new(unix_ms: i64) -> ManualClock {
        ManualClock {
            mono: AtomicU64::new(0),
            unix: AtomicI64::new(unix_ms),
        }
    }

    /// Move both times forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.mono.fetch_add(ms, Ordering::SeqCst);
        self.unix
            .fetch_add(i64::try_from(ms).unwrap_or(i64::MAX), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn monotonic_ms(&self) -> u64 {
        self.mono.load(Ordering::SeqCst)
    }
    fn unix_ms(&self) -> i64 {
        self.unix.load(Ordering::SeqCst)
    }
}

/// What a cached output is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The contributor's id.
    pub contributor: Arc<str>,
    /// The identity digest of the verified definition.
    pub identity: ContentHash,
    /// Prompt mode.
    pub mode: PromptMode,
    /// Assembly path.
    pub path: AssemblyPath,
    /// Context tier.
    pub tier: Tier,
    /// Operational mode.
    pub operational_mode: OperationalMode,
    /// The contributor's fingerprint of further inputs.
    pub fingerprint: Option<ContentHash>,
}

impl CacheKey {
    /// The key of `contributor`'s output in `ctx`.
    pub fn for_context(
        contributor: &Arc<str>,
        ctx: &ContributionContext,
        fingerprint: Option<ContentHash>,
    ) -> CacheKey {
        CacheKey {
            contributor: contributor.clone(),
            identity: ctx.identity_digest,
            mode: ctx.mode,
            path: ctx.path,
            tier: ctx.tier,
            operational_mode: ctx.operational_mode,
            fingerprint,
        }
    }
}

/// Counters of the cache's work since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Lookups answered with fresh output.
    pub hits: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Entries held now.
    pub entries: u64,
    /// Lookups answered with expired output while a refresh was due.
    pub stale_serves: u64,
    /// Background refreshes that stored new output.
    pub refreshes: u64,
    /// Invalidation calls.
    pub invalidations: u64,
    /// Entries dropped to stay within capacity.
    pub evictions: u64,
    /// Lookups that found an entry whose validator no longer matched its contributor's sources;
    /// each is counted as a miss as well.
    pub changed: u64,
}

/// Permission to store output computed from a lookup; refused if anything was invalidated
/// since the ticket was taken.
#[derive(Debug, Clone)]
#[must_use]
pub struct Ticket {
    epoch: u64,
    refresh: bool,
    validator: Option<ContentHash>,
}

impl Ticket {
    /// The validator the lookup was made with; output stored with this ticket carries it.
    pub fn validator(&self) -> Option<ContentHash> {
        self.validator
    }
}

/// The answer to a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// Fresh output.
    Hit(Arc<[Section]>),
    /// Expired output, served once more. When `refresh` is set, the caller is the one that
    /// should refresh it in the background and store the result with that ticket.
    Stale {
        /// The expired output.
        sections: Arc<[Section]>,
        /// The refresh ticket, when no other refresh is under way.
        refresh: Option<Ticket>,
    },
    /// Nothing cached: compute, then store with the ticket.
    Miss(Ticket),
}

#[derive(Debug)]
struct Entry {
    sections: Arc<[Section]>,
    stored_ms: u64,
    ttl_ms: Option<u64>,
    source: SourceKind,
    tags: Arc<[Arc<str>]>,
    refreshing_since: Option<u64>,
    validator: Option<ContentHash>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<CacheKey, Entry>,
    epoch: u64,
    stats: CacheStats,
}

/// The cache of contributors' output. Thread-safe; share it as `Arc<SectionCache>`.
pub struct SectionCache {
    inner: Mutex<Inner>,
    clock: Arc<dyn Clock>,
    default_ttl: Duration,
    capacity: usize,
}

impl std::fmt::Debug for SectionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SectionCache")
            .field("stats", &self.stats())
            .field("default_ttl", &self.default_ttl)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Default for SectionCache {
    fn default() -> Self {
        SectionCache::new(Arc::new(SystemClock::new()))
    }
}

impl SectionCache {
    /// The default time to live of contributors that opt into one (the seeds' 30 s).
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// The default number of entries kept.
    pub const DEFAULT_CAPACITY: usize = 4096;

    /// A cache on `clock` with the default TTL and capacity.
    pub fn new(clock: Arc<dyn Clock>) -> SectionCache {
        SectionCache {
            inner: Mutex::new(Inner::default()),
            clock,
            default_ttl: Self::DEFAULT_TTL,
            capacity: Self::DEFAULT_CAPACITY,
        }
    }

    /// The same cache with another default TTL.
    #[must_use]
    pub fn with_default_ttl(mut self, ttl: Duration) -> SectionCache {
        self.default_ttl = ttl;
        self
    }

    /// The same cache with another capacity (at least 1).
    #[must_use]
    pub fn with_capacity(mut self, capacity: usize) -> SectionCache {
        self.capacity = capacity.max(1);
        self
    }

    /// The clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// The default TTL.
    pub fn default_ttl(&self) -> Duration {
        self.default_ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Look `key` up, for output without a validator. An expired entry is handed out for
    /// refresh to one caller at a time; if that refresh has not finished after
    /// `refresh_timeout`, the next caller gets it.
    pub fn lookup(&self, key: &CacheKey, refresh_timeout: Duration) -> Lookup {
        self.lookup_validated(key, None, refresh_timeout)
    }

    /// Look `key` up for output whose sources now have the digest `validator`
    /// ([`crate::Contributor::cache_validator`]). An entry stored under another validator is
    /// dropped and answered as a miss (counted in `misses` and `changed`); otherwise as
    /// [`SectionCache::lookup`]. The returned ticket carries `validator` to the stored entry.
    pub fn lookup_validated(
        &self,
        key: &CacheKey,
        validator: Option<ContentHash>,
        refresh_timeout: Duration,
    ) -> Lookup {
        let now = self.clock.monotonic_ms();
        let mut inner = self.lock();
        let epoch = inner.epoch;
        let miss = Ticket {
            epoch,
            refresh: false,
            validator,
        };
        let outdated = inner
            .entries
            .get(key)
            .is_some_and(|e| e.validator != validator);
        if outdated {
            inner.entries.remove(key);
            inner.stats.changed += 1;
            inner.stats.misses += 1;
            inner.stats.entries = inner.entries.len() as u64;
            drop(inner);
            tracing::debug!(target: "strata_registry", contributor = %key.contributor,
                "cached output's sources changed: computing it again");
            return Lookup::Miss(miss);
        }
        let Some(entry) = inner.entries.get_mut(key) else {
            inner.stats.misses += 1;
            return Lookup::Miss(miss);
        };
        let expired = entry
            .ttl_ms
            .is_some_and(|ttl| now.saturating_sub(entry.stored_ms) >= ttl);
        if !expired {
            let sections = entry.sections.clone();
            inner.stats.hits += 1;
            return Lookup::Hit(sections);
        }
        let timeout_ms = u64::try_from(refresh_timeout.as_millis()).unwrap_or(u64::MAX);
        let due = entry
            .refreshing_since
            .is_none_or(|since| now.saturating_sub(since) >= timeout_ms);
        let refresh = if due {
            entry.refreshing_since = Some(now);
            Some(Ticket {
                epoch,
                refresh: true,
                validator,
            })
        } else {
            None
        };
        let sections = entry.sections.clone();
        inner.stats.stale_serves += 1;
        Lookup::Stale { sections, refresh }
    }

    /// Store output computed after `ticket` was taken. Refused (returns false) when the
    /// policy does not cache, or when anything was invalidated since the ticket was taken.
    pub fn store(
        &self,
        ticket: Ticket,
        key: CacheKey,
        sections: Arc<[Section]>,
        policy: CachePolicy,
        source: SourceKind,
        tags: Arc<[Arc<str>]>,
    ) -> bool {
        let ttl_ms = match policy {
            CachePolicy::UntilInvalidated => None,
            CachePolicy::Ttl(ttl) => {
                Some(u64::try_from(ttl.unwrap_or(self.default_ttl).as_millis()).unwrap_or(u64::MAX))
            }
            _ => return false,
        };
        let now = self.clock.monotonic_ms();
        let mut inner = self.lock();
        if ticket.epoch != inner.epoch {
            tracing::debug!(target: "strata_registry", contributor = %key.contributor,
                "output computed before an invalidation was not cached");
            return false;
        }
        if !inner.entries.contains_key(&key) && inner.entries.len() >= self.capacity {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.stored_ms)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.entries.remove(&k);
                inner.stats.evictions += 1;
            }
        }
        inner.entries.insert(
            key,
            Entry {
                sections,
                stored_ms: now,
                ttl_ms,
                source,
                tags,
                refreshing_since: None,
                validator: ticket.validator,
            },
        );
        if ticket.refresh {
            inner.stats.refreshes += 1;
        }
        inner.stats.entries = inner.entries.len() as u64;
        true
    }

    /// A background refresh failed: the expired output stays and the next lookup may retry.
    pub fn refresh_failed(&self, key: &CacheKey) {
        if let Some(e) = self.lock().entries.get_mut(key) {
            e.refreshing_since = None;
        }
    }

    fn invalidate_where(&self, what: &str, pred: impl Fn(&CacheKey, &Entry) -> bool) -> usize {
        let mut inner = self.lock();
        let before = inner.entries.len();
        inner.entries.retain(|k, e| !pred(k, e));
        let removed = before - inner.entries.len();
        inner.epoch += 1;
        inner.stats.invalidations += 1;
        inner.stats.entries = inner.entries.len() as u64;
        drop(inner);
        tracing::debug!(target: "strata_registry", what, removed, "section cache invalidated");
        removed
    }

    /// Drop the output of one contributor. Returns how many entries went.
    pub fn invalidate_contributor(&self, id: &str) -> usize {
        self.invalidate_where("contributor", |k, _| &*k.contributor == id)
    }

    /// Drop the output of every contributor from `source`.
    pub fn invalidate_source(&self, source: &SourceKind) -> usize {
        self.invalidate_where("source", |_, e| &e.source == source)
    }

    /// Drop the output of every contributor tagged `tag`.
    pub fn invalidate_tag(&self, tag: &str) -> usize {
        self.invalidate_where("tag", |_, e| e.tags.iter().any(|t| &**t == tag))
    }

    /// Drop everything.
    pub fn invalidate_all(&self) -> usize {
        self.invalidate_where("all", |_, _| true)
    }

    /// Keep only output of the identity digest `digest` (a new definition is in use).
    pub fn retain_digest(&self, digest: ContentHash) -> usize {
        self.invalidate_where("definition", |k, _| k.identity != digest)
    }

    /// The counters.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        let mut s = inner.stats;
        s.entries = inner.entries.len() as u64;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::RuntimeLayer;

    fn key(id: &str, digest: &str) -> CacheKey {
        CacheKey {
            contributor: Arc::from(id),
            identity: ContentHash::of(digest),
            mode: PromptMode::Full,
            path: AssemblyPath::Soul,
            tier: Tier::T3,
            operational_mode: OperationalMode::Assistant,
            fingerprint: None,
        }
    }

    fn sections(text: &str) -> Arc<[Section]> {
        Arc::from(vec![Section::builder(RuntimeLayer::Shared, "s", text)
            .unwrap()
            .build()])
    }

    fn text(s: &[Section]) -> &str {
        s[0].content().as_str()
    }

    fn miss(c: &SectionCache, k: &CacheKey) -> Ticket {
        match c.lookup(k, Duration::from_secs(1)) {
            Lookup::Miss(t) => t,
            other => panic!("expected a miss, got {other:?}"),
        }
    }

    fn tags(t: &[&str]) -> Arc<[Arc<str>]> {
        t.iter().map(|s| Arc::from(*s)).collect()
    }

    /// Verifies ADR-0011: stable output is kept until invalidated, and counted.
    #[test]
    fn stable_until_invalidated() {
        let c = SectionCache::new(Arc::new(ManualClock::new(0)));
        let k = key("env", "d1");
        let t = miss(&c, &k);
        assert!(c.store(
            t,
            k.clone(),
            sections("a"),
            CachePolicy::UntilInvalidated,
            SourceKind::Static,
            tags(&[])
        ));
        match c.lookup(&k, Duration::from_secs(1)) {
            Lookup::Hit(s) => assert_eq!(text(&s), "a"),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.invalidate_contributor("env"), 1);
        let _ = miss(&c, &k);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries, s.invalidations), (1, 2, 0, 1));
    }

    /// Verifies ADR-0011: a new identity digest never serves old entries.
    #[test]
    fn digest_is_part_of_the_key() {
        let c = SectionCache::new(Arc::new(ManualClock::new(0)));
        let k1 = key("env", "d1");
        let t = miss(&c, &k1);
        c.store(
            t,
            k1.clone(),
            sections("a"),
            CachePolicy::UntilInvalidated,
            SourceKind::Static,
            tags(&[]),
        );
        let k2 = key("env", "d2");
        let _ = miss(&c, &k2);
        assert_eq!(c.retain_digest(k2.identity), 1);
        assert_eq!(c.stats().entries, 0);
    }

    /// Verifies ADR-0011: output computed before an invalidation is not stored.
    #[test]
    fn store_after_invalidation_is_refused() {
        let c = SectionCache::new(Arc::new(ManualClock::new(0)));
        let k = key("tools", "d");
        let t = miss(&c, &k);
        c.invalidate_tag("tools");
        assert!(!c.store(
            t,
            k.clone(),
            sections("old"),
            CachePolicy::UntilInvalidated,
            SourceKind::Static,
            tags(&["tools"])
        ));
        let _ = miss(&c, &k);
    }

    /// Verifies ADR-0011: a TTL entry is served stale once expired, one refresh at a time.
    #[test]
    fn ttl_serves_stale_and_hands_out_one_refresh() {
        let clock = Arc::new(ManualClock::new(0));
        let c = SectionCache::new(clock.clone());
        let k = key("mem", "d");
        let t = miss(&c, &k);
        c.store(
            t,
            k.clone(),
            sections("v1"),
            CachePolicy::Ttl(None),
            SourceKind::Store,
            tags(&[]),
        );
        clock.advance(Duration::from_secs(29));
        assert!(matches!(
            c.lookup(&k, Duration::from_secs(2)),
            Lookup::Hit(_)
        ));
        clock.advance(Duration::from_secs(1));
        let ticket = match c.lookup(&k, Duration::from_secs(2)) {
            Lookup::Stale {
                sections,
                refresh: Some(t),
            } => {
                assert_eq!(text(&sections), "v1");
                t
            }
            other => panic!("{other:?}"),
        };
        // A second caller gets the stale output but no second refresh.
        assert!(matches!(
            c.lookup(&k, Duration::from_secs(2)),
            Lookup::Stale { refresh: None, .. }
        ));
        assert!(c.store(
            ticket,
            k.clone(),
            sections("v2"),
            CachePolicy::Ttl(None),
            SourceKind::Store,
            tags(&[])
        ));
        match c.lookup(&k, Duration::from_secs(2)) {
            Lookup::Hit(s) => assert_eq!(text(&s), "v2"),
            other => panic!("{other:?}"),
        }
        let s = c.stats();
        assert_eq!((s.stale_serves, s.refreshes), (2, 1));
    }

    /// Verifies ADR-0011: a refresh that never finishes is handed to another caller later.
    #[test]
    fn hung_refresh_is_retried_after_its_timeout() {
        let clock = Arc::new(ManualClock::new(0));
        let c = SectionCache::new(clock.clone()).with_default_ttl(Duration::from_secs(5));
        let k = key("mem", "d");
        let t = miss(&c, &k);
        c.store(
            t,
            k.clone(),
            sections("v1"),
            CachePolicy::Ttl(None),
            SourceKind::Store,
            tags(&[]),
        );
        clock.advance(Duration::from_secs(6));
        let Lookup::Stale {
            refresh: Some(_), ..
        } = c.lookup(&k, Duration::from_secs(2))
        else {
            panic!("expected a refresh ticket")
        };
        clock.advance(Duration::from_secs(1));
        assert!(matches!(
            c.lookup(&k, Duration::from_secs(2)),
            Lookup::Stale { refresh: None, .. }
        ));
        clock.advance(Duration::from_secs(1));
        assert!(matches!(
            c.lookup(&k, Duration::from_secs(2)),
            Lookup::Stale {
                refresh: Some(_),
                ..
            }
        ));
    }

    /// Verifies ADR-0011: an entry is served only under the validator it was stored with; one
    /// stored under another is dropped and counted as a miss and a change, an expired one is
    /// refreshed under the new validator, and output without one is served as before.
    #[test]
    fn validator_decides_whether_an_entry_is_served() {
        let clock = Arc::new(ManualClock::new(0));
        let c = SectionCache::new(clock.clone());
        let k = key("files", "d");
        let (v1, v2) = (Some(ContentHash::of("v1")), Some(ContentHash::of("v2")));
        let lookup = |v| c.lookup_validated(&k, v, Duration::from_secs(1));
        let Lookup::Miss(t) = lookup(v1) else {
            panic!("empty cache")
        };
        assert_eq!(t.validator(), v1);
        let policy = CachePolicy::Ttl(Some(Duration::from_secs(5)));
        assert!(c.store(
            t,
            k.clone(),
            sections("one"),
            policy,
            SourceKind::Config,
            tags(&[])
        ));
        assert!(matches!(lookup(v1), Lookup::Hit(_)));
        let Lookup::Miss(t) = lookup(v2) else {
            panic!("the sources changed")
        };
        assert_eq!(c.stats().entries, 0, "the outdated entry is dropped");
        assert!(c.store(
            t,
            k.clone(),
            sections("two"),
            policy,
            SourceKind::Config,
            tags(&[])
        ));
        match lookup(v2) {
            Lookup::Hit(s) => assert_eq!(text(&s), "two"),
            other => panic!("{other:?}"),
        }
        // No validator is a validator too: output stored with one is not served without.
        assert!(matches!(
            c.lookup(&k, Duration::from_secs(1)),
            Lookup::Miss(_)
        ));
        let Lookup::Miss(t) = lookup(v2) else {
            panic!("dropped")
        };
        assert!(c.store(
            t,
            k.clone(),
            sections("two"),
            policy,
            SourceKind::Config,
            tags(&[])
        ));
        clock.advance(Duration::from_secs(5));
        match lookup(v2) {
            Lookup::Stale {
                refresh: Some(t), ..
            } => assert_eq!(t.validator(), v2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(lookup(v1), Lookup::Miss(_)), "expired and changed");
        let s = c.stats();
        assert_eq!(
            (s.hits, s.misses, s.changed, s.stale_serves, s.invalidations),
            (2, 5, 3, 1, 0)
        );
    }

    #[test]
    fn never_policy_is_not_stored_and_capacity_evicts_oldest() {
        let clock = Arc::new(ManualClock::new(0));
        let c = SectionCache::new(clock.clone()).with_capacity(2);
        let k = key("a", "d");
        let t = miss(&c, &k);
        assert!(!c.store(
            t,
            k,
            sections("x"),
            CachePolicy::Never,
            SourceKind::Static,
            tags(&[])
        ));
        for id in ["a", "b", "c"] {
            let k = key(id, "d");
            let t = miss(&c, &k);
            clock.advance(Duration::from_millis(1));
            assert!(c.store(
                t,
                k,
                sections(id),
                CachePolicy::UntilInvalidated,
                SourceKind::Static,
                tags(&[])
            ));
        }
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (2, 1));
        assert!(matches!(
            c.lookup(&key("a", "d"), Duration::ZERO),
            Lookup::Miss(_)
        ));
    }
}
