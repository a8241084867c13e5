//! Tokenizer throughput per kind of text (ADR-0020): the exact tokenizer's `count`,
//! `count_up_to` and `prefix` on prose, code, CJK, emoji, base64, datamarked text, the shared
//! workload's sections and hostile runs, next to tiktoken-rs (the reference the exact tokenizer
//! replaced) where tiktoken-rs finishes in reasonable time.
//!
//! Run with `cargo bench -p strata-core --bench tokenizer`.
#![allow(missing_docs, reason = "criterion generates the bench entry points")]
#![allow(clippy::unwrap_used, reason = "benchmarks fail loudly")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata_core::format::{encode_untrusted, Encoding};
use strata_core::{TiktokenTokenizer, Tokenizer};

/// About `bytes` of text made by cycling through `parts`.
fn cycle(parts: &[&str], bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    let mut i = 0usize;
    while s.len() < bytes {
        s.push_str(parts[i % parts.len()]);
        // A cheap deterministic shuffle of the order.
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s
}

const PROSE: &[&str] = &[
    "The ",
    "assembler ",
    "keeps ",
    "what ",
    "fits ",
    "and ",
    "reports ",
    "what ",
    "it ",
    "dropped. ",
    "Budgets ",
    "are ",
    "counted ",
    "in ",
    "exact ",
    "tokens; ",
    "they're ",
    "never ",
    "estimated. ",
    "Sections ",
    "arrive ",
    "from ",
    "memory, ",
    "tools ",
    "and ",
    "callers.\n\n",
];
const CJK: &[&str] = &[
    "上下文",
    "组装器",
    "保留",
    "适合",
    "的内容，",
    "并报告",
    "被丢弃的",
    "部分。",
    "日本語の",
    "テキストも",
    "混ざる。",
    "한국어 ",
    "문장도 ",
    "있다. ",
];
const EMOJI: &[&str] = &["🦀 ", "👩‍👩‍👧 ", "✨", "🚀🚀 ", "e\u{301} ", "ok 👍 "];

/// Text corpora of about 64 KiB each, and the hostile runs.
fn corpora() -> Vec<(&'static str, String)> {
    const SIZE: usize = 64 * 1024;
    let prose = cycle(PROSE, SIZE);
    let code =
        include_str!("../src/format.rs").repeat(SIZE / include_str!("../src/format.rs").len() + 1);
    let raw: Vec<u8> = (0..SIZE * 3 / 4).map(|i| (i * 7919 % 251) as u8).collect();
    let mut out = vec![
        ("prose", prose.clone()),
        ("code", code),
        ("cjk", cycle(CJK, SIZE)),
        ("emoji", cycle(EMOJI, SIZE)),
        (
            "base64",
            encode_untrusted(&String::from_utf8_lossy(&raw), Encoding::Base64),
        ),
        ("datamark", encode_untrusted(&prose, Encoding::Datamark)),
    ];
    // The shared workload's section texts, when they are beside the repository.
    let shared =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/n1000.json");
    if let Ok(bytes) = std::fs::read(&shared) {
        let text = String::from_utf8_lossy(&bytes);
        out.push((
            "workload_n1000_json",
            text[..SIZE.min(text.len())].to_owned(),
        ));
    }
    out
}

/// Inputs on which tiktoken-rs is quadratic or panics: only the exact tokenizer runs them.
fn hostile() -> Vec<(&'static str, String)> {
    vec![
        ("one_letter_300k", "x".repeat(300_000)),
        ("spaces_1100k", format!("a{}b", " ".repeat(1_100_000))),
        ("cjk_run_300k", "漢".repeat(100_000)),
        ("line_breaks_300k", "\n \n".repeat(100_000)),
        (
            "base64_1m",
            encode_untrusted(&"payload ".repeat(98_304), Encoding::Base64),
        ),
    ]
}

fn throughput(c: &mut Criterion) {
    let exact = TiktokenTokenizer::o200k();
    let reference = tiktoken_rs::o200k_base_singleton();
    exact.warm_up();
    let mut g = c.benchmark_group("tokenizer_o200k_count");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(4));
    for (name, text) in corpora() {
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("strata", name), &text, |b, t| {
            b.iter(|| black_box(exact.count(black_box(t))))
        });
        g.bench_with_input(BenchmarkId::new("tiktoken_rs", name), &text, |b, t| {
            b.iter(|| black_box(reference.encode_ordinary(black_box(t)).len()))
        });
    }
    g.finish();

    let cl = TiktokenTokenizer::cl100k();
    let cl_ref = tiktoken_rs::cl100k_base_singleton();
    cl.warm_up();
    let mut g = c.benchmark_group("tokenizer_cl100k_count");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(4));
    for (name, text) in corpora()
        .into_iter()
        .filter(|(n, _)| matches!(*n, "prose" | "cjk"))
    {
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("strata", name), &text, |b, t| {
            b.iter(|| black_box(cl.count(black_box(t))))
        });
        g.bench_with_input(BenchmarkId::new("tiktoken_rs", name), &text, |b, t| {
            b.iter(|| black_box(cl_ref.encode_ordinary(black_box(t)).len()))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("tokenizer_o200k_hostile");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    for (name, text) in hostile() {
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("count", name), &text, |b, t| {
            b.iter(|| black_box(exact.count(black_box(t))))
        });
        g.bench_with_input(BenchmarkId::new("prefix_1000", name), &text, |b, t| {
            b.iter(|| black_box(exact.prefix(black_box(t), 1_000)))
        });
    }
    g.finish();

    // Probing and cutting: the cost follows the limit, not the length of the text.
    let long = cycle(PROSE, 1024 * 1024);
    let mut g = c.benchmark_group("tokenizer_o200k_limits_1mib_prose");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("count", |b| {
        b.iter(|| black_box(exact.count(black_box(&long))))
    });
    for limit in [100usize, 1_000, 16_384] {
        g.bench_with_input(BenchmarkId::new("count_up_to", limit), &limit, |b, &l| {
            b.iter(|| black_box(exact.count_up_to(black_box(&long), l)))
        });
        g.bench_with_input(BenchmarkId::new("prefix", limit), &limit, |b, &l| {
            b.iter(|| black_box(exact.prefix(black_box(&long), l)))
        });
    }
    g.finish();
}

/// The byte-at-a-time loop `separate_ascii_words` was before it read 64 bytes at a time, kept
/// here as the baseline of the word-bound benchmark.
fn ascii_words_bytewise(text: &str) -> usize {
    let b = text.as_bytes();
    let (mut words, mut i) = (0, 0);
    while i < b.len() {
        if !b[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let before_ok = start == 0 || (b[start - 1].is_ascii() && b[start - 1] != b'\'');
        let after_ok = i == b.len() || b[i].is_ascii();
        words += usize::from(before_ok && after_ok);
    }
    words
}

/// The word bound every section works out when it is built (ADR-0037), per corpus, against the
/// byte-at-a-time loop.
fn ascii_words(c: &mut Criterion) {
    let mut g = c.benchmark_group("separate_ascii_words");
    g.measurement_time(Duration::from_secs(2));
    for (name, text) in corpora() {
        assert_eq!(
            strata_core::separate_ascii_words(&text),
            ascii_words_bytewise(&text)
        );
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("blocks", name), &text, |b, t| {
            b.iter(|| black_box(strata_core::separate_ascii_words(black_box(t))))
        });
        g.bench_with_input(BenchmarkId::new("bytewise", name), &text, |b, t| {
            b.iter(|| black_box(ascii_words_bytewise(black_box(t))))
        });
    }
    g.finish();
}

criterion_group!(benches, throughput, ascii_words);
criterion_main!(benches);
