//! The scale benchmark of the long-term memory stores (ADR-0019): for each store and size it
//! reports the ingest rate, hybrid top-10 latency (p50 and p99 over many queries), the first
//! search of a new handle (cold start), what a write from another connection costs the next
//! search (SQLite), and recall@10 of the vector ranking and of hybrid search against exact
//! search computed here by brute force from the embedder's vectors.
//!
//! ```text
//! cargo bench -p strata-memory --bench scale
//! STRATA_SCALE_SIZES=100000,1000000 STRATA_SCALE_STORES=sqlite cargo bench -p strata-memory --bench scale
//! ```
//!
//! `STRATA_SCALE_SIZES` (default `100000`), `STRATA_SCALE_STORES` (`sqlite,postgres`),
//! `STRATA_SCALE_QUERIES` (latency queries, default 300) and `STRATA_SCALE_RECALL_QUERIES`
//! (default 50). PostgreSQL runs on a throwaway server started on loopback by the test harness.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark program: it prints its report, and a setup failure aborts the run"
)]

#[cfg(feature = "postgres")]
#[path = "../tests/pg_harness/mod.rs"]
mod pg_harness;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_memory::{
    Embedder, HashEmbedder, LongTermMemory, MemoryId, NewMemory, SearchMode, SearchOptions,
    SqliteStore, StoreOptions,
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

fn corpus(n: usize) -> Vec<String> {
    let vocab = vocabulary();
    let mut rng = Rng(0x5eed);
    (0..n)
        .map(|_| {
            let len = 12 + (rng.next() % 30) as usize;
            rng.sentence(&vocab, len)
        })
        .collect()
}

fn id(i: usize) -> MemoryId {
    MemoryId::new(format!("b{i}")).unwrap()
}

fn index_of(id: &MemoryId) -> usize {
    id.as_str()[1..].parse().unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Exact search by brute force: the embedder's vectors, scaled to unit length here.
struct Exact {
    dims: usize,
    data: Vec<f32>,
}

impl Exact {
    fn new(texts: &[String]) -> Exact {
        let e = HashEmbedder::default();
        let mut data = Vec::with_capacity(texts.len() * e.dims());
        for chunk in texts.chunks(10_000) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            for mut v in e.embed(&refs).unwrap() {
                let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
                if norm > 0.0 {
                    v.iter_mut()
                        .for_each(|x| *x = (f64::from(*x) / norm) as f32);
                }
                data.extend(v);
            }
        }
        Exact {
            dims: e.dims(),
            data,
        }
    }

    fn query(q: &str) -> Vec<f32> {
        HashEmbedder::default().embed(&[q]).unwrap().remove(0)
    }

    fn sim(&self, q: &[f32], i: usize) -> f32 {
        self.data[i * self.dims..(i + 1) * self.dims]
            .iter()
            .zip(q)
            .map(|(a, b)| a * b)
            .sum()
    }

    /// The best `n` (index, similarity), best first, ties by id text (as the stores do).
    fn top(&self, q: &[f32], n: usize) -> Vec<(usize, f32)> {
        let mut all: Vec<(usize, f32)> = (0..self.data.len() / self.dims)
            .map(|i| (i, self.sim(q, i)))
            .collect();
        let cmp = |a: &(usize, f32), b: &(usize, f32)| {
            b.1.partial_cmp(&a.1)
                .unwrap()
                .then_with(|| id(a.0).cmp(&id(b.0)))
        };
        all.select_nth_unstable_by(n - 1, cmp);
        all.truncate(n);
        all.sort_by(cmp);
        all
    }
}

/// Reciprocal rank fusion with k = 60, written here independently of the crate.
fn rrf(lexical: &[usize], vector: &[usize], top: usize) -> Vec<usize> {
    let mut score: HashMap<usize, f64> = HashMap::new();
    for list in [lexical, vector] {
        for (r, i) in list.iter().enumerate() {
            *score.entry(*i).or_default() += 1.0 / (60.0 + r as f64 + 1.0);
        }
    }
    let mut all: Vec<(usize, f64)> = score.into_iter().collect();
    all.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap()
            .then_with(|| id(a.0).cmp(&id(b.0)))
    });
    all.into_iter().take(top).map(|(i, _)| i).collect()
}

struct Report {
    store: &'static str,
    n: usize,
    ingest_per_s: f64,
    cold: Duration,
    p50: Duration,
    p99: Duration,
    lexical_p50: Duration,
    vector_p50: Duration,
    vector_recall: f64,
    hybrid_recall: f64,
    foreign: Option<(Duration, u64)>,
}

fn measure(
    store: &dyn LongTermMemory,
    name: &'static str,
    texts: &[String],
    exact: &Exact,
    cold_handle: &dyn Fn() -> Box<dyn LongTermMemory>,
) -> Report {
    let n = texts.len();
    let started = Instant::now();
    for (c, chunk) in texts.chunks(2_000).enumerate() {
        let batch: Vec<NewMemory> = chunk
            .iter()
            .enumerate()
            .map(|(j, t)| NewMemory::new("agent", t.clone()).with_id(id(c * 2_000 + j)))
            .collect();
        store.put_many(batch).unwrap();
    }
    let ingest_per_s = n as f64 / started.elapsed().as_secs_f64();
    eprintln!("{name} {n}: ingested at {ingest_per_s:.0}/s");

    let vocab = vocabulary();
    let mut rng = Rng(0xbeef);
    let queries: usize = env_num("STRATA_SCALE_QUERIES", 300);
    let qs: Vec<String> = (0..queries).map(|_| rng.sentence(&vocab, 5)).collect();
    let hybrid = SearchOptions::top(10);

    let fresh = cold_handle();
    let t = Instant::now();
    fresh.search(&qs[0], &hybrid).unwrap();
    let cold = t.elapsed();
    drop(fresh);

    store.search(&qs[0], &hybrid).unwrap();
    let mut lat: Vec<Duration> = qs
        .iter()
        .map(|q| {
            let t = Instant::now();
            store.search(q, &hybrid).unwrap();
            t.elapsed()
        })
        .collect();
    lat.sort();
    let p50_of = |opts: &SearchOptions| {
        let mut l: Vec<Duration> = qs
            .iter()
            .take(100)
            .map(|q| {
                let t = Instant::now();
                store.search(q, opts).unwrap();
                t.elapsed()
            })
            .collect();
        l.sort();
        percentile(&l, 0.5)
    };
    let lexical_p50 = p50_of(&SearchOptions::top(10).mode(SearchMode::Lexical));
    let vector_p50 = p50_of(&SearchOptions::top(10).mode(SearchMode::Vector));

    let recall_queries: usize = env_num("STRATA_SCALE_RECALL_QUERIES", 50);
    let (mut v_hit, mut h_hit, mut total) = (0usize, 0usize, 0usize);
    let vector = SearchOptions::top(10).mode(SearchMode::Vector);
    let lexical = SearchOptions::top(50).mode(SearchMode::Lexical);
    for q in qs.iter().take(recall_queries) {
        let qv = Exact::query(q);
        let best = exact.top(&qv, 50);
        let cut = best[9].1;
        let got = store.search(q, &vector).unwrap();
        // A result tied with the tenth best is as right as the tenth best.
        v_hit += got
            .iter()
            .filter(|h| exact.sim(&qv, index_of(&h.record.id)) >= cut - 1e-6)
            .count();
        let lex: Vec<usize> = store
            .search(q, &lexical)
            .unwrap()
            .iter()
            .map(|h| index_of(&h.record.id))
            .collect();
        let want = rrf(&lex, &best.iter().map(|(i, _)| *i).collect::<Vec<_>>(), 10);
        let got: Vec<usize> = store
            .search(q, &hybrid)
            .unwrap()
            .iter()
            .map(|h| index_of(&h.record.id))
            .collect();
        h_hit += got.iter().filter(|i| want.contains(i)).count();
        total += want.len().min(10);
    }
    Report {
        store: name,
        n,
        ingest_per_s,
        cold,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        lexical_p50,
        vector_p50,
        vector_recall: v_hit as f64 / total as f64,
        hybrid_recall: h_hit as f64 / total as f64,
        foreign: None,
    }
}

fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; this program takes no arguments.
    let sizes: Vec<usize> = std::env::var("STRATA_SCALE_SIZES")
        .unwrap_or_else(|_| "100000".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let stores = std::env::var("STRATA_SCALE_STORES").unwrap_or_else(|_| "sqlite,postgres".into());
    let mut reports = Vec::new();
    for &n in &sizes {
        let texts = corpus(n);
        let exact = Exact::new(&texts);
        if stores.contains("sqlite") {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("scale.db");
            let open = || {
                SqliteStore::open_with(
                    &path,
                    Arc::new(HashEmbedder::default()),
                    StoreOptions::default(),
                )
                .unwrap()
            };
            let store = open();
            let mut r = measure(&store, "sqlite", &texts, &exact, &|| Box::new(open()));
            // Another connection writes one memory; the next search catches up.
            let other = open();
            other
                .put(NewMemory::new("agent", "a write from another process").with_id(id(n)))
                .unwrap();
            let before = store.vector_cache_stats();
            let t = Instant::now();
            store
                .search("another process write", &SearchOptions::top(10))
                .unwrap();
            let took = t.elapsed();
            let after = store.vector_cache_stats();
            assert_eq!(
                after.full_loads, before.full_loads,
                "a foreign write reloaded everything"
            );
            r.foreign = Some((took, after.rows_refreshed - before.rows_refreshed));
            reports.push(r);
        }
        #[cfg(feature = "postgres")]
        if stores.contains("postgres") {
            let server = pg_harness::shared();
            let schema = pg_harness::fresh_schema("scale");
            let connect = || {
                strata_memory::PgStore::connect_with(
                    &server.test_params(),
                    &schema,
                    Arc::new(HashEmbedder::default()),
                    StoreOptions::default(),
                )
                .unwrap()
            };
            let store = connect();
            // Steady state: the column statistics that autovacuum keeps (and the lexical
            // query reads) exist. Without them the first minute of searches ranks every term.
            let analyze = || {
                let mut c =
                    postgres::Client::connect(&server.test_params(), postgres::NoTls).unwrap();
                c.batch_execute(&format!("ANALYZE \"{schema}\".memories"))
                    .unwrap();
            };
            reports.push(measure(&store, "postgres", &texts, &exact, &|| {
                analyze();
                Box::new(connect())
            }));
        }
    }
    println!();
    println!("| store | memories | ingest | first search (new handle) | hybrid p50 | hybrid p99 | lexical p50 | vector p50 | vector recall@10 | hybrid recall@10 | next search after a foreign write |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in reports {
        println!(
            "| {} | {} | {:.0}/s | {} | {} | {} | {} | {} | {:.3} | {:.3} | {} |",
            r.store,
            r.n,
            r.ingest_per_s,
            ms(r.cold),
            ms(r.p50),
            ms(r.p99),
            ms(r.lexical_p50),
            ms(r.vector_p50),
            r.vector_recall,
            r.hybrid_recall,
            r.foreign
                .map(|(d, rows)| format!("{} ({rows} rows read)", ms(d)))
                .unwrap_or_else(|| "n/a".into())
        );
    }
}
