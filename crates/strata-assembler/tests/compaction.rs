//! Conversation compaction through the session API (ADR-0047): the turns a request leaves out
//! are named; a summary of a range stands in for it on later turns, as fenced data, while the
//! log keeps every entry; refusals store nothing; a keyed compaction is retry-safe; the
//! summary survives a restart and goes with a reset.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod demo;

use std::path::Path;

use strata_assembler::prelude::*;
use strata_assembler::session::{Compaction, OperationId, Outcome};

fn runtime(dir: &Path) -> Runtime {
    Runtime::builder(demo::agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .sqlite(dir.join("m.db"))
        .build()
        .unwrap()
}

/// Four exchanges with long answers: entries 1-8.
fn conversation(s: &Session<'_>) {
    for i in 1..=4 {
        s.prepare(&format!("Question number {i}?"), &TurnOptions::default())
            .unwrap();
        let answer = format!("Answer number {i}: {}", "details ".repeat(300));
        s.record_reply(&Reply::text(answer)).unwrap();
    }
}

fn summary(first: u64, last: u64) -> Compaction {
    Compaction {
        first_seq: first,
        last_seq: last,
        summary: "The user asked about deploy windows; Fridays are frozen.".into(),
        model: Some("claude-haiku-4-5".into()),
    }
}

#[test]
fn a_summary_stands_in_for_its_range_and_the_log_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("c");
    conversation(&s);
    // A small window leaves the oldest turns out, and the turn says which.
    let small = TurnOptions {
        context_window: Some(3_000),
        ..TurnOptions::default()
    };
    let tight = s.prepare("Question number 5?", &small).unwrap();
    let dropped = tight.dropped_turns();
    assert!(
        !dropped.is_empty() && dropped.iter().all(|seq| *seq < 9),
        "{dropped:?}"
    );
    let entries = s.turns().unwrap();
    for seq in &dropped {
        let e = entries.iter().find(|e| e.seq == *seq).unwrap();
        assert!(!tight.body.to_string().contains(e.content.as_str()));
    }

    let record = s.compact(&summary(1, 4)).unwrap();
    assert_eq!(
        (record.first_seq, record.last_seq, record.entries),
        (1, 4, 4)
    );
    let turn = s.continue_turn(&TurnOptions::default()).unwrap();
    let body = turn.body.to_string();
    assert!(body.contains("Fridays are frozen."), "{body}");
    for gone in ["Question number 1?", "Answer number 2:"] {
        assert!(!body.contains(gone), "`{gone}` is still sent: {body}");
    }
    for kept in [
        "Question number 3?",
        "Answer number 4:",
        "Question number 5?",
    ] {
        assert!(body.contains(kept), "`{kept}` is missing: {body}");
    }
    // It leads the turns that followed its range.
    assert!(body.find("Fridays are frozen.") < body.find("Question number 3?"));
    // Fenced data of layer 5, not a turn: it cannot speak for the user or the identity.
    let fence = body
        .find("id=\\\"summary/1-4\\\"")
        .expect("the summary's section");
    let open = &body[body[..fence].rfind("<strata:section").unwrap()..fence + 80];
    assert!(
        open.contains("layer=\\\"5\\\"") && open.contains("authority=\\\"data\\\""),
        "{open}"
    );
    let section = turn
        .report()
        .sections
        .iter()
        .find(|x| x.id.as_str() == "summary/1-4")
        .unwrap();
    assert!(section.role.is_none(), "{section:?}");
    assert_eq!(section.provenance.record.as_deref(), Some("1-4"));
    // Nothing is deleted.
    assert_eq!(s.turns().unwrap().len(), 9);

    // A new runtime on the same store sees it; a reset takes it away with the turns.
    drop(rt);
    let rt = runtime(dir.path());
    let s = rt.session("c");
    assert_eq!(s.compactions().unwrap().len(), 1);
    s.reset().unwrap();
    assert!(s.compactions().unwrap().is_empty());
}

#[test]
fn a_range_that_cannot_be_summarised_is_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("r");
    conversation(&s);
    s.compact(&summary(1, 2)).unwrap();
    for (c, says) in [
        (summary(2, 4), "overlaps the summary of 1-2"),
        (summary(3, 40), "no entry 40"),
        (summary(5, 8), "exchange in progress"),
    ] {
        let err = s.compact(&c).unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
        assert_eq!(s.compactions().unwrap().len(), 1);
    }
    let unknown = rt.session("nobody").compact(&summary(1, 2)).unwrap_err();
    assert!(unknown.to_string().contains("holds no turns"), "{unknown}");
}

#[test]
fn a_keyed_compaction_is_retry_safe() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let s = rt.session("k");
    conversation(&s);
    let op = OperationId::new("compact-1", b"1-4").unwrap();
    let answer = |r: &strata_assembler::session::CompactionRecord| Ok(format!("{}", r.entries));
    let first = s.compact_once(&op, &summary(1, 4), &answer).unwrap();
    assert!(matches!(first, Outcome::Done(_)));
    let again = s.compact_once(&op, &summary(1, 4), &answer).unwrap();
    assert!(
        matches!(again, Outcome::Repeated(ref a) if a == "4"),
        "{again:?}"
    );
    assert_eq!(s.compactions().unwrap().len(), 1);
    let other = OperationId::new("compact-1", b"5-6").unwrap();
    let reused = s.compact_once(&other, &summary(5, 6), &answer).unwrap_err();
    assert!(matches!(reused, SessionError::KeyReused { .. }), "{reused}");
    assert_eq!(s.compactions().unwrap().len(), 1);
}
