//! What a turn changes for its session, told in the turn and to the registry's subscribers
//! (ADR-0045, ADR-0049), as the Prompts System's events describe: the prompt is updated whenever
//! the stable prefix changes (identity, tools, goals, the operational template), a session's
//! mode change is announced, so are the skills it activates and the tools it offers when they
//! change, and a turn that changes nothing, or is refused, announces nothing.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;
use std::sync::Arc;

use strata_assembler::session::TurnEvent;
use strata_assembler::{assemble::*, prelude::*, session::*};

fn runtime(dir: &Path) -> Runtime {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
        .build()
        .unwrap()
}

fn mode(m: OperationalMode) -> TurnOptions {
    TurnOptions {
        operational_mode: Some(m),
        ..TurnOptions::default()
    }
}

/// Prompts System, events: "system prompt updated" fires for a goal change and for a changed
/// operational template, not for a turn that only adds to the history; "mode changed" fires
/// from sessions, once per change, in the turn and to subscribers.
#[test]
fn goal_and_mode_changes_are_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let events = rt.registry().subscribe();
    let s = rt.session("s1");
    let first = s
        .prepare("Plan the release.", &mode(OperationalMode::Assistant))
        .unwrap();
    // A first turn tells its prompt, its (no) skills and its (no) tools, never a mode change.
    assert!(
        matches!(
            &first.events[..],
            [
                TurnEvent::PromptUpdated { .. },
                TurnEvent::SkillsUpdated { skills },
                TurnEvent::ToolsUpdated { tools },
            ] if skills.is_empty() && tools.is_empty()
        ),
        "{:?}",
        first.events
    );
    s.record_reply(&Reply::text("Ok.")).unwrap();
    let same = s
        .prepare("Go on.", &mode(OperationalMode::Assistant))
        .unwrap();
    assert_eq!(same.events, vec![], "nothing stable changed");
    s.record_reply(&Reply::text("Ok.")).unwrap();

    // A goal is part of the stable context.
    s.goals()
        .unwrap()
        .create_goal("Ship version 2", GoalPriority::High)
        .unwrap();
    let goal = s
        .prepare("What is the goal?", &mode(OperationalMode::Assistant))
        .unwrap();
    assert!(turn_wire(&goal).contains("Ship version 2"));
    assert!(
        matches!(goal.events[..], [TurnEvent::PromptUpdated { .. }]),
        "{:?}",
        goal.events
    );
    s.record_reply(&Reply::text("Ok.")).unwrap();

    // Another operational mode: its template changes the prefix, and the mode change is told.
    let dev = s
        .prepare("Now debug it.", &mode(OperationalMode::Developer))
        .unwrap();
    assert!(
        dev.events.contains(&TurnEvent::ModeChanged {
            from: OperationalMode::Assistant,
            to: OperationalMode::Developer
        }),
        "{:?}",
        dev.events
    );
    s.record_reply(&Reply::text("Ok.")).unwrap();

    // A refused turn announces nothing and remembers nothing.
    let tiny = TurnOptions {
        context_window: Some(64),
        ..mode(OperationalMode::Planning)
    };
    assert!(s.prepare("refused", &tiny).is_err());
    let again = s
        .prepare("Still debugging.", &mode(OperationalMode::Developer))
        .unwrap();
    assert_eq!(again.events, vec![]);

    let got: Vec<RegistryEvent> = events
        .try_iter()
        .filter(|e| {
            matches!(
                e,
                RegistryEvent::SystemPromptUpdated { .. }
                    | RegistryEvent::SessionModeChanged { .. }
            )
        })
        .collect();
    let modes: Vec<&RegistryEvent> = got
        .iter()
        .filter(|e| matches!(e, RegistryEvent::SessionModeChanged { .. }))
        .collect();
    assert_eq!(modes.len(), 1, "{got:?}");
    assert!(matches!(
        modes[0],
        RegistryEvent::SessionModeChanged { session, from: OperationalMode::Assistant, to: OperationalMode::Developer }
            if &**session == "s1"
    ));
    let prompts = got.len() - modes.len();
    let told: usize = [&first, &goal, &dev]
        .iter()
        .map(|t| {
            t.events
                .iter()
                .filter(|e| matches!(e, TurnEvent::PromptUpdated { .. }))
                .count()
        })
        .sum();
    assert_eq!(prompts, told, "{got:?}");
}

fn turn_wire(t: &PreparedTurn) -> String {
    t.body.to_string()
}

/// A runtime announcing two tools of the signed allowlist and one outside it.
fn tooled(dir: &Path) -> Runtime {
    let tool = |n: &str| AnnouncedTool::new(ToolName::new(n).unwrap(), "");
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
        .tools(vec![tool("shell"), tool("file_read"), tool("rm_rf")])
        .build()
        .unwrap()
}

fn skill(id: &str) -> ActiveSkill {
    ActiveSkill::new(id, format!("Follow the {id} routine.")).unwrap()
}

/// A turn activating `skills`, offering the tools `only` permits (all when `None`).
fn turn(skills: &[&str], only: Option<&[&str]>) -> TurnOptions {
    TurnOptions {
        skills: skills.iter().map(|s| skill(s)).collect(),
        tool_policy: match only {
            Some(names) => {
                ToolPolicy::Only(names.iter().map(|n| ToolName::new(*n).unwrap()).collect())
            }
            None => ToolPolicy::default(),
        },
        ..TurnOptions::default()
    }
}

fn skills_of(t: &PreparedTurn) -> Option<Vec<String>> {
    t.events.iter().find_map(|e| match e {
        TurnEvent::SkillsUpdated { skills } => Some(skills.iter().map(|s| s.to_string()).collect()),
        _ => None,
    })
}

fn tools_of(t: &PreparedTurn) -> Option<Vec<String>> {
    t.events.iter().find_map(|e| match e {
        TurnEvent::ToolsUpdated { tools } => Some(tools.iter().map(|t| t.to_string()).collect()),
        _ => None,
    })
}

/// The session skill and tool events a subscriber received, as (session, names).
fn told(rx: &std::sync::mpsc::Receiver<RegistryEvent>) -> Vec<(String, &'static str, Vec<String>)> {
    rx.try_iter()
        .filter_map(|e| match e {
            RegistryEvent::SessionSkillsUpdated { session, skills } => Some((
                session.to_string(),
                "skills",
                skills.iter().map(|s| s.to_string()).collect(),
            )),
            RegistryEvent::SessionToolsUpdated { session, tools } => Some((
                session.to_string(),
                "tools",
                tools.iter().map(|t| t.to_string()).collect(),
            )),
            _ => None,
        })
        .collect()
}

/// Verifies ADR-0049: a session's first turn in the runtime tells its skills and tools (sorted,
/// each once); a turn activating other skills tells the skills and not the tools, a turn
/// offering other tools tells the tools and not the skills, a turn that changes neither (the
/// same skills in another order) tells neither, a refused turn tells and remembers nothing, and
/// the subscriber receives exactly what the stored turns told.
#[test]
fn skill_and_tool_changes_are_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tooled(dir.path());
    let rx = rt.registry().subscribe();
    let s = rt.session("s1");
    let step = |msg: &str, o: &TurnOptions| {
        let t = s.prepare(msg, o).unwrap();
        s.record_reply(&Reply::text("Ok.")).unwrap();
        t
    };

    // The first turn: the whole set, sorted, without the tool outside the allowlist.
    let first = step("Start.", &turn(&["review", "deploy", "review"], None));
    assert_eq!(skills_of(&first).unwrap(), ["deploy", "review"]);
    assert_eq!(tools_of(&first).unwrap(), ["file_read", "shell"]);

    // Nothing changes: the same skills in another order, the same tools.
    let same = step("Go on.", &turn(&["review", "deploy"], None));
    assert_eq!(same.events, vec![], "nothing changed");

    // Another skill set: the skills are told, the tools are not.
    let skills = step("Only review.", &turn(&["review"], None));
    assert_eq!(skills_of(&skills).unwrap(), ["review"]);
    assert_eq!(tools_of(&skills), None, "{:?}", skills.events);

    // The caller narrows the tools: the tools are told, the skills are not.
    let tools = step("Read only.", &turn(&["review"], Some(&["file_read"])));
    assert_eq!(tools_of(&tools).unwrap(), ["file_read"]);
    assert_eq!(skills_of(&tools), None, "{:?}", tools.events);

    // A refused turn (no room) with other skills and tools tells and remembers nothing.
    let refused = TurnOptions {
        context_window: Some(64),
        ..turn(&["deploy"], None)
    };
    assert!(s.prepare("refused", &refused).is_err());
    // One the store refuses after it was assembled (a message over the entry limit) too.
    let huge = "word ".repeat(14_000);
    let e = s
        .prepare(&huge, &turn(&["deploy"], Some(&["shell"])))
        .unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
    let after = step("Still reading.", &turn(&["review"], Some(&["file_read"])));
    assert_eq!(after.events, vec![], "the refused turn was remembered");

    // No skills at all is a change too.
    let none = step("Plain.", &turn(&[], Some(&["file_read"])));
    assert_eq!(skills_of(&none).unwrap(), Vec::<String>::new());

    let s1 = |kind: &'static str, names: &[&str]| {
        (
            "s1".to_owned(),
            kind,
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        told(&rx),
        vec![
            s1("skills", &["deploy", "review"]),
            s1("tools", &["file_read", "shell"]),
            s1("skills", &["review"]),
            s1("tools", &["file_read"]),
            s1("skills", &[]),
        ]
    );
}

/// Verifies ADR-0049: each session is compared with its own previous turn, not with the
/// runtime's last turn; a continued turn is remembered and told like a stored one; a reset
/// session's next turn is a first turn again.
#[test]
fn each_session_is_compared_with_its_own_previous_turn() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tooled(dir.path());
    let rx = rt.registry().subscribe();
    let a = rt.session("a");
    let b = rt.session("b");
    let ta = a.prepare("A one.", &turn(&["deploy"], None)).unwrap();
    a.record_reply(&Reply::text("Ok.")).unwrap();
    assert_eq!(skills_of(&ta).unwrap(), ["deploy"]);
    let tb = b
        .prepare("B one.", &turn(&["review"], Some(&["shell"])))
        .unwrap();
    b.record_reply(&Reply::text("Ok.")).unwrap();
    assert_eq!(skills_of(&tb).unwrap(), ["review"]);
    assert_eq!(tools_of(&tb).unwrap(), ["shell"]);
    // Session a's turn after b's: unchanged for a.
    let ta = a.prepare("A two.", &turn(&["deploy"], None)).unwrap();
    assert_eq!(ta.events, vec![], "compared with session b's turn");
    a.record_reply(&Reply::tool_call(
        "c1",
        ToolName::new("shell").unwrap(),
        serde_json::json!({"command": "ls"}),
    ))
    .unwrap();
    a.record_tool_result("c1", "notes.txt").unwrap();
    // The continued turn offers fewer tools: told, remembered, sent to subscribers.
    let cont = a
        .continue_turn(&turn(&["deploy"], Some(&["file_read"])))
        .unwrap();
    assert_eq!(tools_of(&cont).unwrap(), ["file_read"]);
    let again = a
        .continue_turn(&turn(&["deploy"], Some(&["file_read"])))
        .unwrap();
    assert_eq!(again.events, vec![]);

    a.reset().unwrap();
    let fresh = a.prepare("A anew.", &turn(&["deploy"], None)).unwrap();
    assert_eq!(skills_of(&fresh).unwrap(), ["deploy"]);
    assert_eq!(tools_of(&fresh).unwrap(), ["file_read", "shell"]);

    let got = told(&rx);
    let of = |s: &str| got.iter().filter(|e| e.0 == s).count();
    assert_eq!((of("a"), of("b")), (5, 2), "{got:?}");
    assert!(got.contains(&("a".into(), "tools", vec!["file_read".to_owned()])));
}

/// Verifies ADR-0049: an MCP server's skill prompt takes part through the skill of its id, so
/// the skills a turn announces are the ids the caller activated, whatever prompts follow them.
#[test]
fn an_mcp_skill_prompt_follows_its_skill() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tooled(dir.path());
    rt.registry()
        .register(Arc::new(strata_registry::builtins::Prompt::mcp_skill(
            "gh",
            "deploy",
            "Open a pull request first.",
        )))
        .unwrap();
    let s = rt.session("s1");
    let t = s.prepare("Ship.", &turn(&["deploy"], None)).unwrap();
    assert!(turn_wire(&t).contains("Open a pull request first."));
    assert_eq!(skills_of(&t).unwrap(), ["deploy"]);
}
