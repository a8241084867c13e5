//! Load benchmark of `strata serve`: prepare-turn throughput and latency at 1, 16 and 64
//! concurrent sessions, the per-turn cost of spawning `strata session prepare` instead, and
//! what a fresh service costs before its first answers (start to `listening`, then the first
//! and second turns of a new session; `STRATA_LOAD_STARTS` fresh starts, 5 by default).
//!
//! ```sh
//! cargo bench -p strata-cli --bench serve_load                 # 10 s per level
//! STRATA_LOAD_SECONDS=30 STRATA_LOAD_LEVELS=1,16,64 cargo bench -p strata-cli --bench serve_load
//! STRATA_LOAD_RECEIPTS=1 cargo bench -p strata-cli --bench serve_load   # with signed receipts
//! ```
//!
//! With `STRATA_LOAD_RECEIPTS=1` the server signs a receipt for every turn with a fresh runtime
//! key and appends it (synced) to a receipt log before answering, as `--receipt-key` and
//! `--receipt-log` do in production.
//!
//! Each client thread owns one session and runs conversations of ten turns (prepare with a new
//! user message, then record a short reply), deleting the session after the tenth, so the
//! history stays realistic. Only the prepare requests are timed. The server is the optimised
//! binary cargo built for this benchmark, on a SQLite file in a temporary directory, with the
//! bundled demo agent. Results go to standard output as a markdown table.
#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark program reports on standard output and fails loudly"
)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

const TOKEN: &str = "load-benchmark-token-0123456789";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!("{cpus} CPUs ({model}), load average {}", load.join(" "))
}

struct Level {
    clients: usize,
    turns: u64,
    errors: u64,
    seconds: f64,
    hist: Histogram<u64>,
}

fn run_level(url: &str, clients: usize, seconds: u64) -> Level {
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for c in 0..clients {
        let url = url.to_owned();
        let stop = stop.clone();
        handles.push(std::thread::spawn(move || {
            let agent = client();
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let (mut turns, mut errors) = (0u64, 0u64);
            let session = format!("load-{clients}-{c}");
            let auth = format!("Bearer {TOKEN}");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match prepare(&agent, &url, &session, n) {
                    Some(took) => {
                        hist.record(micros(took)).unwrap();
                        turns += 1;
                    }
                    None => errors += 1,
                }
                let reply = format!("{{\"text\": \"Answer {n}: the window moved to Thursday.\"}}");
                let _ = agent
                    .post(&format!("{url}/v1/sessions/{session}/replies"))
                    .header("Authorization", &auth)
                    .header("Content-Type", "application/json")
                    .send(reply.as_str());
                n += 1;
                if n.is_multiple_of(10) {
                    let _ = agent
                        .delete(&format!("{url}/v1/sessions/{session}"))
                        .header("Authorization", &auth)
                        .call();
                }
            }
            (hist, turns, errors)
        }));
    }
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let (mut turns, mut errors) = (0, 0);
    for h in handles {
        let (h, t, e) = h.join().unwrap();
        hist.add(h).unwrap();
        turns += t;
        errors += e;
    }
    Level {
        clients,
        turns,
        errors,
        seconds: started.elapsed().as_secs_f64(),
        hist,
    }
}

/// Start `strata serve` on the demo agent with its SQLite memory at `db` and the tokens file in
/// `dir`, on a free loopback port: the child, its URL, and the time from spawning it to its
/// `listening` line (the service accepts connections from then on).
fn start_server(dir: &Path, db: &Path, extra: &[PathBuf]) -> (Child, String, Duration) {
    let demo = root().join("crates/strata-cli/demo");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("serve")
        .args(["--model", "bench-model"])
        .args(extra)
        .arg("--agent")
        .arg(demo.join("agent.signed.json"))
        .arg("--trust")
        .arg(demo.join("trust.toml"))
        .arg("--store")
        .arg(db)
        .arg("--token-file")
        .arg(dir.join("tokens"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--concurrency",
            "1024",
            "--quiet",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let up = started.elapsed();
    let url = line.trim().strip_prefix("listening ").unwrap().to_owned();
    (child, url, up)
}

/// An HTTP client that reports error statuses as responses.
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// Prepare turn `n` of `session` on the service at `url`: its round trip with the response
/// read whole (the request body and the report), or `None` if it failed.
fn prepare(agent: &ureq::Agent, url: &str, session: &str, n: u64) -> Option<Duration> {
    let body = format!(
        "{{\"message\": \"Question {n}: what changed in the deploy schedule, and who approved it?\"}}"
    );
    let started = Instant::now();
    let mut resp = agent
        .post(&format!("{url}/v1/sessions/{session}/turns"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .send(body.as_str())
        .ok()?;
    resp.body_mut().read_to_vec().ok()?;
    let took = started.elapsed();
    (resp.status().as_u16() == 200).then_some(took)
}

/// Microseconds, at least one (the histograms' lower bound).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Stop the service with SIGTERM and wait for it to exit.
fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// `n` fresh services, one after the other, each on a new SQLite file: the time to `listening`,
/// and the first and second prepared turns of a new session (what a runtime that starts the
/// service on demand waits for). Three histograms, in microseconds.
fn fresh_starts(dir: &Path, n: usize) -> [Histogram<u64>; 3] {
    let mut hists = [0, 1, 2].map(|_| Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap());
    for i in 0..n {
        let (child, url, up) = start_server(dir, &dir.join(format!("fresh-{i}.db")), &[]);
        let agent = client();
        let first = prepare(&agent, &url, "fresh", 0).expect("the first turn of a fresh service");
        let second = prepare(&agent, &url, "fresh", 1).expect("the second turn");
        stop(child);
        for (h, d) in hists.iter_mut().zip([up, first, second]) {
            h.record(micros(d)).unwrap();
        }
    }
    hists
}

fn spawn_costs(dir: &Path, agent: &Path, trust: &Path, n: usize) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for i in 0..n {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("session")
            .arg("--agent")
            .arg(agent)
            .arg("--trust")
            .arg(trust)
            .arg("--store")
            .arg(dir.join("spawn.db"))
            .args(["--id", &format!("spawn-{}", i / 10)])
            .args([
                "prepare",
                "Question: what changed in the deploy schedule, and who approved it?",
                "--model",
                "bench",
            ])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        hist.record(micros(started.elapsed())).unwrap();
    }
    hist
}

fn ms(micros: u64) -> String {
    format!("{:.2}", micros as f64 / 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken from the command line.
    let seconds: u64 = std::env::var("STRATA_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let levels: Vec<usize> = std::env::var("STRATA_LOAD_LEVELS")
        .unwrap_or_else(|_| "1,16,64".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let starts: usize = std::env::var("STRATA_LOAD_STARTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokens"), format!("{TOKEN}\n")).unwrap();
    let demo = root().join("crates/strata-cli/demo");
    let (agent, trust) = (demo.join("agent.signed.json"), demo.join("trust.toml"));
    let receipts = std::env::var("STRATA_LOAD_RECEIPTS").is_ok_and(|v| v == "1");
    let mut receipt_args: Vec<PathBuf> = Vec::new();
    if receipts {
        let key = dir.path().join("runtime.key");
        let made = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("keygen")
            .arg("--out")
            .arg(&key)
            .output()
            .unwrap();
        assert!(made.status.success(), "keygen failed");
        receipt_args = vec![
            "--receipt-key".into(),
            key,
            "--receipt-log".into(),
            dir.path().join("receipts.log"),
        ];
    }
    let (child, url, _) = start_server(dir.path(), &dir.path().join("memory.db"), &receipt_args);
    eprintln!(
        "serving at {url}; {seconds} s per level; receipts {}; machine: {}",
        if receipts { "signed and logged" } else { "off" },
        machine()
    );
    // Warm up: tokenizer pages, SQLite, caches.
    let _ = run_level(&url, 2, 2);
    let mut rows = Vec::new();
    for c in levels {
        let l = run_level(&url, c, seconds);
        eprintln!("{c} sessions: {} turns", l.turns);
        rows.push(l);
    }
    stop(child);
    let spawn = spawn_costs(dir.path(), &agent, &trust, 20);
    let fresh = fresh_starts(dir.path(), starts);
    println!(
        "Machine: {}; receipts {}\n",
        machine(),
        if receipts { "signed and logged" } else { "off" }
    );
    println!("| concurrent sessions | turns/s | p50 ms | p90 ms | p99 ms | max ms | errors |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for l in &rows {
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            l.clients,
            l.turns as f64 / l.seconds,
            ms(l.hist.value_at_quantile(0.5)),
            ms(l.hist.value_at_quantile(0.9)),
            ms(l.hist.value_at_quantile(0.99)),
            ms(l.hist.max()),
            l.errors
        );
    }
    println!(
        "\nSpawning `strata session prepare` per turn (20 runs, sequential): p50 {} ms, p99 {} ms, max {} ms.",
        ms(spawn.value_at_quantile(0.5)),
        ms(spawn.value_at_quantile(0.99)),
        ms(spawn.max())
    );
    println!(
        "\nA fresh service ({starts} starts, each on a new SQLite file): start to listening p50 {} ms, \
         max {} ms; first turn p50 {} ms, max {} ms; second turn p50 {} ms, max {} ms.",
        ms(fresh[0].value_at_quantile(0.5)),
        ms(fresh[0].max()),
        ms(fresh[1].value_at_quantile(0.5)),
        ms(fresh[1].max()),
        ms(fresh[2].value_at_quantile(0.5)),
        ms(fresh[2].max())
    );
}
