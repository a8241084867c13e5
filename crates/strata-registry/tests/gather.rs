//! Gathering: concurrency, timeouts, panics, layer checks, sticky failures, order, caching.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{arc, ctx, Behaviour, Gate, TestContributor};
use proptest::prelude::*;
use strata_core::{
    AssemblyPath, ContentHash, ModeSet, PathSet, PromptMode, RuntimeLayer, SourceKind,
};
use strata_registry::{
    CachePolicy, ContributorError, GatherError, ManualClock, OmissionReason, Registry, RunOutcome,
    SectionCache, TAG_TOOLS,
};

fn ids(g: &strata_registry::Gathered) -> Vec<String> {
    g.sections.iter().map(|s| s.id().to_string()).collect()
}

fn outcome(g: &strata_registry::Gathered, id: &str) -> RunOutcome {
    g.runs
        .iter()
        .find(|r| &*r.contributor == id)
        .map(|r| r.outcome)
        .unwrap_or_else(|| panic!("{id} did not take part"))
}

/// Verifies ADR-0011: only contributors of the context's mode and path take part.
#[test]
fn mode_and_path_select_contributors() {
    let r = Registry::new();
    r.register(arc(TestContributor::new(
        "all",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["all"]),
    )))
    .unwrap();
    r.register(arc(TestContributor::new(
        "full-only",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["full"]),
    )
    .with_meta(|m| m.modes = ModeSet::of(&[PromptMode::Full]))))
        .unwrap();
    r.register(arc(TestContributor::new(
        "no-basic",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["nobasic"]),
    )
    .with_meta(|m| m.paths = PathSet::all().without(AssemblyPath::Basic))))
        .unwrap();
    let mut c = ctx();
    assert_eq!(ids(&r.gather(&c).unwrap()), ["all", "full", "nobasic"]);
    c.mode = PromptMode::Compact;
    assert_eq!(ids(&r.gather(&c).unwrap()), ["all", "nobasic"]);
    c.path = AssemblyPath::Basic;
    let g = r.gather(&c).unwrap();
    assert_eq!(ids(&g), ["all"]);
    assert_eq!(g.runs.len(), 1);
}

/// Verifies ADR-0011: contributors run at the same time (each waits for all the others, which
/// could never happen if they ran one after another).
#[test]
fn contributors_run_concurrently() {
    let r = Registry::new();
    let gate = Arc::new(Gate::default());
    for i in 0..4 {
        r.register(arc(TestContributor::new(
            &format!("c{i}"),
            RuntimeLayer::Delegated,
            Behaviour::Rendezvous(gate.clone(), 4),
        )
        .with_meta(|m| m.timeout = Duration::from_secs(10))))
            .unwrap();
    }
    let g = r.gather(&ctx()).unwrap();
    assert!(g.omissions.is_empty(), "{:?}", g.omissions);
    assert_eq!(g.sections.len(), 4);
}

/// Verifies ADR-0011: a slow contributor is abandoned and reported, not started again while its
/// old run is still going, and runs again once it has ended.
#[test]
fn slow_contributor_is_abandoned_then_retried_after_it_ends() {
    let r = Registry::new();
    let gate = Arc::new(Gate::default());
    let slow = arc(TestContributor::new(
        "slow",
        RuntimeLayer::LongTermMemory,
        Behaviour::Gate(gate.clone()),
    )
    .with_meta(|m| m.timeout = Duration::from_millis(30)));
    r.register(slow.clone()).unwrap();
    r.register(arc(TestContributor::new(
        "fast",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["f"]),
    )))
    .unwrap();

    let g = r.gather(&ctx()).unwrap();
    assert_eq!(ids(&g), ["f"]);
    assert_eq!(g.omissions.len(), 1);
    assert_eq!(&*g.omissions[0].contributor, "slow");
    assert_eq!(g.omissions[0].layer, RuntimeLayer::LongTermMemory);
    assert_eq!(
        g.omissions[0].reason,
        OmissionReason::Failed(ContributorError::Timeout(Duration::from_millis(30)))
    );
    assert_eq!(outcome(&g, "slow"), RunOutcome::Omitted);

    let g = r.gather(&ctx()).unwrap();
    assert_eq!(g.omissions[0].reason, OmissionReason::StillRunning);
    assert_eq!(slow.calls(), 1, "a hung contributor is not started twice");

    gate.open();
    // The abandoned run ends on its own; then the contributor is started again.
    let mut tries = 0;
    loop {
        let g = r.gather(&ctx()).unwrap();
        if g.omissions.is_empty() {
            assert_eq!(ids(&g), ["f", "gated"]);
            break;
        }
        tries += 1;
        assert!(tries < 500, "the abandoned run never ended");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn failures_and_panics_become_omissions() {
    let r = Registry::new();
    r.register(arc(TestContributor::new(
        "boom",
        RuntimeLayer::WorkingMemory,
        Behaviour::Panic,
    )))
    .unwrap();
    r.register(arc(TestContributor::new(
        "broken",
        RuntimeLayer::Shared,
        Behaviour::Fail,
    )))
    .unwrap();
    r.register(arc(TestContributor::new(
        "ok",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["ok"]),
    )))
    .unwrap();
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(ids(&g), ["ok"]);
    let reasons: Vec<(&str, &OmissionReason)> = g
        .omissions
        .iter()
        .map(|o| (&*o.contributor, &o.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "broken",
                &OmissionReason::Failed(ContributorError::Source("disk on fire".into()))
            ),
            ("boom", &OmissionReason::Failed(ContributorError::Panicked)),
        ]
    );
}

/// Verifies ADR-0011 and ADR-0006: a section of another layer than declared is dropped and
/// reported; the contributor's other sections stay.
#[test]
fn sections_of_another_layer_are_dropped_and_reported() {
    let r = Registry::new();
    r.register(arc(TestContributor::new(
        "liar",
        RuntimeLayer::LongTermMemory,
        Behaviour::WrongLayer(RuntimeLayer::Shared),
    )))
    .unwrap();
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(ids(&g), ["home"]);
    assert_eq!(g.sections[0].layer(), RuntimeLayer::LongTermMemory);
    match &g.omissions[..] {
        [o] => {
            assert_eq!(o.layer, RuntimeLayer::LongTermMemory);
            assert!(matches!(
                &o.reason,
                OmissionReason::WrongLayer { section, produced: RuntimeLayer::Shared }
                    if section.as_str() == "elsewhere"
            ));
        }
        other => panic!("{other:?}"),
    }
}

/// An MCP server's contributor cannot claim another source for its sections.
#[test]
fn mcp_sections_must_name_their_server() {
    let r = Registry::new();
    r.register(arc(TestContributor::new(
        "mcp:evil/x",
        RuntimeLayer::Shared,
        Behaviour::ForgeSource,
    )
    .with_meta(|m| m.source = SourceKind::Mcp("evil".into()))))
        .unwrap();
    r.register(arc(TestContributor::new(
        "mcp:good/x",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["fine"]),
    )
    .with_meta(|m| m.source = SourceKind::Mcp("good".into()))))
        .unwrap();
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(ids(&g), ["fine"]);
    assert!(matches!(
        &g.omissions[0].reason,
        OmissionReason::ForeignSource { claimed, server, .. } if claimed == "static" && server == "evil"
    ));
}

/// Verifies ADR-0011: a failing sticky contributor fails the gathering.
#[test]
fn sticky_failure_fails_the_gathering() {
    for behaviour in [
        Behaviour::Fail,
        Behaviour::Panic,
        Behaviour::WrongLayer(RuntimeLayer::Shared),
    ] {
        let r = Registry::new();
        r.register(arc(TestContributor::new(
            "goal",
            RuntimeLayer::Delegated,
            behaviour,
        )
        .with_meta(|m| m.sticky = true)))
            .unwrap();
        let e = r.gather(&ctx()).unwrap_err();
        let GatherError::Sticky {
            contributor, layer, ..
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!((&**contributor, *layer), ("goal", RuntimeLayer::Delegated));
        assert!(e.to_string().contains("sticky"), "{e}");
    }
}

/// Verifies ADR-0011: stable output is computed once and then served from the cache; dynamic
/// output is computed every time; tools changes and a new definition recompute.
#[test]
fn stable_output_is_cached_and_invalidated() {
    let cache = Arc::new(SectionCache::new(Arc::new(ManualClock::new(0))));
    let r = Registry::with_cache(cache.clone());
    let stable = arc(TestContributor::new(
        "tools.catalog",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["catalog"]),
    )
    .stable()
    .with_meta(|m| m.tags = vec![TAG_TOOLS.into()]));
    let dynamic = arc(TestContributor::new(
        "clock",
        RuntimeLayer::Shared,
        Behaviour::Sections(vec!["clock"]),
    ));
    r.register(stable.clone()).unwrap();
    r.register(dynamic.clone()).unwrap();

    let g = r.gather(&ctx()).unwrap();
    assert_eq!(outcome(&g, "tools.catalog"), RunOutcome::Computed);
    stable.set_text("changed underneath");
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(outcome(&g, "tools.catalog"), RunOutcome::Cached);
    assert_eq!(outcome(&g, "clock"), RunOutcome::Computed);
    assert_eq!(g.sections[1].content().as_str(), "text of tools.catalog");
    assert_eq!((stable.calls(), dynamic.calls()), (1, 2));

    r.tools_changed();
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(outcome(&g, "tools.catalog"), RunOutcome::Computed);
    assert_eq!(g.sections[1].content().as_str(), "changed underneath");

    let mut other = ctx();
    other.identity_digest = ContentHash::of("definition-2");
    let g = r.gather(&other).unwrap();
    assert_eq!(outcome(&g, "tools.catalog"), RunOutcome::Computed);
    r.definition_changed(other.identity_digest);
    let stats = cache.stats();
    assert_eq!(stats.entries, 1);
    assert_eq!((stats.hits, stats.misses), (1, 3));
}

/// Verifies ADR-0011: a TTL contributor's expired output is served stale while a background
/// thread refreshes it; the next gathering sees the refreshed output.
#[test]
fn ttl_output_is_served_stale_and_refreshed_in_the_background() {
    let clock = Arc::new(ManualClock::new(0));
    let cache = Arc::new(SectionCache::new(clock.clone()));
    let r = Registry::with_cache(cache.clone());
    let mem = arc(TestContributor::new(
        "memory",
        RuntimeLayer::LongTermMemory,
        Behaviour::Sections(vec!["m"]),
    )
    .with_policy(CachePolicy::Ttl(None)));
    r.register(mem.clone()).unwrap();
    let text = |g: &strata_registry::Gathered| g.sections[0].content().to_string();

    let g = r.gather(&ctx()).unwrap();
    assert_eq!(text(&g), "text of memory");
    mem.set_text("v2");
    clock.advance(Duration::from_secs(10));
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(outcome(&g, "memory"), RunOutcome::Cached);
    assert_eq!(text(&g), "text of memory");

    clock.advance(Duration::from_secs(25));
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(outcome(&g, "memory"), RunOutcome::Stale);
    assert_eq!(text(&g), "text of memory");
    assert!(r.wait_for_refreshes(Duration::from_secs(5)));
    let g = r.gather(&ctx()).unwrap();
    assert_eq!(outcome(&g, "memory"), RunOutcome::Cached);
    assert_eq!(text(&g), "v2");
    let s = cache.stats();
    assert_eq!((s.stale_serves, s.refreshes), (1, 1));
    assert_eq!(mem.calls(), 2);
}

/// A failed background refresh keeps the expired output and lets a later gathering retry.
#[test]
fn failed_refresh_keeps_stale_output() {
    struct Flaky(std::sync::atomic::AtomicUsize);
    impl strata_registry::Contributor for Flaky {
        fn id(&self) -> &str {
            "flaky"
        }
        fn layer(&self) -> RuntimeLayer {
            RuntimeLayer::Shared
        }
        fn cache_policy(&self) -> CachePolicy {
            CachePolicy::Ttl(Some(Duration::from_secs(1)))
        }
        fn contribute(
            &self,
            _: &strata_registry::ContributionContext,
        ) -> Result<Vec<strata_core::Section>, ContributorError> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n == 1 {
                return Err(ContributorError::Source("down".into()));
            }
            Ok(vec![strata_core::Section::builder(
                RuntimeLayer::Shared,
                "f",
                format!("v{n}"),
            )
            .unwrap()
            .build()])
        }
    }
    let clock = Arc::new(ManualClock::new(0));
    let r = Registry::with_cache(Arc::new(SectionCache::new(clock.clone())));
    r.register(Arc::new(Flaky(Default::default()))).unwrap();
    let text = |r: &Registry| r.gather(&ctx()).unwrap().sections[0].content().to_string();
    assert_eq!(text(&r), "v0");
    clock.advance(Duration::from_secs(2));
    assert_eq!(text(&r), "v0"); // stale; the refresh fails
    assert!(r.wait_for_refreshes(Duration::from_secs(5)));
    assert_eq!(text(&r), "v0"); // still stale; this one refreshes
    assert!(r.wait_for_refreshes(Duration::from_secs(5)));
    assert_eq!(text(&r), "v2");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Verifies ADR-0013: the gathered order is by layer, then contributor id, then section id,
    /// whatever the order of registration.
    #[test]
    fn order_is_deterministic(
        spec in proptest::collection::btree_map("[a-e]{1,3}", (0usize..4, 1usize..4), 1..6),
        seed in any::<u64>(),
    ) {
        let section_ids: [&'static str; 3] = ["z", "m", "a"];
        let mut entries: Vec<_> = spec.into_iter().collect();
        // Register in a scrambled order.
        let len = entries.len();
        entries.rotate_left((seed as usize) % len);
        if seed % 2 == 0 { entries.reverse(); }
        let r = Registry::new();
        for (id, (layer, n)) in &entries {
            let layer = RuntimeLayer::ALL[*layer];
            r.register(arc(TestContributor::new(id, layer, Behaviour::Sections(section_ids[..*n].to_vec())))).unwrap();
        }
        let g = r.gather(&ctx()).unwrap();
        let got: Vec<(RuntimeLayer, String, String)> = g.sections.iter()
            .map(|s| (s.layer(), s.provenance().name.to_string(), s.id().to_string())).collect();
        let mut want = got.clone();
        want.sort();
        prop_assert_eq!(&got, &want);
        let total: usize = entries.iter().map(|(_, (_, n))| n).sum();
        prop_assert_eq!(got.len(), total);
        // Same inputs, same output.
        let again: Vec<_> = r.gather(&ctx()).unwrap().sections.iter()
            .map(|s| (s.layer(), s.provenance().name.to_string(), s.id().to_string())).collect();
        prop_assert_eq!(got, again);
    }
}

/// A contributor whose output is the number held in `source`, validated by that number; when
/// `change_while_running` is set, its next run changes the source to `changed_to` before
/// reading it (a file edited while the contributor reads it).
struct Versioned {
    source: Arc<std::sync::atomic::AtomicU64>,
    change_while_running: std::sync::atomic::AtomicBool,
    changed_to: u64,
}

impl strata_registry::Contributor for Versioned {
    fn id(&self) -> &str {
        "versioned"
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn cache_policy(&self) -> CachePolicy {
        CachePolicy::UntilInvalidated
    }
    fn cache_validator(&self, _ctx: &strata_registry::ContributionContext) -> Option<ContentHash> {
        let v = self.source.load(std::sync::atomic::Ordering::SeqCst);
        Some(ContentHash::of(&v.to_string()))
    }
    fn contribute(
        &self,
        _ctx: &strata_registry::ContributionContext,
    ) -> Result<Vec<strata_core::Section>, ContributorError> {
        use std::sync::atomic::Ordering;
        if self.change_while_running.swap(false, Ordering::SeqCst) {
            self.source.store(self.changed_to, Ordering::SeqCst);
        }
        let v = self.source.load(Ordering::SeqCst);
        Ok(vec![strata_core::Section::builder(
            RuntimeLayer::Shared,
            "v",
            v.to_string(),
        )
        .unwrap()
        .build()])
    }
}

/// Verifies ADR-0011: cached output is served only while its contributor's validator is the one
/// it was computed under; output whose sources changed while it was computed is not cached, so
/// it is not served either when the sources go back to the state its lookup saw.
#[test]
fn validated_output_follows_its_sources() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let cache = Arc::new(SectionCache::new(Arc::new(ManualClock::new(0))));
    let r = Registry::with_cache(cache.clone());
    let source = Arc::new(AtomicU64::new(1));
    let c = Arc::new(Versioned {
        source: source.clone(),
        change_while_running: AtomicBool::new(false),
        changed_to: 2,
    });
    r.register(c.clone()).unwrap();
    let got = |r: &Registry| {
        let g = r.gather(&ctx()).unwrap();
        (
            g.sections[0].content().as_str().to_owned(),
            outcome(&g, "versioned"),
        )
    };
    assert_eq!(got(&r), ("1".into(), RunOutcome::Computed));
    assert_eq!(got(&r), ("1".into(), RunOutcome::Cached));
    source.store(3, Ordering::SeqCst);
    assert_eq!(got(&r), ("3".into(), RunOutcome::Computed));
    assert_eq!(got(&r), ("3".into(), RunOutcome::Cached));
    assert_eq!(cache.stats().changed, 1);

    // Changed to 1, looked up under 1, then changed to 2 while it runs: the output read from 2
    // is given but not kept.
    source.store(1, Ordering::SeqCst);
    c.change_while_running.store(true, Ordering::SeqCst);
    assert_eq!(got(&r), ("2".into(), RunOutcome::Computed));
    // Back to the state the lookup saw: computed again, not served the output of 2.
    source.store(1, Ordering::SeqCst);
    assert_eq!(got(&r), ("1".into(), RunOutcome::Computed));
    assert_eq!(got(&r), ("1".into(), RunOutcome::Cached));
}
