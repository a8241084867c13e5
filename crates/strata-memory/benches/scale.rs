//! The scale benchmark of the long-term memory stores (ADR-0019, ADR-0029): for each store and
//! size it reports the ingest rate, hybrid top-10 latency (p50 and p99 over many queries), the
//! first search of a new handle (cold start) and the memory that handle took, what a write from
//! another connection costs the next search (SQLite), and recall@10 of the lexical, vector and
//! hybrid rankings against exact search computed here by brute force: BM25 with FTS5's formula
//! over the corpus, cosine similarity over the embedder's vectors, and their rank fusion.
//!
//! ```text
//! cargo bench -p strata-memory --bench scale
//! STRATA_SCALE_SIZES=100000,1000000 STRATA_SCALE_STORES=sqlite cargo bench -p strata-memory --bench scale
//! ```
//!
//! `STRATA_SCALE_SIZES` (default `100000`), `STRATA_SCALE_STORES` (`sqlite,postgres`),
//! `STRATA_SCALE_QUERIES` (latency queries, default 300) and `STRATA_SCALE_RECALL_QUERIES`
//! (default 50). PostgreSQL runs on a throwaway server started on loopback by the test harness.
//!
//! `STRATA_SCALE_KEEP=<dir>` keeps the stores between runs: SQLite files `<dir>/sqlite-<n>.db`
//! and a PostgreSQL cluster in `<dir>/pg` (schema `scale_<n>`). A kept store that already holds
//! the `n` memories is searched without ingesting again (the ingest column then says so).
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

/// Exact BM25 for a set of queries, written here from FTS5's documented formula (k1 = 1.2,
/// b = 0.75, idf `ln((N - df + 0.5) / (df + 0.5))` raised to 1e-6 when not positive), over
/// the corpus split into lower-case words.
struct ExactBm25 {
    n: f64,
    avg: f64,
    lens: Vec<u32>,
    /// Per query term: `(document, count)`.
    postings: HashMap<String, Vec<(usize, u32)>>,
}

fn split_words(t: &str) -> impl Iterator<Item = String> + '_ {
    t.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl ExactBm25 {
    fn new(texts: &[String], queries: &[String]) -> ExactBm25 {
        let wanted: std::collections::HashSet<String> =
            queries.iter().flat_map(|q| split_words(q)).collect();
        let mut postings: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let mut lens = Vec::with_capacity(texts.len());
        let mut total = 0u64;
        for (i, t) in texts.iter().enumerate() {
            let mut counts: HashMap<String, u32> = HashMap::new();
            let mut len = 0u32;
            for w in split_words(t) {
                len += 1;
                if wanted.contains(&w) {
                    *counts.entry(w).or_default() += 1;
                }
            }
            for (w, c) in counts {
                postings.entry(w).or_default().push((i, c));
            }
            lens.push(len);
            total += u64::from(len);
        }
        ExactBm25 {
            n: texts.len() as f64,
            avg: total as f64 / texts.len() as f64,
            lens,
            postings,
        }
    }

    /// The best `top` matching documents (and any tied with the last), best first, ties by id
    /// text.
    fn rank(&self, q: &str, top: usize) -> Vec<(usize, f64)> {
        let mut terms: Vec<String> = split_words(q).collect();
        terms.sort();
        terms.dedup();
        let mut score: HashMap<usize, f64> = HashMap::new();
        for t in &terms {
            let Some(p) = self.postings.get(t) else {
                continue;
            };
            let df = p.len() as f64;
            let mut idf = ((self.n - df + 0.5) / (df + 0.5)).ln();
            if idf <= 0.0 {
                idf = 1e-6;
            }
            for &(d, tf) in p {
                let tf = f64::from(tf);
                let len = f64::from(self.lens[d]);
                *score.entry(d).or_default() +=
                    idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len / self.avg));
            }
        }
        let mut all: Vec<(usize, f64)> = score.into_iter().collect();
        if all.len() > top {
            all.select_nth_unstable_by(top - 1, |a, b| b.1.partial_cmp(&a.1).unwrap());
            let cut = all[top - 1].1;
            all.retain(|x| x.1 >= cut);
        }
        all.sort_by(|a, b| {
            b.1.partial_cmp(&a.1)
                .unwrap()
                .then_with(|| id(a.0).cmp(&id(b.0)))
        });
        all
    }
}

/// Resident memory of this process, from `/proc/self/status` (0 where that is unavailable).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
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
    /// `None` when a kept store was reused.
    ingest_per_s: Option<f64>,
    cold: Duration,
    cold_again: Duration,
    cold_rss: u64,
    p50: Duration,
    p99: Duration,
    lexical_p50: Duration,
    vector_p50: Duration,
    lexical_recall: f64,
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
    let present = store.count(None).unwrap();
    let ingest_per_s = if present == n {
        eprintln!("{name} {n}: reusing the kept store");
        None
    } else {
        assert_eq!(
            present, 0,
            "the kept {name} store holds {present} memories, not 0 or {n}: remove it"
        );
        let started = Instant::now();
        for (c, chunk) in texts.chunks(2_000).enumerate() {
            let batch: Vec<NewMemory> = chunk
                .iter()
                .enumerate()
                .map(|(j, t)| NewMemory::new("agent", t.clone()).with_id(id(c * 2_000 + j)))
                .collect();
            store.put_many(batch).unwrap();
        }
        let rate = n as f64 / started.elapsed().as_secs_f64();
        eprintln!("{name} {n}: ingested at {rate:.0}/s");
        Some(rate)
    };

    let vocab = vocabulary();
    let mut rng = Rng(0xbeef);
    let queries: usize = env_num("STRATA_SCALE_QUERIES", 300);
    let qs: Vec<String> = (0..queries).map(|_| rng.sentence(&vocab, 5)).collect();
    let hybrid = SearchOptions::top(10);

    let fresh = cold_handle();
    let rss_before = rss_bytes();
    let t = Instant::now();
    fresh.search(&qs[0], &hybrid).unwrap();
    let cold = t.elapsed();
    let cold_rss = rss_bytes().saturating_sub(rss_before);
    drop(fresh);
    eprintln!("{name} {n}: first search of a new handle {cold:?}");
    // A second new handle: SQLite starts it from the snapshot the first one wrote.
    let fresh = cold_handle();
    let t = Instant::now();
    fresh.search(&qs[1], &hybrid).unwrap();
    let cold_again = t.elapsed();
    drop(fresh);
    eprintln!("{name} {n}: first search of the next new handle {cold_again:?}");

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
    let recall_qs = &qs[..recall_queries.min(qs.len())];
    let bm25 = ExactBm25::new(texts, recall_qs);
    let (mut l_hit, mut l_total) = (0usize, 0usize);
    let (mut v_hit, mut h_hit, mut total) = (0usize, 0usize, 0usize);
    let vector = SearchOptions::top(10).mode(SearchMode::Vector);
    let lexical = SearchOptions::top(10).mode(SearchMode::Lexical);
    for q in recall_qs {
        let qv = Exact::query(q);
        let best = exact.top(&qv, 50);
        let cut = best[9].1;
        let got = store.search(q, &vector).unwrap();
        // A result tied with the tenth best is as right as the tenth best.
        v_hit += got
            .iter()
            .filter(|h| exact.sim(&qv, index_of(&h.record.id)) >= cut - 1e-6)
            .count();
        let lex_all = bm25.rank(q, 50);
        let lex_score: HashMap<usize, f64> = lex_all.iter().copied().collect();
        if let Some(&(_, lcut)) = lex_all.get(9.min(lex_all.len().saturating_sub(1))) {
            let got = store.search(q, &lexical).unwrap();
            l_hit += got
                .iter()
                .filter(|h| {
                    lex_score
                        .get(&index_of(&h.record.id))
                        .is_some_and(|s| *s >= lcut - 1e-9)
                })
                .count();
            l_total += lex_all.len().min(10);
        }
        let lex: Vec<usize> = lex_all.iter().take(50).map(|(i, _)| *i).collect();
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
        cold_again,
        cold_rss,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        lexical_p50,
        vector_p50,
        lexical_recall: l_hit as f64 / l_total.max(1) as f64,
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
    let keep = std::env::var_os("STRATA_SCALE_KEEP").map(std::path::PathBuf::from);
    let mut reports = Vec::new();
    for &n in &sizes {
        let texts = corpus(n);
        let exact = Exact::new(&texts);
        if stores.contains("sqlite") {
            let temp = tempfile::tempdir().unwrap();
            let dir = keep.clone().unwrap_or_else(|| temp.path().to_path_buf());
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("sqlite-{n}.db"));
            let open = || {
                SqliteStore::open_with(
                    &path,
                    Arc::new(HashEmbedder::default()),
                    StoreOptions::default(),
                )
                .unwrap()
            };
            // The first new handle loads from the rows (and writes the index snapshot); the
            // next one starts from that snapshot.
            let mut snapshot = path.as_os_str().to_owned();
            snapshot.push("-index");
            let _ = std::fs::remove_file(&snapshot);
            let store = open();
            let mut r = measure(&store, "sqlite", &texts, &exact, &|| Box::new(open()));
            // Another connection writes one memory; the next search catches up. The write is
            // undone afterwards so that a kept store keeps exactly `n` memories.
            let other = open();
            let extra = id(n);
            other
                .put(NewMemory::new("agent", "a write from another process").with_id(extra.clone()))
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
            other.delete(&extra).unwrap();
            reports.push(r);
        }
        #[cfg(feature = "postgres")]
        if stores.contains("postgres") {
            let kept_server;
            let server: &pg_harness::PgServer = match &keep {
                Some(dir) => {
                    kept_server = pg_harness::PgServer::start_kept(&dir.join("pg"));
                    &kept_server
                }
                None => pg_harness::shared(),
            };
            let schema = if keep.is_some() {
                format!("scale_{n}")
            } else {
                pg_harness::fresh_schema("scale")
            };
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
            reports.push(measure(&store, "postgres", &texts, &exact, &|| {
                Box::new(connect())
            }));
        }
    }
    println!();
    println!("| store | memories | ingest | first search of a new handle | of the next new handle | memory of a new handle | hybrid p50 | hybrid p99 | lexical p50 | vector p50 | lexical recall@10 | vector recall@10 | hybrid recall@10 | next search after a foreign write |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in reports {
        println!(
            "| {} | {} | {} | {} | {} | {} MB | {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {} |",
            r.store,
            r.n,
            r.ingest_per_s
                .map_or_else(|| "kept store".to_owned(), |x| format!("{x:.0}/s")),
            ms(r.cold),
            ms(r.cold_again),
            r.cold_rss / 1_000_000,
            ms(r.p50),
            ms(r.p99),
            ms(r.lexical_p50),
            ms(r.vector_p50),
            r.lexical_recall,
            r.vector_recall,
            r.hybrid_recall,
            r.foreign
                .map(|(d, rows)| format!("{} ({rows} rows read)", ms(d)))
                .unwrap_or_else(|| "n/a".into())
        );
    }
}
