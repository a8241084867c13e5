//! Conformance with the "Aleph" seed (its prompt system: a pipeline of prioritised layers,
//! stable and dynamic zones, section caching with invalidation and stats, assembly paths,
//! Full/Compact/Minimal modes, `aleph.toml`'s limits, the tool-usage grammar and memory
//! augmentation), driven through the session API. Each test names the seed section it covers.
//!
//! Where strata's model differs from Aleph's: Aleph's identity layers (soul, role, tools,
//! response format, language) are strata's signed layers 1-2, never runtime sections, so no
//! mode, path or cache invalidation can remove or replace them; a workspace `SOUL.md` is a
//! layer-3 file like any other. The wikilink graph of "MemoryAugmentationLayer" is wired into
//! the runtime when notes sit beside MEMORY.md; its session test is
//! `embeddings.rs::linked_notes_reach_the_session`. The layers whose text is each platform's
//! own (protocol tokens, heartbeat, operational guidelines, generation models, special
//! actions, skill mode) are `[[prompts]]` of `strata.toml`.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;
mod support;

use std::path::Path;
use std::sync::Arc;

use strata_assembler::assemble::{DropReason, SectionStatus};
use strata_assembler::memory::NewMemory;
use strata_assembler::prelude::*;
use strata_assembler::session::TurnEvent;
use strata_core::{AssemblyPath, PromptMode, RuntimeLayer, Section};
use strata_registry::builtins::Prompt;
use strata_registry::StandardSection;

/// 2026-03-02 10:00 UTC, a fixed clock for turns that compare bytes.
const NOW_MS: i64 = 1_772_445_600_000;

fn builder(dir: &Path) -> RuntimeBuilder {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .workspace(dir)
        .sqlite(dir.join("m.db"))
}

fn runtime(dir: &Path) -> Runtime {
    builder(dir).build().unwrap()
}

/// A runtime configured by `strata.toml` text `toml`.
fn configured(dir: &Path, toml: &str) -> Runtime {
    let path = dir.join("strata.toml");
    std::fs::write(&path, toml).unwrap();
    builder(dir).config_file(&path).unwrap().build().unwrap()
}

fn opts(mode: PromptMode, path: AssemblyPath) -> TurnOptions {
    TurnOptions {
        mode: Some(mode),
        path: Some(path),
        now_ms: Some(NOW_MS),
        ..TurnOptions::default()
    }
}

fn tool(name: &str) -> AnnouncedTool {
    AnnouncedTool::new(ToolName::new(name).unwrap(), "Announced.")
}

/// The ids of the sections a turn kept whole or cut.
fn kept(turn: &PreparedTurn) -> Vec<String> {
    turn.report()
        .sections
        .iter()
        .filter(|s| matches!(s.status, SectionStatus::Kept | SectionStatus::Cut { .. }))
        .map(|s| s.id.as_str().to_owned())
        .collect()
}

fn status<'a>(turn: &'a PreparedTurn, id: &str) -> &'a SectionStatus {
    &turn
        .report()
        .sections
        .iter()
        .find(|s| s.id.as_str() == id)
        .unwrap_or_else(|| panic!("no section {id} in {:?}", turn.report().sections))
        .status
}

/// Where `needle` first occurs in the turn's request body.
fn at(body: &str, needle: &str) -> usize {
    body.find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in {body}"))
}

/// A workspace with a bootstrap file and a memory index.
fn workspace(dir: &Path) {
    std::fs::write(dir.join("AGENTS.md"), "Deploy with the blue pipeline.").unwrap();
    std::fs::write(
        dir.join("MEMORY.md"),
        "- The release train leaves on Tuesdays.\n",
    )
    .unwrap();
}

/// Aleph, "29 Layers (sorted by priority)" and "The PromptPipeline executes layers in ascending
/// priority order (lowest number first)": strata keeps Aleph's numbers (a smaller seed number is
/// a higher strata priority) and places sections of one zone in that order: environment (300)
/// before runtime capabilities (400) before the operational template; temporal context (1720)
/// before the workspace files (1730) before the workspace hints (1735).
#[test]
fn sections_follow_the_seeds_priority_order() {
    use StandardSection as S;
    let seed_order = [
        S::Soul,
        S::AgentRole,
        S::WorkspaceProfile,
        S::Role,
        S::Environment,
        S::RuntimeCapabilities,
        S::ToolCatalog,
        S::ToolGuidance,
        S::Safety,
        S::ProtocolTokens,
        S::Heartbeat,
        S::OperationalGuidelines,
        S::CitationStandards,
        S::GenerationModels,
        S::SkillInstructions,
        S::SpecialActions,
        S::ResponseFormat,
        S::Guidelines,
        S::ThinkingGuidance,
        S::SkillMode,
        S::CustomInstructions,
        S::Language,
        S::InboundContext,
        S::VoiceMode,
        S::TemporalContext,
        S::BootstrapFiles,
        S::Memory,
        S::SessionContext,
    ];
    for w in seed_order.windows(2) {
        assert!(
            w[0].priority() > w[1].priority(),
            "{:?} must outrank {:?}",
            w[0],
            w[1]
        );
    }
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let turn = runtime(dir.path())
        .session("aleph")
        .prepare("Hello.", &opts(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    let body = turn.body.to_string();
    assert!(at(&body, "id=\\\"environment\\\"") < at(&body, "id=\\\"capabilities\\\""));
    assert!(at(&body, "id=\\\"capabilities\\\"") < at(&body, "id=\\\"template/"));
    assert!(at(&body, "id=\\\"time\\\"") < at(&body, "id=\\\"bootstrap/AGENTS.md\\\""));
    assert!(at(&body, "id=\\\"bootstrap/AGENTS.md\\\"") < at(&body, "id=\\\"workspace-hints\\\""));
}

/// Aleph, "Stable vs Dynamic Zones": the stable zone is "cached across turns" and the dynamic
/// zone "recomputed every request". The stable sections form the request's cached prefix (the
/// block with the provider's cache breakpoint), byte-identical on the next turn a minute later;
/// the dynamic ones (time, workspace files) follow it, and the time there changed.
#[test]
fn the_stable_zone_is_a_byte_identical_cached_prefix() {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let rt = runtime(dir.path());
    let s = rt.session("aleph");
    let first = s
        .prepare("First.", &opts(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    let later = TurnOptions {
        now_ms: Some(NOW_MS + 60_000),
        ..opts(PromptMode::Full, AssemblyPath::Soul)
    };
    let second = s.prepare("Second.", &later).unwrap();
    // The stable zone leads the first message; the dynamic zone leads the newest one.
    let zones = |t: &PreparedTurn| {
        let messages = t.body["messages"].as_array().unwrap();
        let first = &messages[0]["content"][0];
        assert!(
            first.get("cache_control").is_some(),
            "the stable zone ends at a cache breakpoint: {first}"
        );
        let newest = messages[messages.len() - 1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| {
                b.get("cache_control").is_none() && b["text"].to_string().contains("<strata:")
            })
            .unwrap()
            .clone();
        (
            first["text"].as_str().unwrap().to_owned(),
            newest["text"].as_str().unwrap().to_owned(),
        )
    };
    let (stable1, dynamic1) = zones(&first);
    let (stable2, dynamic2) = zones(&second);
    assert_eq!(stable1, stable2, "the stable zone changed between turns");
    assert_ne!(dynamic1, dynamic2, "the time is recomputed");
    assert!(stable1.contains("id=\"environment\"") && stable1.contains("id=\"template/"));
    assert!(dynamic1.contains("id=\"time\"") && dynamic1.contains("10:00"));
    assert!(dynamic2.contains("10:01"));
    assert!(dynamic1.contains("id=\"bootstrap/AGENTS.md\""));
    let flags: Vec<(String, bool)> = first
        .report()
        .sections
        .iter()
        .map(|s| (s.id.as_str().to_owned(), s.stable))
        .collect();
    assert!(flags.contains(&("environment".into(), true)), "{flags:?}");
    assert!(flags.contains(&("time".into(), false)), "{flags:?}");
    // The second turn's stable prefix is the first one's: the provider's prompt cache hits.
    assert!(!second
        .events
        .iter()
        .any(|e| matches!(e, TurnEvent::PromptUpdated { .. })));
}

/// Aleph, "Section Caching" (`cache_stats()` gives hits, misses and entries) and "Cache
/// invalidation triggers" (`invalidate("soul")`, `invalidate_all()`): a second turn is served
/// the stable sections from the cache; invalidating one contributor, then all, makes the next
/// turn compute them again.
#[test]
fn section_cache_stats_and_invalidation() {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let rt = runtime(dir.path());
    let cache = rt.registry().cache().unwrap().clone();
    let s = rt.session("aleph");
    let turn = |q: &str| {
        s.prepare(q, &opts(PromptMode::Full, AssemblyPath::Soul))
            .unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
    };
    turn("One.");
    let cold = cache.stats();
    assert!(cold.misses > 0 && cold.entries > 0, "{cold:?}");
    turn("One.");
    let warm = cache.stats();
    assert!(warm.hits > cold.hits, "{warm:?}");
    assert_eq!(warm.misses, cold.misses, "{warm:?}");

    assert_eq!(cache.invalidate_contributor("builtin.environment"), 1);
    turn("One.");
    let one = cache.stats();
    assert_eq!(
        one.misses,
        warm.misses + 1,
        "only the environment is recomputed: {one:?}"
    );
    assert!(one.invalidations > warm.invalidations);

    assert!(cache.invalidate_all() > 1);
    turn("One.");
    let all = cache.stats();
    assert!(all.misses > one.misses + 1, "{all:?}");
}

/// Aleph, "Cache invalidation triggers: Tool list change → invalidate tools": a turn announcing
/// another tool list gets the new tool definitions (the cached tool sections are keyed by the
/// tool list, so no stale list is served) and says that the stable prefix changed.
#[test]
fn a_tool_list_change_recomputes_the_tool_sections() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("aleph");
    let with = |tools: &[&str]| TurnOptions {
        tools: Some(tools.iter().map(|t| tool(t)).collect()),
        ..opts(PromptMode::Full, AssemblyPath::Basic)
    };
    let names = |t: &PreparedTurn| {
        t.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let a = s.prepare("List.", &with(&["search_memory"])).unwrap();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    let b = s
        .prepare("List.", &with(&["search_memory", "shell"]))
        .unwrap();
    assert_eq!(names(&a), ["search_memory"]);
    assert_eq!(names(&b), ["search_memory", "shell"]);
    assert!(b
        .events
        .iter()
        .any(|e| matches!(e, TurnEvent::PromptUpdated { .. })));
}

/// Aleph, "IdentityFilesLayer: SOUL.md" and "Stable vs Dynamic Zones" (the dynamic zone is
/// "recomputed every request"): a workspace `SOUL.md` edited between two turns reaches the very
/// next turn with no invalidation call (Aleph's `invalidate("soul")` is not needed). strata
/// caches the bootstrap files with a validator, a digest of their contents checked on every
/// gathering: a turn with the files unchanged is served them from the cache, and the turn after
/// an edit reads them again, and only them. In strata the file is layer-3 data; the agent's
/// signed identity (the system channel) and the stable zone stay as they were.
#[test]
fn a_soul_file_change_reaches_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("SOUL.md"),
        "Speak like a lighthouse keeper.",
    )
    .unwrap();
    let rt = runtime(dir.path());
    let cache = rt.registry().cache().unwrap().clone();
    let s = rt.session("aleph");
    let turn = || {
        let t = s
            .prepare("Hi.", &opts(PromptMode::Full, AssemblyPath::Soul))
            .unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t
    };
    let a = turn();
    let cold = cache.stats();
    let same = turn();
    let warm = cache.stats();
    assert_eq!(
        warm.misses, cold.misses,
        "unchanged files are served from the cache: {warm:?}"
    );
    assert!(warm.hits > cold.hits, "{warm:?}");
    assert_eq!(warm.changed, 0, "{warm:?}");
    assert!(same.body.to_string().contains("lighthouse keeper"));

    std::fs::write(dir.path().join("SOUL.md"), "Speak like a ship's cook.").unwrap();
    let b = turn();
    let after = cache.stats();
    assert_eq!(
        (after.changed, after.misses),
        (1, warm.misses + 1),
        "the bootstrap files, and only they, are read again: {after:?}"
    );
    assert_eq!(
        after.invalidations, warm.invalidations,
        "nothing was invalidated by hand: {after:?}"
    );
    let (a_body, b_body) = (a.body.to_string(), b.body.to_string());
    assert!(a_body.contains("lighthouse keeper"));
    assert!(
        b_body.contains("ship&#39;s cook") || b_body.contains("ship's cook"),
        "{b_body}"
    );
    assert!(!b_body.contains("lighthouse"), "{b_body}");
    assert_eq!(a.body["system"], b.body["system"]);
    assert_eq!(
        a.body["system"][0]["text"].as_str().unwrap(),
        rt.agent().identity_text()
    );
    let stable_zone = |t: &PreparedTurn| t.body["messages"][0]["content"][0].clone();
    assert!(stable_zone(&a).get("cache_control").is_some());
    assert_eq!(stable_zone(&a), stable_zone(&same));
    assert_eq!(stable_zone(&a), stable_zone(&b));
}

/// Aleph, "Assembly Paths": Basic carries configuration and the tool list only; Cached only the
/// pre-cached stable prefix; Hydration announces the tools retrieved for the turn; Context
/// uses the resolved context (and refuses a turn without one); Soul, the default, carries it
/// all.
#[test]
fn assembly_paths_select_their_sections() {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let rt = builder(dir.path())
        .tools(vec![tool("file_read"), tool("shell")])
        .build()
        .unwrap();
    let s = rt.session("aleph");
    let ask = |o: &TurnOptions| {
        let t = s.prepare("Where is the deploy guide?", o).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t
    };
    let soul = ask(&TurnOptions::default());
    let soul_ids = kept(&soul);
    for id in ["environment", "time", "bootstrap/AGENTS.md", "memory-index"] {
        assert!(soul_ids.iter().any(|k| k == id), "{id} not in {soul_ids:?}");
    }
    let basic = kept(&ask(&opts(PromptMode::Full, AssemblyPath::Basic)));
    assert!(
        basic.iter().all(|k| k.starts_with("turn/")),
        "basic: only the conversation's newest turn besides config and tools: {basic:?}"
    );
    let cached = ask(&opts(PromptMode::Full, AssemblyPath::Cached));
    for s in &cached.report().sections {
        if matches!(s.status, SectionStatus::Kept) && !s.id.as_str().starts_with("turn/") {
            assert!(s.stable, "cached path kept dynamic {s:?}");
        }
    }
    assert!(kept(&cached).iter().any(|k| k == "environment"));
    let hydration = ask(&TurnOptions {
        retrieved_tools: Some(vec![tool("shell")]),
        ..opts(PromptMode::Full, AssemblyPath::Hydration)
    });
    assert_eq!(hydration.body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(hydration.body["tools"][0]["name"], "shell");
    assert!(
        s.prepare("Q", &opts(PromptMode::Full, AssemblyPath::Context))
            .is_err(),
        "the context path needs a resolved context"
    );
    let resolved = Section::builder(
        RuntimeLayer::Delegated,
        "resolved/ticket",
        "Ticket 42: the deploy guide moved to docs/deploy.md.",
    )
    .unwrap()
    .build();
    let context = ask(&TurnOptions {
        resolved_context: vec![resolved],
        ..opts(PromptMode::Full, AssemblyPath::Context)
    });
    assert!(context.body.to_string().contains("Ticket 42"));
}

/// Aleph, "Thinking Modes": Full lets every layer take part; Compact leaves out the heavy ones
/// (runtime context, environment, runtime capabilities ...) but keeps workspace files and
/// memory; Minimal keeps only the core (identity, tools, response format, language: all signed
/// in strata, so the system channel is the same in every mode).
#[test]
fn full_compact_and_minimal_modes() {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let rt = runtime(dir.path());
    let s = rt.session("aleph");
    let ask = |m: PromptMode| {
        let t = s
            .prepare("What is new?", &opts(m, AssemblyPath::Soul))
            .unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t
    };
    let full = ask(PromptMode::Full);
    let compact = ask(PromptMode::Compact);
    let minimal = ask(PromptMode::Minimal);
    let (f, c, m) = (kept(&full), kept(&compact), kept(&minimal));
    for heavy in ["environment", "capabilities", "runtime", "time"] {
        assert!(f.iter().any(|k| k == heavy), "full lacks {heavy}: {f:?}");
        assert!(
            !c.iter().any(|k| k == heavy),
            "compact keeps {heavy}: {c:?}"
        );
    }
    for light in ["bootstrap/AGENTS.md", "memory-index"] {
        assert!(c.iter().any(|k| k == light), "compact lacks {light}: {c:?}");
    }
    assert!(
        m.iter().all(|k| k.starts_with("turn/")),
        "minimal kept more than the core: {m:?}"
    );
    assert_eq!(full.body["system"], minimal.body["system"]);
    assert_eq!(full.body["system"], compact.body["system"]);
}

/// Aleph, "Configuration" (`default_mode`, `max_total_chars`, `protected_priorities`,
/// `[thinker.memory]` limits) read from `strata.toml`: the default mode applies to a turn that
/// names none, the prompt stays within the character cap, and a section with a protected
/// priority survives the budget pressure that drops an unprotected one of higher priority.
#[test]
fn toml_config_sets_mode_caps_and_protected_priorities() {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let rt = configured(
        dir.path(),
        "[prompt]\ndefault_mode = \"compact\"\nmax_total_chars = 16000\nprotected_priorities = [7]\n",
    );
    let big = |id: &str, priority: u32, word: &str| {
        Section::builder(RuntimeLayer::Shared, id, format!("{word} ").repeat(1200))
            .unwrap()
            .priority(priority)
            .build()
    };
    let o = TurnOptions {
        sections: vec![big("note/low", 7, "alpha"), big("note/high", 9, "beta")],
        now_ms: Some(NOW_MS),
        ..TurnOptions::default()
    };
    let turn = rt.session("aleph").prepare("Go.", &o).unwrap();
    let r = turn.report();
    assert_eq!(r.max_total_chars, Some(16_000));
    assert!(r.chars <= 16_000, "{} chars", r.chars);
    assert!(
        !kept(&turn).iter().any(|k| k == "environment"),
        "default_mode = compact"
    );
    assert!(
        matches!(status(&turn, "note/low"), SectionStatus::Kept),
        "{:?}",
        status(&turn, "note/low")
    );
    assert!(
        !matches!(status(&turn, "note/high"), SectionStatus::Kept),
        "{:?}",
        status(&turn, "note/high")
    );

    // The same turn without the protection: the lower priority goes first.
    let dir2 = tempfile::tempdir().unwrap();
    let plain = configured(
        dir2.path(),
        "[prompt]\nmax_total_chars = 16000\nprotected_priorities = []\n",
    );
    let turn = plain.session("aleph").prepare("Go.", &o).unwrap();
    assert!(
        matches!(status(&turn, "note/high"), SectionStatus::Kept),
        "{:?}",
        status(&turn, "note/high")
    );
    assert!(
        matches!(
            status(&turn, "note/low"),
            SectionStatus::Cut { .. }
                | SectionStatus::Dropped {
                    reason: DropReason::Budget | DropReason::MaxTotalChars
                }
        ),
        "{:?}",
        status(&turn, "note/low")
    );
}

/// Aleph, "MemoryAugmentationLayer: 1. Structured index — reads .aleph/MEMORY.md, truncated to
/// 200 lines" with `max_memory_lines`: the index is read from the configured file and cut to
/// the configured number of lines.
#[test]
fn the_memory_index_is_read_within_its_line_limit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".aleph")).unwrap();
    let lines: String = (1..=6).map(|i| format!("- note line {i}\n")).collect();
    std::fs::write(dir.path().join(".aleph/MEMORY.md"), lines).unwrap();
    let rt = configured(
        dir.path(),
        "[memory]\nfile = \".aleph/MEMORY.md\"\nmax_lines = 3\n",
    );
    let turn = rt
        .session("aleph")
        .prepare("Notes?", &TurnOptions::default())
        .unwrap();
    let body = turn.body.to_string();
    assert!(body.contains("note line 3"), "{body}");
    assert!(!body.contains("note line 4"), "{body}");
    let index = turn
        .report()
        .sections
        .iter()
        .find(|s| s.id.as_str() == "memory-index")
        .unwrap();
    assert_eq!(
        serde_json::to_value(index.layer).unwrap(),
        "long_term_memory"
    );
}

/// Aleph, "MemoryAugmentationLayer: 2. Vector retrieval — top-K semantic search results": the
/// runtime's memories per turn bound the search results that reach the turn, best first.
#[test]
fn memory_search_gives_the_top_k() {
    let dir = tempfile::tempdir().unwrap();
    let rt = builder(dir.path()).memories_per_turn(2).build().unwrap();
    let agent = rt.agent().agent_id().to_owned();
    for i in 0..5 {
        rt.remember(NewMemory::new(
            &agent,
            format!("Rollout note {i}: the canary stage of a rollout lasts {i} hours."),
        ))
        .unwrap();
    }
    let turn = rt
        .session("aleph")
        .prepare(
            "How long is the canary stage of a rollout?",
            &TurnOptions::default(),
        )
        .unwrap();
    let mems: Vec<String> = kept(&turn)
        .into_iter()
        .filter(|k| k.starts_with("mem/"))
        .collect();
    assert_eq!(mems.len(), 2, "{mems:?}");
}

/// Aleph, "ToolUsageGrammarLayer": guidelines come from each tool's `prefer_for` and
/// `prefer_over` hints, with no hard-coded rule. In strata the hints are part of the signed
/// definition, so the grammar is signed text in the system channel; a definition without hints
/// has none.
#[test]
fn the_tool_usage_grammar_comes_from_the_tools_hints() {
    let with_hints = support::agent_from_definition(
        "id = \"g\"\nname = \"G\"\nversion = 1\n[core]\nidentity = \"You are G.\"\n\
         [[core.tools]]\nname = \"grep\"\ndescription = \"Search text.\"\n\
         prefer_for = [\"searching file contents\"]\nprefer_over = [\"shell\"]\n\
         [[core.tools]]\nname = \"shell\"\ndescription = \"Run a command.\"\n",
    );
    let without = support::agent_from_definition(
        "id = \"g\"\nname = \"G\"\nversion = 1\n[core]\nidentity = \"You are G.\"\n\
         [[core.tools]]\nname = \"grep\"\ndescription = \"Search text.\"\n\
         [[core.tools]]\nname = \"shell\"\ndescription = \"Run a command.\"\n",
    );
    let system = |agent: VerifiedAgent| {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::builder(agent)
            .provider(Provider::Anthropic, "test-model")
            .max_tokens(256)
            .sqlite(dir.path().join("m.db"))
            .build()
            .unwrap();
        let t = rt
            .session("g")
            .prepare("Find TODOs.", &TurnOptions::default())
            .unwrap();
        t.body["system"][0]["text"].as_str().unwrap().to_owned()
    };
    let hinted = system(with_hints);
    assert!(
        hinted.contains("prefer `grep` for searching file contents"),
        "{hinted}"
    );
    assert!(hinted.contains("prefer `grep` over `shell`"), "{hinted}");
    assert!(!system(without).contains("prefer"));
}

/// Aleph, "Cache invalidation triggers: Session reset": the reset session starts over, and
/// another session's next turn is still served its workspace sections from the cache.
#[test]
fn resetting_one_session_keeps_the_others_cached_sections() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("AGENTS.md"),
        "Deploy with the blue pipeline.",
    )
    .unwrap();
    let rt = runtime(dir.path());
    let cache = rt.registry().cache().unwrap().clone();
    let a = rt.session("a");
    let b = rt.session("b");
    a.prepare("First question of a.", &TurnOptions::default())
        .unwrap();
    b.prepare("First question of b.", &TurnOptions::default())
        .unwrap();
    let before = cache.stats();
    assert!(before.entries > 0, "{before:?}");

    assert!(a.reset().unwrap() > 0);
    let after_reset = cache.stats();
    assert_eq!(after_reset.entries, before.entries, "{after_reset:?}");
    assert_eq!(after_reset.invalidations, before.invalidations);

    let turn = b
        .prepare("Second question of b.", &TurnOptions::default())
        .unwrap();
    let after = cache.stats();
    // Only the memory search, cached by its query, is computed again for the new message.
    assert_eq!(after.misses, after_reset.misses + 1, "{after:?}");
    assert!(after.hits > after_reset.hits, "{after:?}");
    assert!(turn
        .body
        .to_string()
        .contains("Deploy with the blue pipeline."));
    // The reset session holds nothing of its old conversation.
    let fresh = a.prepare("A new start.", &TurnOptions::default()).unwrap();
    assert!(!fresh.body.to_string().contains("First question of a."));
}

/// Aleph, "Thinking Modes: Compact — Excludes 14 heavy layers (... protocol tokens, heartbeat,
/// operational guidelines, citation standards, generation models, skill instructions, special
/// actions ...)": strata has no built-in text for these layers; a runtime registers it as a
/// prompt of the layer's kind, which then takes part in the full mode and not in the compact
/// or minimal ones.
#[test]
fn heavy_layers_registered_as_prompts_follow_the_modes() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    for (id, kind, text) in [
        (
            "heartbeat",
            StandardSection::Heartbeat,
            "Send a keep-alive every minute.",
        ),
        (
            "protocol",
            StandardSection::ProtocolTokens,
            "Frame calls as JSON-RPC 2.0.",
        ),
        (
            "media",
            StandardSection::GenerationModels,
            "Images: the sketch model.",
        ),
    ] {
        rt.registry()
            .register(Arc::new(Prompt::new(id, RuntimeLayer::Shared, kind, text)))
            .unwrap();
    }
    let s = rt.session("aleph");
    let ask = |m: PromptMode| {
        let t = s.prepare("Hi.", &opts(m, AssemblyPath::Soul)).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t.body.to_string()
    };
    let full = ask(PromptMode::Full);
    for text in ["keep-alive", "JSON-RPC 2.0", "the sketch model"] {
        assert!(full.contains(text), "full lacks {text}");
    }
    for m in [PromptMode::Compact, PromptMode::Minimal] {
        let body = ask(m);
        for text in ["keep-alive", "JSON-RPC 2.0", "the sketch model"] {
            assert!(!body.contains(text), "{m:?} keeps {text}");
        }
    }
}

/// Aleph, "ProtocolTokensLayer (700)", "HeartbeatLayer (710)", "OperationalGuidelinesLayer
/// (800)", "GenerationModelsLayer (1000)", "SpecialActionsLayer (1100)" and "SkillModeLayer
/// (1400)": strata has no built-in text for these (it is each platform's own), so a runtime
/// writes it in `strata.toml` as `[[prompts]]` of that kind. Each becomes a runtime section
/// of source `config` in its layer (3, or 4 for skill mode), placed in Aleph's priority order,
/// taking part in full mode and left out in compact mode as Aleph's "Compact excludes 14
/// heavy layers" says. Verifies ADR-0050.
#[test]
fn the_platforms_own_layers_come_from_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let kinds = [
        (
            "protocol_tokens",
            "Reply NO_REPLY when nothing needs saying.",
        ),
        ("heartbeat", "On a heartbeat poll, answer HEARTBEAT_OK."),
        (
            "operational_guidelines",
            "Never restart a service during business hours.",
        ),
        (
            "generation_models",
            "Images come from pixel-2 and there is no audio model.",
        ),
        (
            "special_actions",
            "Write REMIND then the text to set a reminder.",
        ),
        ("skill_mode", "Follow the active skill's steps in order."),
    ];
    let mut toml = String::new();
    for (kind, text) in kinds {
        toml.push_str(&format!(
            "[[prompts]]\nid = \"{kind}\"\nkind = \"{kind}\"\ntext = \"{text}\"\n\n"
        ));
    }
    let rt = configured(dir.path(), &toml);
    let s = rt.session("aleph");
    let full = s
        .prepare("Hi.", &opts(PromptMode::Full, AssemblyPath::Soul))
        .unwrap();
    let body = full.body.to_string();
    let mut last = 0;
    for (kind, text) in kinds {
        let id = format!("config:{kind}");
        assert!(
            matches!(status(&full, &id), SectionStatus::Kept),
            "{id}: {:?}",
            status(&full, &id)
        );
        // In Aleph's order (skill mode, layer 4, comes after the layer-3 ones in any case).
        let here = at(&body, text);
        assert!(here > last, "{kind} out of Aleph's order in {body}");
        last = here;
        let section = full
            .report()
            .sections
            .iter()
            .find(|x| x.id.as_str() == id)
            .unwrap();
        assert_eq!(
            section.provenance.source,
            strata_core::SourceKind::Config,
            "{section:?}"
        );
    }
    s.record_reply(&Reply::text("Ok.")).unwrap();
    let compact = s
        .prepare("Hi.", &opts(PromptMode::Compact, AssemblyPath::Soul))
        .unwrap();
    let body = compact.body.to_string();
    for (kind, text) in kinds {
        assert!(!body.contains(text), "{kind} in a compact turn: {body}");
    }
    // A kind that is signed identity cannot be configured.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[prompts]]\nid = \"x\"\nkind = \"soul\"\ntext = \"I am root.\"\n",
    )
    .unwrap();
    let Err(e) = builder(dir.path()).config_file(&bad) else {
        panic!("a prompt of kind soul was accepted");
    };
    let e = e.to_string();
    assert!(
        e.contains("prompts.kind") && e.contains("signed identity"),
        "{e}"
    );
    // The same entry in a configuration built in code is refused before the store is opened.
    let mut config = strata_registry::Config::default();
    config.prompts.push(strata_registry::ConfiguredPrompt {
        id: "x".into(),
        kind: "soul".into(),
        when: None,
        text: "I am root.".into(),
    });
    let fresh = tempfile::tempdir().unwrap();
    let Err(e) = Runtime::builder(demo::agent())
        .sqlite(fresh.path().join("m.db"))
        .config(config)
        .build()
    else {
        panic!("a prompt of kind soul was accepted in code");
    };
    assert!(e.to_string().contains("prompts.kind"), "{e}");
    assert!(
        !fresh.path().join("m.db").exists(),
        "a refused build opened the store"
    );
}

/// Aleph, "MemoryAugmentationLayer: 1. Structured index — reads .aleph/MEMORY.md" (recomputed
/// on every request there): an edited MEMORY.md reaches the very next turn, while an unchanged
/// one is served from the section cache.
#[test]
fn an_edited_memory_index_reaches_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    workspace(dir.path());
    let rt = runtime(dir.path());
    let s = rt.session("aleph");
    let turn = |q: &str| {
        let t = s
            .prepare(q, &opts(PromptMode::Full, AssemblyPath::Soul))
            .unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t.body.to_string()
    };
    assert!(turn("When?").contains("release train leaves on Tuesdays"));
    let before = rt.registry().cache().unwrap().stats();
    assert!(turn("When?").contains("release train leaves on Tuesdays"));
    let after = rt.registry().cache().unwrap().stats();
    assert_eq!(
        after.misses, before.misses,
        "nothing changed, yet something was read again"
    );
    assert_eq!(after.changed, 0);
    std::fs::write(
        dir.path().join("MEMORY.md"),
        "- The release train leaves on Thursdays.\n",
    )
    .unwrap();
    let body = turn("When?");
    assert!(body.contains("leaves on Thursdays"), "{body}");
    assert_eq!(rt.registry().cache().unwrap().stats().changed, 1);
    assert!(!body.contains("leaves on Tuesdays"), "{body}");
}
