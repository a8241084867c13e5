//! Session operations are atomic and retry-safe (ADR-0031), checked against a plain model:
//! random sequences of prepares (some refused for their budget or because a tool call has no
//! result yet), replies (some with a non-object argument or a repeated call id), tool results
//! (some for calls that do not exist or already have one), continues, resets and restarts of the
//! runtime run on a real SQLite file and a real PostgreSQL server. After every step the stored
//! history equals the model, which changes only when the operation succeeded; after every
//! refusal the next valid operation succeeds; a repeat of a keyed operation gets the first
//! answer and writes nothing.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

#[cfg(feature = "postgres")]
#[path = "../../strata-memory/tests/pg_harness/mod.rs"]
mod pg_harness;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use serde_json::{json, Value};
use strata_assembler::{agent::*, assemble::*, prelude::*, session::*};
use strata_core::Role;

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-cli/demo")
}

fn agent() -> VerifiedAgent {
    let trust = TrustStore::read(&demo().join("trust.toml")).unwrap();
    Loader::new(&trust, &RollbackGuard::in_memory())
        .load_file(&demo().join("agent.signed.json"))
        .unwrap()
}

/// Where a runtime's store lives.
#[derive(Clone)]
enum Store {
    Sqlite(PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(String),
}

fn runtime(store: &Store) -> Runtime {
    let b = Runtime::builder(agent())
        .provider(Provider::Anthropic, "test-model")
        .max_tokens(256)
        .tools(vec![AnnouncedTool::new(
            ToolName::new("file_read").unwrap(),
            "",
        )]);
    match store {
        Store::Sqlite(p) => b.sqlite(p),
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => b.postgres(url),
    }
    .build()
    .unwrap()
}

/// One step of a conversation.
#[derive(Debug, Clone)]
enum Op {
    /// A user message of `words` words; refused when it does not `fit` (a window too small for
    /// the identity).
    Prepare {
        words: u8,
        fits: bool,
    },
    /// A reply with or without text, calling `c{id}` with an object (or a string) argument.
    Reply {
        text: bool,
        calls: Vec<(u8, bool)>,
    },
    /// A result for the call `c{id}`.
    Result {
        id: u8,
    },
    Continue,
    Reset,
    /// The runtime is dropped and built again on the same store.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u8..40, prop::bool::weighted(0.8)).prop_map(|(words, fits)| Op::Prepare { words, fits }),
        3 => (any::<bool>(), prop::collection::vec((0u8..4, prop::bool::weighted(0.85)), 0..3))
            .prop_map(|(text, calls)| Op::Reply { text, calls }),
        3 => (0u8..5).prop_map(|id| Op::Result { id }),
        1 => Just(Op::Continue),
        1 => Just(Op::Reset),
        1 => Just(Op::Restart),
    ]
}

/// What the session must hold: role, call id, text (for a call, its arguments).
type Model = Vec<(Role, Option<String>, String)>;

fn stored(s: &Session<'_>) -> Model {
    s.turns()
        .unwrap()
        .into_iter()
        .map(|e| {
            let text = if e.role == Role::ToolCall {
                let v: Value = serde_json::from_str(e.content.as_str()).unwrap();
                v["arguments"].to_string()
            } else {
                e.content.as_str().to_owned()
            };
            (e.role, e.call_id.map(|c| c.to_string()), text)
        })
        .collect()
}

/// Calls of the model that have no result yet.
fn pending(model: &Model) -> Vec<String> {
    let mut open = Vec::new();
    for (role, call, _) in model {
        match (role, call) {
            (Role::ToolCall, Some(c)) => open.push(c.clone()),
            (Role::ToolResult, Some(c)) => open.retain(|o| o != c),
            _ => {}
        }
    }
    open
}

fn message(words: u8, step: usize) -> String {
    (0..words)
        .map(|i| format!("w{}", (i as usize * 7 + step) % 31))
        .collect::<Vec<_>>()
        .join(" ")
}

fn opts(fits: bool) -> TurnOptions {
    TurnOptions {
        // 64 tokens cannot hold the demo agent's identity: the turn is refused.
        context_window: Some(if fits { 32_000 } else { 64 }),
        ..TurnOptions::default()
    }
}

static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// Run `ops` on a fresh session of `store`, checking the model after every step.
fn drive(store: &Store, ops: &[Op], keyed: &[bool]) -> Result<(), TestCaseError> {
    let id = format!(
        "atomic-{}-{}",
        std::process::id(),
        SESSIONS.fetch_add(1, Ordering::Relaxed)
    );
    let mut rt = runtime(store);
    let mut model: Model = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let key = keyed.get(step).copied().unwrap_or(false);
        let s = rt.session(id.as_str());
        let before = stored(&s);
        prop_assert_eq!(&before, &model, "before step {}", step);
        let open = pending(&model);
        // What the operation should do to the model, or None when it must be refused.
        let mut refused = false;
        match op {
            Op::Prepare { words, fits } => {
                let text = message(*words, step);
                let expect_ok = *fits && open.is_empty();
                let o = opts(*fits);
                let r = if key {
                    let oid = OperationId::new(format!("k{step}"), text.as_bytes()).unwrap();
                    let answer = |t: &PreparedTurn| Ok(String::from_utf8(t.sent.clone()).unwrap());
                    let first = s.prepare_once(&oid, &text, &o, &answer);
                    if let Ok(Outcome::Done(turn)) = &first {
                        // The repeat writes nothing and answers the bytes sent the first time.
                        let again = s.prepare_once(&oid, &text, &o, &answer).unwrap();
                        let Outcome::Repeated(a) = again else {
                            return Err(TestCaseError::fail("a repeat ran again"));
                        };
                        prop_assert_eq!(a.as_bytes(), &turn.sent[..]);
                        let other =
                            OperationId::new(format!("k{step}"), b"another request").unwrap();
                        let reused = matches!(
                            s.prepare_once(&other, "another request", &o, &answer),
                            Err(SessionError::KeyReused { .. })
                        );
                        prop_assert!(reused, "the key was taken for another request");
                    }
                    first.map(|_| ())
                } else {
                    s.prepare(&text, &o).map(|_| ())
                };
                prop_assert_eq!(
                    r.is_ok(),
                    expect_ok,
                    "prepare at step {}: {:?}",
                    step,
                    r.err()
                );
                if r.is_ok() {
                    model.push((Role::User, None, text));
                } else {
                    refused = true;
                }
            }
            Op::Reply { text, calls } => {
                // A reply while calls wait for their results would break the history for
                // good; runtimes answer the calls first.
                if !open.is_empty() {
                    continue;
                }
                let mut reply = Reply::default();
                if *text {
                    reply.text = format!("answer at step {step}");
                }
                let mut expect_ok = *text || !calls.is_empty();
                let mut ids = Vec::new();
                for (c, object) in calls {
                    let cid = format!("c{c}");
                    let args = if *object {
                        json!({"path": format!("f{step}.txt")})
                    } else {
                        json!("f.txt")
                    };
                    let known = model.iter().any(|(r, id, _)| {
                        *r == Role::ToolCall && id.as_deref() == Some(cid.as_str())
                    });
                    expect_ok &= *object && !known && !ids.contains(&cid);
                    ids.push(cid.clone());
                    reply.tool_calls.push(ToolCall {
                        id: cid,
                        name: ToolName::new("file_read").unwrap(),
                        arguments: args,
                    });
                }
                let r = if key {
                    let oid = OperationId::new(
                        format!("k{step}"),
                        serde_json::to_vec(&reply).unwrap().as_slice(),
                    )
                    .unwrap();
                    let answer = |m: &MarkerReport| Ok(format!("{} markers", m.outcomes.len()));
                    let first = s.record_reply_once(&oid, &reply, &answer);
                    if first.is_ok() {
                        let again = s.record_reply_once(&oid, &reply, &answer).unwrap();
                        prop_assert!(matches!(again, Outcome::Repeated(ref a) if a == "0 markers"));
                    }
                    first.map(|_| ())
                } else {
                    s.record_reply(&reply).map(|_| ())
                };
                prop_assert_eq!(
                    r.is_ok(),
                    expect_ok,
                    "reply at step {}: {:?}",
                    step,
                    r.err()
                );
                if r.is_ok() {
                    if *text {
                        model.push((Role::Assistant, None, reply.text.clone()));
                    }
                    for c in &reply.tool_calls {
                        model.push((Role::ToolCall, Some(c.id.clone()), c.arguments.to_string()));
                    }
                } else {
                    refused = true;
                }
            }
            Op::Result { id } => {
                let cid = format!("c{id}");
                let expect_ok = open.contains(&cid);
                let out = format!("output of {cid} at step {step}");
                let r = if key {
                    let oid = OperationId::new(format!("k{step}"), out.as_bytes()).unwrap();
                    let first = s.record_tool_result_once(&oid, &cid, &out, "recorded");
                    if first.is_ok() {
                        let again = s
                            .record_tool_result_once(&oid, &cid, &out, "recorded")
                            .unwrap();
                        prop_assert!(matches!(again, Outcome::Repeated(ref a) if a == "recorded"));
                    }
                    first.map(|_| ())
                } else {
                    s.record_tool_result(&cid, &out)
                };
                prop_assert_eq!(
                    r.is_ok(),
                    expect_ok,
                    "result at step {}: {:?}",
                    step,
                    r.err()
                );
                if r.is_ok() {
                    model.push((Role::ToolResult, Some(cid), out));
                } else {
                    refused = true;
                }
            }
            Op::Continue => {
                let _ = s.continue_turn(&opts(true));
            }
            Op::Reset => {
                let n = if key {
                    let oid = OperationId::new(format!("k{step}"), b"reset").unwrap();
                    let answer = |n: &usize| Ok(n.to_string());
                    let Outcome::Done(n) = s.reset_once(&oid, &answer).unwrap() else {
                        return Err(TestCaseError::fail("a first reset was a repeat"));
                    };
                    let again = s.reset_once(&oid, &answer).unwrap();
                    prop_assert!(matches!(again, Outcome::Repeated(ref a) if *a == n.to_string()));
                    n
                } else {
                    s.reset().unwrap()
                };
                prop_assert_eq!(n, model.len());
                model.clear();
            }
            Op::Restart => {
                drop(s);
                rt = runtime(store);
            }
        }
        let s = rt.session(id.as_str());
        prop_assert_eq!(&stored(&s), &model, "after step {} ({:?})", step, op);
        if refused {
            // The session is still usable: answer what waits for an answer, then ask.
            for cid in pending(&model) {
                s.record_tool_result(&cid, "late output").unwrap();
                model.push((Role::ToolResult, Some(cid), "late output".into()));
            }
            let text = format!("still there? {step}");
            s.prepare(&text, &opts(true))
                .map_err(|e| TestCaseError::fail(format!("after a refusal at step {step}: {e}")))?;
            model.push((Role::User, None, text));
            prop_assert_eq!(&stored(&s), &model, "after the repair of step {}", step);
        }
    }
    Ok(())
}

/// Cases per property: `PROPTEST_CASES` when set (longer runs), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(24)))]

    /// Verifies ADR-0031 on a SQLite file: every operation is all or nothing, refusals leave
    /// the session usable, keyed repeats write nothing, and restarts lose nothing acknowledged.
    #[test]
    fn sqlite_sessions_follow_the_model(
        ops in prop::collection::vec(op(), 1..14),
        keyed in prop::collection::vec(any::<bool>(), 14),
    ) {
        let dir = tempfile::tempdir().unwrap();
        drive(&Store::Sqlite(dir.path().join("m.db")), &ops, &keyed)?;
    }
}

#[cfg(feature = "postgres")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(12)))]

    /// Verifies ADR-0031 on a PostgreSQL server the test starts: the same model, the same rules.
    #[test]
    fn postgres_sessions_follow_the_model(
        ops in prop::collection::vec(op(), 1..14),
        keyed in prop::collection::vec(any::<bool>(), 14),
    ) {
        let url = pg_harness::shared().test_params();
        drive(&Store::Postgres(url), &ops, &keyed)?;
    }
}

/// Verifies ADR-0031: the case the old session lost for good. A turn refused while a tool call
/// waits for its result stores nothing, so once the result is recorded the next turn goes out.
#[test]
fn a_refused_turn_after_an_unanswered_call_leaves_the_session_usable() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(&Store::Sqlite(dir.path().join("m.db")));
    let s = rt.session("s");
    s.prepare("read notes.txt", &opts(true)).unwrap();
    s.record_reply(&Reply::tool_call(
        "call_1",
        ToolName::new("file_read").unwrap(),
        json!({"path": "notes.txt"}),
    ))
    .unwrap();
    let held = s.turns().unwrap();
    assert!(matches!(
        s.prepare("and the other file?", &opts(true)),
        Err(SessionError::Assemble(AssembleError::History { .. }))
    ));
    assert_eq!(s.turns().unwrap(), held, "the refused message was stored");
    s.record_tool_result("call_1", "notes").unwrap();
    let t = s.prepare("and the other file?", &opts(true)).unwrap();
    let last = t.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(s.turns().unwrap().len(), held.len() + 2);
}

/// Verifies ADR-0031: a reply refused for its third tool call stores neither its text nor the
/// calls before the bad one.
#[test]
fn a_refused_reply_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(&Store::Sqlite(dir.path().join("m.db")));
    let s = rt.session("s");
    s.prepare("read two files", &opts(true)).unwrap();
    let name = ToolName::new("file_read").unwrap();
    let reply = Reply {
        text: "Reading both.".into(),
        tool_calls: vec![
            ToolCall {
                id: "a".into(),
                name: name.clone(),
                arguments: json!({"path": "1"}),
            },
            ToolCall {
                id: "b".into(),
                name: name.clone(),
                arguments: json!({"path": "2"}),
            },
            ToolCall {
                id: "a".into(),
                name,
                arguments: json!({"path": "3"}),
            },
        ],
        reasoning: Vec::new(),
    };
    let held = s.turns().unwrap();
    assert!(matches!(
        s.record_reply(&reply),
        Err(SessionError::Store(_))
    ));
    assert_eq!(s.turns().unwrap(), held);
}

/// Verifies ADR-0034: a runtime told its agent's key is revoked refuses its turns until a
/// re-check against a store that trusts the key again succeeds.
#[test]
fn a_runtime_rechecked_against_a_revoking_store_refuses_turns() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(&Store::Sqlite(dir.path().join("m.db")));
    let trust_text = std::fs::read_to_string(demo().join("trust.toml")).unwrap();
    let trust = TrustStore::from_toml(&trust_text).unwrap();
    rt.recheck(&trust).unwrap();
    let s = rt.session("r");
    s.prepare("hello", &opts(true)).unwrap();
    let signer = rt.agent().signers()[0].to_string();
    // Another trusted key keeps the store valid once the signer is revoked.
    let other = strata_agentdef::KeyPair::generate();
    let other_entry = TrustStore::toml_for(&[("other", &other.public())]);
    let other_keys = &other_entry[other_entry.find("[[keys]]").unwrap()..];
    let revoking = TrustStore::from_toml(&format!(
        "{trust_text}\n{other_keys}\n[[revoked]]\nid = \"{signer}\"\nreason = \"lost\"\n"
    ))
    .unwrap();
    assert!(rt.recheck(&revoking).is_err());
    let held = s.turns().unwrap();
    assert!(matches!(
        s.prepare("still there?", &opts(true)),
        Err(SessionError::Assemble(AssembleError::AgentNotValid(_)))
    ));
    assert_eq!(s.turns().unwrap(), held);
    rt.recheck(&trust).unwrap();
    s.prepare("back", &opts(true)).unwrap();
}
