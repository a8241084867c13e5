//! The receipt log in PostgreSQL on a real server that the test starts on loopback: runtimes on
//! separate connections append at once and extend one chain with nothing lost; deleted,
//! edited, re-numbered, re-chained and forged rows are each refused by the audit with their own
//! error, and nothing is appended after the newest entry was changed. Verifies ADR-0021.
#![cfg(feature = "postgres")]
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

#[path = "../../strata-memory/tests/pg_harness/mod.rs"]
mod pg_harness;
mod support;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use sha2::{Digest as _, Sha256};
use strata_assembler::receipt::log_pg::{self as receipt_log_pg, PgReceiptLog};
use strata_assembler::{agent::*, assemble::*};

fn runtime_key() -> KeyPair {
    KeyPair::from_seed(&[0x52; 32])
}

fn trust() -> TrustStore {
    TrustStore::from_toml(&TrustStore::toml_for(&[(
        "runtime",
        &runtime_key().public(),
    )]))
    .unwrap()
}

/// `n` real receipts: assemblies of distinct memory sections, signed by the runtime key.
fn receipts(n: usize) -> Vec<Vec<u8>> {
    static AGENT: OnceLock<VerifiedAgent> = OnceLock::new();
    let agent = AGENT.get_or_init(support::agent);
    let asm = Assembler::o200k();
    let key = runtime_key();
    (0..n)
        .map(|i| {
            let section = Section::builder(
                RuntimeLayer::LongTermMemory,
                format!("m{i}"),
                format!("memory number {i}"),
            )
            .unwrap()
            .build();
            let req = AssemblyRequest {
                sections: vec![section],
                ..Default::default()
            };
            asm.assemble_with_receipt(agent, &req, &RequestParams::default(), &key)
                .unwrap()
                .receipt
                .to_json()
                .into_bytes()
        })
        .collect()
}

fn client(params: &str) -> postgres::Client {
    postgres::Client::connect(params, postgres::NoTls).unwrap()
}

/// SHA-256 of an entry as the log format defines it, computed here with `sha2` directly.
fn digest(seq: i64, unix_ms: i64, prev: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(format!("{seq} {unix_ms} {} {prev}\n", body.len()).as_bytes());
    h.update(body);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Verifies ADR-0021: the log is created once, explicitly; a schema without it is refused.
#[test]
fn the_log_is_created_once_and_a_missing_log_is_refused() {
    let server = pg_harness::shared();
    let params = server.test_params();
    let schema = pg_harness::fresh_schema("rlog_init");
    let e = PgReceiptLog::open(&params, &schema).unwrap_err();
    assert_eq!(e.cause(), "not_initialised", "{e}");
    let e = receipt_log_pg::audit(&params, &schema, None, None).unwrap_err();
    assert_eq!(e.cause(), "not_initialised", "{e}");
    let mut log = PgReceiptLog::init(&params, &schema).unwrap();
    assert_eq!(
        log.head().unwrap(),
        (0, strata_assembler::receipt::log::GENESIS.to_owned())
    );
    let e = PgReceiptLog::init(&params, &schema).unwrap_err();
    assert_eq!(e.cause(), "database", "{e}");
    let e = PgReceiptLog::open(&params, "Bad-Name").unwrap_err();
    assert_eq!(e.cause(), "database", "{e}");
}

/// Verifies ADR-0021: four runtimes on their own connections append at the same time; every
/// acknowledged entry is in the log once, at the sequence number it was acknowledged with, and
/// the whole chain verifies with every receipt's signature.
#[test]
fn concurrent_runtimes_extend_one_chain_and_lose_nothing() {
    const WRITERS: usize = 4;
    const EACH: usize = 15;
    let server = pg_harness::shared();
    let params = server.test_params();
    let schema = pg_harness::fresh_schema("rlog_conc");
    drop(PgReceiptLog::init(&params, &schema).unwrap());
    let bodies = receipts(WRITERS * EACH);
    let acked: BTreeMap<u64, (String, Vec<u8>)> = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .chunks(EACH)
            .map(|chunk| {
                let (params, schema) = (&params, &schema);
                s.spawn(move || {
                    let mut log = PgReceiptLog::open(params, schema).unwrap();
                    chunk
                        .iter()
                        .map(|b| {
                            let a = log.append(b).unwrap();
                            (a.seq, (a.digest, b.clone()))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(
        acked.len(),
        WRITERS * EACH,
        "a sequence number was given twice"
    );
    let head = acked.values().last().unwrap().0.clone();
    let audit = receipt_log_pg::audit(&params, &schema, Some(&trust()), Some(&head)).unwrap();
    assert_eq!(audit.entries.len(), WRITERS * EACH);
    assert_eq!(audit.receipts.len(), WRITERS * EACH);
    for e in &audit.entries {
        let (d, body) = &acked[&e.seq];
        assert_eq!((&e.digest, &e.body), (d, body), "entry {}", e.seq);
    }
    // The chain links are the format's, recomputed here independently.
    let mut prev = strata_assembler::receipt::log::GENESIS.to_owned();
    for e in &audit.entries {
        let seq = i64::try_from(e.seq).unwrap();
        assert_eq!(e.prev, prev);
        assert_eq!(e.digest, digest(seq, e.unix_ms, &e.prev, &e.body));
        prev = e.digest.clone();
    }
}

/// A fresh log of `n` entries, and a connection for tampering with it.
fn log_of(prefix: &str, n: usize) -> (String, String, String, postgres::Client) {
    let server = pg_harness::shared();
    let params = server.test_params();
    let schema = pg_harness::fresh_schema(prefix);
    let mut log = PgReceiptLog::init(&params, &schema).unwrap();
    let mut head = String::new();
    for b in receipts(n) {
        head = log.append(&b).unwrap().digest;
    }
    let c = client(&params);
    (params, schema, head, c)
}

fn audit_cause(params: &str, schema: &str, head: Option<&str>) -> &'static str {
    match receipt_log_pg::audit(params, schema, Some(&trust()), head) {
        Ok(_) => "ok",
        Err(e) => e.cause(),
    }
}

/// Verifies ADR-0021: each kind of tampering with the rows is refused by the audit with its own
/// error, and a log opened for appending refuses a tampered chain.
#[test]
fn tampered_rows_are_refused_each_with_its_own_error() {
    // A deleted row in the middle.
    let (params, schema, head, mut c) = log_of("rlog_del", 4);
    assert_eq!(audit_cause(&params, &schema, Some(&head)), "ok");
    c.execute(
        &format!("DELETE FROM {schema}.receipt_log WHERE seq = 1"),
        &[],
    )
    .unwrap();
    assert_eq!(audit_cause(&params, &schema, None), "deleted");
    assert_eq!(
        PgReceiptLog::open(&params, &schema).unwrap_err().cause(),
        "deleted"
    );

    // The newest row deleted: only the kept head shows it.
    let (params, schema, head, mut c) = log_of("rlog_tail", 3);
    c.execute(
        &format!("DELETE FROM {schema}.receipt_log WHERE seq = 2"),
        &[],
    )
    .unwrap();
    assert_eq!(audit_cause(&params, &schema, None), "ok");
    assert_eq!(audit_cause(&params, &schema, Some(&head)), "head_mismatch");

    // One byte of a receipt changed.
    let (params, schema, _, mut c) = log_of("rlog_edit", 3);
    c.execute(
        &format!(
            "UPDATE {schema}.receipt_log SET body = overlay(body placing '\\x20'::bytea from 10) \
             WHERE seq = 1"
        ),
        &[],
    )
    .unwrap();
    assert_eq!(audit_cause(&params, &schema, None), "edited");

    // Two entries swapped by renumbering.
    let (params, schema, _, mut c) = log_of("rlog_swap", 3);
    c.batch_execute(&format!(
        "UPDATE {schema}.receipt_log SET seq = 100 WHERE seq = 0;
         UPDATE {schema}.receipt_log SET seq = 0 WHERE seq = 1;
         UPDATE {schema}.receipt_log SET seq = 1 WHERE seq = 100;"
    ))
    .unwrap();
    assert_eq!(audit_cause(&params, &schema, None), "edited");

    // An entry re-chained to another predecessor, its digest recomputed to match.
    let (params, schema, _, mut c) = log_of("rlog_chain", 3);
    let row = c
        .query_one(
            &format!("SELECT unix_ms, body FROM {schema}.receipt_log WHERE seq = 2"),
            &[],
        )
        .unwrap();
    let (ms, body): (i64, Vec<u8>) = (row.get(0), row.get(1));
    let fake_prev = "ab".repeat(32);
    c.execute(
        &format!("UPDATE {schema}.receipt_log SET prev = $1, digest = $2 WHERE seq = 2"),
        &[&fake_prev, &digest(2, ms, &fake_prev, &body)],
    )
    .unwrap();
    assert_eq!(audit_cause(&params, &schema, None), "chain_broken");

    // A well-chained entry whose receipt the runtime key never signed.
    let (params, schema, head, mut c) = log_of("rlog_forge", 2);
    let forged =
        br#"{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}"#;
    c.execute(
        &format!(
            "INSERT INTO {schema}.receipt_log (seq, unix_ms, prev, digest, body) \
             VALUES (2, 0, $1, $2, $3)"
        ),
        &[&head, &digest(2, 0, &head, forged), &forged.as_slice()],
    )
    .unwrap();
    assert_eq!(audit_cause(&params, &schema, None), "receipt");
    // Without the trust store the chain itself is intact: the signature is what refuses it.
    receipt_log_pg::audit(&params, &schema, None, None).unwrap();
}

/// Verifies ADR-0021: a runtime that already holds the log open appends nothing after the
/// newest entry was edited, removed or replaced behind its back.
#[test]
fn nothing_is_appended_after_the_newest_entry_was_edited() {
    let (params, schema, _, mut c) = log_of("rlog_live", 2);
    let mut log = PgReceiptLog::open(&params, &schema).unwrap();
    c.execute(
        &format!("UPDATE {schema}.receipt_log SET unix_ms = unix_ms + 1 WHERE seq = 1"),
        &[],
    )
    .unwrap();
    let e = log.append(&receipts(1)[0]).unwrap_err();
    assert_eq!(e.cause(), "edited", "{e}");

    // The newest entries removed behind a writer's back: the next entry would cover the gap,
    // so the writer that knew them refuses, though the rows left are a consistent chain.
    let (params, schema, _, mut c) = log_of("rlog_cut_live", 3);
    let mut log = PgReceiptLog::open(&params, &schema).unwrap();
    c.execute(
        &format!("DELETE FROM {schema}.receipt_log WHERE seq = 2"),
        &[],
    )
    .unwrap();
    let e = log.append(&receipts(1)[0]).unwrap_err();
    assert_eq!(e.cause(), "head_mismatch", "{e}");
    // The newest entry replaced by another well-chained one: refused the same way.
    let (params, schema, _, mut c) = log_of("rlog_swap_live", 2);
    let mut log = PgReceiptLog::open(&params, &schema).unwrap();
    let row = c
        .query_one(
            &format!("SELECT prev FROM {schema}.receipt_log WHERE seq = 1"),
            &[],
        )
        .unwrap();
    let prev: String = row.get(0);
    let other = receipts(2).pop().unwrap();
    c.execute(
        &format!(
            "UPDATE {schema}.receipt_log SET body = $1, unix_ms = 5, digest = $2 WHERE seq = 1"
        ),
        &[&other, &digest(1, 5, &prev, &other)],
    )
    .unwrap();
    let e = log.append(&receipts(1)[0]).unwrap_err();
    assert_eq!(e.cause(), "head_mismatch", "{e}");
    let n: i64 = c
        .query_one(&format!("SELECT count(*) FROM {schema}.receipt_log"), &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
}
