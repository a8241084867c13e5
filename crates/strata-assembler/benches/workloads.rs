//! Assembly of the three shared benchmark workloads (30, 1,000 and 10,000 sections, a
//! 16,384-token budget), the same files other prompt assemblers are measured on: cold (a new
//! assembler, nothing cached), warm (the same request again) and warm with three turns changed
//! (three sections of the session log have new text on every call), next to the two baselines
//! the targets are stated against: tokenizing the output once, and copying and hashing it.
//! The warm arms are also timed as a runtime's request path, without and with each turn's
//! receipt handed to a `ReceiptSigner` (the receipt's cost against the warm targets). What a
//! runtime pays to build (and drop) the workload's sections is measured too.
//!
//! The workloads live in `shared/bench/` beside the repository (`<repo>/../shared/bench`), or
//! in the directory named by `STRATA_BENCH_WORKLOADS`. Without them the benchmark says so and
//! measures nothing. Only the public API is used: identity sections (layers 1-2) go into a signed
//! agent definition, verified as in production; layers 3-6 become sections.
#![allow(missing_docs, reason = "criterion generates the bench entry points")]
#![allow(clippy::unwrap_used, reason = "benchmarks fail loudly")]
#![allow(
    clippy::print_stderr,
    reason = "a skipped benchmark says why on stderr"
)]

use std::collections::HashSet;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::Value;
use strata_agentdef::{sign_definition, KeyPair, Loader, RollbackGuard, TrustStore, VerifiedAgent};
use strata_assembler::{
    assemble::*,
    receipt,
    receipt::{ReceiptSigner, SignedReceipt},
};

/// Numbers the revisions of the changing turns, so that every changed turn is new text.
static TURN: AtomicU64 = AtomicU64::new(0);

/// The workload files, smallest first.
const FILES: [&str; 3] = ["n30.json", "n1000.json", "n10000.json"];

fn workload_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("STRATA_BENCH_WORKLOADS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench"));
    FILES.iter().all(|f| dir.join(f).is_file()).then_some(dir)
}

/// One workload: the identity text of layers 1 and 2, the runtime sections and the budget.
struct Workload {
    name: String,
    core: String,
    characteristics: String,
    sections: Vec<Section>,
    budget: u32,
}

fn load(path: &std::path::Path) -> Workload {
    let json: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let budget = u32::try_from(json["budget_tokens"].as_u64().unwrap()).unwrap();
    let (mut core, mut characteristics, mut sections) = (Vec::new(), Vec::new(), Vec::new());
    for s in json["sections"].as_array().unwrap() {
        let content = s["content"].as_str().unwrap().to_owned();
        let layer = match s["layer"].as_u64().unwrap() {
            1 => {
                core.push(content);
                continue;
            }
            2 => {
                characteristics.push(content);
                continue;
            }
            3 => RuntimeLayer::Shared,
            4 => RuntimeLayer::Delegated,
            5 => RuntimeLayer::WorkingMemory,
            6 => RuntimeLayer::LongTermMemory,
            n => panic!("layer {n} in {}", path.display()),
        };
        let priority = u32::try_from(s["priority"].as_u64().unwrap()).unwrap();
        let section = Section::builder(layer, s["id"].as_str().unwrap(), content)
            .unwrap()
            .priority(priority)
            .sticky(s["sticky"].as_bool().unwrap_or(false))
            .build();
        sections.push(section);
    }
    Workload {
        name: path.file_stem().unwrap().to_string_lossy().into_owned(),
        core: core.join("\n\n"),
        characteristics: characteristics.join("\n\n"),
        sections,
        budget,
    }
}

/// A TOML basic multi-line string holding `text`.
fn toml_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"\"\"{escaped}\"\"\"")
}

/// The workload's identity layers as an agent definition, signed with a fixed benchmark key
/// and verified against a trust store holding only that key.
fn agent(w: &Workload) -> VerifiedAgent {
    let definition = format!(
        "id = \"bench\"\nname = \"Bench\"\nversion = 1\n\n[budget]\ntotal_tokens = {}\n\n\
         [core]\nidentity = {}\n\n[characteristics]\npersonality = {}\n",
        w.budget,
        toml_text(&w.core),
        toml_text(&w.characteristics),
    );
    let key = KeyPair::from_seed(&[0x42; 32]);
    let envelope = sign_definition(&definition, None, &[&key]).unwrap();
    let trust = TrustStore::from_toml(&TrustStore::toml_for(&[("bench", &key.public())])).unwrap();
    let guard = RollbackGuard::in_memory();
    Loader::new(&trust, &guard)
        .load_bytes(envelope.to_json().as_bytes(), None)
        .unwrap()
}

fn request(w: &Workload, sections: Vec<Section>) -> AssemblyRequest {
    AssemblyRequest {
        sections,
        budget: Some(BudgetSpec::Explicit(Budget::with_total(w.budget))),
        ..Default::default()
    }
}

/// Indices of the three sections that change between turns: the last three of the session
/// log, or the last three sections when the log has fewer.
fn changing(sections: &[Section]) -> Vec<usize> {
    let log: Vec<usize> = (0..sections.len())
        .filter(|&i| sections[i].layer() == RuntimeLayer::WorkingMemory)
        .collect();
    let pool = if log.len() >= 3 {
        log
    } else {
        (0..sections.len()).collect()
    };
    pool[pool.len().saturating_sub(3)..].to_vec()
}

/// The workload's request with new text, unseen before, in the turns at `changed`.
fn revised(w: &Workload, changed: &[usize]) -> AssemblyRequest {
    let turn = TURN.fetch_add(1, Ordering::Relaxed);
    let mut sections = w.sections.clone();
    for (k, &i) in changed.iter().enumerate() {
        let text = format!(
            "{} (revised in turn {turn}.{k})",
            sections[i].content().as_str()
        );
        sections[i] = sections[i].with_content(text);
    }
    request(w, sections)
}

/// The sections of `req` that take part (mode and path), in order of layer, then score, then
/// position, with the number of distinct id digests among them: the least that selecting
/// them reads and decides (see the floor arms).
fn floor(req: &AssemblyRequest) -> (Vec<usize>, usize) {
    let sections = black_box(&req.sections);
    let max_score = sections.iter().map(|s| s.score()).max().unwrap_or(0);
    let pos_bits = usize::BITS - sections.len().leading_zeros();
    assert!(
        2 + (u64::BITS - max_score.leading_zeros()) + pos_bits <= u64::BITS,
        "the floor packs layer, score and position into one integer"
    );
    let mut keys: Vec<u64> = Vec::with_capacity(sections.len());
    let mut ids: HashSet<u64, foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(sections.len(), Default::default());
    for (i, s) in sections.iter().enumerate() {
        if s.modes().contains(req.mode) && s.paths().contains(req.path) {
            let layer = s.layer().index() as u64;
            keys.push((layer << 62) | ((max_score - s.score()) << pos_bits) | i as u64);
            ids.insert(s.id_digest());
        }
    }
    keys.sort_unstable();
    let mask = (1u64 << pos_bits) - 1;
    (
        keys.iter().map(|k| (k & mask) as usize).collect(),
        ids.len(),
    )
}

fn workloads(c: &mut Criterion) {
    let Some(dir) = workload_dir() else {
        eprintln!(
            "workloads: skipped; no {} in <repo>/../shared/bench (set STRATA_BENCH_WORKLOADS to \
             the directory that holds them)",
            FILES.join(", ")
        );
        return;
    };
    let tok = Arc::new(TiktokenTokenizer::o200k());
    tok.warm_up();
    for file in FILES {
        let w = load(&dir.join(file));
        let agent = agent(&w);
        let req = request(&w, w.sections.clone());
        let warm = Assembler::new(tok.clone());
        let out = warm.assemble(&agent, &req).unwrap();
        // What a cold assembly hands the tokenizer, against its output and what it was offered:
        // dropped sections are not counted (ADR-0037).
        eprintln!(
            "{}: a cold assembly counted {} bytes for an output of {} bytes ({} offered)",
            w.name,
            warm.cache_stats().tokenized_bytes,
            out.text().len(),
            w.sections
                .iter()
                .map(|s| s.content().as_str().len())
                .sum::<usize>()
        );
        let big = w.sections.len() >= 10_000;

        let mut g = c.benchmark_group(format!("workload_{}", w.name));
        g.throughput(Throughput::Elements(w.sections.len() as u64));
        g.sample_size(if big { 10 } else { 30 });
        g.measurement_time(Duration::from_secs(if big { 20 } else { 8 }));
        g.bench_function("baseline_copy_and_hash_output", |b| {
            b.iter(|| {
                let copy = black_box(out.text()).to_owned();
                black_box(blake3::hash(copy.as_bytes()))
            })
        });
        g.bench_function("baseline_tokenize_output_once", |b| {
            b.iter(|| black_box(tok.count(black_box(out.text()))))
        });
        // What a runtime pays to build the request's sections from their texts (each section
        // works out its content hash and word bound when built); the texts are shared, not
        // copied.
        g.bench_function("build_sections", |b| {
            b.iter(|| {
                let built: Vec<Section> = w
                    .sections
                    .iter()
                    .map(|s| {
                        Section::builder(s.layer(), s.id().as_str(), s.content().clone())
                            .unwrap()
                            .priority(s.priority())
                            .sticky(s.sticky())
                            .build()
                    })
                    .collect();
                black_box(built)
            })
        });
        // A floor under any cold assembly of this request, from the sections alone: one pass
        // that reads what selection must read of every section offered (mode, path, layer,
        // score, the id's digest) into one integer key each, the sort of those keys and a set
        // of the digests (the id check); then, in that order, an entry per section holding its
        // id and a reference to its provenance, the least a report that names every section
        // holds. Nothing rendered, nothing counted: a floor under an assembly's cost above one
        // count of its output (with this sort and table; a faster sort could lower it by part
        // of the sort's share), the second arm for a report that names each section.
        g.bench_function("floor_read_order_check_ids", |b| {
            b.iter(|| black_box(floor(&req).0.len()))
        });
        g.bench_function("floor_read_order_check_ids_and_name_each", |b| {
            b.iter(|| {
                let (order, ids) = floor(&req);
                let named: Vec<(strata_core::SectionId, Arc<strata_core::Provenance>, u64)> = order
                    .iter()
                    .map(|&i| {
                        let s = &req.sections[i];
                        let bytes = s.content().as_str().len() as u64;
                        (s.id().clone(), s.provenance_shared().clone(), bytes)
                    })
                    .collect();
                black_box((ids, named))
            })
        });
        g.bench_function("cold", |b| {
            b.iter(|| {
                let a = Assembler::new(tok.clone());
                black_box(a.assemble(&agent, &req).unwrap())
            })
        });
        g.bench_function("warm", |b| {
            b.iter(|| black_box(warm.assemble(&agent, &req).unwrap()))
        });
        let changed = changing(&w.sections);
        // The request is built and dropped outside the timing, as the runtime owns it: the
        // assembler borrows it (`iter_batched_ref`).
        g.bench_function("warm_3_turns_changed", |b| {
            b.iter_batched_ref(
                || {
                    // New text in three turns, unseen by the assembler (not timed).
                    revised(&w, &changed)
                },
                |req| black_box(warm.assemble(&agent, req).unwrap()),
                BatchSize::PerIteration,
            )
        });
        // A receipt of the whole assembly, built and signed: straight from the report (what
        // the signer and `assemble_with_receipt` do), and through an owned record per section.
        let key = KeyPair::from_seed(&[0x72; 32]);
        let key_id = key.key_id().to_string();
        eprintln!(
            "{}: a receipt's statement is {} bytes",
            w.name,
            receipt::statement_bytes(&agent, &out, receipt::Sent::Text(out.text()), &key_id).len()
        );
        g.bench_function("receipt_build_and_sign", |b| {
            b.iter(|| {
                black_box(SignedReceipt::of_assembly(
                    &agent,
                    &out,
                    receipt::Sent::Text(out.text()),
                    &key,
                ))
            })
        });
        g.bench_function("receipt_part_statement_bytes", |b| {
            b.iter(|| {
                black_box(receipt::statement_bytes(
                    &agent,
                    &out,
                    receipt::Sent::Text(out.text()),
                    &key_id,
                ))
            })
        });
        g.bench_function("receipt_build_and_sign_owned_records", |b| {
            b.iter(|| {
                let st = receipt::statement(&agent, &out, receipt::Sent::Text(out.text()), &key_id);
                black_box(SignedReceipt::sign(st, &key).unwrap())
            })
        });
        // The request path without and with a receipt (see `Receipts::turn`); the request of
        // a changed turn is built and dropped untimed as above.
        let receipts = Receipts::start();
        let turn = |changed_turns: bool, arm: Arm, iters: u64| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let fresh = changed_turns.then(|| revised(&w, &changed));
                timed += receipts.turn(&warm, &agent, fresh.as_ref().unwrap_or(&req), arm);
                drop(fresh);
            }
            timed
        };
        for (name, changed_turns) in [("warm", false), ("warm_3_turns_changed", true)] {
            g.bench_function(format!("{name}_request_path"), |b| {
                b.iter_custom(|iters| turn(changed_turns, Arm::None, iters))
            });
            g.bench_function(format!("{name}_request_path_receipt_handed_over"), |b| {
                b.iter_custom(|iters| turn(changed_turns, Arm::HandedOver, iters))
            });
            g.bench_function(format!("{name}_request_path_receipt_signed_after"), |b| {
                b.iter_custom(|iters| turn(changed_turns, Arm::SignedAfter, iters))
            });
        }
        g.finish();
        receipts.signer.finish().unwrap();
    }
}

/// What becomes of a turn's receipt in the request-path arms.
#[derive(Debug, Clone, Copy)]
enum Arm {
    /// No receipt.
    None,
    /// Handed to a `ReceiptSigner`, whose worker signs it while the request is in flight.
    HandedOver,
    /// Built and signed on the same thread after the send: the request path is unchanged by
    /// construction, and the receipt's work disturbs the next turn's caches as the worker's
    /// does.
    SignedAfter,
}

/// A signer and its key, for the request-path arms (ADR-0021).
struct Receipts {
    signer: ReceiptSigner,
    key: KeyPair,
}

impl Receipts {
    fn start() -> Receipts {
        let key = KeyPair::from_seed(&[0x72; 32]);
        Receipts {
            signer: ReceiptSigner::start(
                KeyPair::from_seed(&[0x72; 32]),
                |_r: SignedReceipt| Ok(()),
                64,
            ),
            key,
        }
    }

    /// One turn: the time a turn waits, the assembly (plus the hand-over in `HandedOver`).
    /// What follows the send is not timed: waiting for the worker and reclaiming, signing on
    /// this thread, or dropping the result.
    fn turn(
        &self,
        warm: &Assembler,
        agent: &VerifiedAgent,
        req: &AssemblyRequest,
        arm: Arm,
    ) -> Duration {
        let t = Instant::now();
        let ctx = warm.assemble(agent, req).unwrap();
        black_box(ctx.text().len());
        match arm {
            Arm::None => t.elapsed(),
            Arm::HandedOver => {
                self.signer.submit(agent, ctx, None).unwrap();
                let timed = t.elapsed();
                // Wait for the worker without sleeping: a thread woken from a sleep may resume
                // on the other core, with cold caches, which would be timed as the receipt's
                // cost although a runtime waiting for a model sleeps either way.
                while self.signer.progress().1 < self.signer.progress().0 {
                    std::hint::spin_loop();
                }
                self.signer.reclaim();
                timed
            }
            Arm::SignedAfter => {
                let timed = t.elapsed();
                black_box(SignedReceipt::of_assembly(
                    agent,
                    &ctx,
                    receipt::Sent::Text(ctx.text()),
                    &self.key,
                ));
                timed
            }
        }
    }
}

/// The request path with and without a receipt when every turn starts with cooled caches, as
/// in a conversation, where a turn follows a model's answer rather than the previous turn:
/// before each timed turn 64 MiB are written, untimed. Criterion cannot time this (it plans
/// iterations from the timed part alone), so this runs only with `STRATA_BENCH_COOLED=1`, a
/// fixed number of turns per arm with the arms interleaved, and prints medians.
fn cooled(_c: &mut Criterion) {
    if std::env::var_os("STRATA_BENCH_COOLED").is_none() {
        return;
    }
    let Some(dir) = workload_dir() else {
        eprintln!("cooled: skipped; no workloads");
        return;
    };
    let tok = Arc::new(TiktokenTokenizer::o200k());
    tok.warm_up();
    let mut cooler = vec![0u8; 64 << 20];
    let mut cool = |round: u64| {
        for i in (0..cooler.len()).step_by(64) {
            cooler[i] = cooler[i].wrapping_add(round as u8 | 1);
        }
        black_box(&cooler);
    };
    let receipts = Receipts::start();
    for file in FILES {
        let w = load(&dir.join(file));
        let agent = agent(&w);
        let req = request(&w, w.sections.clone());
        let warm = Assembler::new(tok.clone());
        for _ in 0..4 {
            warm.assemble(&agent, &req).unwrap();
        }
        let changed = changing(&w.sections);
        let turns = if w.sections.len() >= 5_000 { 60 } else { 240 };
        for (name, changed_turns) in [("warm", false), ("warm_3_turns_changed", true)] {
            let mut times: [Vec<Duration>; 3] = Default::default();
            for round in 0..turns {
                // The six orders of the arms in turn, so that each arm follows each other one
                // about as often (the arm before leaves the allocator in its own state).
                const ORDERS: [[usize; 3]; 6] = [
                    [0, 1, 2],
                    [1, 2, 0],
                    [2, 0, 1],
                    [0, 2, 1],
                    [2, 1, 0],
                    [1, 0, 2],
                ];
                for arm in ORDERS[round as usize % 6] {
                    let times = &mut times[arm];
                    let fresh = changed_turns.then(|| revised(&w, &changed));
                    cool(round);
                    let arm_of = [Arm::None, Arm::HandedOver, Arm::SignedAfter][arm];
                    times.push(receipts.turn(
                        &warm,
                        &agent,
                        fresh.as_ref().unwrap_or(&req),
                        arm_of,
                    ));
                    drop(fresh);
                }
            }
            let median = |v: &mut Vec<Duration>| {
                v.sort();
                v[v.len() / 2]
            };
            let [a, b, c] = &mut times;
            let (a, b, c) = (median(a), median(b), median(c));
            eprintln!(
                "cooled {} {name}: request path {a:?}; receipt handed over {b:?} ({:+.1}%); \
                 signed after the send {c:?} ({:+.1}%); {turns} turns each",
                w.name,
                (b.as_secs_f64() / a.as_secs_f64() - 1.0) * 100.0,
                (c.as_secs_f64() / a.as_secs_f64() - 1.0) * 100.0,
            );
        }
    }
    receipts.signer.finish().unwrap();
}

criterion_group!(benches, workloads, cooled);
criterion_main!(benches);
