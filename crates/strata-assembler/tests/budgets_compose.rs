//! How a turn's context window, its tier, `strata.toml`'s character cap and per-layer budgets
//! combine (ADR-0044), for the configuration each seed system uses: the window sets the total,
//! the response reserve and the tier; the caps and layer budgets the operator configured apply
//! under any window. Before this rule, a window made every configured budget vanish.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;

use strata_assembler::{assemble::*, prelude::*};

/// A runtime on a fresh SQLite file, configured by `toml` when given.
fn runtime(dir: &Path, toml: Option<&str>) -> Runtime {
    let mut b = Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"));
    if let Some(t) = toml {
        let path = dir.join("strata.toml");
        std::fs::write(&path, t).unwrap();
        b = b.config_file(&path).unwrap();
    }
    b.build().unwrap()
}

fn window(w: u32) -> TurnOptions {
    TurnOptions {
        context_window: Some(w),
        ..TurnOptions::default()
    }
}

fn layer(r: &Report, name: &str) -> Option<u64> {
    r.layers
        .iter()
        .find(|l| serde_json::to_value(l.layer).unwrap() == name)
        .unwrap()
        .budget
}

/// Aleph's `max_total_chars` (TOML config, "max chars") holds under a 128,000-token window.
#[test]
fn aleph_character_cap_holds_under_a_window() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), Some("[prompt]\nmax_total_chars = 9000\n"));
    let s = rt.session("aleph");
    let turn = s.prepare(&"word ".repeat(400), &window(128_000)).unwrap();
    let r = turn.report();
    assert_eq!(r.max_total_chars, Some(9000));
    assert!(r.chars <= 9000, "{} chars", r.chars);
    assert_eq!(r.total_tokens, 128_000);
    assert_eq!(r.response_reserve, 16_000, "an eighth of the window");
}

/// DevClaw's per-layer token budgets hold under a window: the working-memory budget is the
/// configured one, and older turns over it are dropped for the layer's budget.
#[test]
fn devclaw_layer_budgets_hold_under_a_window() {
    let dir = tempfile::tempdir().unwrap();
    let toml = "[budget]\ntotal = 16384\nworking_memory = 600\nlong_term_memory = 500\n";
    let rt = runtime(dir.path(), Some(toml));
    let s = rt.session("devclaw");
    for i in 0..12 {
        s.prepare(
            &format!("question {i}: {}", "detail ".repeat(40)),
            &window(128_000),
        )
        .unwrap();
        s.record_reply(&Reply::text(format!("answer {i}: {}", "fact ".repeat(40))))
            .unwrap();
    }
    let turn = s.prepare("the last question", &window(128_000)).unwrap();
    let r = turn.report();
    assert_eq!(layer(r, "working_memory"), Some(600));
    assert_eq!(layer(r, "long_term_memory"), Some(500));
    let wm = r
        .layers
        .iter()
        .find(|l| serde_json::to_value(l.layer).unwrap() == "working_memory")
        .unwrap();
    assert!(
        wm.dropped > 0,
        "older turns over the layer budget are dropped"
    );
    assert!(turn.body.to_string().contains("the last question"));
}

/// The Prompts System's tiers follow the window while the configured budgets stay: a small
/// window and a large one give different tiers, each with strata.toml's layer budgets.
#[test]
fn prompts_system_tiers_follow_the_window_with_configured_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        dir.path(),
        Some("[budget]\ndelegated = 700\n[prompt]\nmax_total_chars = 60000\n"),
    );
    let s = rt.session("tiers");
    let small = s.prepare("hello", &window(8_000)).unwrap();
    let large = s.prepare("hello again", &window(200_000)).unwrap();
    assert_ne!(small.report().tier, large.report().tier);
    for t in [&small, &large] {
        assert_eq!(layer(t.report(), "delegated"), Some(700));
        assert_eq!(t.report().max_total_chars, Some(60_000));
    }
    assert_eq!(small.report().total_tokens, 8_000);
    assert_eq!(large.report().total_tokens, 200_000);
}

/// Ivy's default: without strata.toml or a window, the definition's budget applies, and a
/// window alone sets the total without inventing layer budgets.
#[test]
fn ivy_definition_budget_without_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), None);
    let s = rt.session("ivy");
    let plain = s.prepare("hello", &TurnOptions::default()).unwrap();
    assert_eq!(
        plain.report().total_tokens,
        u64::from(rt.agent().budget().total_tokens)
    );
    let windowed = s.prepare("hello again", &window(32_000)).unwrap();
    assert_eq!(windowed.report().total_tokens, 32_000);
    assert_eq!(
        layer(windowed.report(), "working_memory"),
        rt.agent().budget().layers.working_memory.map(u64::from)
    );
}
