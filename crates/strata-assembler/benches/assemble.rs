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
use strata_assembler::assemble::*;

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

/// A tool's output of `bytes` bytes: JSON log lines, each with different numbers.
fn tool_output(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 200);
    let mut i = 0u64;
    while out.len() < bytes {
        out.push_str(&format!(
            "{{\"ts\": {}, \"level\": \"info\", \"msg\": \"request {} served in {} ms\", \
             \"path\": \"/api/v1/items/{}\"}}\n",
            1_700_000_000_000 + i * 17,
            i,
            i % 97,
            i * 7 % 10_007
        ));
        i += 1;
    }
    out
}

/// One large tool result, cut to fit a 16,384-token budget, from a new assembler each time:
/// the cost should follow what is kept, not what the tool returned (ADR-0037). The result is a
/// log of JSON records, one per line, keeping its head or its tail (escaped, the default, or
/// datamarked), and the same records as one line of minified JSON keeping its head.
fn large_tool_result(c: &mut Criterion) {
    let agent = support::agent_with(
        16_384,
        "You are Bench, an agent used to measure the assembler.",
    );
    let tok = Arc::new(TiktokenTokenizer::o200k());
    tok.warm_up();
    let mut g = c.benchmark_group("large_tool_result_cold");
    g.sample_size(10);
    for mb in [1usize, 8, 32] {
        let lines = tool_output(mb << 20);
        // The same records as one line of minified JSON, cut at its head.
        let one_line = format!("[{}]", lines.trim_end().replace('\n', ","));
        for (keep, output, name, enc) in [
            (Keep::Head, &lines, "head", Encoding::Escaped),
            (Keep::Tail, &lines, "tail", Encoding::Escaped),
            (Keep::Head, &one_line, "head_one_line", Encoding::Escaped),
            (Keep::Head, &lines, "head_datamark", Encoding::Datamark),
            (Keep::Tail, &lines, "tail_datamark", Encoding::Datamark),
        ] {
            let call = Section::builder(RuntimeLayer::WorkingMemory, "call-1", r#"{"q":"all"}"#)
                .unwrap()
                .phase(Phase::History)
                .turn(Turn::tool_call(
                    1,
                    "c1",
                    ToolName::new("file_read").unwrap(),
                ))
                .build();
            let result = Section::builder(RuntimeLayer::WorkingMemory, "result-1", output.as_str())
                .unwrap()
                .phase(Phase::History)
                .keep(keep)
                .turn(Turn::tool_result(2, "c1"))
                .build();
            let req = AssemblyRequest {
                sections: vec![call, result],
                budget: Some(BudgetSpec::Explicit(Budget::with_total(16_384))),
                render: RenderOptions::default().with_encoding(RuntimeLayer::WorkingMemory, enc),
                ..Default::default()
            };
            let out = Assembler::new(tok.clone()).assemble(&agent, &req).unwrap();
            assert!(out
                .report()
                .sections
                .iter()
                .any(|s| matches!(s.status, SectionStatus::Cut { .. })));
            // What the cut is measured against: one count of what was sent (its throughput in
            // bytes of that text).
            let text = out.text().to_owned();
            g.throughput(Throughput::Bytes(text.len() as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{name}_tokenize_output_once"), format!("{mb}MiB")),
                &text,
                |b, text| b.iter(|| black_box(tok.count(black_box(text)))),
            );
            g.throughput(Throughput::Bytes(output.len() as u64));
            g.bench_with_input(
                BenchmarkId::new(name, format!("{mb}MiB")),
                &req,
                |b, req| {
                    b.iter(|| {
                        let a = Assembler::new(tok.clone());
                        black_box(a.assemble(&agent, req).unwrap())
                    })
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, typical, scaling, large_tool_result);
criterion_main!(benches);
