//! Conversation compaction over the service, against the real binary (ADR-0047): a turn names
//! the entries it left out; a summary posted for a range stands in for it on the next turn,
//! as fenced data, while the session keeps every entry; a refused summary stores nothing; a
//! keyed one is retry-safe. Verifies ADR-0047.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

mod serve_harness;

use serde_json::json;
use serve_harness::Server;

#[test]
fn a_summary_posted_for_a_range_stands_in_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let s = "/v1/sessions/c-1";
    for i in 1..=4 {
        let t = srv.post(
            &format!("{s}/turns"),
            &json!({"message": format!("Question number {i}?")}),
        );
        assert_eq!(t.status, 200, "{:?}", t.body);
        let answer = format!("Answer number {i}: {}", "details ".repeat(300));
        let r = srv.post(&format!("{s}/replies"), &json!({"text": answer}));
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    // A small window leaves entries out, and the answer names them.
    let tight = srv.post(
        &format!("{s}/turns"),
        &json!({"message": "Question number 5?", "context_window": 3000}),
    );
    assert_eq!(tight.status, 200, "{:?}", tight.body);
    let dropped = tight.body["dropped_turns"].as_array().unwrap();
    assert!(!dropped.is_empty(), "{}", tight.text);
    assert!(
        dropped.iter().all(|d| d.as_u64().unwrap() < 9),
        "{dropped:?}"
    );

    let summary = json!({"first_seq": 1, "last_seq": 4, "summary": "Fridays are frozen.", "model": "claude-haiku-4-5"});
    let path = format!("{s}/compactions");
    let first = srv.keyed("POST", &path, Some(&summary), "compact-1");
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(first.body["entries"], 4);
    let again = srv.keyed("POST", &path, Some(&summary), "compact-1");
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    let other = json!({"first_seq": 5, "last_seq": 6, "summary": "Other."});
    let reused = srv.keyed("POST", &path, Some(&other), "compact-1");
    assert_eq!(reused.status, 422, "{:?}", reused.body);
    assert_eq!(reused.code(), "idempotency_key_reused");
    // Refused ranges store nothing.
    for (body, says) in [
        (
            json!({"first_seq": 3, "last_seq": 6, "summary": "x"}),
            "overlaps",
        ),
        (
            json!({"first_seq": 5, "last_seq": 9, "summary": "x"}),
            "exchange in progress",
        ),
        (
            json!({"first_seq": 5, "last_seq": 6, "summary": " "}),
            "empty",
        ),
    ] {
        let r = srv.post(&path, &body);
        assert_eq!(r.status, 400, "{:?}", r.body);
        assert!(r.text.contains(says), "{}", r.text);
    }
    let listed = srv.get(&path);
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(listed.body["compactions"].as_array().unwrap().len(), 1);
    assert_eq!(
        srv.post("/v1/sessions/nobody/compactions", &summary).status,
        404
    );

    // The next turn carries the summary, fenced as data, instead of entries 1-4.
    let next = srv.post(&format!("{s}/turns"), &json!({}));
    assert_eq!(next.status, 200, "{:?}", next.body);
    let body = next.body["request"].to_string();
    assert!(body.contains("Fridays are frozen."), "{body}");
    assert!(
        body.contains("id=\\\"summary/1-4\\\" authority=\\\"data\\\""),
        "{body}"
    );
    assert!(!body.contains("Question number 1?") && body.contains("Question number 3?"));
    // The session keeps every entry.
    let session = srv.get(s);
    assert_eq!(session.body["turns"].as_array().unwrap().len(), 9);
}
