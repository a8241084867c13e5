//! Conformance with the "Prompts System" seed (prompt tiers by context window, operational
//! modes with a template per mode and tier and a fallback, the prompt registry with its
//! sources and MCP prompts cleared on disconnect, the goal manager with checkpoints, locked
//! decisions, artifacts and progress, markers parsed from model output, and events), driven
//! through the session API. Each test names the seed section it covers.
//!
//! Where strata differs by design: the system channel holds only the signed text (I8), so the
//! goal, the skills and the mode's template lead the context that follows it instead; a
//! `LOCKED` marker in model output only proposes a lock, which the caller confirms (ADR-0011);
//! the last-resort template is the signed definition's fallback, not "Developer Tier 3".
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;
use std::sync::Arc;

use strata_assembler::prelude::*;
use strata_assembler::session::{ActiveSkill, GoalPriority, RegistryEvent, TurnEvent};
use strata_core::{OperationalMode, RuntimeLayer, SourceKind, Tier};
use strata_registry::builtins::Prompt;
use strata_registry::{ArtifactAction, ArtifactKind, CheckpointStatus, StandardSection};

fn runtime(dir: &Path) -> Runtime {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
        .build()
        .unwrap()
}

fn skill() -> ActiveSkill {
    ActiveSkill {
        id: Arc::from("release-checklist"),
        instructions: "Walk the release checklist step by step.".into(),
    }
}

fn window(w: u32) -> TurnOptions {
    TurnOptions {
        context_window: Some(w),
        ..TurnOptions::default()
    }
}

/// The id of the turn's operational-mode template section.
fn template(turn: &PreparedTurn) -> String {
    turn.report()
        .sections
        .iter()
        .find(|s| s.id.as_str().starts_with("template/"))
        .unwrap_or_else(|| panic!("no template in {:?}", turn.report().sections))
        .id
        .as_str()
        .to_owned()
}

/// Prompts System, "Prompt Tiers": Tier 1 for 2K and 4K windows, Tier 2 for 8K, Tier 3 for
/// 16K, Tier 4 for 32K, Tier 5 for 64K and 128K; and each tier's prompt budget (200, 500,
/// 1,000, 1,500 tokens) bounds the template that reaches the turn.
#[test]
fn the_context_window_sets_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("tiers");
    for (w, tier, budget) in [
        (2_048, Tier::T1, 200),
        (4_096, Tier::T1, 200),
        (8_192, Tier::T2, 500),
        (16_384, Tier::T3, 1000),
        (32_768, Tier::T4, 1500),
        (65_536, Tier::T5, 1500),
        (131_072, Tier::T5, 1500),
    ] {
        let turn = s.prepare("Hello.", &window(w)).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        assert_eq!(turn.report().tier, tier, "window {w}");
        let t = turn
            .report()
            .sections
            .iter()
            .find(|x| x.id.as_str().starts_with("template/"))
            .unwrap();
        assert!(t.tokens <= budget, "{t:?} over {budget}");
    }
}

/// Prompts System, "Operational Modes" ("Template: templates/<mode>/tier{1-5}.txt"), "Mode
/// Switching" and "Fallback Strategy": the turn's mode and tier pick the signed template; a
/// mode without a template for the tier takes its nearest tier; a mode without templates takes
/// the definition's fallback.
#[test]
fn each_mode_and_tier_has_its_template_with_a_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("modes");
    let ask = |mode: OperationalMode, w: u32| {
        let o = TurnOptions {
            operational_mode: Some(mode),
            ..window(w)
        };
        let t = s.prepare("Hello.", &o).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t
    };
    let a1 = ask(OperationalMode::Assistant, 4_096);
    assert_eq!(template(&a1), "template/assistant/tier1");
    assert!(a1
        .body
        .to_string()
        .contains("Answer in one or two sentences."));
    let a3 = ask(OperationalMode::Assistant, 16_384);
    assert_eq!(template(&a3), "template/assistant/tier3");
    assert!(a3.body.to_string().contains("say what you are unsure of"));
    let d3 = ask(OperationalMode::Developer, 16_384);
    assert_eq!(template(&d3), "template/developer/tier3");
    assert!(d3.body.to_string().contains("smallest change"));
    assert!(d3.events.iter().any(|e| matches!(
        e,
        TurnEvent::ModeChanged {
            from: OperationalMode::Assistant,
            to: OperationalMode::Developer
        }
    )));
    let d1 = ask(OperationalMode::Developer, 4_096);
    assert_eq!(template(&d1), "template/developer/tier3", "nearest tier");
    let p = ask(OperationalMode::Planning, 16_384);
    assert_eq!(template(&p), "template/fallback");
    assert!(p.body.to_string().contains("Help with the task at hand"));
}

/// Prompts System, "Prompt Registry" (`register`, `get`, `getByTag`, `getBySource`) and "MCP
/// Integration" ("When server disconnects, clear its prompts"): a skill prompt an MCP server
/// registered reaches a turn while its skill is active; clearing the server removes it, with
/// an event, and the static prompt stays.
#[test]
fn mcp_prompts_are_cleared_when_their_server_disconnects() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let registry = rt.registry();
    registry
        .register(Arc::new(Prompt::new(
            "core-mandates",
            RuntimeLayer::Delegated,
            StandardSection::OperationalGuidelines,
            "Mandate: never push to main directly.",
        )))
        .unwrap();
    registry
        .register(Arc::new(Prompt::mcp_skill(
            "github-mcp",
            "github-workflow",
            "Open a pull request for every change.",
        )))
        .unwrap();
    assert!(registry.get("mcp:github-mcp/github-workflow").is_some());
    let mcp: Vec<_> = registry
        .by_source(&SourceKind::Mcp("github-mcp".into()))
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(mcp, ["mcp:github-mcp/github-workflow"]);
    assert!(registry
        .by_tag("skills")
        .iter()
        .any(|r| r.id() == "mcp:github-mcp/github-workflow"));
    assert_eq!(
        registry.active_mcp_servers(),
        [Arc::<str>::from("github-mcp")]
    );

    let s = rt.session("registry");
    let o = TurnOptions {
        skills: vec![ActiveSkill {
            id: Arc::from("github-workflow"),
            instructions: "Use the GitHub workflow.".into(),
        }],
        ..TurnOptions::default()
    };
    let body = s.prepare("Ship it.", &o).unwrap().body.to_string();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    assert!(
        body.contains("Open a pull request for every change."),
        "{body}"
    );
    assert!(body.contains("never push to main directly"), "{body}");

    let events = registry.subscribe();
    let removed = registry.clear_mcp_server("github-mcp");
    assert_eq!(
        removed,
        [Arc::<str>::from("mcp:github-mcp/github-workflow")]
    );
    assert!(matches!(
        events.try_recv().unwrap(),
        RegistryEvent::McpServerCleared { .. }
    ));
    assert!(registry.active_mcp_servers().is_empty());
    let body = s.prepare("Ship it.", &o).unwrap().body.to_string();
    assert!(!body.contains("Open a pull request"), "{body}");
    assert!(body.contains("never push to main directly"));
}

/// Prompts System, "GoalManager" (goals, checkpoints, decisions with a rationale, locks,
/// artifacts, `getGoalProgress`) and "Goal in System Prompt": a session's goal book, changed
/// by the caller, reaches the turn with its checkpoints, decisions and artifacts; a locked
/// decision cannot be changed.
#[test]
fn the_goal_manager_tracks_checkpoints_decisions_artifacts_and_progress() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("goals");
    let g = s.goals().unwrap();
    let goal = g
        .create_goal("Implement user authentication", GoalPriority::High)
        .unwrap();
    let design = g
        .create_checkpoint(&goal.id, "Design authentication flow")
        .unwrap();
    g.create_checkpoint(&goal.id, "Implement login endpoint")
        .unwrap();
    g.update_checkpoint(&goal.id, design.id, CheckpointStatus::Completed)
        .unwrap();
    let jwt = g
        .record_decision(&goal.id, "Use JWT for authentication", "Stateless servers")
        .unwrap();
    g.lock_decision(&goal.id, jwt.id).unwrap();
    assert!(
        g.update_decision(&goal.id, jwt.id, "Use sessions", "Changed mind")
            .is_err(),
        "a locked decision cannot be changed"
    );
    g.record_artifact(
        &goal.id,
        ArtifactKind::File,
        "src/auth/login.ts",
        ArtifactAction::Created,
    )
    .unwrap();
    let p = g.progress(&goal.id).unwrap();
    assert_eq!((p.completed, p.total, p.percentage), (1, 2, 50));
    let body = s
        .prepare("Status?", &TurnOptions::default())
        .unwrap()
        .body
        .to_string();
    for text in [
        "Implement user authentication",
        "Design authentication flow",
        "Implement login endpoint",
        "Use JWT for authentication",
        "src/auth/login.ts",
    ] {
        assert!(body.contains(text), "no `{text}` in {body}");
    }
    assert!(!body.contains("Use sessions"));
}

/// Prompts System, "Goal Markers" (`[GOAL]`, `[CHECKPOINT] ... - COMPLETED`, `[DECISION] ... -
/// LOCKED`, `[ARTIFACT]`, `[NEXT]`) "parsed and used to update the goal structure": a reply's
/// markers update the session's goals; a lock stays a proposal until the caller confirms it.
#[test]
fn markers_in_a_reply_update_the_goals() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("markers");
    s.prepare("Plan the auth work.", &TurnOptions::default())
        .unwrap();
    let report = s
        .record_reply(&Reply::text(
            "Here is the plan.\n[GOAL] Implement user authentication system\n\
             [CHECKPOINT] Design authentication flow - COMPLETED\n\
             [DECISION] Use JWT for authentication - LOCKED\n\
             [ARTIFACT] Created src/auth/login.ts\n\
             [NEXT] Implement JWT token generation",
        ))
        .unwrap();
    assert!(report.malformed.is_empty(), "{report:?}");
    assert_eq!(report.outcomes.len(), 5, "{report:?}");
    let g = s.goals().unwrap();
    let goal = g.active_goal().unwrap();
    assert_eq!(goal.description, "Implement user authentication system");
    assert_eq!(goal.checkpoints.len(), 1);
    assert_eq!(goal.checkpoints[0].status, CheckpointStatus::Completed);
    assert_eq!(goal.artifacts.len(), 1);
    assert_eq!(goal.next.as_deref(), Some("Implement JWT token generation"));
    let d = &goal.decisions[0];
    assert!(!d.locked && d.lock_proposed, "{d:?}");
    assert_eq!(g.pending_locks().len(), 1);
    let body = s
        .prepare("Continue.", &TurnOptions::default())
        .unwrap()
        .body
        .to_string();
    assert!(body.contains("Implement JWT token generation"), "{body}");
}

/// Prompts System, "Events" (`system-prompt-updated`, `mode-changed`, `active-mcp-updated`):
/// a session's first turn and a goal change announce a new system prompt, a mode change is
/// announced in the turn and to the registry's subscribers, and an MCP prompt's registration
/// announces the active servers.
#[test]
fn prompt_events_are_announced() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let events = rt.registry().subscribe();
    let s = rt.session("events");
    let prompt_updated = |t: &PreparedTurn| {
        t.events
            .iter()
            .any(|e| matches!(e, TurnEvent::PromptUpdated { .. }))
    };
    let first = s.prepare("One.", &TurnOptions::default()).unwrap();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    assert!(prompt_updated(&first));
    let same = s.prepare("Two.", &TurnOptions::default()).unwrap();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    assert!(!prompt_updated(&same), "{:?}", same.events);
    s.goals()
        .unwrap()
        .create_goal("Write the migration", GoalPriority::Medium)
        .unwrap();
    let dev = TurnOptions {
        operational_mode: Some(OperationalMode::Developer),
        ..TurnOptions::default()
    };
    let changed = s.prepare("Three.", &dev).unwrap();
    assert!(prompt_updated(&changed));
    assert!(changed
        .events
        .iter()
        .any(|e| matches!(e, TurnEvent::ModeChanged { .. })));
    let seen: Vec<RegistryEvent> = events.try_iter().collect();
    assert!(
        seen.iter().any(|e| matches!(
            e,
            RegistryEvent::SessionModeChanged {
                to: OperationalMode::Developer,
                ..
            }
        )),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e, RegistryEvent::SystemPromptUpdated { .. })),
        "{seen:?}"
    );
    rt.registry()
        .register(Arc::new(Prompt::mcp_skill(
            "docs-mcp",
            "docs",
            "Cite the docs.",
        )))
        .unwrap();
    let seen: Vec<RegistryEvent> = events.try_iter().collect();
    assert!(
        seen.iter().any(|e| matches!(
            e,
            RegistryEvent::ActiveMcpUpdated { servers } if servers.len() == 1
        )),
        "{seen:?}"
    );
}

/// Prompts System, "Events" (all six of "Prompt Events"), as strata maps them: a session's turn
/// tells `system-prompt-updated`, `mode-changed`, `active-skills-updated` and
/// `active-tools-updated` (`TurnEvent`, and `RegistryEvent::SystemPromptUpdated`,
/// `SessionModeChanged`, `SessionSkillsUpdated`, `SessionToolsUpdated` to subscribers, ADR-0045,
/// ADR-0049); the registry tells `active-mcp-updated` as MCP servers' contributors come and go;
/// `active-hooks-updated` is the runtime's to fire (`Registry::hooks_changed`).
#[test]
fn the_six_prompt_events_are_announced() {
    let dir = tempfile::tempdir().unwrap();
    let tool = |n: &str| AnnouncedTool::new(ToolName::new(n).unwrap(), "");
    let rt = Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.path().join("m.db"))
        .tools(vec![tool("file_read"), tool("shell")])
        .build()
        .unwrap();
    let registry = rt.registry();
    let events = registry.subscribe();
    let s = rt.session("six");
    let kinds = |t: &PreparedTurn| -> Vec<&'static str> {
        t.events
            .iter()
            .map(|e| match e {
                TurnEvent::PromptUpdated { .. } => "system-prompt-updated",
                TurnEvent::ModeChanged { .. } => "mode-changed",
                TurnEvent::SkillsUpdated { .. } => "active-skills-updated",
                TurnEvent::ToolsUpdated { .. } => "active-tools-updated",
                _ => "other",
            })
            .collect()
    };

    let assistant = TurnOptions {
        operational_mode: Some(OperationalMode::Assistant),
        skills: vec![skill()],
        ..TurnOptions::default()
    };
    let first = s.prepare("Prepare the release.", &assistant).unwrap();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    assert_eq!(
        kinds(&first),
        [
            "system-prompt-updated",
            "active-skills-updated",
            "active-tools-updated"
        ]
    );
    // The developer mode, no skill, and only `file_read`: every per-session event fires.
    let developer = TurnOptions {
        operational_mode: Some(OperationalMode::Developer),
        tool_policy: strata_core::ToolPolicy::Only([ToolName::new("file_read").unwrap()].into()),
        ..TurnOptions::default()
    };
    let second = s.prepare("Fix the build.", &developer).unwrap();
    s.record_reply(&Reply::text("Ok.")).unwrap();
    assert_eq!(
        kinds(&second),
        [
            "system-prompt-updated",
            "mode-changed",
            "active-skills-updated",
            "active-tools-updated"
        ]
    );
    // The same turn again changes nothing.
    let third = s.prepare("Go on.", &developer).unwrap();
    assert_eq!(kinds(&third), Vec::<&str>::new());

    registry.hooks_changed(["audit"]);
    registry
        .register(Arc::new(Prompt::mcp_skill(
            "docs-mcp",
            "docs",
            "Cite the docs.",
        )))
        .unwrap();
    registry.clear_mcp_server("docs-mcp");

    let seen: Vec<String> = events
        .try_iter()
        .filter_map(|e| match e {
            RegistryEvent::SystemPromptUpdated { .. } => Some("system-prompt-updated".into()),
            RegistryEvent::SessionModeChanged { from, to, .. } => {
                Some(format!("mode-changed {from:?}->{to:?}"))
            }
            RegistryEvent::SessionSkillsUpdated { skills, .. } => {
                Some(format!("active-skills-updated {skills:?}"))
            }
            RegistryEvent::SessionToolsUpdated { tools, .. } => Some(format!(
                "active-tools-updated {:?}",
                tools.iter().map(ToolName::as_str).collect::<Vec<_>>()
            )),
            RegistryEvent::ActiveHooksUpdated { hooks } => {
                Some(format!("active-hooks-updated {hooks:?}"))
            }
            RegistryEvent::ActiveMcpUpdated { servers } => {
                Some(format!("active-mcp-updated {servers:?}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        [
            "system-prompt-updated",
            "active-skills-updated [\"release-checklist\"]",
            "active-tools-updated [\"file_read\", \"shell\"]",
            "system-prompt-updated",
            "mode-changed Assistant->Developer",
            "active-skills-updated []",
            "active-tools-updated [\"file_read\"]",
            "active-hooks-updated [\"audit\"]",
            "active-mcp-updated [\"docs-mcp\"]",
            "active-mcp-updated []",
        ]
    );
}

/// Prompts System, "Assembly Order: 1. Core Mandates 2. Active Goals 3. Active Skills": the goal
/// comes before the skills, and both before the conversation's earlier turns.
#[test]
fn the_goal_leads_the_skills_and_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("ps");
    s.goals()
        .unwrap()
        .create_goal("Implement user authentication", GoalPriority::High)
        .unwrap();
    s.prepare("Where do we start?", &TurnOptions::default())
        .unwrap();
    s.record_reply(&Reply::text("With the login flow."))
        .unwrap();
    let opts = TurnOptions {
        skills: vec![skill()],
        ..TurnOptions::default()
    };
    let turn = s.prepare("Then what?", &opts).unwrap();
    let body = turn.body.to_string();
    let at = |needle: &str| {
        body.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` not in {body}"))
    };
    let goal = at("Implement user authentication");
    let skill = at("Walk the release checklist");
    let earlier = at("Where do we start?");
    assert!(goal < skill, "the goal after the skills: {body}");
    assert!(skill < earlier, "the skills after the conversation: {body}");
    let report = turn.report();
    let goal_section = report
        .sections
        .iter()
        .find(|x| x.id.as_str().starts_with("goal"))
        .unwrap_or_else(|| panic!("no goal section in {:?}", report.sections));
    assert!(goal_section.stable, "{goal_section:?}");
}

/// Each session sees its own goal, also when the goal is stable: the section cache, whose keys
/// name no session, never holds one.
#[test]
fn each_session_keeps_its_own_goal() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    for (id, goal) in [
        ("one", "Migrate the billing database"),
        ("two", "Write the onboarding guide"),
    ] {
        rt.session(id)
            .goals()
            .unwrap()
            .create_goal(goal, GoalPriority::Medium)
            .unwrap();
    }
    for _ in 0..2 {
        let one = rt
            .session("one")
            .prepare("Status?", &TurnOptions::default())
            .unwrap()
            .body
            .to_string();
        let two = rt
            .session("two")
            .prepare("Status?", &TurnOptions::default())
            .unwrap()
            .body
            .to_string();
        assert!(one.contains("Migrate the billing database") && !one.contains("onboarding"));
        assert!(two.contains("Write the onboarding guide") && !two.contains("billing"));
    }
}

/// Prompts System, "SystemPromptBuilder ... 4. Sanity Checks (optional, from registry:
/// 'sanity-reality-check')" with `useSanityChecks` (default `true`) and the registry's
/// `source: 'config'`: a `[[prompts]]` entry of `strata.toml` with `when = "sanity_check"`
/// is a prompt of source `config` that takes part in every turn unless the turn sets
/// `sanity_checks: Some(false)`; a sanity check registered in code (`Prompt::sanity_check`)
/// follows the same switch. (Its place: layer 3, before the goal and the skills of layer 4,
/// where the seed puts it after them; the layer order decides in strata.) Verifies ADR-0050.
#[test]
fn sanity_checks_take_part_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(
        &config,
        "[[prompts]]\n\
         id = \"sanity-reality-check\"\n\
         kind = \"operational_guidelines\"\n\
         when = \"sanity_check\"\n\
         text = \"Before you state a fact, check it against what a tool returned.\"\n",
    )
    .unwrap();
    let rt = Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.path().join("m.db"))
        .config_file(&config)
        .unwrap()
        .build()
        .unwrap();
    rt.registry()
        .register(Arc::new(Prompt::sanity_check(
            "team.sanity",
            "Say which tool output each number came from.",
        )))
        .unwrap();
    let s = rt.session("ps");
    let on = s
        .prepare("How many users signed up?", &TurnOptions::default())
        .unwrap();
    let body = on.body.to_string();
    assert!(
        body.contains("check it against what a tool returned"),
        "{body}"
    );
    assert!(
        body.contains("Say which tool output each number came from."),
        "{body}"
    );
    let configured = on
        .report()
        .sections
        .iter()
        .find(|x| x.id.as_str() == "config:sanity-reality-check")
        .unwrap();
    assert_eq!(configured.provenance.source, SourceKind::Config);
    assert_eq!(
        on.body["system"][0]["text"].as_str().unwrap(),
        rt.agent().identity_text()
    );
    s.record_reply(&Reply::text("42.")).unwrap();
    let off = TurnOptions {
        sanity_checks: Some(false),
        ..TurnOptions::default()
    };
    let turn = s.prepare("And yesterday?", &off).unwrap();
    let body = turn.body.to_string();
    assert!(
        !body.contains("check it against what a tool returned"),
        "{body}"
    );
    assert!(!body.contains("Say which tool output"), "{body}");
    // Turned on again, both are back.
    s.record_reply(&Reply::text("40.")).unwrap();
    let again = TurnOptions {
        sanity_checks: Some(true),
        ..TurnOptions::default()
    };
    let body = s.prepare("And today?", &again).unwrap().body.to_string();
    assert!(
        body.contains("check it against what a tool returned"),
        "{body}"
    );
}
