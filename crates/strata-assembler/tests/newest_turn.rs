//! The newest user turn is never lost silently (ADR-0030): it is kept whatever its section
//! says, cut to its head and tail when even the sticky content does not fit, and only when not
//! even a minimal cut fits does the assembly fail, with `MessageTooLarge`. Counts are checked
//! with tiktoken-rs, an independent implementation of o200k_base.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod support;

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::Value;
use strata_assembler::{agent::*, assemble::*};

fn reference(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len() as u64
}

fn agent() -> &'static VerifiedAgent {
    static A: OnceLock<VerifiedAgent> = OnceLock::new();
    A.get_or_init(support::agent)
}

fn assembler() -> &'static Assembler {
    static A: OnceLock<Assembler> = OnceLock::new();
    A.get_or_init(Assembler::o200k)
}

/// A long message whose first and last lines are easy to find: the question is at its end.
fn long_message(lines: usize) -> String {
    let mut out = String::from("FIRST LINE: here is the log you asked about.\n");
    for i in 0..lines {
        out.push_str(&format!(
            "{i:05} worker-{} finished batch {} in {} ms\n",
            i % 7,
            i * 3,
            (i * 37) % 1000
        ));
    }
    out.push_str("LAST LINE: why did batch 12 take so long?");
    out
}

fn turn(seq: u64, role: Role, text: &str) -> Section {
    Section::builder(RuntimeLayer::WorkingMemory, format!("turn/{seq}"), text)
        .unwrap()
        .turn(Turn::new(seq, role))
        .build()
}

/// An older exchange, then the newest user message (not marked sticky by its caller).
fn conversation(message: &str) -> Vec<Section> {
    vec![
        turn(1, Role::User, "What is the weather like today in Lisbon?"),
        turn(2, Role::Assistant, "Sunny, 24 degrees, light wind."),
        turn(3, Role::User, message),
    ]
}

fn request(sections: Vec<Section>, total: u32, provider: Option<Provider>) -> AssemblyRequest {
    AssemblyRequest {
        sections,
        provider,
        budget: Some(BudgetSpec::Explicit(Budget::with_total(total))),
        ..Default::default()
    }
}

fn params() -> RequestParams {
    RequestParams {
        model: "test-model".into(),
        max_tokens: Some(256),
        ..Default::default()
    }
}

fn status_of(r: &Report, id: &str) -> SectionStatus {
    r.sections
        .iter()
        .find(|s| s.id == id)
        .unwrap()
        .status
        .clone()
}

/// The decoded text of section `id` in a plain-text output: head and tail of a cut.
fn plain_text_of(output: &str, id: &str) -> Option<String> {
    parse(output).unwrap().into_iter().find_map(|p| match p {
        Parsed::Section { id: i, text, .. } if i == id => Some(text),
        _ => None,
    })
}

/// The text of the last user message of a provider body.
fn last_user_text(provider: Provider, body: &Value) -> String {
    let items = match provider {
        Provider::OpenAiResponses => body["input"].as_array().unwrap(),
        _ => body["messages"].as_array().unwrap(),
    };
    let last = items.iter().rev().find(|m| m["role"] == "user").unwrap();
    match &last["content"] {
        Value::String(s) => s.clone(),
        // Context blocks may precede it in the same message: the turn is the last block.
        Value::Array(blocks) => blocks.last().unwrap()["text"].as_str().unwrap().to_owned(),
        other => panic!("unexpected content {other}"),
    }
}

/// Verifies ADR-0030: a message about twice the budget is sent cut to its head and tail, both
/// ends visible, reported as cut; the older turns are dropped before it is cut; the plain-text
/// output's count equals the reference and is within the budget.
#[test]
fn a_message_twice_the_budget_is_sent_cut_with_both_ends() {
    let message = long_message(300);
    let total = 1_800u32;
    assert!(
        reference(&message) > 2 * u64::from(total) / 2,
        "the message is large"
    );
    let ctx = assembler()
        .assemble(agent(), &request(conversation(&message), total, None))
        .unwrap();
    let r = ctx.report();
    let SectionStatus::Cut {
        head_bytes,
        tail_bytes,
        ..
    } = status_of(r, "turn/3")
    else {
        panic!("not cut: {:?}", status_of(r, "turn/3"))
    };
    assert!(
        head_bytes > 0 && tail_bytes > 0,
        "{head_bytes} {tail_bytes}"
    );
    let text = plain_text_of(ctx.text(), "turn/3").unwrap();
    assert!(text.starts_with("FIRST LINE"));
    assert!(text.ends_with("LAST LINE: why did batch 12 take so long?"));
    assert_eq!(
        (head_bytes + tail_bytes) as usize,
        text.len(),
        "the report's cut is the output's"
    );
    assert!(matches!(
        status_of(r, "turn/1"),
        SectionStatus::Dropped { .. }
    ));
    assert_eq!(r.used_tokens, reference(ctx.text()));
    assert!(r.used_tokens <= r.prompt_budget);
}

/// Verifies ADR-0030 for provider requests: the newest user message goes out as the last
/// native user message, cut around a plain note (no strata syntax), with both ends.
#[test]
fn a_provider_request_carries_the_cut_message_natively() {
    let message = long_message(300);
    for provider in [
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
        Provider::Anthropic,
    ] {
        let ctx = assembler()
            .assemble(
                agent(),
                &request(conversation(&message), 1_800, Some(provider)),
            )
            .unwrap();
        let r = ctx.report();
        assert!(
            matches!(status_of(r, "turn/3"), SectionStatus::Cut { .. }),
            "{provider:?}"
        );
        assert!(r.used_tokens <= r.prompt_budget, "{provider:?}");
        let params = params();
        let body = ctx.request_body(provider, &params).unwrap();
        let text = last_user_text(provider, &body);
        assert!(text.starts_with("FIRST LINE"), "{provider:?}: {text:.80}");
        assert!(
            text.ends_with("LAST LINE: why did batch 12 take so long?"),
            "{provider:?}"
        );
        assert!(
            text.contains("bytes of this message left out here"),
            "{provider:?}"
        );
        assert!(!text.contains("<strata:"), "{provider:?}");
        // Every byte of the native message is the message's, but for the note.
        let note_start = text.find("\n[... ").unwrap();
        let note_end = note_start + text[note_start..].find(" ...]\n").unwrap() + 6;
        assert!(message.starts_with(&text[..note_start]));
        assert!(message.ends_with(&text[note_end..]));
    }
}

/// Verifies ADR-0030: a message that fits whole is sent whole, and a short newest message is
/// kept while an older, larger one is dropped.
#[test]
fn a_message_that_fits_is_sent_whole_before_older_turns() {
    let sections = vec![
        turn(1, Role::User, &long_message(300)),
        turn(2, Role::Assistant, "Noted."),
        turn(3, Role::User, "And what about batch 12?"),
    ];
    let ctx = assembler()
        .assemble(agent(), &request(sections, 1_200, None))
        .unwrap();
    let r = ctx.report();
    assert_eq!(status_of(r, "turn/3"), SectionStatus::Kept);
    assert_ne!(status_of(r, "turn/1"), SectionStatus::Kept);
    assert_eq!(
        plain_text_of(ctx.text(), "turn/3").unwrap(),
        "And what about batch 12?"
    );
}

/// Verifies ADR-0030: where identity leaves less than a minimal cut, the assembly fails with
/// `MessageTooLarge` (not a silent drop, not the generic sticky error).
#[test]
fn a_message_without_room_for_a_minimal_cut_is_refused() {
    let message = long_message(300);
    let mut saw_refusal = false;
    let mut saw_cut = false;
    for total in (200u32..900).step_by(7) {
        match assembler().assemble(agent(), &request(conversation(&message), total, None)) {
            Ok(ctx) => {
                let r = ctx.report();
                assert!(
                    matches!(status_of(r, "turn/3"), SectionStatus::Cut { .. }),
                    "budget {total}: {:?}",
                    status_of(r, "turn/3")
                );
                let text = plain_text_of(ctx.text(), "turn/3").unwrap();
                assert!(
                    text.ends_with("take so long?"),
                    "budget {total}: {text:?} {:?}",
                    status_of(r, "turn/3")
                );
                assert!(r.used_tokens <= r.prompt_budget);
                saw_cut = true;
            }
            Err(AssembleError::MessageTooLarge {
                tokens,
                available,
                minimum,
                ..
            }) => {
                assert!(available < tokens && minimum > 0);
                saw_refusal = true;
            }
            Err(AssembleError::IdentityExceedsBudget { .. }) => {}
            Err(e) => panic!("budget {total}: {e:?}"),
        }
    }
    assert!(
        saw_refusal && saw_cut,
        "refused {saw_refusal}, cut {saw_cut}"
    );
}

/// Cases per property: `PROPTEST_CASES` when set (longer runs), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    /// Verifies ADR-0030: for any budget and message size, the newest user message is kept
    /// whole or cut with both of its ends, or the assembly fails with a typed error that says
    /// so; it is never dropped while the request goes out.
    #[test]
    fn the_newest_user_turn_is_never_dropped(lines in 0usize..400, total in 300u32..4_000) {
        let message = long_message(lines);
        match assembler().assemble(agent(), &request(conversation(&message), total, Some(Provider::Anthropic))) {
            Ok(ctx) => {
                let r = ctx.report();
                let st = status_of(r, "turn/3");
                prop_assert!(matches!(st, SectionStatus::Kept | SectionStatus::Cut { .. }), "{:?}", st);
                let body = ctx.request_body(Provider::Anthropic, &params()).unwrap();
                let text = last_user_text(Provider::Anthropic, &body);
                prop_assert!(text.starts_with("FIRST LINE"));
                prop_assert!(text.ends_with("take so long?"));
                prop_assert!(r.used_tokens <= r.prompt_budget);
            }
            Err(AssembleError::MessageTooLarge { .. } | AssembleError::IdentityExceedsBudget { .. }) => {}
            Err(e) => prop_assert!(false, "{}", e),
        }
    }
}
