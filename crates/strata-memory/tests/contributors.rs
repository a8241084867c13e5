//! The layer 3, 5 and 6 contributors over real stores, alone and through the registry.
//! Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;

use strata_core::{
    ContentHash, Phase, Role, RuntimeLayer, SourceKind, TiktokenTokenizer, Tokenizer,
};
use strata_memory::markdown::note_memory_id;
use strata_memory::{
    InMemoryStore, IndexLimits, ListOptions, LongTermMemory, LongTermMemoryContributor,
    ManualClock, MemoryError, MemoryId, MemoryIndexContributor, MemoryRecord, NewEntry, NewMemory,
    NoteGraph, Scope, SearchHit, SearchOptions, SharedContextReader, SharedContextWriter,
    SharedFactsContributor, SqliteStore, StoreOptions, WalkOptions, WorkingMemory,
    WorkingMemoryContributor,
};
use strata_registry::{
    ContributionContext, Contributor, ContributorError, OmissionReason, Registry,
};

fn ctx(query: Option<&str>) -> ContributionContext {
    let mut c = ContributionContext::new("ada", ContentHash::of("digest"), "session-1", 0);
    c.query = query.map(Arc::from);
    c
}

fn sqlite(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> Arc<SqliteStore> {
    Arc::new(
        SqliteStore::open_with(
            dir.path().join("memory.db"),
            Arc::new(strata_memory::HashEmbedder::default()),
            StoreOptions::default()
                .with_clock(clock.clone())
                .with_name("team-store"),
        )
        .unwrap(),
    )
}

/// Verifies ADR-0012: shared facts become layer-3 sections, the most specific scope wins, and
/// provenance names the store and the fact.
#[test]
fn shared_facts_contributor() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let store = sqlite(&dir, &clock);
    let ws = Scope::new("workspace:acme").unwrap();
    store.set_fact(&Scope::global(), "tz", "UTC").unwrap();
    store
        .set_fact(&Scope::global(), "company", "Acme Corp")
        .unwrap();
    store.set_fact(&ws, "project", "Apollo").unwrap();
    store.set_fact(&ws, "company", "Acme (workspace)").unwrap();
    clock.set(2_000);
    store
        .set_fact(&Scope::agent("ada").unwrap(), "tz", "Europe/Paris")
        .unwrap();
    store
        .set_fact(&Scope::agent("bob").unwrap(), "tz", "Asia/Tokyo")
        .unwrap();

    let c =
        SharedFactsContributor::new(SharedContextReader::new(store.clone())).with_scopes(vec![ws]);
    assert_eq!(c.layer(), RuntimeLayer::Shared);
    let sections = c.contribute(&ctx(None)).unwrap();
    let shown: Vec<(&str, &str)> = sections
        .iter()
        .map(|s| (s.id().as_str(), s.content().as_str()))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("fact/tz", "tz: Europe/Paris"),
            ("fact/company", "company: Acme (workspace)"),
            ("fact/project", "project: Apollo"),
        ]
    );
    let tz = &sections[0];
    assert_eq!(tz.layer(), RuntimeLayer::Shared);
    assert_eq!(tz.key().unwrap().as_str(), "fact:tz");
    let p = tz.provenance();
    assert_eq!(p.source, SourceKind::Store);
    assert_eq!(&*p.name, "team-store");
    assert_eq!(p.record.as_deref(), Some("agent:ada/tz"));
    assert_eq!(p.created_ms, Some(2_000));
    assert_eq!(p.content_hash, ContentHash::of("tz: Europe/Paris"));
}

/// Verifies ADR-0012: recent working memory becomes one layer-5 section per turn with its
/// turn metadata, within the token budget, without splitting a call from its result.
#[test]
fn working_memory_contributor() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(5_000));
    let store = sqlite(&dir, &clock);
    let s = "session-1";
    store
        .append(s, NewEntry::user("Please check the weather in Paris."))
        .unwrap();
    store
        .append(s, NewEntry::tool_call("w1", r#"{"city":"Paris"}"#))
        .unwrap();
    store
        .append(s, NewEntry::tool_call("w2", r#"{"city":"Lyon"}"#))
        .unwrap();
    store
        .append(s, NewEntry::tool_result("w1", "Paris: 21 C, sunny"))
        .unwrap();
    store
        .append(s, NewEntry::tool_result("w2", "Lyon: 25 C, cloudy"))
        .unwrap();
    store
        .append(s, NewEntry::assistant("Paris is sunny at 21 C."))
        .unwrap();
    store.append(s, NewEntry::user("And tomorrow?")).unwrap();
    store
        .append("other", NewEntry::user("not this session"))
        .unwrap();

    let tok: Arc<dyn Tokenizer> = Arc::new(TiktokenTokenizer::o200k());
    let all = WorkingMemoryContributor::new(store.clone(), tok.clone(), 10_000)
        .contribute(&ctx(None))
        .unwrap();
    assert_eq!(all.len(), 7);
    for (sec, e) in all.iter().zip(store.entries(s).unwrap()) {
        assert_eq!(sec.layer(), RuntimeLayer::WorkingMemory);
        assert_eq!(sec.phase(), Phase::History);
        assert_eq!(sec.id().as_str(), format!("turn/{}", e.seq));
        assert_eq!(sec.turn().unwrap(), &e.turn());
        assert_eq!(sec.content().as_str(), e.content.as_str());
        let p = sec.provenance();
        assert_eq!(
            (p.source.clone(), &*p.name),
            (SourceKind::Store, "team-store")
        );
        assert_eq!(p.record.as_deref(), Some(e.seq.to_string().as_str()));
        assert_eq!(p.created_ms, Some(5_000));
    }
    assert_eq!(all[1].turn().unwrap().role, Role::ToolCall);
    assert_eq!(all[1].turn().unwrap().call_id.as_deref(), Some("w1"));

    // A budget that fits the last three entries but would split w2 from its call: the
    // selection goes back to the call, or stops before the pair.
    let last_three: usize = all[4..]
        .iter()
        .map(|s| tok.count(s.content().as_str()))
        .sum();
    let got = WorkingMemoryContributor::new(store.clone(), tok.clone(), last_three + 3)
        .contribute(&ctx(None))
        .unwrap();
    let roles: Vec<Role> = got.iter().map(|s| s.turn().unwrap().role).collect();
    assert_eq!(
        roles,
        [Role::Assistant, Role::User],
        "only the answer and the new question fit without splitting w2"
    );

    // The exchange in progress is gathered whole whatever the budget (ADR-0039): here the
    // newest user message is followed by a call and a result larger than the budget.
    let t = "session-2";
    store
        .append(t, NewEntry::user("Read the build log."))
        .unwrap();
    store
        .append(t, NewEntry::tool_call("b1", r#"{"path":"build.log"}"#))
        .unwrap();
    store
        .append(t, NewEntry::tool_result("b1", "step ok\n".repeat(500)))
        .unwrap();
    let ctx2 = ContributionContext::new("ada", ContentHash::of("digest"), t, 0);
    let got = WorkingMemoryContributor::new(store.clone(), tok.clone(), 10)
        .contribute(&ctx2)
        .unwrap();
    let roles: Vec<Role> = got.iter().map(|s| s.turn().unwrap().role).collect();
    assert_eq!(roles, [Role::User, Role::ToolCall, Role::ToolResult]);
}

fn seed_memories(store: &dyn LongTermMemory, clock: &ManualClock) -> Vec<MemoryRecord> {
    let items = [
        (
            "ada",
            "The staging deploy pipeline fails when migrations time out.",
        ),
        ("ada", "Ada prefers answers with code examples in Rust."),
        ("ada", "The cafeteria closes at three on Fridays."),
        (
            "bob",
            "Bob's staging deploy pipeline notes: never deploy on Friday.",
        ),
    ];
    items
        .iter()
        .map(|(agent, text)| {
            clock.advance(10);
            store.put(NewMemory::new(*agent, *text)).unwrap()
        })
        .collect()
}

/// Verifies ADR-0012: search results become layer-6 sections with the record id, creation
/// time and fused score, best first, from the agent's own memories only.
#[test]
fn long_term_memory_contributor() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(10_000));
    let store = sqlite(&dir, &clock);
    let stored = seed_memories(store.as_ref(), &clock);
    let c = LongTermMemoryContributor::new(store.clone(), SearchOptions::top(3));
    assert!(
        c.contribute(&ctx(None)).unwrap().is_empty(),
        "no query, no search"
    );

    let query = "why does the staging deploy pipeline fail";
    let sections = c.contribute(&ctx(Some(query))).unwrap();
    let hits = store
        .search(query, &SearchOptions::top(3).agent("ada"))
        .unwrap();
    assert_eq!(sections.len(), hits.len());
    assert_eq!(
        sections[0].provenance().record.as_deref(),
        Some(stored[0].id.as_str())
    );
    for (s, h) in sections.iter().zip(&hits) {
        assert_eq!(s.layer(), RuntimeLayer::LongTermMemory);
        assert_eq!(s.phase(), Phase::Memory);
        assert_eq!(s.id().as_str(), format!("mem/{}", h.record.id));
        assert_eq!(s.content().as_str(), h.record.content.as_str());
        let p = s.provenance();
        assert_eq!(p.source, SourceKind::Store);
        assert_eq!(&*p.name, "team-store");
        assert_eq!(p.record.as_deref(), Some(h.record.id.as_str()));
        assert_eq!(p.created_ms, Some(h.record.created_ms));
        assert_eq!(p.score, Some(h.score));
    }
    assert!(sections
        .windows(2)
        .all(|w| w[0].priority() > w[1].priority()));
    assert!(
        sections
            .iter()
            .all(|s| !s.content().as_str().starts_with("Bob")),
        "another agent's memories are not searched"
    );
    let across = LongTermMemoryContributor::new(store.clone(), SearchOptions::top(4))
        .across_agents()
        .contribute(&ctx(Some(query)))
        .unwrap();
    assert!(across
        .iter()
        .any(|s| s.content().as_str().starts_with("Bob")));
}

/// Verifies ADR-0012: notes found by search bring their wikilink neighbours along.
#[test]
fn long_term_contributor_follows_wikilinks() {
    let graph = Arc::new(NoteGraph::from_notes([
        (
            "runbook.md",
            "Deploy runbook: follow [[Rollback]] if the canary fails.",
        ),
        (
            "rollback.md",
            "Rollback: revert the release tag, then see [[Postmortem]].",
        ),
        ("postmortem.md", "Write a postmortem within two days."),
        ("recipes.md", "Cinnamon buns."),
    ]));
    let store = Arc::new(InMemoryStore::new());
    store.put_many(graph.to_memories("ada")).unwrap();
    let c = LongTermMemoryContributor::new(
        store.clone(),
        SearchOptions::top(1).mode(strata_memory::SearchMode::Lexical),
    )
    .with_note_graph(graph.clone(), WalkOptions::new(2, 5));
    let sections = c.contribute(&ctx(Some("canary deploy runbook"))).unwrap();
    let ids: Vec<&str> = sections.iter().map(|s| s.id().as_str()).collect();
    assert_eq!(
        ids,
        vec![
            format!("mem/{}", note_memory_id("runbook")).as_str(),
            "note/rollback",
            "note/postmortem"
        ]
    );
    assert_eq!(
        sections[1].provenance().record.as_deref(),
        Some(note_memory_id("rollback").as_str())
    );
    assert!(sections[1].priority() < sections[0].priority());
}

/// Verifies ADR-0012: the MEMORY.md contributor reports truncation in its section.
#[test]
fn memory_index_contributor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("MEMORY.md");
    let c = MemoryIndexContributor::new(&path, IndexLimits::new(2, 1000));
    assert!(c.contribute(&ctx(None)).unwrap().is_empty());
    std::fs::write(&path, "- one\n- two\n- three\n").unwrap();
    let s = c.contribute(&ctx(None)).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(
        s[0].content().as_str(),
        "- one\n- two\n[MEMORY.md truncated: 2 of 3 lines, 12 of 20 characters kept]\n"
    );
    assert_eq!(s[0].provenance().source, SourceKind::Store);
}

#[derive(Debug)]
struct Broken;

impl LongTermMemory for Broken {
    fn store_name(&self) -> &str {
        "broken"
    }
    fn dims(&self) -> usize {
        1
    }
    fn put_many(&self, _: Vec<NewMemory>) -> Result<Vec<MemoryRecord>, MemoryError> {
        unreachable!("not used")
    }
    fn get(&self, _: &MemoryId) -> Result<Option<MemoryRecord>, MemoryError> {
        Ok(None)
    }
    fn delete(&self, _: &MemoryId) -> Result<bool, MemoryError> {
        Ok(false)
    }
    fn list(&self, _: &ListOptions) -> Result<Vec<MemoryRecord>, MemoryError> {
        Ok(Vec::new())
    }
    fn count(&self, _: Option<&str>) -> Result<usize, MemoryError> {
        Ok(0)
    }
    fn search(&self, _: &str, _: &SearchOptions) -> Result<Vec<SearchHit>, MemoryError> {
        Err(MemoryError::ConnectionLost {
            location: "postgres://x".into(),
            detail: "server closed the connection".into(),
        })
    }
}

/// Verifies ADR-0012: through the registry, memory contributors add their sections, and a
/// failing store is a marked omission, not a failed gathering.
#[test]
fn contributors_work_through_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(10_000));
    let store = sqlite(&dir, &clock);
    seed_memories(store.as_ref(), &clock);
    store.set_fact(&Scope::global(), "tz", "UTC").unwrap();
    store.append("session-1", NewEntry::user("hello")).unwrap();

    let registry = Registry::new();
    registry
        .register(Arc::new(SharedFactsContributor::new(
            SharedContextReader::new(store.clone()),
        )))
        .unwrap();
    registry
        .register(Arc::new(WorkingMemoryContributor::new(
            store.clone(),
            Arc::new(TiktokenTokenizer::o200k()),
            1000,
        )))
        .unwrap();
    registry
        .register(Arc::new(LongTermMemoryContributor::new(
            store.clone(),
            SearchOptions::top(2),
        )))
        .unwrap();
    registry
        .register(Arc::new(
            LongTermMemoryContributor::new(Arc::new(Broken), SearchOptions::top(2))
                .with_id("memory.broken"),
        ))
        .unwrap();
    let g = registry.gather(&ctx(Some("staging deploy"))).unwrap();
    let layers: Vec<RuntimeLayer> = g.sections.iter().map(|s| s.layer()).collect();
    assert!(layers.contains(&RuntimeLayer::Shared));
    assert!(layers.contains(&RuntimeLayer::WorkingMemory));
    assert_eq!(
        layers
            .iter()
            .filter(|l| **l == RuntimeLayer::LongTermMemory)
            .count(),
        2
    );
    assert!(g
        .sections
        .iter()
        .all(|s| s.provenance().source == SourceKind::Store));
    assert_eq!(g.omissions.len(), 1);
    assert_eq!(&*g.omissions[0].contributor, "memory.broken");
    match &g.omissions[0].reason {
        OmissionReason::Failed(ContributorError::Source(msg)) => {
            assert!(msg.contains("lost the connection"), "{msg}");
        }
        other => panic!("unexpected omission {other:?}"),
    }
}
