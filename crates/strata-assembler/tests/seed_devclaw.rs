//! Conformance with the "DevClaw" seed (its prompt layers: per-layer token budgets, trimming
//! the least important content first with a visible marker, TTL caches, concurrent loading, a
//! minimal mode for scheduled jobs, bootstrap files and hybrid BM25 + vector memory), driven
//! through the session API. Each test names the seed section it covers.
//!
//! DevClaw's numbered layers map onto strata's six: its core identity and safety rules are the
//! signed layers 1-2; custom instructions, bootstrap files, business context, temporal and
//! runtime information are layer 3; thinking hints and skills layer 4; conversation history
//! layer 5; memory layer 6. Its `token_budget` keys (`system`, `skills`, `history`, `memory`)
//! are read as the budgets of layers 3, 4, 5 and 6.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_assembler::assemble::{DropReason, Report, SectionStatus};
use strata_assembler::memory::{NewMemory, SearchOptions};
use strata_assembler::prelude::*;
use strata_assembler::session::{ActiveSkill, ThinkingLevel};
use strata_core::{PromptMode, RuntimeLayer, Section, Stability};
use strata_registry::{ContributionContext, Contributor, ContributorError, ContributorMeta};

fn builder(dir: &Path) -> RuntimeBuilder {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
}

fn runtime(dir: &Path) -> Runtime {
    builder(dir).build().unwrap()
}

/// A runtime with a workspace, configured by `strata.toml` text `toml`.
fn configured(dir: &Path, toml: &str) -> Runtime {
    let path = dir.join("strata.toml");
    std::fs::write(&path, toml).unwrap();
    builder(dir)
        .workspace(dir)
        .config_file(&path)
        .unwrap()
        .build()
        .unwrap()
}

fn kept(turn: &PreparedTurn) -> Vec<String> {
    turn.report()
        .sections
        .iter()
        .filter(|s| matches!(s.status, SectionStatus::Kept | SectionStatus::Cut { .. }))
        .map(|s| s.id.as_str().to_owned())
        .collect()
}

fn status<'a>(r: &'a Report, id: &str) -> &'a SectionStatus {
    &r.sections
        .iter()
        .find(|s| s.id.as_str() == id)
        .unwrap_or_else(|| panic!("no section {id} in {:?}", r.sections))
        .status
}

fn layer_budget(r: &Report, name: &str) -> Option<u64> {
    r.layers
        .iter()
        .find(|l| serde_json::to_value(l.layer).unwrap() == name)
        .unwrap()
        .budget
}

/// DevClaw, "Token Budgets" and "Configuration: token_budget" (`total`, `system`, `skills`,
/// `history`, `memory`): each key becomes its layer's budget, and a layer over its budget
/// loses sections for that budget, whatever room the whole prompt has left.
#[test]
fn per_layer_token_budgets_from_devclaws_keys() {
    let dir = tempfile::tempdir().unwrap();
    let rt = configured(
        dir.path(),
        "[budget]\ntotal = 16384\nsystem = 3000\nskills = 700\nhistory = 900\nmemory = 120\n",
    );
    let agent = rt.agent().agent_id().to_owned();
    for i in 0..4 {
        rt.remember(NewMemory::new(
            &agent,
            format!(
                "Incident {i}: the payment queue stalled for {i} minutes. {}",
                "Detail. ".repeat(20)
            ),
        ))
        .unwrap();
    }
    let turn = rt
        .session("devclaw")
        .prepare("Why did the payment queue stall?", &TurnOptions::default())
        .unwrap();
    let r = turn.report();
    assert_eq!(r.total_tokens, 16_384);
    assert_eq!(layer_budget(r, "shared"), Some(3000));
    assert_eq!(layer_budget(r, "delegated"), Some(700));
    assert_eq!(layer_budget(r, "working_memory"), Some(900));
    assert_eq!(layer_budget(r, "long_term_memory"), Some(120));
    let ltm = r
        .layers
        .iter()
        .find(|l| serde_json::to_value(l.layer).unwrap() == "long_term_memory")
        .unwrap();
    assert!(ltm.tokens <= 120, "{ltm:?}");
    assert!(
        r.sections.iter().any(|s| matches!(
            s.status,
            SectionStatus::Dropped {
                reason: DropReason::LayerBudget
            }
        )),
        "{:?}",
        r.sections
    );
}

/// DevClaw, "Budget Enforcement: 1. Layers sorted by priority 2. Lower priority layers trimmed
/// first 3. Truncation indicated in output": under a tight budget the less important of two
/// sections gives way while the more important one stays whole, and the request shows where
/// text was left out.
#[test]
fn the_least_important_content_is_trimmed_first_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let note = |id: &str, priority: u32, word: &str| {
        Section::builder(
            RuntimeLayer::LongTermMemory,
            id,
            format!("{word} ").repeat(1500),
        )
        .unwrap()
        .priority(priority)
        .build()
    };
    let o = TurnOptions {
        sections: vec![
            note("note/minor", 10, "minor"),
            note("note/major", 90, "major"),
        ],
        ..TurnOptions::default()
    };
    let turn = rt.session("devclaw").prepare("Summarise.", &o).unwrap();
    let r = turn.report();
    assert!(
        matches!(status(r, "note/major"), SectionStatus::Kept),
        "{:?}",
        status(r, "note/major")
    );
    assert!(
        matches!(
            status(r, "note/minor"),
            SectionStatus::Cut { .. } | SectionStatus::Dropped { .. }
        ),
        "{:?}",
        status(r, "note/minor")
    );
    assert!(
        r.used_tokens <= r.prompt_budget,
        "{} > {}",
        r.used_tokens,
        r.prompt_budget
    );
    let body = turn.body.to_string();
    // A cut section says so in its header; a dropped one leaves an omission marker.
    assert!(
        body.contains(r#"id=\"note/minor\" authority=\"data\" source=\"caller\" encoding=\"escaped\" cut=\"true\""#)
            || body.contains(r#"<strata:omitted layer=\"6\" id=\"note/minor\""#),
        "no truncation marker in {body}"
    );
    assert!(!body.contains(
        r#"id=\"note/major\" authority=\"data\" source=\"caller\" encoding=\"escaped\" cut"#
    ));
}

/// DevClaw, "Minimal Prompt Mode": "For scheduled jobs ... Includes only: core identity, safety
/// rules, temporal context, custom instructions. Skips: bootstrap files, memory search, skills,
/// conversation history."
#[test]
fn the_scheduled_mode_keeps_only_what_a_scheduled_job_needs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("AGENTS.md"),
        "Deploy with the blue pipeline.",
    )
    .unwrap();
    let rt = configured(
        dir.path(),
        "[workspace]\ncustom_instructions = \"Post the nightly report to #ops.\"\n",
    );
    let agent = rt.agent().agent_id().to_owned();
    rt.remember(NewMemory::new(
        &agent,
        "The nightly report lists failed builds.",
    ))
    .unwrap();
    let s = rt.session("cron");
    s.prepare(
        "An earlier question about the nightly report.",
        &TurnOptions::default(),
    )
    .unwrap();
    s.record_reply(&Reply::text("An earlier answer.")).unwrap();
    let o = TurnOptions {
        mode: Some(PromptMode::Scheduled),
        skills: vec![ActiveSkill {
            id: Arc::from("triage"),
            instructions: "Triage each failure by owner.".into(),
        }],
        ..TurnOptions::default()
    };
    let turn = s.prepare("Write the nightly report.", &o).unwrap();
    let body = turn.body.to_string();
    let system = turn.body["system"][0]["text"].as_str().unwrap();
    assert_eq!(
        system,
        rt.agent().identity_text(),
        "identity and safety rules"
    );
    assert!(system.contains("core.safety"));
    assert!(kept(&turn).iter().any(|k| k == "time"), "{:?}", kept(&turn));
    assert!(body.contains("Post the nightly report to #ops."), "{body}");
    for skipped in [
        "Deploy with the blue pipeline.",
        "lists failed builds",
        "Triage each failure",
        "An earlier question",
    ] {
        assert!(
            !body.contains(skipped),
            "`{skipped}` in a scheduled prompt: {body}"
        );
    }
}

/// DevClaw, "LayerBootstrap (15)": `SOUL.md`, `AGENTS.md`, `TOOLS.md` and `COMMANDS.md` from
/// the workspace, each its own layer-3 section, placed in DevClaw's listing order (the order of
/// the bootstrap contributor's file list, each file one priority step below the one before).
#[test]
fn bootstrap_files_are_read_from_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("COMMANDS.md", "Run /deploy to ship."),
        ("TOOLS.md", "The linter is called tidy."),
        ("AGENTS.md", "The reviewer agent checks diffs."),
        ("SOUL.md", "Be terse."),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let rt = configured(dir.path(), "");
    let turn = rt
        .session("devclaw")
        .prepare("Hello.", &TurnOptions::default())
        .unwrap();
    let body = turn.body.to_string();
    let at = |name: &str| {
        body.find(&format!("id=\\\"bootstrap/{name}\\\""))
            .unwrap_or_else(|| panic!("no {name} in {body}"))
    };
    let order = ["SOUL.md", "AGENTS.md", "TOOLS.md", "COMMANDS.md"];
    for w in order.windows(2) {
        assert!(at(w[0]) < at(w[1]), "{} after {} in {body}", w[0], w[1]);
    }
    let reported: Vec<&str> = turn
        .report()
        .sections
        .iter()
        .filter_map(|s| s.id.as_str().strip_prefix("bootstrap/"))
        .collect();
    assert_eq!(reported, order, "the report lists them in that order too");
    for s in &turn.report().sections {
        if s.id.as_str().starts_with("bootstrap/") {
            assert_eq!(serde_json::to_value(s.layer).unwrap(), "shared", "{s:?}");
        }
    }
    assert!(turn.body.to_string().contains("The linter is called tidy."));
}

/// DevClaw, "LayerThinking (12)" (extended thinking hints from `/think`), "LayerSkills (40)"
/// (active skill instructions), "LayerTemporal (60)" (date, time zone, day of week) and
/// "LayerRuntime (80)" (agent, model, OS): each reaches the turn from its per-turn input.
#[test]
fn thinking_skills_time_and_runtime_layers() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let o = TurnOptions {
        thinking: Some(ThinkingLevel::High),
        skills: vec![ActiveSkill {
            id: Arc::from("sql-review"),
            instructions: "Check every query for a missing index.".into(),
        }],
        ..TurnOptions::default()
    };
    let turn = rt.session("devclaw").prepare("Review this.", &o).unwrap();
    let body = turn.body.to_string();
    assert!(
        body.contains("Check every query for a missing index."),
        "{body}"
    );
    let ids = kept(&turn);
    assert!(ids.iter().any(|k| k.contains("thinking")), "{ids:?}");
    assert!(
        body.contains("Day of week") && body.contains("Time zone"),
        "{body}"
    );
    assert!(
        body.contains("Agent&#58; ada-demo") && body.contains("Model&#58; test-model"),
        "{body}"
    );
    let plain = rt
        .session("devclaw-2")
        .prepare("Review this.", &TurnOptions::default())
        .unwrap();
    assert!(!kept(&plain).iter().any(|k| k.contains("thinking")));
}

/// One of two contributors that only finish when both run at the same time.
struct Rendezvous {
    id: &'static str,
    arrived: Arc<AtomicUsize>,
}

impl Contributor for Rendezvous {
    fn id(&self) -> &str {
        self.id
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            stability: Stability::Dynamic,
            timeout: Duration::from_secs(5),
            ..ContributorMeta::default()
        }
    }
    fn contribute(&self, ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.arrived.load(Ordering::SeqCst) < 2 {
            if Instant::now() > deadline {
                return Err(ContributorError::Source("ran alone".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = ctx;
        Ok(vec![Section::builder(
            RuntimeLayer::Shared,
            self.id,
            format!("{} loaded", self.id),
        )
        .unwrap()
        .build()])
    }
}

/// DevClaw, "Concurrent Loading": heavy layers load at the same time. Two contributors that
/// each wait for the other both finish, which they could not if the registry ran them one
/// after the other.
#[test]
fn contributors_load_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let arrived = Arc::new(AtomicUsize::new(0));
    for id in ["slow-a", "slow-b"] {
        rt.registry()
            .register(Arc::new(Rendezvous {
                id,
                arrived: arrived.clone(),
            }))
            .unwrap();
    }
    let turn = rt
        .session("devclaw")
        .prepare("Hello.", &TurnOptions::default())
        .unwrap();
    assert!(
        turn.report().omissions.is_empty(),
        "{:?}",
        turn.report().omissions
    );
    let body = turn.body.to_string();
    assert!(
        body.contains("slow-a loaded") && body.contains("slow-b loaded"),
        "{body}"
    );
}

/// DevClaw, "LayerMemory (50): Hybrid search results (vector + BM25)": the runtime's memory
/// search fuses a lexical and a vector ranking (each hit says its rank in both), and the turn
/// carries the hits.
#[test]
fn memory_search_is_hybrid_bm25_and_vector() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let agent = rt.agent().agent_id().to_owned();
    for text in [
        "The staging cluster is rebuilt every Sunday night.",
        "Lunch orders close at eleven.",
        "Grafana dashboards live in the observability repo.",
    ] {
        rt.remember(NewMemory::new(&agent, text)).unwrap();
    }
    let query = "When is the staging cluster rebuilt?";
    let hits = rt.memory().search(query, &SearchOptions::top(3)).unwrap();
    let top = &hits[0];
    assert!(
        top.record.content.as_str().contains("staging cluster"),
        "{hits:?}"
    );
    assert_eq!(top.lexical_rank, Some(1), "{top:?}");
    assert!(top.vector_rank.is_some(), "{top:?}");
    let turn = rt
        .session("devclaw")
        .prepare(query, &TurnOptions::default())
        .unwrap();
    assert!(turn.body.to_string().contains("rebuilt every Sunday night"));
}

/// DevClaw, "Layer Caching: Memory 30s" and "Cache Flow: 1. Check cache for fresh result": a
/// query's hits are kept, a new query searches again, and a memory added through the runtime
/// drops the kept hits.
#[test]
fn memory_search_hits_are_kept_per_query_until_a_memory_is_added() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let agent = rt.agent().agent_id().to_owned();
    rt.remember(NewMemory::new(
        &agent,
        "The cafeteria opens for breakfast at 7:30.",
    ))
    .unwrap();
    let s = rt.session("devclaw");
    let ask = |q: &str| {
        let t = s.prepare(q, &TurnOptions::default()).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t.body.to_string()
    };
    assert!(ask("When does the cafeteria open for breakfast?").contains("7:30"));
    // Written behind the runtime's back: the same query is answered from the kept hits.
    rt.memory()
        .put(NewMemory::new(
            &agent,
            "The cafeteria breakfast moved to 8:15 on Fridays.",
        ))
        .unwrap();
    let cached = ask("When does the cafeteria open for breakfast?");
    assert!(
        cached.contains("7:30") && !cached.contains("8:15"),
        "{cached}"
    );
    // Another query searches again.
    assert!(ask("Cafeteria breakfast on Fridays?").contains("8:15"));
    // A memory added through the runtime drops the kept hits.
    rt.remember(NewMemory::new(
        &agent,
        "The cafeteria serves breakfast until 10:00.",
    ))
    .unwrap();
    let fresh = ask("When does the cafeteria open for breakfast?");
    assert!(fresh.contains("8:15") && fresh.contains("10:00"), "{fresh}");
}

/// DevClaw, "LayerBusiness (20)" (`business_context` from the session's configuration): the
/// platform's business context for the session reaches each turn as the `business-context`
/// section of layer 3, in the stable part of the context (so a provider's prompt cache keeps
/// hitting while it does not change), and a change of it is a change of the standing prompt.
/// strata takes it with each turn (the service and the command line have the same field): the
/// session log keeps the conversation, the platform keeps its configuration. Verifies ADR-0050.
#[test]
fn business_context_is_layer_three_and_stable() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("devclaw");
    let with = |text: &str| TurnOptions {
        business_context: Some(text.into()),
        ..TurnOptions::default()
    };
    let a = s
        .prepare(
            "Which plan is the customer on?",
            &with("Customer: Acme, plan Enterprise."),
        )
        .unwrap();
    let section = a
        .report()
        .sections
        .iter()
        .find(|x| x.id.as_str() == "business-context")
        .unwrap_or_else(|| panic!("no business-context in {:?}", a.report().sections))
        .clone();
    assert_eq!(serde_json::to_value(section.layer).unwrap(), "shared");
    assert!(section.stable, "{section:?}");
    let stable = a.body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(stable.contains("plan Enterprise"), "{stable}");
    s.record_reply(&Reply::text("Enterprise.")).unwrap();
    // The same context: the same standing prompt, no event.
    let b = s
        .prepare(
            "And the renewal date?",
            &with("Customer: Acme, plan Enterprise."),
        )
        .unwrap();
    assert!(b.events.is_empty(), "{:?}", b.events);
    s.record_reply(&Reply::text("March.")).unwrap();
    let c = s
        .prepare("And now?", &with("Customer: Globex, plan Team."))
        .unwrap();
    assert!(
        c.events.iter().any(|e| matches!(
            e,
            strata_assembler::session::TurnEvent::PromptUpdated { .. }
        )),
        "{:?}",
        c.events
    );
    let e = s.prepare("Hi", &with(" \n ")).unwrap_err().to_string();
    assert!(e.contains("business context: is empty"), "{e}");
}

/// A layer-3 source whose text is the number of times it was read, cached with the cache's
/// time to live.
struct Feed(Arc<AtomicUsize>);

impl Contributor for Feed {
    fn id(&self) -> &str {
        "team.feed"
    }
    fn layer(&self) -> RuntimeLayer {
        RuntimeLayer::Shared
    }
    fn meta(&self) -> ContributorMeta {
        ContributorMeta {
            stability: Stability::Stable,
            ..ContributorMeta::default()
        }
    }
    fn cache_policy(&self) -> strata_registry::CachePolicy {
        strata_registry::CachePolicy::Ttl(None)
    }
    fn contribute(&self, _ctx: &ContributionContext) -> Result<Vec<Section>, ContributorError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(vec![Section::builder(
            RuntimeLayer::Shared,
            "feed",
            format!("Feed reading number {n}."),
        )
        .unwrap()
        .build()])
    }
}

/// DevClaw, "Cache TTL" (`prompt_layer_cache_ttl: 30s`) and "TTL caches refreshed in the
/// background", through the session API on the runtime's clock: within the TTL a turn reuses
/// the cached text (the source is not read again); once it has expired, the next turn is
/// served the old text at once while a background refresh reads the source, and the turn after
/// the refresh has the new text.
#[test]
fn ttl_caches_are_refreshed_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(strata_registry::ManualClock::new(1_772_445_600_000));
    let rt = builder(dir.path()).clock(clock.clone()).build().unwrap();
    let reads = Arc::new(AtomicUsize::new(0));
    rt.registry()
        .register(Arc::new(Feed(reads.clone())))
        .unwrap();
    let s = rt.session("devclaw");
    let turn = |q: &str| {
        let t = s.prepare(q, &TurnOptions::default()).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t.body.to_string()
    };
    assert!(turn("One?").contains("Feed reading number 1."));
    clock.advance(Duration::from_secs(29));
    assert!(turn("Two?").contains("Feed reading number 1."));
    assert_eq!(reads.load(Ordering::SeqCst), 1, "read again within the TTL");
    clock.advance(Duration::from_secs(2));
    // Expired: the old text at once, the refresh in the background.
    assert!(turn("Three?").contains("Feed reading number 1."));
    assert!(rt.registry().wait_for_refreshes(Duration::from_secs(5)));
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert!(turn("Four?").contains("Feed reading number 2."));
    // The turn's time comes from the same clock, and so do the times the store stamps.
    let t = s.prepare("Five?", &TurnOptions::default()).unwrap();
    assert!(t.body.to_string().contains("2026-03-02"), "{}", t.body);
    let stamped: Vec<i64> = s.turns().unwrap().iter().map(|e| e.at_ms).collect();
    assert!(
        stamped
            .iter()
            .all(|&at| (1_772_445_600_000..=1_772_445_600_000 + 31_000).contains(&at)),
        "{stamped:?}"
    );
}
