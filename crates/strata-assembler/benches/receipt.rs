//! Benchmarks of assembly receipts (ADR-0021) next to the warm assembly they describe.
//!
//! The workload is the typical agent of the `assemble` bench (30 runtime sections, the default
//! budget), in the plain-text format and as an Anthropic request. Measured: warm assembly alone;
//! the receipt alone (statement, canonical bytes, SHA-256 subject, ed25519 signature); the two
//! together (`Assembler::assemble_with_receipt`); the request path (assembly and the bytes to
//! send) without and with a `ReceiptSigner` signing off it (plus the hand-over; the worker
//! finishes between turns, untimed), with the assembly reclaimed by the runtime's thread or
//! freed by the worker; that worker's sustained rate (each receipt there includes cloning the assembly it is
//! handed); and verifying a receipt.
#![allow(missing_docs, reason = "criterion generates the bench entry points")]
#![allow(clippy::unwrap_used, reason = "benchmarks fail loudly")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use strata_assembler::receipt::{self, Sent};
use strata_assembler::{agent::*, assemble::*, receipt::*};

fn sections(n: usize, words: usize) -> Vec<Section> {
    (0..n)
        .map(|i| {
            let layer = RuntimeLayer::ALL[i % 4];
            let text = format!("Section {i}: ")
                + &"the quick brown fox jumps over the lazy dog ".repeat(words);
            let mut b = Section::builder(layer, format!("s{i}"), text.as_str())
                .unwrap()
                .priority((i * 37 % 100) as u32);
            if layer == RuntimeLayer::WorkingMemory {
                b = b.phase(Phase::History).turn(Turn {
                    seq: i as u64,
                    role: Role::User,
                    call_id: None,
                    name: None,
                    is_error: false,
                    reasoning: Vec::new(),
                });
            }
            if i % 3 == 0 {
                b = b.stability(Stability::Stable);
            }
            b.build()
        })
        .collect()
}

fn receipts(c: &mut Criterion) {
    let agent = support::agent_with(
        16_384,
        "You are Bench, an agent used to measure the assembler.",
    );
    let key = KeyPair::from_seed(&[0x72; 32]);
    let trust =
        TrustStore::from_toml(&TrustStore::toml_for(&[("runtime", &key.public())])).unwrap();
    let tok = Arc::new(TiktokenTokenizer::o200k());
    let params = RequestParams {
        model: "claude-sonnet-4-5".into(),
        max_tokens: Some(1024),
        ..RequestParams::default()
    };
    for (name, provider) in [("text", None), ("anthropic", Some(Provider::Anthropic))] {
        let req = AssemblyRequest {
            sections: sections(30, 5),
            budget: Some(BudgetSpec::Explicit(Budget::with_total(16_384))),
            provider,
            ..Default::default()
        };
        let warm = Assembler::new(tok.clone());
        let r = warm
            .assemble_with_receipt(&agent, &req, &params, &key)
            .unwrap();
        let envelope = r.receipt.to_json();
        let mut g = c.benchmark_group(format!("receipt_30_sections_{name}"));
        g.bench_function("assemble_warm", |b| {
            b.iter(|| black_box(warm.assemble(&agent, &req).unwrap()))
        });
        g.bench_function("assemble_warm_and_write_body", |b| {
            b.iter(|| {
                let ctx = warm.assemble(&agent, &req).unwrap();
                let sent = match provider {
                    Some(p) => body_bytes(&ctx.request_body(p, &params).unwrap()),
                    None => ctx.text().to_owned().into_bytes(),
                };
                black_box((ctx, sent))
            })
        });
        g.bench_function("receipt_only_build_and_sign", |b| {
            let sent = r.sent.clone();
            b.iter(|| {
                let s = match provider {
                    Some(_) => Sent::Body(&sent),
                    None => Sent::Text(r.context.text()),
                };
                black_box(SignedReceipt::of_assembly(&agent, &r.context, s, &key))
            })
        });
        // The parts of building and signing, to see where the time goes.
        let sent_for_parts = r.sent.clone();
        let sent_of = || match provider {
            Some(_) => Sent::Body(&sent_for_parts),
            None => Sent::Text(r.context.text()),
        };
        let id = key.key_id().to_string();
        g.bench_function("part_statement", |b| {
            b.iter(|| black_box(receipt::statement(&agent, &r.context, sent_of(), &id)))
        });
        g.bench_function("part_statement_bytes", |b| {
            b.iter(|| black_box(receipt::statement_bytes(&agent, &r.context, sent_of(), &id)))
        });
        let st = receipt::statement(&agent, &r.context, sent_of(), &id);
        g.bench_function("part_canonical_bytes", |b| {
            b.iter(|| black_box(st.canonical_bytes()))
        });
        let payload = st.canonical_bytes();
        g.bench_function("part_dsse_sign", |b| {
            b.iter(|| {
                let mut e =
                    strata_agentdef::Envelope::with_type(receipt::PAYLOAD_TYPE, payload.clone());
                e.sign(&key);
                black_box(e)
            })
        });
        g.bench_function("assemble_warm_with_receipt", |b| {
            b.iter(|| {
                black_box(
                    warm.assemble_with_receipt(&agent, &req, &params, &key)
                        .unwrap(),
                )
            })
        });
        // Off the request path. The time a turn waits is the assembly and the bytes to send,
        // plus, with a signer, handing both over; the worker signs while the request is in
        // flight. What happens after sending is untimed in both: dropping the assembly, or
        // waiting for the worker and reclaiming the assembly it kept (freed on this thread).
        let signer = ReceiptSigner::start(
            KeyPair::from_seed(&[0x72; 32]),
            |_r: SignedReceipt| Ok(()),
            64,
        );
        let turn = |defer: bool, reclaim: bool, iters: u64| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let ctx = warm.assemble(&agent, &req).unwrap();
                let body = provider.map(|p| body_bytes(&ctx.request_body(p, &params).unwrap()));
                let sent = match &body {
                    Some(b) => b.len(),
                    None => ctx.text().len(),
                };
                black_box(sent);
                if defer {
                    signer.submit(&agent, ctx, body).unwrap();
                    timed += t.elapsed();
                    signer.flush().unwrap();
                    if reclaim {
                        signer.reclaim();
                    }
                } else {
                    timed += t.elapsed();
                    drop((ctx, body));
                }
            }
            timed
        };
        g.bench_function("request_path", |b| {
            b.iter_custom(|iters| turn(false, false, iters))
        });
        g.bench_function("request_path_defer_receipt", |b| {
            b.iter_custom(|iters| turn(true, true, iters))
        });
        // Without `reclaim`: the worker frees what it was handed.
        g.bench_function("request_path_defer_receipt_worker_frees", |b| {
            b.iter_custom(|iters| turn(true, false, iters))
        });
        // The worker's sustained rate: receipts submitted back to back, until all are signed.
        g.bench_function("deferred_receipt_throughput", |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    let r = r.clone();
                    let body = provider.map(|_| r.sent);
                    signer.submit(&agent, r.context, body).unwrap();
                }
                signer.flush().unwrap();
                let spent = t.elapsed();
                signer.reclaim();
                spent
            })
        });
        g.bench_function("verify_receipt", |b| {
            b.iter(|| black_box(receipt::verify(envelope.as_bytes(), &trust).unwrap()))
        });
        g.finish();
    }
}

criterion_group!(benches, receipts);
criterion_main!(benches);
