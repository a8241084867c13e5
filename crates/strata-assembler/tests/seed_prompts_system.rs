//! The Prompts System's goal placement, through the session API (the "Prompts System" seed:
//! "Goal in System Prompt" and the `SystemPromptBuilder`'s assembly order: core mandates, the
//! active goal, the active skills). strata's system channel holds only the signed text (I8), so
//! the goal leads the context that follows it: before the skills and before the conversation,
//! and part of the stable prefix. Each session's goal is its own: never cached across sessions.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;
use std::sync::Arc;

use strata_assembler::prelude::*;
use strata_assembler::session::{ActiveSkill, GoalPriority};

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
