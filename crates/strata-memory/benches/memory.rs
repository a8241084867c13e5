//! Benchmarks of the SQLite memory store: ingest rate, hybrid top-10 search over 10,000 and
//! 100,000 memories (each database is built once per run in a temporary directory), and the
//! working-memory reads a session turn makes (the newest entries within a token budget, the
//! exchange in progress) on sessions of 200 and 5,000 entries, next to reading the whole
//! session and selecting from it, which is what those reads cost before stores paged them.
//!
//! Run with `cargo bench -p strata-memory`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "benchmark code: the criterion macros generate undocumented items, and a setup failure aborts the run"
)]

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use strata_core::TiktokenTokenizer;
use strata_memory::{
    select_recent, HashEmbedder, LongTermMemory, NewEntry, NewMemory, SearchMode, SearchOptions,
    SqliteStore, StoreOptions, WorkingMemory,
};

/// A deterministic vocabulary of 4,000 made-up words from syllables.
fn vocabulary() -> Vec<String> {
    const SYL: [&str; 20] = [
        "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "va", "zu", "xe", "bo", "fi", "gu",
        "ha", "je", "wo", "qui", "ny",
    ];
    let mut words = Vec::new();
    for a in SYL {
        for b in SYL {
            for c in ["", "n", "r", "s", "l", "m", "t", "k", "x", "d"] {
                words.push(format!("{a}{b}{c}"));
            }
        }
    }
    words
}

/// A small xorshift generator so the corpus is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A Zipf-like pick: small indices are much more frequent, like real words.
    fn word<'a>(&mut self, vocab: &'a [String]) -> &'a str {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        let i = ((vocab.len() as f64).powf(u) - 1.0) as usize;
        &vocab[i.min(vocab.len() - 1)]
    }

    fn sentence(&mut self, vocab: &[String], words: usize) -> String {
        (0..words)
            .map(|_| self.word(vocab))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn memories(n: usize, seed: u64) -> Vec<NewMemory> {
    let vocab = vocabulary();
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|i| {
            let len = 12 + (rng.next() % 30) as usize;
            NewMemory::new(format!("agent-{}", i % 8), rng.sentence(&vocab, len))
                .with_tags([format!("t{}", i % 16)])
        })
        .collect()
}

fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open_with(
        dir.path().join("bench.db"),
        Arc::new(HashEmbedder::default()),
        StoreOptions::default(),
    )
    .unwrap()
}

fn build(n: usize) -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let all = memories(n, 0x5eed);
    for chunk in all.chunks(2_000) {
        store.put_many(chunk.to_vec()).unwrap();
    }
    (dir, store)
}

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("sqlite_ingest");
    g.sample_size(10);
    let batch = memories(1_000, 7);
    g.throughput(Throughput::Elements(batch.len() as u64));
    g.bench_function("put_many_1000", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let store = open(&dir);
                (dir, store, batch.clone())
            },
            |(_dir, store, batch)| store.put_many(batch).unwrap(),
            BatchSize::PerIteration,
        );
    });
    let single = memories(50, 9);
    g.throughput(Throughput::Elements(single.len() as u64));
    g.bench_function("put_one_by_one_50", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let store = open(&dir);
                (dir, store, single.clone())
            },
            |(_dir, store, items)| {
                for m in items {
                    store.put(m).unwrap();
                }
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

fn search(c: &mut Criterion) {
    let vocab = vocabulary();
    let mut rng = Rng(0xbeef);
    let queries: Vec<String> = (0..32).map(|_| rng.sentence(&vocab, 5)).collect();
    let mut g = c.benchmark_group("sqlite_hybrid_top10");
    g.sample_size(20);
    for n in [10_000usize, 100_000] {
        let (_dir, store) = build(n);
        assert_eq!(store.count(None).unwrap(), n);
        let opts = SearchOptions::top(10);
        // Warm the vector cache once; a runtime keeps its store open.
        store.search(&queries[0], &opts).unwrap();
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("hybrid", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                store.search(&queries[i], &opts).unwrap()
            });
        });
        let lexical = SearchOptions::top(10).mode(SearchMode::Lexical);
        g.bench_with_input(BenchmarkId::new("lexical", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                store.search(&queries[i], &lexical).unwrap()
            });
        });
        let filtered = SearchOptions::top(10).agent("agent-3");
        g.bench_with_input(BenchmarkId::new("hybrid_one_agent", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                store.search(&queries[i], &filtered).unwrap()
            });
        });
    }
    g.finish();
}

fn working(c: &mut Criterion) {
    let tok = TiktokenTokenizer::o200k();
    let vocab = vocabulary();
    let mut rng = Rng(0x7e11);
    let mut g = c.benchmark_group("working_memory");
    for n in [200usize, 5_000] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        for i in 0..n {
            let text = rng.sentence(&vocab, 40);
            let e = if i % 2 == 0 {
                NewEntry::user(text)
            } else {
                NewEntry::assistant(text)
            };
            store.append("s", e).unwrap();
        }
        // The history a turn shows: 4,000 tokens, about 70 entries here.
        let budget = 4_000;
        let paged = store.recent_within("s", budget, &tok).unwrap();
        let whole = select_recent(&store.entries("s").unwrap(), budget, &tok);
        assert_eq!(paged, whole);
        g.bench_with_input(
            BenchmarkId::new("recent_within_4000_tokens", n),
            &n,
            |b, _| b.iter(|| store.recent_within("s", budget, &tok).unwrap()),
        );
        g.bench_with_input(
            BenchmarkId::new("whole_session_then_select_4000_tokens", n),
            &n,
            |b, _| b.iter(|| select_recent(&store.entries("s").unwrap(), budget, &tok)),
        );
        g.bench_with_input(BenchmarkId::new("current_exchange", n), &n, |b, _| {
            b.iter(|| store.current_exchange("s").unwrap())
        });
        g.bench_with_input(BenchmarkId::new("has_session", n), &n, |b, _| {
            b.iter(|| store.has_session("s").unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = ingest, search, working
}
criterion_main!(benches);
