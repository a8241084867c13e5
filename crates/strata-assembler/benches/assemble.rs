//! Benchmarks of the Context Assembler (ADR-0008, ADR-0013).
//!
//! Targets: warm assembly within 10x of copying and hashing the output bytes; cold assembly
//! within 2x of tokenizing the new text once; cost linear in the number of sections.
#![allow(missing_docs, reason = "criterion generates the bench entry points")]
#![allow(clippy::unwrap_used, reason = "benchmarks fail loudly")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata_assembler::*;

fn sections(n: usize, words: usize) -> Vec<Section> {
    (0..n)
        .map(|i| {
            let layer = RuntimeLayer::ALL[i % 4];
            let text = format!("Section {i}: ")
                + &"the quick brown fox jumps over the lazy dog ".repeat(words);
            let mut b = Section::builder(layer, format!("s{i}"), text)
                .unwrap()
                .priority((i * 37 % 100) as u32);
            if layer == RuntimeLayer::WorkingMemory {
                b = b.phase(Phase::History).turn(Turn {
                    seq: i as u64,
                    role: Role::User,
                    call_id: None,
                    name: None,
                });
            }
            if i % 3 == 0 {
                b = b.stability(Stability::Stable);
            }
            b.build()
        })
        .collect()
}

fn request(n: usize, words: usize, total: u32) -> AssemblyRequest {
    AssemblyRequest {
        sections: sections(n, words),
        budget: Some(BudgetSpec::Explicit(Budget::with_total(total))),
        ..Default::default()
    }
}

fn typical(c: &mut Criterion) {
    let agent = support::agent_with(
        16_384,
        "You are Bench, an agent used to measure the assembler.",
    );
    let tok = Arc::new(TiktokenTokenizer::o200k());
    // About 30 sections of about 45 words each, under the default 16,384-token budget.
    let req = request(30, 5, 16_384);
    let warm = Assembler::new(tok.clone());
    let out = warm.assemble(&agent, &req).unwrap();
    let mut g = c.benchmark_group("typical_30_sections");
    g.throughput(Throughput::Bytes(out.text().len() as u64));
    g.bench_function("baseline_copy_and_hash_output", |b| {
        b.iter(|| {
            let copy = black_box(out.text()).to_owned();
            black_box(blake3::hash(copy.as_bytes()))
        })
    });
    g.bench_function("baseline_tokenize_output_once", |b| {
        b.iter(|| black_box(tok.count(black_box(out.text()))))
    });
    g.bench_function("assemble_warm", |b| {
        b.iter(|| black_box(warm.assemble(&agent, &req).unwrap()))
    });
    g.bench_function("assemble_cold", |b| {
        b.iter(|| {
            let a = Assembler::new(tok.clone());
            black_box(a.assemble(&agent, &req).unwrap())
        })
    });
    g.finish();
}

fn scaling(c: &mut Criterion) {
    let agent = support::agent_with(
        16_384,
        "You are Bench, an agent used to measure the assembler.",
    );
    let tok = Arc::new(TiktokenTokenizer::o200k());
    let mut g = c.benchmark_group("scaling_warm");
    g.sample_size(20);
    for n in [100usize, 1_000, 10_000] {
        // A budget large enough to keep everything: the cost is ordering, conflicts and copying.
        let req = request(n, 2, 2_000_000);
        let a = Assembler::new(tok.clone());
        a.assemble(&agent, &req).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &req, |b, req| {
            b.iter(|| black_box(a.assemble(&agent, req).unwrap()))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("trimming_heavy_pressure_warm");
    g.sample_size(20);
    for n in [1_000usize, 10_000] {
        // Room for about a tenth of the sections: most are dropped under pressure.
        let req = request(n, 2, (n as u32) * 3 + 400);
        let a = Assembler::new(tok.clone());
        let out = a.assemble(&agent, &req).unwrap();
        assert!(out.report().layers.iter().map(|l| l.dropped).sum::<usize>() > n / 2);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &req, |b, req| {
            b.iter(|| black_box(a.assemble(&agent, req).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, typical, scaling);
criterion_main!(benches);
