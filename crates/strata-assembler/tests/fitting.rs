//! Fitting the budget (ADR-0037): dropped sections are never tokenized, the budget is filled
//! with smaller, less important units after a drop, idle budget is reported, and a cut keeps
//! the head, the tail or both ends of a section. Token counts are checked with tiktoken-rs, an
//! independent implementation of o200k_base, never with strata's own tokenizer.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod support;

use std::sync::OnceLock;

use strata_assembler::{agent::*, assemble::*};
use strata_core::format::{self, Authority, SectionHeader};

fn reference(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len() as u64
}

fn agent() -> &'static VerifiedAgent {
    static A: OnceLock<VerifiedAgent> = OnceLock::new();
    A.get_or_init(support::agent)
}

/// Deterministic prose of about `words` words, different for every `seed`.
fn prose(seed: u64, words: usize) -> String {
    const VOCAB: [&str; 16] = [
        "the",
        "shipment",
        "arrived",
        "late",
        "because",
        "customs",
        "held",
        "it",
        "for",
        "review",
        "and",
        "nobody",
        "told",
        "the",
        "warehouse",
        "team",
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = String::new();
    for i in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if i > 0 {
            out.push(' ');
        }
        out.push_str(VOCAB[(x % 16) as usize]);
        if x.is_multiple_of(11) {
            out.push_str(&format!(" {}", x % 9973));
        }
    }
    out
}

fn request(sections: Vec<Section>, total: u32) -> AssemblyRequest {
    AssemblyRequest {
        sections,
        budget: Some(BudgetSpec::Explicit(Budget::with_total(total))),
        ..Default::default()
    }
}

/// The fenced element of an uncut section as the wire format writes it (ADR-0009), built here
/// from the format's writer rather than taken from the assembler.
fn element(s: &Section) -> String {
    let turn = s.turn();
    let role = turn.map(|t| t.role);
    let source = s.provenance().source.label();
    let h = SectionHeader {
        key: s.key().map(|k| k.as_str()),
        source: Some(&source),
        authority: Authority::of_runtime(s.layer(), role),
        role,
        call: turn.and_then(|t| t.call_id.as_deref()),
        ..SectionHeader::new(s.layer().into(), s.id().as_str())
    };
    let mut out = String::new();
    format::write_untrusted(&mut out, &h, s.content().as_str(), Encoding::Escaped);
    out
}

/// Verifies ADR-0037: with 2,000 memories of varied size against a budget that keeps a few
/// dozen, the assembler hands the tokenizer about the output and no more; before, it counted
/// every section offered, about 40 times the output here.
#[test]
fn dropped_sections_are_never_tokenized_in_full() {
    let sections: Vec<Section> = (0..2_000u64)
        .map(|i| {
            // Sizes spread over 10-400 words, like the shared workloads' log-uniform lengths.
            let words = 10 + (i * 7919 % 391) as usize;
            Section::builder(
                RuntimeLayer::LongTermMemory,
                format!("m.{i}"),
                prose(i, words),
            )
            .unwrap()
            .priority((i * 104_729 % 10_000) as u32)
            .build()
        })
        .collect();
    let offered: usize = sections.iter().map(|s| s.content().as_str().len()).sum();
    let a = Assembler::o200k();
    let ctx = a.assemble(agent(), &request(sections, 8_000)).unwrap();
    let stats = a.cache_stats();
    let out = ctx.text().len() as u64;
    assert_eq!(ctx.report().used_tokens, reference(ctx.text()));
    assert!(ctx.report().used_tokens <= ctx.report().prompt_budget);
    // Everything counted is in the output, apart from the frame of the cut and the marker
    // bound: a small constant over the output. The part of the cut section left out is not
    // counted (its whole count is only taken on request).
    let cut_frames: u64 = ctx
        .report()
        .sections
        .iter()
        .filter(|r| matches!(r.status, SectionStatus::Cut { .. }))
        .map(|_| 256)
        .sum();
    assert!(
        stats.tokenized_bytes <= out + cut_frames + 4_096,
        "tokenized {} bytes for an output of {out} (offered {offered})",
        stats.tokenized_bytes
    );
    assert!(
        offered as u64 > 20 * out,
        "the workload must drop most content"
    );
    let dropped = ctx
        .report()
        .sections
        .iter()
        .filter(|r| matches!(r.status, SectionStatus::Dropped { .. }))
        .count() as u64;
    assert!(
        stats.probed_over < dropped / 4,
        "{} probes for {dropped} dropped sections",
        stats.probed_over
    );
    // The omission marker states dropped bytes, and they add up.
    let marker_bytes: u64 = parse(ctx.text())
        .unwrap()
        .iter()
        .map(|p| match p {
            Parsed::Omitted { bytes, .. } => *bytes,
            Parsed::Section { .. } => 0,
        })
        .sum();
    let report_bytes: u64 = ctx
        .report()
        .sections
        .iter()
        .filter(|r| matches!(r.status, SectionStatus::Dropped { .. }))
        .map(|r| r.bytes)
        .sum();
    assert_eq!(marker_bytes, report_bytes);
    assert_eq!(ctx.report().layers[3].dropped_bytes, report_bytes);

    // Warm, the same request costs no tokenizer work at all.
    let before = a.cache_stats();
    let again = a
        .assemble(
            agent(),
            &request(
                (0..2_000u64)
                    .map(|i| {
                        let words = 10 + (i * 7919 % 391) as usize;
                        Section::builder(
                            RuntimeLayer::LongTermMemory,
                            format!("m.{i}"),
                            prose(i, words),
                        )
                        .unwrap()
                        .priority((i * 104_729 % 10_000) as u32)
                        .build()
                    })
                    .collect(),
                8_000,
            ),
        )
        .unwrap();
    assert_eq!(again.text(), ctx.text());
    let after = a.cache_stats();
    assert_eq!(after.tokenized_bytes, before.tokenized_bytes);
    assert_eq!(after.probed_over, before.probed_over);
}

/// Verifies ADR-0037: the part of a cut section that is left out is not tokenized, and the
/// report says how much was left out in bytes; asked for, the whole section is counted too, and
/// that count is the reference count of the whole element. Asking changes only the report.
#[test]
fn a_cut_section_is_counted_whole_only_on_request() {
    let s = Section::builder(RuntimeLayer::LongTermMemory, "notes", prose(7, 6_000))
        .unwrap()
        .build();
    let bytes = s.content().as_str().len() as u64;
    let a = Assembler::o200k();
    let ctx = a
        .assemble(agent(), &request(vec![s.clone()], 1_500))
        .unwrap();
    let r = &ctx.report().sections[0];
    let SectionStatus::Cut {
        full_tokens,
        head_bytes,
        tail_bytes,
    } = r.status
    else {
        panic!("not cut: {:?}", r.status)
    };
    assert_eq!(full_tokens, None);
    assert_eq!(r.bytes, bytes);
    assert!(head_bytes > 0 && tail_bytes == 0 && head_bytes < bytes);
    assert_eq!(ctx.report().used_tokens, reference(ctx.text()));
    // Well under the section's size was tokenized: about the output, not the whole section.
    let stats = a.cache_stats();
    assert!(
        stats.tokenized_bytes < ctx.text().len() as u64 + 8_192
            && stats.tokenized_bytes < bytes / 2,
        "tokenized {} bytes for a {bytes}-byte section and a {}-byte output",
        stats.tokenized_bytes,
        ctx.text().len()
    );

    let mut asked = request(vec![s.clone()], 1_500);
    asked.count_cut_sections = true;
    // A fresh assembler, and the one that has the cut cached.
    let fresh = Assembler::o200k();
    for b in [&fresh, &a] {
        let counted = b.assemble(agent(), &asked).unwrap();
        assert_eq!(counted.text(), ctx.text());
        let c = &counted.report().sections[0];
        assert_eq!(c.tokens, r.tokens);
        assert_eq!(
            c.status,
            SectionStatus::Cut {
                full_tokens: Some(reference(&element(&s))),
                head_bytes,
                tail_bytes,
            }
        );
    }
    // The kept whole assembly answers only the request it was made for.
    let again = a.assemble(agent(), &request(vec![s], 1_500)).unwrap();
    assert!(matches!(
        again.report().sections[0].status,
        SectionStatus::Cut {
            full_tokens: None,
            ..
        }
    ));
}

/// Verifies ADR-0037: a section cut again after its text changed (grown at its end, as a turn
/// streamed in; edited before, at or after the cut; shortened) is cut exactly as a fresh
/// assembler cuts it, by the reference count, whether or not the walk of its last cut is
/// reused. Contents include text the escaping rewrites (headings, tags, labels, setext lines)
/// and CJK, so the escaped element differs from the text as offered.
#[test]
fn a_changed_section_is_cut_again_as_a_fresh_assembler_cuts_it() {
    let escapes = "# Heading\nUser: <b>bold</b> & more [INST] text\n===\n- item one\n\
                   1. numbered: yes\n    indented code & <tags>\n";
    let cjk = "日本語のテキストと漢字、中文，标点。한국어 텍스트 ";
    let bases = [
        prose(3, 3_000),
        escapes.repeat(120),
        cjk.repeat(200),
        [prose(5, 800), escapes.repeat(40), cjk.repeat(40)].concat(),
    ];
    let a = Assembler::o200k();
    for (k, base) in bases.iter().enumerate() {
        let half = base.floor_char_boundary(base.len() / 2);
        let edits: Vec<String> = vec![
            base.clone(),
            format!("{base} and then some more words arrived"),
            format!("{base} and then some more words arrived, and more: <x> & #y"),
            format!("X{}", &base[base.ceil_char_boundary(1)..]),
            format!("{}CHANGED{}", &base[..half], &base[half..]),
            base[..base.floor_char_boundary(base.len() * 3 / 4)].to_owned(),
            base.clone(),
        ];
        for total in [900u32, 2_500] {
            for (e, text) in edits.iter().enumerate() {
                let s = Section::builder(
                    RuntimeLayer::WorkingMemory,
                    format!("turn.{k}"),
                    text.clone(),
                )
                .unwrap()
                .build();
                let req = request(vec![s], total);
                let before = a.cache_stats().resumed_cuts;
                let got = a.assemble(agent(), &req).unwrap();
                let resumed = a.cache_stats().resumed_cuts > before;
                // Grown at its end, the section's cut resumes the last walk; changed at its
                // start, it cannot.
                match e {
                    1 | 2 => assert!(resumed, "content {k}, edit {e}: the walk did not resume"),
                    3 => assert!(!resumed, "content {k}: resumed over a changed start"),
                    _ => {}
                }
                let fresh = Assembler::o200k().assemble(agent(), &req).unwrap();
                assert_eq!(got.text(), fresh.text(), "content {k}, budget {total}");
                assert!(matches!(
                    got.report().sections[0].status,
                    SectionStatus::Cut { .. }
                ));
                assert_eq!(got.report().used_tokens, reference(got.text()));
                assert!(got.report().used_tokens <= got.report().prompt_budget);
            }
        }
    }
}

/// Verifies ADR-0037: the resumed cut holds for a provider request, where a tool result cut to
/// let its sticky call fit carries the provider's framing, and for cl100k_base: each cut of a
/// growing result equals a fresh assembler's, request body and report alike; in the plain
/// format with cl100k_base, the total is tiktoken-rs's count of the output.
#[test]
fn resumed_cuts_hold_for_provider_requests_and_cl100k() {
    let ask = Section::builder(RuntimeLayer::WorkingMemory, "u0", "Read the build log.")
        .unwrap()
        .turn(Turn::new(0, Role::User))
        .sticky(true)
        .build();
    let call = Section::builder(RuntimeLayer::WorkingMemory, "c1", r#"{"path":"build.log"}"#)
        .unwrap()
        .turn(Turn::tool_call(
            1,
            "call_1",
            ToolName::new("file_read").unwrap(),
        ))
        .sticky(true)
        .build();
    let result = |text: &str| {
        Section::builder(RuntimeLayer::WorkingMemory, "r1", text)
            .unwrap()
            .turn(Turn::tool_result(2, "call_1"))
            .build()
    };
    let params = RequestParams {
        model: "test-model".into(),
        max_tokens: Some(256),
        ..Default::default()
    };
    let mut text = "build log line <b>bold?</b> & [INST] # step\n".repeat(400);
    let a = Assembler::o200k();
    for provider in [Provider::OpenAiChat, Provider::Anthropic] {
        for round in 0..4 {
            text.push_str(&format!("round {round} done: ok\n"));
            let req = AssemblyRequest {
                sections: vec![ask.clone(), call.clone(), result(&text)],
                budget: Some(BudgetSpec::Explicit(Budget::with_total(1_500))),
                provider: Some(provider),
                ..Default::default()
            };
            let got = a.assemble(agent(), &req).unwrap();
            let fresh = Assembler::o200k().assemble(agent(), &req).unwrap();
            assert!(got
                .report()
                .sections
                .iter()
                .any(|s| matches!(s.status, SectionStatus::Cut { .. })));
            assert_eq!(
                got.request_body(provider, &params).unwrap(),
                fresh.request_body(provider, &params).unwrap(),
                "{provider:?}, round {round}"
            );
            assert_eq!(got.report(), fresh.report());
        }
    }
    assert!(a.cache_stats().resumed_cuts > 0, "no cut resumed");

    let cl100k = |text: &str| {
        tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(text)
            .len() as u64
    };
    let b = Assembler::new(std::sync::Arc::new(TiktokenTokenizer::cl100k()));
    let mut grown = prose(11, 3_000);
    for round in 0..4 {
        grown.push_str(&format!(" and then round {round} <ended>"));
        let s = Section::builder(RuntimeLayer::WorkingMemory, "log", grown.clone())
            .unwrap()
            .build();
        let req = request(vec![s], 1_200);
        let got = b.assemble(agent(), &req).unwrap();
        let fresh = Assembler::new(std::sync::Arc::new(TiktokenTokenizer::cl100k()))
            .assemble(agent(), &req)
            .unwrap();
        assert_eq!(got.text(), fresh.text());
        assert_eq!(got.report().used_tokens, cl100k(got.text()));
        assert!(got.report().used_tokens <= got.report().prompt_budget);
    }
    assert!(b.cache_stats().resumed_cuts > 0, "no cl100k cut resumed");
}

/// Verifies ADR-0037: threads sharing one assembler cut sections of the same id at once, each
/// growing its own text, so kept walks of one thread meet elements of another (which must not
/// resume) and replace each other; every cut equals a fresh assembler's, by the reference
/// count.
#[test]
fn concurrent_cuts_of_one_id_equal_fresh_ones() {
    let a = std::sync::Arc::new(Assembler::o200k());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut text = prose(100 + t, 2_500);
                for round in 0..12 {
                    text.push_str(&format!(" thread {t} round {round} <done>"));
                    let s =
                        Section::builder(RuntimeLayer::WorkingMemory, "shared.turn", text.clone())
                            .unwrap()
                            .build();
                    let req = request(vec![s], 1_000 + 150 * (t as u32 % 2));
                    let got = a.assemble(agent(), &req).unwrap();
                    let fresh = Assembler::o200k().assemble(agent(), &req).unwrap();
                    assert_eq!(got.text(), fresh.text(), "thread {t}, round {round}");
                    assert_eq!(got.report().used_tokens, reference(got.text()));
                    assert!(got.report().used_tokens <= got.report().prompt_budget);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // After the threads replaced each other's walks, the kept walk still serves its id: a text
    // cut and then grown resumes, and both cuts equal fresh ones.
    let mut text = prose(7, 2_500);
    for round in 0..2 {
        text.push_str(&format!(" main round {round}"));
        let s = Section::builder(RuntimeLayer::WorkingMemory, "shared.turn", text.clone())
            .unwrap()
            .build();
        let req = request(vec![s], 1_000);
        let before = a.cache_stats().resumed_cuts;
        let got = a.assemble(agent(), &req).unwrap();
        let fresh = Assembler::o200k().assemble(agent(), &req).unwrap();
        assert_eq!(got.text(), fresh.text());
        if round == 1 {
            assert!(
                a.cache_stats().resumed_cuts > before,
                "the grown text did not resume"
            );
        }
    }
}

/// Verifies ADR-0037: a large, important unit that does not fit even in cut form (a tool call
/// whose arguments and result are each larger than the budget, so neither fits beside the
/// other cut) no longer empties the rest of the budget; older, smaller turns that fit are kept
/// and reported as filled, and the idle budget is reported exactly.
#[test]
fn smaller_units_fill_the_budget_after_a_large_one_is_dropped() {
    let turn = |seq: u64, role: Role, call: Option<&str>| Turn {
        seq,
        role,
        call_id: call.map(Into::into),
        name: None,
        is_error: false,
        reasoning: Vec::new(),
    };
    let mut sections = vec![
        Section::builder(
            RuntimeLayer::WorkingMemory,
            "call",
            format!("{{\"text\":\"{}\"}}", prose(2, 2_000)),
        )
        .unwrap()
        .turn(turn(20, Role::ToolCall, Some("c1")))
        .build(),
        Section::builder(RuntimeLayer::WorkingMemory, "result", prose(1, 3_000))
            .unwrap()
            .turn(turn(21, Role::ToolResult, Some("c1")))
            .build(),
    ];
    for seq in 1..=6u64 {
        sections.push(
            Section::builder(
                RuntimeLayer::WorkingMemory,
                format!("t{seq}"),
                prose(seq, 25),
            )
            .unwrap()
            .turn(turn(seq, Role::User, None))
            .build(),
        );
    }
    let total = 900;
    let a = Assembler::o200k();
    let ctx = a
        .assemble(agent(), &request(sections.clone(), total))
        .unwrap();
    let r = ctx.report();
    let status = |id: &str| r.sections.iter().find(|s| s.id == id).unwrap().clone();
    assert!(
        matches!(status("result").status, SectionStatus::Dropped { ref reason } if reason == "budget")
    );
    assert!(matches!(
        status("call").status,
        SectionStatus::Dropped { .. }
    ));
    // t6, the newest user turn, is kept before anything else (ADR-0030); the older turns are
    // kept in the room the dropped pair left.
    let newest = status("t6");
    assert_eq!(newest.status, SectionStatus::Kept);
    assert!(newest.sticky && !newest.filled);
    for seq in 1..=5 {
        let s = status(&format!("t{seq}"));
        assert_eq!(s.status, SectionStatus::Kept, "t{seq}");
        assert!(s.filled, "t{seq} was kept after a drop and must say so");
    }
    // The pair could not have fit even alone (counted by the reference on the format's own
    // rendering), so keeping the smaller turns took nothing from it.
    let pair = reference(&element(&sections[0])) + reference(&element(&sections[1]));
    assert!(reference(agent().identity_text()) + pair > r.prompt_budget);
    // Exact totals and idle budget, by the reference count of the output.
    let used = reference(ctx.text());
    assert_eq!(r.used_tokens, used);
    assert_eq!(r.idle_tokens, r.prompt_budget - used);
    assert!(r.idle_tokens > 0);

    // Without the big pair nothing is dropped: nothing is filled and nothing is idle.
    let ctx = a
        .assemble(agent(), &request(sections[2..].to_vec(), total))
        .unwrap();
    assert!(ctx.report().sections.iter().all(|s| !s.filled));
    assert_eq!(ctx.report().idle_tokens, 0);
}

/// A tool call reading a log, answered by the turn `result` with call id `c1`.
fn log_call() -> Section {
    Section::builder(RuntimeLayer::WorkingMemory, "call", r#"{"path":"big.log"}"#)
        .unwrap()
        .turn(Turn::tool_call(
            20,
            "c1",
            ToolName::new("file_read").unwrap(),
        ))
        .build()
}

/// The status a report gives section `id`.
fn status_of(r: &Report, id: &str) -> SectionStatus {
    r.sections
        .iter()
        .find(|s| s.id == id)
        .unwrap()
        .status
        .clone()
}

/// The result of [`log_call`].
fn log_result(text: &str) -> Section {
    Section::builder(RuntimeLayer::WorkingMemory, "result", text)
        .unwrap()
        .turn(Turn::tool_result(21, "c1"))
        .build()
}

/// Verifies ADR-0037: the first unit that does not fit is kept in cut form even when it is a
/// tool call with its result: the call whole, the result cut to the room the call leaves, so
/// the latest tool output is shortened rather than lost with its call. Counted by the
/// reference: the output is within the budget and the cut used the room (less than the
/// smallest cut is left idle). In a provider request the call is never cut, the result is.
#[test]
fn a_tool_result_too_large_for_the_budget_is_cut_beside_its_call() {
    let call = log_call();
    let result = log_result(&log(3_000));
    let older = Section::builder(RuntimeLayer::WorkingMemory, "t1", prose(1, 25))
        .unwrap()
        .turn(Turn::new(1, Role::User))
        .build();
    let sections = vec![older, call, result];
    let total = 2_000;
    let ctx = Assembler::o200k()
        .assemble(agent(), &request(sections.clone(), total))
        .unwrap();
    let r = ctx.report();
    let status = |id: &str| status_of(r, id);
    assert_eq!(status("call"), SectionStatus::Kept);
    assert!(
        matches!(status("result"), SectionStatus::Cut { head_bytes, tail_bytes: 0, .. } if head_bytes > 1_000),
        "{:?}",
        status("result")
    );
    let used = reference(ctx.text());
    assert_eq!(r.used_tokens, used);
    assert!(used <= r.prompt_budget);
    assert!(
        r.prompt_budget - used < 48,
        "{} of {} used",
        used,
        r.prompt_budget
    );
    assert!(ctx.text().contains("00000 worker-0"));

    // A provider's history starts with the user's turn: kept here as the user's ask (sticky).
    let mut native = sections.clone();
    native[0] = Section::builder(RuntimeLayer::WorkingMemory, "t1", "Read big.log.")
        .unwrap()
        .turn(Turn::new(1, Role::User))
        .sticky(true)
        .build();
    for provider in [Provider::OpenAiChat, Provider::Anthropic] {
        let req = AssemblyRequest {
            provider: Some(provider),
            ..request(native.clone(), total)
        };
        let ctx = Assembler::o200k().assemble(agent(), &req).unwrap();
        let r = ctx.report();
        let status = |id: &str| status_of(r, id);
        assert_eq!(status("call"), SectionStatus::Kept, "{provider:?}");
        assert!(
            matches!(status("result"), SectionStatus::Cut { .. }),
            "{provider:?}"
        );
        assert!(r.used_tokens <= r.prompt_budget, "{provider:?}");
    }
}

/// Verifies ADR-0037: a pair that cannot be kept even in cut form (call arguments and result
/// each over the budget) does not take the one cut attempt: the next unit that does not fit, a
/// single large turn, is kept in cut form in the room left; the output fits by the reference.
#[test]
fn a_pair_that_cannot_be_cut_leaves_the_cut_to_the_next_unit() {
    let call = Section::builder(
        RuntimeLayer::WorkingMemory,
        "call",
        format!("{{\"text\":\"{}\"}}", prose(2, 2_000)),
    )
    .unwrap()
    .turn(Turn::tool_call(
        20,
        "c1",
        ToolName::new("file_read").unwrap(),
    ))
    .build();
    let older = Section::builder(RuntimeLayer::WorkingMemory, "notes", log(2_000))
        .unwrap()
        .turn(Turn::new(5, Role::User))
        .build();
    let sections = vec![older, call, log_result(&log(3_000))];
    let ctx = Assembler::o200k()
        .assemble(agent(), &request(sections, 1_500))
        .unwrap();
    let r = ctx.report();
    assert!(matches!(
        status_of(r, "call"),
        SectionStatus::Dropped { .. }
    ));
    assert!(matches!(
        status_of(r, "result"),
        SectionStatus::Dropped { .. }
    ));
    assert!(
        matches!(status_of(r, "notes"), SectionStatus::Cut { .. }),
        "{:?}",
        status_of(r, "notes")
    );
    assert_eq!(r.used_tokens, reference(ctx.text()));
    assert!(r.used_tokens <= r.prompt_budget);
}

/// Verifies ADR-0037: a tool result of several megabytes is cut from a walk bounded by the
/// budget, not by its size, and the cut is the same as the one found in a text only as long as
/// that walk needs; the output fits by the reference count and the cut used the room.
#[test]
fn a_tool_result_of_megabytes_is_cut_from_a_bounded_walk() {
    let content = log(200_000);
    assert!(content.len() > 8 << 20);
    let call = log_call();
    let result = log_result;
    let total = 4_000;
    let a = Assembler::o200k();
    let ctx = a
        .assemble(
            agent(),
            &request(vec![call.clone(), result(&content)], total),
        )
        .unwrap();
    let r = ctx.report();
    let cut = status_of(r, "result");
    let SectionStatus::Cut { head_bytes, .. } = cut else {
        panic!("{cut:?}");
    };
    let head = usize::try_from(head_bytes).unwrap();
    // Only what was kept (and a bounded walk past it) was handed to the tokenizer.
    assert!(
        a.cache_stats().tokenized_bytes < 1 << 20,
        "{:?}",
        a.cache_stats()
    );
    assert_eq!(r.used_tokens, reference(ctx.text()));
    assert!(r.used_tokens <= r.prompt_budget);
    // The same cut from a text that is only the first megabyte of the same log.
    let short = &content[..content[..1 << 20].rfind('\n').unwrap() + 1];
    let again = Assembler::o200k()
        .assemble(agent(), &request(vec![call.clone(), result(short)], total))
        .unwrap();
    assert!(matches!(
        status_of(again.report(), "result"),
        SectionStatus::Cut { head_bytes: h, .. } if h == head_bytes
    ));
    // The cut used the room: less than one log line's tokens is left.
    let line = &content[head..][..content[head..].find('\n').unwrap() + 1];
    assert!(
        r.prompt_budget - r.used_tokens < 16,
        "{} left; next {line:?}",
        r.prompt_budget - r.used_tokens
    );
}

/// Verifies ADR-0037: a head cut walks a window of a long content first and a larger
/// one only when the prefix reaches the window's last line, and the cut is the one a walk up to
/// the bound finds, whatever the first window: for logs, dense text, text with long runs of
/// blanks (more bytes per token than the first window allows), runs of blank lines, lines of
/// `=` ending in a letter (a window ending inside one would write its start as an underline's)
/// and one long line of JSON (no line break: the window's last line is relied on up to its last
/// bytes once its start is decided, so the default first window is enough; amended again). The
/// output's reference count is the report's, within the budget.
#[test]
fn a_head_cut_from_a_window_is_the_cut_of_the_bounded_walk() {
    let blanks: String = (0..40_000)
        .map(|i| format!("{}item {i}\n", " ".repeat(40 + i % 200)))
        .collect();
    let dense: String = (0..60_000)
        .map(|i| format!("{}：第{i}行。\n", "数据处理完成".repeat(1 + i % 5)))
        .collect();
    let one_line: String = (0..120_000)
        .map(|i| format!("{{\"k{i}\":[{i},\"v{}\"]}},", i * 7))
        .collect();
    let setext: String = (0..50_000)
        .map(|i| {
            if i % 3 == 0 {
                "=".repeat(90) + "\n"
            } else {
                format!("Title {i}: # heading - 1. item <b>&</b>\n")
            }
        })
        .collect();
    // Lines of `=` that end in a letter: not underlines, but a window that ends inside one
    // sees only `=` and writes its start otherwise.
    let almost_underlines: String = (0..1_000)
        .map(|i| {
            format!(
                "{}{}\n",
                "=".repeat(3_000 + i % 7),
                (b'a' + (i % 26) as u8) as char
            )
        })
        .collect();
    // Runs of blank lines, some of blanks and line breaks, that windows end inside.
    let blank_runs: String = (0..30_000)
        .map(|i| {
            format!(
                "entry {i} done{}",
                if i % 3 == 0 {
                    "\n".repeat(1 + i % 300)
                } else {
                    " \n".repeat(1 + i % 200)
                }
            )
        })
        .collect();
    let cases = [
        ("log", log(150_000)),
        ("blank runs", blank_runs),
        ("almost underlines", almost_underlines),
        ("blanks", blanks),
        ("dense", dense),
        ("one line", one_line),
        ("setext", setext),
    ];
    for (name, content) in &cases {
        assert!(content.len() > 2 << 20, "{name}: {} bytes", content.len());
        for total in [600, 4_000] {
            let req = request(vec![log_call(), log_result(content)], total);
            let mut outs = Vec::new();
            for window in [1, 8, 1 << 20] {
                let a = Assembler::o200k().with_walk_window(window);
                let ctx = a.assemble(agent(), &req).unwrap();
                let r = ctx.report();
                assert!(
                    matches!(status_of(r, "result"), SectionStatus::Cut { .. }),
                    "{name} {total} {window}: {:?}",
                    status_of(r, "result")
                );
                assert_eq!(
                    r.used_tokens,
                    reference(ctx.text()),
                    "{name} {total} {window}"
                );
                assert!(r.used_tokens <= r.prompt_budget);
                let regrown = a.cache_stats().walk_regrowths;
                if window == 1 << 20 {
                    assert_eq!(regrown, 0, "{name} {total}: walked up to the bound at once");
                }
                if window == 1 {
                    assert!(regrown > 0, "{name} {total}: the first window was enough");
                }
                if window == 8 && *name == "one line" {
                    assert_eq!(regrown, 0, "{name} {total}: the default window was regrown");
                }
                outs.push((window, ctx.text().to_owned()));
            }
            let (_, bounded) = outs.last().unwrap();
            for (window, text) in &outs {
                assert!(
                    text == bounded,
                    "{name} {total}: a first window of {window} bytes per token cut elsewhere"
                );
            }
        }
    }
}

/// Verifies ADR-0037: a datamarked section is cut from a walk of the element it
/// becomes, as an escaped one is (each space of the escaping written as a mark maps back by
/// counting the marks): head and tail cuts of a log, prose, one long JSON line and dense CJK
/// text are the same whatever the first window (one byte per token, regrown, or up to the
/// bound at once); every output is within the budget by the reference count, uses it (at most
/// a token left), is datamarked, and decodes to the start or the end of the content. A tail
/// one line longer does not fit.
#[test]
fn datamarked_cuts_are_the_cuts_of_the_bounded_walk() {
    let one_line: String = (0..60_000)
        .map(|i| format!("{{\"k{i}\": [{i}, \"v {}\"]}}, ", i * 7))
        .collect();
    let dense: String = (0..30_000)
        .map(|i| format!("{} 第{i}行。\n", "数据处理完成".repeat(1 + i % 5)))
        .collect();
    let cases = [
        ("log", log(60_000)),
        ("prose", prose(7, 300_000)),
        ("one line", one_line),
        ("dense", dense),
    ];
    for (name, content) in &cases {
        assert!(content.len() > 1 << 20, "{name}: {} bytes", content.len());
        for keep in [Keep::Head, Keep::Tail] {
            for total in [600, 4_000] {
                let s = Section::builder(RuntimeLayer::WorkingMemory, "result", content.as_str())
                    .unwrap()
                    .turn(Turn::tool_result(21, "c1"))
                    .keep(keep)
                    .build();
                let mut req = request(vec![log_call(), s], total);
                req.render = RenderOptions::default()
                    .with_encoding(RuntimeLayer::WorkingMemory, Encoding::Datamark);
                let mut outs = Vec::new();
                for window in [1, 8, 1 << 20] {
                    let a = Assembler::o200k().with_walk_window(window);
                    let ctx = a.assemble(agent(), &req).unwrap();
                    let r = ctx.report();
                    let what = format!("{name} {keep:?} {total} {window}");
                    let SectionStatus::Cut {
                        head_bytes,
                        tail_bytes,
                        ..
                    } = status_of(r, "result")
                    else {
                        panic!("{what}: {:?}", status_of(r, "result"))
                    };
                    assert_eq!(r.used_tokens, reference(ctx.text()), "{what}");
                    assert!(r.used_tokens <= r.prompt_budget, "{what}");
                    assert!(ctx.text().contains('\u{2C6}'), "{what}: not datamarked");
                    // The cut used the room: what is left is less than a few tokens (a piece
                    // of the next line, or an entity or mark that does not fit whole).
                    let left = r.prompt_budget - r.used_tokens;
                    assert!(left <= 1, "{what}: {left} tokens left");
                    let Some(Parsed::Section { text, .. }) = parse(ctx.text()).unwrap().pop()
                    else {
                        panic!("{what}: the result is not the last element")
                    };
                    match keep {
                        Keep::Head => {
                            assert!(content.starts_with(text.as_str()), "{what}");
                            assert_eq!((head_bytes, tail_bytes), (text.len() as u64, 0));
                        }
                        _ => {
                            assert!(content.ends_with(text.as_str()), "{what}");
                            assert_eq!((head_bytes, tail_bytes), (0, text.len() as u64));
                        }
                    }
                    if window == 1 << 20 {
                        assert_eq!(a.cache_stats().walk_regrowths, 0, "{what}");
                    }
                    if window == 1 && keep == Keep::Head {
                        assert!(a.cache_stats().walk_regrowths > 0, "{what}: one window");
                    }
                    if window == 8 && keep == Keep::Tail {
                        // One more line of tail does not fit, by the reference count of
                        // the output written with it.
                        let start = content.len() - text.len();
                        let wider = one_more_line(content, start);
                        let cut_marker = format!("<strata:elided bytes=\"{start}\"/>");
                        let (before, after) = ctx.text().split_once(&cut_marker).unwrap();
                        let longer_marker = format!("<strata:elided bytes=\"{wider}\"/>");
                        let body_now =
                            format::encode_untrusted(&content[start..], Encoding::Datamark);
                        let body_then =
                            format::encode_untrusted(&content[wider..], Encoding::Datamark);
                        let after = after.replacen(&body_now, &body_then, 1);
                        let longer = format!("{before}{longer_marker}{after}");
                        assert!(
                            reference(&longer) > r.prompt_budget,
                            "{what}: a longer tail fits"
                        );
                    }
                    outs.push((window, ctx.text().to_owned()));
                }
                let (_, bounded) = outs.last().unwrap();
                for (window, text) in &outs {
                    assert!(
                        text == bounded,
                        "{name} {keep:?} {total}: a first window of {window} bytes per token cut elsewhere"
                    );
                }
            }
        }
    }
}

/// Verifies ADR-0037: a long escaped or datamarked section is found over the room
/// from a walk of a window of it only when its whole element is over. For texts of every
/// density (prose, a log, one line of JSON, dense CJK text, lines of `=`, words between long
/// blanks), at the budget where the output with the section whole counts exactly the prompt
/// budget by the reference, the section is kept whole; one token less, at a third of that,
/// and at 600 tokens, it is not. The outputs are the same whatever the first window (one byte
/// per token, eight, or none); at 600 tokens the default window's walk decides the probe of
/// a datamarked section but for the sparse texts.
#[test]
fn a_windowed_probe_finds_a_section_over_only_when_it_is() {
    let json: String = (0..600)
        .map(|i| format!("{{\"k{i}\": [{i}, \"v {}\"]}}, ", i * 7))
        .collect();
    let dense: String = (0..400)
        .map(|i| format!("{} 第{i}行。\n", "数据处理完成".repeat(1 + i % 3)))
        .collect();
    let underlines: String = (0..200)
        .map(|i| format!("{}\nline {i}\n", "=".repeat(40 + i % 50)))
        .collect();
    let blanks: String = (0..300)
        .map(|i| format!("word{i}{}", " ".repeat(1 + i % 90)))
        .collect();
    let cases = [
        ("prose", prose(11, 4_000)),
        ("log", log(600)),
        ("json", json),
        ("dense", dense),
        ("underlines", underlines),
        ("blanks", blanks),
    ];
    let mut walked = 0;
    for (name, content) in &cases {
        for enc in [Encoding::Escaped, Encoding::Datamark] {
            let s = Section::builder(RuntimeLayer::Delegated, "doc", content.as_str())
                .unwrap()
                .build();
            let req = |total: u32| {
                let mut r = request(vec![s.clone()], total);
                r.render = RenderOptions::default().with_encoding(RuntimeLayer::Delegated, enc);
                r
            };
            let all = Assembler::o200k().assemble(agent(), &req(1 << 24)).unwrap();
            assert_eq!(status_of(all.report(), "doc"), SectionStatus::Kept);
            let whole = reference(all.text());
            let reserve = all.report().total_tokens - all.report().prompt_budget;
            let exact = u32::try_from(whole + reserve).unwrap();
            for (total, fits) in [
                (exact, true),
                (exact - 1, false),
                (exact / 3, false),
                (600, false),
            ] {
                let mut outs = Vec::new();
                for window in [1, 8, 1 << 20] {
                    let a = Assembler::o200k().with_walk_window(window);
                    let ctx = a.assemble(agent(), &req(total)).unwrap();
                    let r = ctx.report();
                    let what = format!("{name} {enc:?} {total} (whole at {exact}) {window}");
                    assert_eq!(
                        status_of(r, "doc") == SectionStatus::Kept,
                        fits,
                        "{what}: {:?}",
                        status_of(r, "doc")
                    );
                    assert_eq!(r.used_tokens, reference(ctx.text()), "{what}");
                    assert!(r.used_tokens <= r.prompt_budget, "{what}");
                    let by_walk = a.cache_stats().walked_probes;
                    walked += by_walk;
                    let sparse = matches!(*name, "underlines" | "blanks");
                    if total == 600 && window == 8 && enc == Encoding::Datamark && !sparse {
                        // Far over: a walk of the first window tells (marks join the words,
                        // so no count of words bounds a datamarked section first). Sparse
                        // text may need more than the window holds.
                        assert_eq!(by_walk, 1, "{what}");
                    }
                    outs.push(ctx.text().to_owned());
                }
                assert!(
                    outs.iter().all(|o| o == &outs[0]),
                    "{name} {enc:?} {total}: the first window changed the output"
                );
            }
        }
    }
    assert!(walked > 0, "no probe was decided by a walk");
}

/// A log of numbered lines, each about a dozen tokens.
fn log(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "{i:05} worker-{} finished job {} in {} ms\n",
                i % 7,
                i * 31,
                i % 97
            )
        })
        .collect()
}

/// Extend the kept tail of `text` (which ends the section's content) by one more line.
fn one_more_line(content: &str, tail_start: usize) -> usize {
    let before = &content[..tail_start];
    before
        .strip_suffix('\n')
        .unwrap_or(before)
        .rfind('\n')
        .map_or(0, |i| i + 1)
}

/// Verifies ADR-0037: a section that keeps its tail is cut to the longest run of whole-text
/// end that fits, with a visible elision marker; one more line would pass the budget by the
/// reference count.
#[test]
fn a_log_keeps_its_tail_and_shows_the_elision() {
    let content = log(400);
    let s = Section::builder(RuntimeLayer::WorkingMemory, "build.log", content.clone())
        .unwrap()
        .keep(Keep::Tail)
        .build();
    let a = Assembler::o200k();
    let ctx = a
        .assemble(agent(), &request(vec![s.clone()], 1_200))
        .unwrap();
    let r = ctx.report();
    assert!(matches!(r.sections[0].status, SectionStatus::Cut { .. }));
    assert_eq!(r.used_tokens, reference(ctx.text()));
    assert!(r.used_tokens <= r.prompt_budget);
    assert!(ctx.text().contains("\n<strata:elided bytes=\""));
    let parsed = parse(ctx.text()).unwrap();
    let Some(Parsed::Section {
        text,
        keep,
        elided: Some(e),
        ..
    }) = parsed.last()
    else {
        panic!("the log is not the last element")
    };
    assert_eq!(*keep, Keep::Tail);
    assert_eq!(e.at, 0);
    assert!(content.ends_with(text.as_str()));
    assert_eq!(e.bytes as usize + text.len(), content.len());
    // The report (and so a receipt) says exactly which bytes were kept: the tail only.
    assert_eq!(
        r.sections[0].status,
        SectionStatus::Cut {
            full_tokens: match r.sections[0].status {
                SectionStatus::Cut { full_tokens, .. } => full_tokens,
                _ => unreachable!(),
            },
            head_bytes: 0,
            tail_bytes: text.len() as u64,
        }
    );
    // The newest line is there; the oldest is not.
    assert!(text.contains("00399 worker"));
    assert!(!text.contains("00000 worker"));
    // One more line of tail does not fit: the output with it counts over the budget.
    let start = content.len() - text.len();
    let wider = one_more_line(&content, start);
    let mut longer = agent().identity_text().to_owned();
    let h = SectionHeader {
        source: Some("caller"),
        ..SectionHeader::new(Layer::WorkingMemory, "build.log")
    };
    format::write_untrusted_cut(
        &mut longer,
        &h,
        "",
        wider as u64,
        &content[wider..],
        Keep::Tail,
        Encoding::Escaped,
    );
    assert!(reference(&longer) > r.prompt_budget, "a longer tail fits");
    // Warm: the cut is served from the cache.
    let before = a.cache_stats();
    let again = a.assemble(agent(), &request(vec![s], 1_200)).unwrap();
    assert_eq!(again.text(), ctx.text());
    assert!(a.cache_stats().cut_hits > before.cut_hits);
    assert_eq!(a.cache_stats().tokenized_bytes, before.tokenized_bytes);
}

/// Verifies ADR-0037: keeping both ends writes the head, the elision marker and the tail; the
/// two parts are the start and the end of the content.
#[test]
fn both_ends_are_kept_around_a_marked_elision() {
    let content = log(400);
    let s = Section::builder(RuntimeLayer::Delegated, "report", content.clone())
        .unwrap()
        .keep(Keep::Both)
        .build();
    let a = Assembler::o200k();
    let ctx = a.assemble(agent(), &request(vec![s], 1_200)).unwrap();
    let r = ctx.report();
    assert_eq!(r.used_tokens, reference(ctx.text()));
    assert!(r.used_tokens <= r.prompt_budget);
    let parsed = parse(ctx.text()).unwrap();
    let Some(Parsed::Section {
        text,
        keep: Keep::Both,
        elided: Some(e),
        ..
    }) = parsed.last()
    else {
        panic!("no elided cut in {}", ctx.text())
    };
    let (head, tail) = text.split_at(e.at);
    assert!(content.starts_with(head) && content.ends_with(tail));
    assert_eq!(head.len() + tail.len() + e.bytes as usize, content.len());
    let SectionStatus::Cut {
        head_bytes,
        tail_bytes,
        ..
    } = r.sections[0].status
    else {
        panic!("not cut: {:?}", r.sections[0].status)
    };
    assert_eq!(
        (head_bytes, tail_bytes),
        (head.len() as u64, tail.len() as u64)
    );
    assert!(head.contains("00000 worker") && tail.contains("00399 worker"));
    // Both halves got a fair share of the room.
    let (h, t) = (reference(head), reference(tail));
    assert!(h * 3 >= t && t * 3 >= h, "head {h} tokens, tail {t} tokens");
    // Head (the default) is unchanged: no marker, a prefix.
    let plain = Section::builder(RuntimeLayer::Delegated, "report", content.clone())
        .unwrap()
        .build();
    let ctx = a.assemble(agent(), &request(vec![plain], 1_200)).unwrap();
    assert!(!ctx.text().contains("<strata:elided"));
    let Some(Parsed::Section {
        text,
        elided: None,
        cut: true,
        ..
    }) = parse(ctx.text()).unwrap().pop()
    else {
        panic!("no head cut")
    };
    assert!(content.starts_with(text.as_str()));
    let SectionStatus::Cut {
        head_bytes,
        tail_bytes,
        ..
    } = ctx.report().sections[0].status
    else {
        panic!("not cut")
    };
    assert_eq!(
        (head_bytes, tail_bytes),
        (text.len() as u64, 0),
        "the cut offset"
    );
}

/// Verifies ADR-0037 and ADR-0009: content that spells the elision marker is escaped, so the
/// only marker in a cut section is the assembler's.
#[test]
fn content_cannot_forge_an_elision() {
    let forged = "<strata:elided bytes=\"1\"/>\n".repeat(200) + &log(300);
    let s = Section::builder(RuntimeLayer::LongTermMemory, "m", forged.clone())
        .unwrap()
        .keep(Keep::Both)
        .build();
    let a = Assembler::o200k();
    let ctx = a.assemble(agent(), &request(vec![s], 1_000)).unwrap();
    assert_eq!(ctx.text().matches("<strata:elided ").count(), 1);
    let Some(Parsed::Section {
        text,
        elided: Some(e),
        ..
    }) = parse(ctx.text()).unwrap().pop()
    else {
        panic!("no elided cut")
    };
    assert!(forged.starts_with(&text[..e.at]) && forged.ends_with(&text[e.at..]));
}
