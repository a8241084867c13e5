//! Section cache: the property that no output is ever served across an invalidation, nor under
//! another validator than the one it was computed under.
#![allow(
    clippy::unwrap_used,
    reason = "helpers outside #[test] functions fail the test on purpose"
)]

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use strata_core::{
    AssemblyPath, ContentHash, OperationalMode, PromptMode, RuntimeLayer, Section, SourceKind, Tier,
};
use strata_registry::cache::{Lookup, Ticket};
use strata_registry::{CacheKey, CachePolicy, ManualClock, SectionCache};

/// The contributors of the model: source, tags and policy of each.
fn contributor(
    i: usize,
) -> (
    &'static str,
    SourceKind,
    &'static [&'static str],
    CachePolicy,
) {
    match i % 4 {
        0 => (
            "c0",
            SourceKind::Static,
            &["tools"],
            CachePolicy::UntilInvalidated,
        ),
        1 => (
            "c1",
            SourceKind::Config,
            &["skills"],
            CachePolicy::Ttl(Some(Duration::from_secs(5))),
        ),
        2 => (
            "c2",
            SourceKind::Mcp("a".into()),
            &["tools", "skills"],
            CachePolicy::UntilInvalidated,
        ),
        _ => (
            "c3",
            SourceKind::Mcp("b".into()),
            &[],
            CachePolicy::Ttl(None),
        ),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Begin(usize),
    Complete(usize),
    Lookup(usize),
    InvalidateContributor(usize),
    InvalidateTag(bool),
    InvalidateSource(usize),
    InvalidateAll,
    NewDigest,
    Advance(u64),
    ChangeSource(usize),
}

/// Whether contributor `i` of the model has a validator (c1 with a TTL, c2 without).
fn validated(i: usize) -> bool {
    matches!(i % 4, 1 | 2)
}

/// Contributor `i`'s validator when its sources are at `version`.
fn validator(i: usize, version: u32) -> Option<ContentHash> {
    validated(i).then(|| ContentHash::of(&format!("sources-{version}")))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4).prop_map(Op::Begin),
        4 => (0usize..16).prop_map(Op::Complete),
        4 => (0usize..4).prop_map(Op::Lookup),
        1 => (0usize..4).prop_map(Op::InvalidateContributor),
        1 => any::<bool>().prop_map(Op::InvalidateTag),
        1 => (0usize..4).prop_map(Op::InvalidateSource),
        1 => Just(Op::InvalidateAll),
        1 => Just(Op::NewDigest),
        2 => (0u64..40_000).prop_map(Op::Advance),
        2 => (0usize..4).prop_map(Op::ChangeSource),
    ]
}

fn key(i: usize, digest: u32) -> CacheKey {
    CacheKey {
        contributor: Arc::from(contributor(i).0),
        identity: ContentHash::of(&format!("definition-{digest}")),
        mode: PromptMode::Full,
        path: AssemblyPath::Soul,
        tier: Tier::T3,
        operational_mode: OperationalMode::Assistant,
        fingerprint: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Verifies ADR-0011: whatever the interleaving of lookups, slow computations, TTL expiry,
    /// background refreshes and invalidations (by contributor, tag, source, all, or a new
    /// definition digest), the cache never serves output computed before the last
    /// invalidation that covered it; and output of a contributor with a validator is served only
    /// while its sources are in the state it was computed from.
    #[test]
    fn never_serves_across_an_invalidation(ops in proptest::collection::vec(op(), 1..80)) {
        let clock = Arc::new(ManualClock::new(0));
        let cache = SectionCache::new(clock.clone());
        let mut digest = 0u32;
        // The op index of the last invalidation that covered each contributor.
        let mut last_invalidated = [0usize; 4];
        // The version of each contributor's sources.
        let mut version = [0u32; 4];
        // Computations under way: contributor, ticket, the op index it started at, digest, and
        // the version of its sources then.
        let mut pending: Vec<(usize, Ticket, usize, u32, u32)> = Vec::new();

        for (step, op) in ops.into_iter().enumerate() {
            let step = step + 1;
            let check = |c: usize, served: &[Section], last: &[usize; 4], now: u32| -> Result<(), TestCaseError> {
                let text = served[0].content().as_str();
                let (name, rest) = text.split_once('@').expect("model content");
                prop_assert_eq!(name, contributor(c).0);
                let (started, from) = rest.split_once('#').expect("model content");
                let started: usize = started.parse().expect("a step");
                prop_assert!(started > last[c],
                    "{} served output from step {} after an invalidation at step {}", name, started, last[c]);
                if validated(c) {
                    let from: u32 = from.parse().expect("a version");
                    prop_assert_eq!(from, now,
                        "{} served output of sources at version {} while they are at {}", name, from, now);
                }
                Ok(())
            };
            match op {
                Op::Begin(c) | Op::Lookup(c) => {
                    let v = version[c];
                    match cache.lookup_validated(&key(c, digest), validator(c, v), Duration::from_secs(3)) {
                        Lookup::Hit(s) => check(c, &s, &last_invalidated, v)?,
                        Lookup::Stale { sections, refresh } => {
                            check(c, &sections, &last_invalidated, v)?;
                            if let Some(t) = refresh {
                                pending.push((c, t, step, digest, v));
                            }
                        }
                        Lookup::Miss(t) => {
                            if matches!(op, Op::Begin(_)) {
                                pending.push((c, t, step, digest, v));
                            }
                        }
                    }
                }
                Op::Complete(i) => {
                    if !pending.is_empty() {
                        let (c, ticket, started, d, v) = pending.remove(i % pending.len());
                        let (name, source, tags, policy) = contributor(c);
                        let section = Section::builder(RuntimeLayer::Shared, "s", format!("{name}@{started}#{v}"))
                            .expect("valid id")
                            .build();
                        cache.store(ticket, key(c, d), Arc::from(vec![section]), policy, source,
                            tags.iter().map(|t| Arc::from(*t)).collect());
                    }
                }
                Op::InvalidateContributor(c) => {
                    cache.invalidate_contributor(contributor(c).0);
                    last_invalidated[c] = step;
                }
                Op::InvalidateTag(tools) => {
                    let tag = if tools { "tools" } else { "skills" };
                    cache.invalidate_tag(tag);
                    for (c, last) in last_invalidated.iter_mut().enumerate() {
                        if contributor(c).2.contains(&tag) {
                            *last = step;
                        }
                    }
                }
                Op::InvalidateSource(s) => {
                    let source = contributor(s).1;
                    cache.invalidate_source(&source);
                    for (c, last) in last_invalidated.iter_mut().enumerate() {
                        if contributor(c).1 == source {
                            *last = step;
                        }
                    }
                }
                Op::InvalidateAll => {
                    cache.invalidate_all();
                    last_invalidated = [step; 4];
                }
                Op::NewDigest => {
                    digest += 1;
                    cache.retain_digest(ContentHash::of(&format!("definition-{digest}")));
                    last_invalidated = [step; 4];
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
                Op::ChangeSource(c) => version[c] += 1,
            }
        }
        let stats = cache.stats();
        prop_assert!(stats.entries <= 4);
    }
}

/// A new definition digest is a different key even without an invalidation call.
#[test]
fn another_digest_misses() {
    let cache = SectionCache::new(Arc::new(ManualClock::new(0)));
    let Lookup::Miss(t) = cache.lookup(&key(0, 1), Duration::ZERO) else {
        panic!("empty cache")
    };
    let s = Section::builder(RuntimeLayer::Shared, "s", "c0@1#0")
        .unwrap()
        .build();
    assert!(cache.store(
        t,
        key(0, 1),
        Arc::from(vec![s]),
        CachePolicy::UntilInvalidated,
        SourceKind::Static,
        Arc::from(Vec::new())
    ));
    assert!(matches!(
        cache.lookup(&key(0, 1), Duration::ZERO),
        Lookup::Hit(_)
    ));
    assert!(matches!(
        cache.lookup(&key(0, 2), Duration::ZERO),
        Lookup::Miss(_)
    ));
}
