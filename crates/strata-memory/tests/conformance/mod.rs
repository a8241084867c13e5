//! The shared conformance suite: the same checks run against every adapter (in-memory, file
//! log, SQLite, PostgreSQL), so the stores are interchangeable behind their traits.
//!
//! Each function takes a fresh, empty store built with the given [`ManualClock`] and the
//! default options (64 KiB entry limit). Verifies ADR-0012.
#![allow(dead_code)]

use std::collections::HashSet;

use strata_core::{Role, TiktokenTokenizer, Tokenizer};
use strata_memory::{
    Batch, Entry, ListOptions, LongTermMemory, ManualClock, MemoryError, MemoryId, NewEntry,
    NewMemory, Operation, Scope, SearchMode, SearchOptions, SharedContext, SharedContextReader,
    SharedContextWriter, Tail, WorkingMemory, DEFAULT_MAX_ENTRY_BYTES, MAX_META_BYTES,
    OPERATION_TTL_MS,
};

/// The clock every conformance store starts from.
pub const T0: i64 = 1_700_000_000_000;

fn invalid<T: std::fmt::Debug>(r: Result<T, MemoryError>) {
    match r {
        Err(MemoryError::Invalid { .. }) => {}
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

/// Working memory: appends, order, validation, budgeted selection, clear.
pub fn working_memory(wm: &dyn WorkingMemory, clock: &ManualClock) {
    assert!(!wm.store_name().is_empty());
    assert!(wm.entries("s1").unwrap().is_empty());
    clock.set(T0);
    let a = wm
        .append("s1", NewEntry::user("hello <|endoftext|> ünïcode 🦀"))
        .unwrap();
    clock.advance(5);
    let b = wm
        .append("s1", NewEntry::tool_call("c1", r#"{"q":"weather"}"#))
        .unwrap();
    let other = wm
        .append("s2", NewEntry::assistant("other session"))
        .unwrap();
    let c = wm
        .append("s1", NewEntry::tool_result("c1", "sunny"))
        .unwrap();
    let d = wm
        .append("s1", NewEntry::assistant("It is sunny."))
        .unwrap();
    assert!(a.seq < b.seq && b.seq < other.seq && other.seq < c.seq && c.seq < d.seq);
    // Numbers within a session (ADR-0036).
    let numbers = [a.session_seq, b.session_seq, c.session_seq, d.session_seq];
    assert_eq!((numbers, other.session_seq), ([1, 2, 3, 4], 1));
    assert_eq!(a.at_ms, T0);
    assert_eq!(b.at_ms, T0 + 5);
    assert_eq!(a.role, Role::User);
    assert_eq!(c.call_id.as_deref(), Some("c1"));
    let all = wm.entries("s1").unwrap();
    assert_eq!(all, vec![a.clone(), b.clone(), c.clone(), d.clone()]);
    assert_eq!(all[0].content.as_str(), "hello <|endoftext|> ünïcode 🦀");
    assert_eq!(wm.entries("s2").unwrap(), vec![other.clone()]);
    assert_eq!(d.turn().seq, d.seq);

    // Existence and the exchange in progress, read without the whole session.
    assert!(wm.has_session("s1").unwrap());
    assert!(wm.has_session("s2").unwrap());
    assert!(!wm.has_session("s4").unwrap());
    assert_eq!(
        wm.current_exchange("s1").unwrap(),
        vec![a.clone(), b.clone(), c.clone(), d.clone()]
    );
    assert!(
        wm.current_exchange("s2").unwrap().is_empty(),
        "no user entry"
    );
    assert!(wm.current_exchange("s4").unwrap().is_empty());
    let (s5a, s5b) = (
        wm.append("s5", NewEntry::user("first question")).unwrap(),
        wm.append("s5", NewEntry::assistant("first answer"))
            .unwrap(),
    );
    assert_eq!(wm.current_exchange("s5").unwrap(), vec![s5a, s5b]);
    let s5c = wm.append("s5", NewEntry::user("second question")).unwrap();
    assert_eq!(wm.current_exchange("s5").unwrap(), vec![s5c.clone()]);
    let s5d = wm.append("s5", NewEntry::tool_call("k1", "{}")).unwrap();
    assert_eq!(wm.current_exchange("s5").unwrap(), vec![s5c, s5d]);
    assert_eq!(wm.clear("s5").unwrap(), 4);
    assert!(!wm.has_session("s5").unwrap());
    assert!(wm.current_exchange("s5").unwrap().is_empty());

    // Validation.
    invalid(wm.append("", NewEntry::user("x")));
    invalid(wm.append(
        "s1",
        NewEntry {
            role: Role::ToolCall,
            content: "x".into(),
            call_id: None,
            meta: None,
        },
    ));
    invalid(wm.append(
        "s1",
        NewEntry {
            role: Role::User,
            content: "x".into(),
            call_id: Some("c9".into()),
            meta: None,
        },
    ));
    invalid(wm.append("s1", NewEntry::tool_result("nope", "orphan")));
    invalid(wm.append("s1", NewEntry::tool_call("c1", "duplicate call id")));
    invalid(wm.append("s1", NewEntry::tool_result("c1", "second result")));
    invalid(wm.append(
        "s2",
        NewEntry::tool_result("c1", "call is in another session"),
    ));
    invalid(wm.append("s1", NewEntry::user("nul \0 inside")));
    let big = "x".repeat(DEFAULT_MAX_ENTRY_BYTES + 1);
    match wm.append("s1", NewEntry::user(big)) {
        Err(MemoryError::EntryTooLarge { size, limit, .. }) => {
            assert_eq!(size, DEFAULT_MAX_ENTRY_BYTES + 1);
            assert_eq!(limit, DEFAULT_MAX_ENTRY_BYTES);
        }
        other => panic!("expected EntryTooLarge, got {other:?}"),
    }
    let at_limit = wm
        .append("s3", NewEntry::user("y".repeat(DEFAULT_MAX_ENTRY_BYTES)))
        .unwrap();
    assert_eq!(at_limit.content.len(), DEFAULT_MAX_ENTRY_BYTES);
    // Nothing refused was stored.
    assert_eq!(wm.entries("s1").unwrap().len(), 4);

    // Clear: only that session; sequence numbers keep growing.
    assert_eq!(wm.clear("s1").unwrap(), 4);
    assert_eq!(wm.clear("s1").unwrap(), 0);
    assert!(wm.entries("s1").unwrap().is_empty());
    assert_eq!(wm.entries("s2").unwrap(), vec![other]);
    let e = wm.append("s1", NewEntry::user("after clear")).unwrap();
    assert!(e.seq > at_limit.seq);
    assert_eq!(
        e.session_seq, 5,
        "session numbers are not reused after a clear"
    );
    // A cleared call id may be used again.
    wm.append("s1", NewEntry::tool_call("c1", "again")).unwrap();
    wm.clear("s1").unwrap();
    wm.clear("s2").unwrap();
    wm.clear("s3").unwrap();

    recent_within(wm, "budget", true);
    recent_within(wm, "budget-2", false);
}

/// The budgeted selection, with the real o200k tokenizer, over an interleaved conversation long
/// enough that stores reading it a page at a time need several pages, with calls answered much
/// later (pairs that span pages) and one call still pending at the end. With `slow_early`, the
/// first entry is a call answered near the end, which rules out every start in between.
fn recent_within(wm: &dyn WorkingMemory, s: &str, slow_early: bool) {
    let tok = TiktokenTokenizer::o200k();
    let mut pending: Vec<String> = Vec::new();
    let mut acknowledged = Vec::new();
    if slow_early {
        acknowledged.push(
            wm.append(s, NewEntry::tool_call("slow-early", "{}"))
                .unwrap(),
        );
    }
    for i in 0..170u32 {
        let e = match i {
            40 => wm.append(s, NewEntry::tool_call("slow-middle", "{\"wait\":true}")),
            120 => wm.append(s, NewEntry::tool_result("slow-middle", "finally")),
            _ => match i % 5 {
                0 => wm.append(
                    s,
                    NewEntry::user(format!("question number {i} about the build")),
                ),
                1 | 2 => {
                    let id = format!("call-{i}");
                    pending.push(id.clone());
                    wm.append(s, NewEntry::tool_call(id, format!("{{\"step\":{i}}}")))
                }
                3 => {
                    // Results arrive in reverse order of the calls.
                    let id = pending.pop().unwrap();
                    wm.append(
                        s,
                        NewEntry::tool_result(id, "output ".repeat(i as usize % 7 + 1)),
                    )
                }
                _ => {
                    let id = pending.pop().unwrap();
                    wm.append(
                        s,
                        NewEntry::tool_result(id.clone(), format!("late result of {id}")),
                    )
                }
            },
        };
        acknowledged.push(e.unwrap());
    }
    if slow_early {
        acknowledged.push(
            wm.append(
                s,
                NewEntry::tool_result("slow-early", "the first call's answer"),
            )
            .unwrap(),
        );
    }
    for i in 0..12 {
        acknowledged.push(
            wm.append(s, NewEntry::assistant(format!("closing remark {i}")))
                .unwrap(),
        );
    }
    // One call stays pending at the very end.
    acknowledged.push(wm.append(s, NewEntry::tool_call("pending", "{}")).unwrap());
    let all = wm.entries(s).unwrap();
    assert_eq!(all, acknowledged);
    let last_user = all.iter().rposition(|e| e.role == Role::User).unwrap();
    assert_eq!(wm.current_exchange(s).unwrap(), all[last_user..].to_vec());
    assert!(
        all.len() - last_user > 1,
        "the exchange has entries after the question"
    );
    let total: usize = all.iter().map(|e| tok.count(e.content.as_str())).sum();
    let mut sizes = HashSet::new();
    for budget in (0..=total + 3).filter(|b| *b < 200 || b % 7 == 0 || *b + 60 > total) {
        let got = wm.recent_within(s, budget, &tok).unwrap();
        check_selection(&all, &got, budget, &tok);
        sizes.insert(got.len());
    }
    assert!(sizes.contains(&all.len()));
    if slow_early {
        // Only the entries after the early call's answer, or everything.
        assert!(
            sizes.iter().all(|n| *n <= 13 || *n == all.len()),
            "{sizes:?}"
        );
    } else {
        // Selections end past the first pages a store reads (32 and 64 entries), none starts
        // inside the pair that spans the middle, and one starts right after it.
        let middle = all
            .iter()
            .position(|e| e.call_id.as_deref() == Some("slow-middle"))
            .unwrap();
        let answer = all
            .iter()
            .rposition(|e| e.call_id.as_deref() == Some("slow-middle"))
            .unwrap();
        assert!(sizes.iter().any(|n| *n > 96 && *n < all.len()), "{sizes:?}");
        assert!(
            sizes
                .iter()
                .all(|n| *n == 0 || !(middle + 1..=answer).contains(&(all.len() - n))),
            "{sizes:?}"
        );
        assert!(sizes.contains(&(all.len() - answer - 1)), "{sizes:?}");
    }
    assert_eq!(wm.recent_within(s, total, &tok).unwrap(), all);
    let got = wm.recent_within(s, total, &tok).unwrap();
    assert_eq!(got.last().unwrap().call_id.as_deref(), Some("pending"));
    wm.clear(s).unwrap();
}

/// The selection is a suffix, fits, never splits a pair, and is the longest such suffix.
pub fn check_selection(all: &[Entry], got: &[Entry], budget: usize, tok: &dyn Tokenizer) {
    let start = all.len() - got.len();
    assert_eq!(&all[start..], got, "budget {budget}: not the newest suffix");
    let used: usize = got.iter().map(|e| tok.count(e.content.as_str())).sum();
    assert!(used <= budget, "budget {budget}: used {used}");
    let valid = |s: usize| {
        let ids: HashSet<&str> = all[s..]
            .iter()
            .filter(|e| e.role == Role::ToolCall)
            .filter_map(|e| e.call_id.as_deref())
            .collect();
        all[s..]
            .iter()
            .filter(|e| e.role == Role::ToolResult)
            .all(|e| ids.contains(e.call_id.as_deref().unwrap()))
    };
    assert!(valid(start), "budget {budget}: a result without its call");
    // Calls in the selection have their results in the selection whenever the result exists.
    for e in got.iter().filter(|e| e.role == Role::ToolCall) {
        let has_result = all
            .iter()
            .any(|r| r.role == Role::ToolResult && r.call_id == e.call_id);
        let in_sel = got
            .iter()
            .any(|r| r.role == Role::ToolResult && r.call_id == e.call_id);
        assert_eq!(
            has_result, in_sel,
            "budget {budget}: a call without its result"
        );
    }
    // Maximal: no earlier valid start fits.
    for s in 0..start {
        let cost: usize = all[s..].iter().map(|e| tok.count(e.content.as_str())).sum();
        assert!(
            !(valid(s) && cost <= budget),
            "budget {budget}: start {s} also fits, selection starts at {start}"
        );
    }
}

fn corpus() -> Vec<NewMemory> {
    let m = |id: &str, agent: &str, text: &str, tags: &[&str]| {
        NewMemory::new(agent, text)
            .with_id(MemoryId::new(id).unwrap())
            .with_tags(tags.iter().copied())
    };
    vec![
        m(
            "deploy",
            "ops",
            "The deploy pipeline for staging fails when the migration step times out.",
            &["ci", "staging"],
        ),
        m(
            "deploy-prod",
            "ops",
            "Production deploys happen on Tuesdays after the change review.",
            &["ci", "prod"],
        ),
        m(
            "pie",
            "cook",
            "Grandmother's apple pie recipe uses cinnamon and brown butter.",
            &["recipe"],
        ),
        m(
            "coffee",
            "cook",
            "The office coffee machine needs descaling every month.",
            &["office"],
        ),
        m(
            "rust",
            "dev",
            "Rust borrow checker errors usually mean two mutable references overlap.",
            &["rust"],
        ),
        m(
            "rust-async",
            "dev",
            "Async Rust futures do nothing until they are polled by an executor.",
            &["rust", "async"],
        ),
        m(
            "postgres",
            "dev",
            "PostgreSQL full text search uses tsvector columns and ts_rank.",
            &["db"],
        ),
        m(
            "sqlite",
            "dev",
            "SQLite FTS5 bm25 scores are negative and lower is better.",
            &["db"],
        ),
        m(
            "vacation",
            "hr",
            "Vacation requests go to the team lead two weeks in advance.",
            &[],
        ),
        m(
            "oncall",
            "ops",
            "The on-call rotation hands over every Monday at ten.",
            &["oncall"],
        ),
        m(
            "staging-db",
            "ops",
            "The staging database is restored from last night's production snapshot.",
            &["staging", "db"],
        ),
        m(
            "lunch",
            "hr",
            "Team lunch is on Friday at the Thai place.",
            &[],
        ),
    ]
}

/// Long-term memory: put, replace, get, delete, list, count, search with filters.
pub fn long_term_memory(ltm: &dyn LongTermMemory, clock: &ManualClock) {
    assert!(!ltm.store_name().is_empty());
    assert!(ltm.dims() > 0);
    clock.set(T0);
    assert_eq!(ltm.count(None).unwrap(), 0);

    // Generated ids, timestamps, tag normalisation.
    let r = ltm
        .put(NewMemory::new("a1", "first memory").with_tags(["zeta", "alpha", "zeta"]))
        .unwrap();
    assert!(r.id.as_str().starts_with("m-"));
    assert_eq!(r.created_ms, T0);
    assert_eq!(r.updated_ms, T0);
    assert_eq!(
        r.tags.iter().map(|t| &**t).collect::<Vec<_>>(),
        vec!["alpha", "zeta"]
    );
    assert_eq!(ltm.get(&r.id).unwrap().as_ref(), Some(&r));

    // Replace by id keeps creation time.
    clock.advance(1000);
    let r2 = ltm
        .put(
            NewMemory::new("a1", "first memory, revised")
                .with_id(r.id.clone())
                .with_tags(["beta"]),
        )
        .unwrap();
    assert_eq!(r2.id, r.id);
    assert_eq!(r2.created_ms, T0);
    assert_eq!(r2.updated_ms, T0 + 1000);
    assert_eq!(ltm.get(&r.id).unwrap().unwrap(), r2);
    assert_eq!(ltm.count(None).unwrap(), 1);
    // The old text is gone from the lexical index, the new one is in it.
    let lex = SearchOptions::top(5).mode(SearchMode::Lexical);
    assert!(ltm
        .search("revised", &lex)
        .unwrap()
        .iter()
        .any(|h| h.record.id == r.id));
    assert_eq!(
        ltm.list(&ListOptions::all().tags(["alpha"])).unwrap(),
        vec![]
    );
    assert_eq!(
        ltm.list(&ListOptions::all().tags(["beta"])).unwrap(),
        vec![r2.clone()]
    );

    // Validation.
    invalid(ltm.put(NewMemory::new("", "no agent")));
    invalid(ltm.put(NewMemory::new("a1", "bad tag").with_tags(["has space"])));
    invalid(ltm.put(NewMemory::new("a1", "nul \0")));
    assert!(matches!(
        ltm.put(NewMemory::new(
            "a1",
            "m".repeat(DEFAULT_MAX_ENTRY_BYTES + 1)
        )),
        Err(MemoryError::EntryTooLarge { .. })
    ));
    assert!(MemoryId::new("bad id").is_err());

    // Delete.
    assert!(ltm.delete(&r.id).unwrap());
    assert!(!ltm.delete(&r.id).unwrap());
    assert_eq!(ltm.get(&r.id).unwrap(), None);
    assert!(ltm.search("revised", &lex).unwrap().is_empty());
    assert_eq!(ltm.count(None).unwrap(), 0);

    // A corpus, one memory per clock tick.
    let mut stored = Vec::new();
    for m in corpus() {
        clock.advance(1);
        stored.push(ltm.put(m).unwrap());
    }
    let n = stored.len();
    assert_eq!(ltm.count(None).unwrap(), n);
    assert_eq!(ltm.count(Some("ops")).unwrap(), 4);
    assert_eq!(ltm.count(Some("nobody")).unwrap(), 0);
    // List: creation order, filters, paging.
    let listed = ltm.list(&ListOptions::all()).unwrap();
    assert_eq!(listed, stored);
    let page = ltm.list(&ListOptions::all().page(2, 3)).unwrap();
    assert_eq!(page, stored[2..5].to_vec());
    let ops: Vec<String> = ltm
        .list(&ListOptions::all().agent("ops"))
        .unwrap()
        .into_iter()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(ops, vec!["deploy", "deploy-prod", "oncall", "staging-db"]);
    let staging_db: Vec<String> = ltm
        .list(&ListOptions::all().tags(["staging", "db"]))
        .unwrap()
        .into_iter()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(staging_db, vec!["staging-db"]);

    search(ltm, &stored);
}

fn ids(hits: &[strata_memory::SearchHit]) -> Vec<String> {
    hits.iter().map(|h| h.record.id.to_string()).collect()
}

fn search(ltm: &dyn LongTermMemory, stored: &[strata_memory::MemoryRecord]) {
    // Hybrid: the obviously relevant memory is first, found by both rankings.
    let hits = ltm
        .search(
            "why does the staging deploy pipeline fail?",
            &SearchOptions::top(3),
        )
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].record.id.as_str(), "deploy", "{:?}", ids(&hits));
    assert_eq!(hits[0].lexical_rank, Some(1));
    assert!(hits[0].vector_rank.is_some());
    assert_eq!(
        &hits[0].record,
        stored.iter().find(|r| r.id.as_str() == "deploy").unwrap()
    );
    for h in &hits {
        let expect: f64 = [h.lexical_rank, h.vector_rank]
            .iter()
            .flatten()
            .map(|r| 1.0 / (60.0 + f64::from(*r)))
            .sum();
        assert!(
            (h.score - expect).abs() < 1e-12,
            "score is reciprocal rank fusion with k = 60"
        );
    }
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    // Deterministic.
    assert_eq!(
        ltm.search(
            "why does the staging deploy pipeline fail?",
            &SearchOptions::top(3)
        )
        .unwrap(),
        hits
    );

    // Filters.
    let hits = ltm
        .search("database snapshot", &SearchOptions::top(10).agent("dev"))
        .unwrap();
    assert!(!hits.is_empty());
    assert!(
        hits.iter().all(|h| &*h.record.agent_id == "dev"),
        "{:?}",
        ids(&hits)
    );
    let hits = ltm
        .search("database", &SearchOptions::top(10).tags(["db", "staging"]))
        .unwrap();
    assert_eq!(ids(&hits), vec!["staging-db"]);
    let hits = ltm
        .search(
            "rust",
            &SearchOptions::top(10)
                .tags(["rust"])
                .mode(SearchMode::Lexical),
        )
        .unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits
        .iter()
        .all(|h| h.vector_rank.is_none() && h.lexical_rank.is_some()));

    // Lexical only returns memories that contain a query word.
    let hits = ltm
        .search(
            "cinnamon",
            &SearchOptions::top(10).mode(SearchMode::Lexical),
        )
        .unwrap();
    assert_eq!(ids(&hits), vec!["pie"]);
    // Vector only ranks by similarity and ignores words.
    let hits = ltm
        .search(
            "apple pie recipe",
            &SearchOptions::top(2).mode(SearchMode::Vector),
        )
        .unwrap();
    assert_eq!(hits[0].record.id.as_str(), "pie");
    assert!(hits
        .iter()
        .all(|h| h.lexical_rank.is_none() && h.vector_rank.is_some()));
    // A similarity threshold leaves unrelated memories out of the vector ranking.
    let hits = ltm
        .search(
            "apple pie recipe",
            &SearchOptions::top(12)
                .mode(SearchMode::Vector)
                .min_similarity(0.3),
        )
        .unwrap();
    assert_eq!(ids(&hits), vec!["pie"]);

    // top_k, empty queries, no match.
    assert_eq!(ltm.search("the", &SearchOptions::top(4)).unwrap().len(), 4);
    assert!(ltm.search("", &SearchOptions::top(4)).unwrap().is_empty());
    assert!(ltm
        .search("  ?! ", &SearchOptions::top(4))
        .unwrap()
        .is_empty());
    assert!(ltm
        .search("deploy", &SearchOptions::top(0))
        .unwrap()
        .is_empty());
    assert!(ltm
        .search(
            "xylophone",
            &SearchOptions::top(4).mode(SearchMode::Lexical)
        )
        .unwrap()
        .is_empty());
    // Query text with FTS or SQL syntax in it is only words.
    let hits = ltm
        .search(
            "deploy\" OR content:* NEAR( ') -- ; DROP TABLE memories",
            &SearchOptions::top(3),
        )
        .unwrap();
    assert!(!hits.is_empty());
    assert_eq!(ltm.count(None).unwrap(), stored.len());
    // put_many stores several at once.
    let many = ltm
        .put_many(vec![
            NewMemory::new("bulk", "bulk one"),
            NewMemory::new("bulk", "bulk two"),
        ])
        .unwrap();
    assert_eq!(many.len(), 2);
    assert_eq!(ltm.count(Some("bulk")).unwrap(), 2);
}

/// Shared context: writer and read-only handle.
pub fn shared_context<S: SharedContextWriter + 'static>(
    store: std::sync::Arc<S>,
    clock: &ManualClock,
) {
    clock.set(T0);
    let global = Scope::global();
    let agent = Scope::agent("a1").unwrap();
    assert_eq!(store.fact(&global, "tz").unwrap(), None);
    let f = store.set_fact(&global, "tz", "UTC").unwrap();
    assert_eq!(f.updated_ms, T0);
    store.set_fact(&global, "company", "Acme").unwrap();
    store.set_fact(&agent, "tz", "Europe/Paris").unwrap();
    clock.advance(7);
    let f2 = store.set_fact(&global, "tz", "UTC+0").unwrap();
    assert_eq!(f2.updated_ms, T0 + 7);
    assert_eq!(store.fact(&global, "tz").unwrap(), Some(f2));

    let reader = SharedContextReader::new(store.clone());
    assert_eq!(reader.store_name(), store.store_name());
    let facts = reader.facts(&[agent.clone(), global.clone()]).unwrap();
    let flat: Vec<(String, String, String)> = facts
        .iter()
        .map(|f| (f.scope.to_string(), f.key.to_string(), f.value.to_string()))
        .collect();
    assert_eq!(
        flat,
        vec![
            ("agent:a1".into(), "tz".into(), "Europe/Paris".into()),
            ("global".into(), "company".into(), "Acme".into()),
            ("global".into(), "tz".into(), "UTC+0".into()),
        ]
    );
    assert!(reader
        .facts(&[Scope::new("workspace:none").unwrap()])
        .unwrap()
        .is_empty());

    invalid(store.set_fact(&global, "has space", "x"));
    invalid(store.set_fact(&global, &"k".repeat(97), "x"));
    assert!(matches!(
        store.set_fact(&global, "big", &"v".repeat(DEFAULT_MAX_ENTRY_BYTES + 1)),
        Err(MemoryError::EntryTooLarge { .. })
    ));
    assert!(Scope::new("bad scope").is_err());

    assert!(store.remove_fact(&global, "tz").unwrap());
    assert!(!store.remove_fact(&global, "tz").unwrap());
    assert_eq!(reader.fact(&global, "tz").unwrap(), None);
    assert_eq!(reader.facts(&[global]).unwrap().len(), 1);
}

/// Session state: absent documents, versioned writes, lost races refused, sessions apart,
/// removal, and the session-files list built on it. Verifies ADR-0016.
pub fn session_state(st: &dyn strata_memory::SessionState, clock: &ManualClock) {
    use strata_memory::{record_session_file, session_files, FileAction};
    assert_eq!(st.state("s1", "goals").unwrap(), None);
    // The first write needs "absent"; a writer that believes otherwise loses.
    assert_eq!(st.put_state("s1", "goals", "{}", Some(1)).unwrap(), None);
    assert_eq!(st.put_state("s1", "goals", "one", None).unwrap(), Some(1));
    assert_eq!(st.put_state("s1", "goals", "again", None).unwrap(), None);
    clock.advance(5);
    assert_eq!(
        st.put_state("s1", "goals", "two", Some(1)).unwrap(),
        Some(2)
    );
    // A writer that read version 1 lost the race: nothing changes.
    assert_eq!(st.put_state("s1", "goals", "stale", Some(1)).unwrap(), None);
    let doc = st.state("s1", "goals").unwrap().unwrap();
    assert_eq!((doc.value.as_str(), doc.version), ("two", 2));
    assert_eq!(doc.updated_ms, T0 + 5);
    // Another session and another name are other documents.
    assert_eq!(st.state("s2", "goals").unwrap(), None);
    assert_eq!(st.state("s1", "files").unwrap(), None);
    invalid(st.state("", "goals"));
    invalid(st.put_state("s1", "bad name", "x", None));
    assert!(st.remove_state("s1", "goals").unwrap());
    assert!(!st.remove_state("s1", "goals").unwrap());
    assert_eq!(st.state("s1", "goals").unwrap(), None);

    record_session_file(st, "s3", "src/a.rs", FileAction::Read, T0).unwrap();
    record_session_file(st, "s3", "src/b.rs", FileAction::Modified, T0 + 1).unwrap();
    record_session_file(st, "s3", "src/a.rs", FileAction::Modified, T0 + 2).unwrap();
    let files = session_files(st, "s3").unwrap();
    let got: Vec<(&str, FileAction)> = files.iter().map(|f| (f.path.as_str(), f.action)).collect();
    assert_eq!(
        got,
        [
            ("src/b.rs", FileAction::Modified),
            ("src/a.rs", FileAction::Modified)
        ]
    );
    assert!(session_files(st, "s4").unwrap().is_empty());
    invalid(record_session_file(st, "s3", "  ", FileAction::Read, T0));
}

/// A batch that clears a session also removes the state documents it names, in the same
/// transaction: a refused batch removes none, a bad name refuses the batch, and documents it
/// does not name stay.
pub fn clear_with_state<S: WorkingMemory + strata_memory::SessionState>(st: &S) {
    let user = |text: &str| NewEntry::user(text);
    st.apply("r1", batch(Tail::At(None), vec![user("hello")], None))
        .unwrap();
    for name in ["files", "tools", "goals"] {
        st.put_state("r1", name, "{}", None).unwrap();
    }
    let reset = |tail: Tail, names: &[&str]| Batch {
        tail,
        clear: true,
        remove_state: names.iter().map(|n| (*n).to_owned()).collect(),
        ..Batch::default()
    };
    let held = st.last_seq("r1").unwrap();
    // Refused for a stale tail: nothing removed.
    let stale = st.apply(
        "r1",
        reset(Tail::At(Some(held.unwrap() + 7)), &["files", "tools"]),
    );
    assert!(
        matches!(stale, Err(MemoryError::SessionChanged { .. })),
        "{stale:?}"
    );
    // Refused for a bad document name: nothing removed.
    invalid(st.apply("r1", reset(Tail::At(held), &["files", "bad name"])));
    for name in ["files", "tools", "goals"] {
        assert!(
            st.state("r1", name).unwrap().is_some(),
            "{name} removed by a refused batch"
        );
    }
    assert_eq!(st.entries("r1").unwrap().len(), 1);
    let done = st
        .apply("r1", reset(Tail::At(held), &["files", "tools"]))
        .unwrap();
    assert_eq!(done.cleared, 1);
    assert!(st.entries("r1").unwrap().is_empty());
    assert_eq!(st.state("r1", "files").unwrap(), None);
    assert_eq!(st.state("r1", "tools").unwrap(), None);
    assert!(
        st.state("r1", "goals").unwrap().is_some(),
        "a document not named was removed"
    );
    // Removing documents alone is a change too.
    let only = Batch {
        tail: Tail::Any,
        remove_state: vec!["goals".into()],
        ..Batch::default()
    };
    st.apply("r1", only).unwrap();
    assert_eq!(st.state("r1", "goals").unwrap(), None);
}

fn batch(tail: Tail, entries: Vec<NewEntry>, operation: Option<Operation>) -> Batch {
    Batch {
        tail,
        clear: false,
        entries,
        operation,
        remove_state: Vec::new(),
    }
}

/// Batches (ADR-0031): every entry of a batch and its operation record are stored together or
/// not at all; a stale tail, a live key, a bad entry anywhere in the batch each refuse the
/// whole batch and change nothing; records outlive a clear and expire after a day.
pub fn batches(wm: &dyn WorkingMemory, clock: &ManualClock) {
    clock.set(T0);
    assert_eq!(wm.last_seq("b1").unwrap(), None);
    let first = wm
        .apply(
            "b1",
            batch(
                Tail::At(None),
                vec![
                    NewEntry::user("read the log"),
                    NewEntry::tool_call("c1", r#"{"path":"a.log"}"#),
                    NewEntry::tool_result("c1", "ok"),
                ],
                Some(Operation::new("key-1", "fp-1", "first answer")),
            ),
        )
        .unwrap();
    assert_eq!(first.entries.len(), 3);
    assert!(first.entries.windows(2).all(|w| w[0].seq < w[1].seq));
    let held = wm.entries("b1").unwrap();
    assert_eq!(held, first.entries);
    let last = held.last().map(|e| e.seq);
    assert_eq!(wm.last_seq("b1").unwrap(), last);
    let op = wm.operation("b1", "key-1").unwrap().unwrap();
    assert_eq!(
        (op.fingerprint.as_str(), op.answer.as_str(), op.at_ms),
        ("fp-1", "first answer", T0)
    );
    assert_eq!(wm.operation("b2", "key-1").unwrap(), None);

    // Each refusal changes nothing.
    let refusals: Vec<(Batch, &str)> = vec![
        (
            batch(Tail::At(None), vec![NewEntry::user("stale")], None),
            "changed",
        ),
        (
            batch(
                Tail::At(last),
                vec![NewEntry::user("again")],
                Some(Operation::new("key-1", "fp-2", "x")),
            ),
            "exists",
        ),
        (
            batch(
                Tail::At(last),
                vec![
                    NewEntry::assistant("calling"),
                    NewEntry::tool_call("c2", "{}"),
                    NewEntry::tool_result("c9", "no such call"),
                ],
                None,
            ),
            "invalid",
        ),
        (
            batch(
                Tail::Any,
                vec![
                    NewEntry::tool_call("c3", "{}"),
                    NewEntry::tool_call("c3", "{}"),
                ],
                None,
            ),
            "invalid",
        ),
        (
            batch(Tail::Any, vec![NewEntry::tool_call("c1", "{}")], None),
            "invalid",
        ),
        (
            batch(
                Tail::Any,
                vec![NewEntry::user("ok"), NewEntry::user("")],
                Some(Operation::new("bad\u{7}key", "fp", "x")),
            ),
            "invalid",
        ),
        (
            batch(
                Tail::Any,
                vec![NewEntry::user("x".repeat(DEFAULT_MAX_ENTRY_BYTES + 1))],
                None,
            ),
            "large",
        ),
    ];
    for (b, why) in refusals {
        let r = wm.apply("b1", b);
        let ok = match (why, &r) {
            ("changed", Err(MemoryError::SessionChanged { found, .. })) => *found == last,
            ("exists", Err(MemoryError::OperationExists { key, .. })) => key == "key-1",
            ("invalid", Err(MemoryError::Invalid { .. })) => true,
            ("large", Err(MemoryError::EntryTooLarge { .. })) => true,
            _ => false,
        };
        assert!(ok, "{why}: {r:?}");
        assert_eq!(wm.entries("b1").unwrap(), held, "{why} changed the session");
        assert_eq!(
            wm.operation("b1", "key-1").unwrap().unwrap().answer,
            "first answer"
        );
    }
    for key in ["", &"k".repeat(256), "tab\tkey", "ünï"] {
        invalid(wm.operation("b1", key));
    }

    // A clear with an operation: the entries go, the records stay.
    clock.advance(10);
    let cleared = wm
        .apply(
            "b1",
            Batch {
                clear: true,
                operation: Some(Operation::new("reset-1", "fp-r", "removed 3")),
                ..Batch::default()
            },
        )
        .unwrap();
    assert_eq!(cleared.cleared, 3);
    assert!(wm.entries("b1").unwrap().is_empty());
    assert_eq!(wm.last_seq("b1").unwrap(), None);
    assert!(wm.operation("b1", "key-1").unwrap().is_some());
    assert_eq!(
        wm.operation("b1", "reset-1").unwrap().unwrap().at_ms,
        T0 + 10
    );
    // A call id of the cleared history may be used again.
    wm.apply(
        "b1",
        batch(Tail::At(None), vec![NewEntry::tool_call("c1", "{}")], None),
    )
    .unwrap();

    // A day later the records are gone and the key may be used again.
    clock.advance(OPERATION_TTL_MS);
    assert_eq!(wm.operation("b1", "key-1").unwrap(), None);
    wm.apply(
        "b1",
        batch(
            Tail::Any,
            vec![NewEntry::tool_result("c1", "late")],
            Some(Operation::new("key-1", "fp-3", "second life")),
        ),
    )
    .unwrap();
    assert_eq!(
        wm.operation("b1", "key-1").unwrap().unwrap().answer,
        "second life"
    );
}

/// The metadata objects of [`entry_meta`]: odd spacing, key order, escapes and non-ASCII text
/// that a store normalising JSON would change.
pub const METAS: [&str; 3] = [
    r#"{"is_error":true}"#,
    "{ \"z\": 1,\n  \"a\": [1.50, \"\\u00e9\", null],\t\"keep_tail\": false }",
    r#"{"reasoning":[{"type":"thinking","signature":"c2ln","text":"ünï 🦀"}],"a":{}}"#,
];

/// Entry metadata: stored and read back byte for byte by every read path, alone and in a batch
/// with other entries; anything but one JSON object within [`MAX_META_BYTES`] refuses the whole
/// batch and writes nothing.
pub fn entry_meta(wm: &dyn WorkingMemory, clock: &ManualClock) {
    clock.set(T0);
    let a = wm
        .append("m1", NewEntry::user("question").with_meta(METAS[0]))
        .unwrap();
    assert_eq!(a.meta.as_deref(), Some(METAS[0]));
    let applied = wm
        .apply(
            "m1",
            batch(
                Tail::At(Some(a.seq)),
                vec![
                    NewEntry::tool_call("c1", "{}"),
                    NewEntry::tool_result("c1", "failed").with_meta(METAS[1]),
                    NewEntry::assistant("answer").with_meta(METAS[2]),
                    NewEntry::user("no meta"),
                ],
                None,
            ),
        )
        .unwrap();
    let metas: Vec<Option<&str>> = applied.entries.iter().map(|e| e.meta.as_deref()).collect();
    assert_eq!(metas, [None, Some(METAS[1]), Some(METAS[2]), None]);
    let mut all = vec![a.clone()];
    all.extend(applied.entries.iter().cloned());
    assert_eq!(wm.entries("m1").unwrap(), all);
    assert_eq!(wm.current_exchange("m1").unwrap(), all[4..].to_vec());
    let tok = TiktokenTokenizer::o200k();
    assert_eq!(wm.recent_within("m1", 1000, &tok).unwrap(), all);

    // Refusals write nothing, even when the other entries of the batch are fine.
    let at_limit = format!("{{\"k\":\"{}\"}}", "x".repeat(MAX_META_BYTES - 8));
    assert_eq!(at_limit.len(), MAX_META_BYTES);
    let over = format!("{{\"k\":\"{}\"}}", "x".repeat(MAX_META_BYTES - 7));
    for bad in [
        "",
        "[]",
        "1",
        "\"text\"",
        "null",
        "{",
        r#"{"a":1} {"b":2}"#,
        r#"{"a":1},"#,
        "not json",
        over.as_str(),
    ] {
        let r = wm.apply(
            "m1",
            batch(
                Tail::Any,
                vec![
                    NewEntry::user("fine"),
                    NewEntry::assistant("also fine").with_meta(bad),
                ],
                None,
            ),
        );
        match r {
            Err(MemoryError::Invalid { .. }) if bad.len() <= MAX_META_BYTES => {}
            Err(MemoryError::EntryTooLarge { size, limit, .. }) if bad.len() > MAX_META_BYTES => {
                assert_eq!((size, limit), (bad.len(), MAX_META_BYTES));
            }
            other => panic!(
                "meta {:?}: expected a refusal, got {other:?}",
                &bad[..bad.len().min(20)]
            ),
        }
        assert_eq!(
            wm.entries("m1").unwrap(),
            all,
            "a refused batch wrote something"
        );
    }
    assert!(!wm.has_session("m2").unwrap());
    invalid(wm.append("m2", NewEntry::user("x").with_meta("[1]")));
    assert!(!wm.has_session("m2").unwrap());
    // The limit itself is accepted (the content limit does not apply to meta).
    let big = wm
        .append("m2", NewEntry::user("x").with_meta(at_limit.clone()))
        .unwrap();
    assert_eq!(big.meta.as_deref(), Some(at_limit.as_str()));
    assert_eq!(wm.entries("m2").unwrap(), vec![big]);
    wm.clear("m1").unwrap();
    wm.clear("m2").unwrap();
}
