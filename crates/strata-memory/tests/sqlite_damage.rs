//! The single-byte damage campaign of the SQLite adapter (ADR-0036): a small store holding
//! every kind of row (sessions with entries, one of them cleared and reused, operation
//! records, long-term memories with tags and a deleted one, shared facts, state documents,
//! change-log rows) is written once; then, for every page of the file, a set of bytes is
//! damaged one at a time in a copy, and the copy is opened, read back whole through the public
//! API and checked. Each case is one of:
//!
//! - detected: the open, a read or `check_integrity` answered an error;
//! - harmless: every read answered exactly what the undamaged copy answers, and the check
//!   passed;
//! - silent: a read answered something else without an error. There must be none.
//!
//! By default each page gets its b-tree header bytes and 16 bytes spread over it;
//! `STRATA_DAMAGE_OFFSETS=all` damages every byte of every page (a long run), and a number
//! spreads that many bytes per page.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_core::EstimateTokenizer;
use strata_memory::{
    Batch, Entry, Fact, HashEmbedder, ListOptions, LongTermMemory, ManualClock, MemoryError,
    MemoryId, MemoryRecord, NewEntry, NewMemory, Operation, Scope, SearchOptions, SessionState,
    SharedContext, SharedContextWriter, SqliteStore, StateDoc, StoreOptions, Tail, WorkingMemory,
};

const T0: i64 = 1_700_000_000_000;
const SESSIONS: [&str; 4] = ["s1", "s2", "s3", "never"];

fn open(path: &Path, clock: &Arc<ManualClock>) -> Result<SqliteStore, MemoryError> {
    SqliteStore::open_with(
        path,
        Arc::new(HashEmbedder::default()),
        StoreOptions::default().with_clock(clock.clone()),
    )
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Write the store the campaign damages, and close it (the last close folds the write-ahead
/// log into the file).
fn build(path: &Path, clock: &Arc<ManualClock>) -> Vec<MemoryId> {
    let s = open(path, clock).unwrap();
    clock.set(T0);
    s.apply(
        "s1",
        Batch {
            tail: Tail::At(None),
            entries: vec![
                NewEntry::user("What is in the deploy log?"),
                NewEntry::tool_call("c1", r#"{"path":"deploy.log"}"#),
                NewEntry::tool_result("c1", "exit 1: permission denied")
                    .with_meta(r#"{"is_error":true}"#),
                NewEntry::assistant("The deploy failed on permissions.")
                    .with_meta(r#"{"reasoning":[{"type":"thinking","signature":"c2ln"}]}"#),
            ],
            ..Batch::default()
        },
    )
    .unwrap();
    for i in 0..6 {
        clock.advance(1);
        let e = if i % 2 == 0 {
            NewEntry::user(format!("question {i} {}", "q".repeat(40 * i)))
        } else {
            NewEntry::assistant(format!("answer {i} {}", "a".repeat(60 * i)))
        };
        s.append("s2", e).unwrap();
    }
    s.apply(
        "s2",
        Batch {
            entries: vec![NewEntry::user("retry-safe turn")],
            operation: Some(Operation::new("op-1", "fp-1", "answered once")),
            ..Batch::default()
        },
    )
    .unwrap();
    s.append("s3", NewEntry::user("first life")).unwrap();
    s.append("s3", NewEntry::assistant("gone soon")).unwrap();
    s.clear("s3").unwrap();
    s.append("s3", NewEntry::user("second life")).unwrap();
    s.append("s3", NewEntry::assistant("numbered from 3"))
        .unwrap();

    let memories: Vec<NewMemory> = (0..14)
        .map(|i| {
            NewMemory::new(
                if i % 3 == 0 { "b" } else { "a" },
                format!(
                    "memory {i}: the staging deploy {} {}",
                    ["needs the VPN", "freezes on Fridays", "uses blue-green"][i % 3],
                    "detail ".repeat(i * 7)
                ),
            )
            .with_tags(if i % 2 == 0 {
                vec!["ops"]
            } else {
                vec!["ops", "x"]
            })
        })
        .collect();
    let recs = s.put_many(memories).unwrap();
    assert!(s.delete(&recs[5].id).unwrap());
    s.put(
        NewMemory::new("a", "memory 0 rewritten: deploys need approval")
            .with_id(recs[0].id.clone()),
    )
    .unwrap();

    s.set_fact(&Scope::global(), "tz", "UTC").unwrap();
    s.set_fact(&Scope::global(), "region", "eu-west-1").unwrap();
    s.set_fact(&Scope::global(), "owner", "platform team")
        .unwrap();
    let agent = Scope::agent("a").unwrap();
    s.set_fact(&agent, "style", "terse").unwrap();
    s.set_fact(&agent, "lang", "en").unwrap();
    s.put_state("s1", "goals", r#"{"goals":["fix deploy"]}"#, None)
        .unwrap();
    s.put_state("s2", "files", r#"["a.rs","b.rs"]"#, None)
        .unwrap();
    s.put_state("s2", "files", r#"["a.rs","b.rs","c.rs"]"#, Some(1))
        .unwrap();
    drop(s);
    assert!(
        std::fs::metadata(with_suffix(path, "-wal")).map_or(true, |m| m.len() == 0),
        "the write-ahead log was folded into the file"
    );
    recs.into_iter().map(|r| r.id).collect()
}

/// Everything the public API answers about the store.
#[derive(Debug, PartialEq)]
struct Reads {
    sessions: Vec<SessionReads>,
    operations: Vec<Option<Operation>>,
    memories: Vec<Vec<MemoryRecord>>,
    counts: Vec<usize>,
    got: Vec<Option<MemoryRecord>>,
    hits: Vec<Vec<(MemoryId, String)>>,
    facts: Vec<Fact>,
    fact: Vec<Option<Fact>>,
    state: Vec<Option<StateDoc>>,
    stats: (u64, u64, u64, u64),
}

#[derive(Debug, PartialEq)]
struct SessionReads {
    entries: Vec<Entry>,
    exchange: Vec<Entry>,
    last: Option<u64>,
    has: bool,
    recent_all: Vec<Entry>,
    recent_few: Vec<Entry>,
}

fn read_everything(s: &SqliteStore, ids: &[MemoryId]) -> Result<Reads, MemoryError> {
    let tok = EstimateTokenizer::new();
    let mut sessions = Vec::new();
    for id in SESSIONS {
        sessions.push(SessionReads {
            entries: s.entries(id)?,
            exchange: s.current_exchange(id)?,
            last: s.last_seq(id)?,
            has: s.has_session(id)?,
            recent_all: s.recent_within(id, 100_000, &tok)?,
            recent_few: s.recent_within(id, 30, &tok)?,
        });
    }
    let global = Scope::global();
    let agent = Scope::agent("a").unwrap();
    let mut got = Vec::new();
    for id in ids
        .iter()
        .cloned()
        .chain([MemoryId::new("no-such-memory").unwrap()])
    {
        got.push(s.get(&id)?);
    }
    let mut hits = Vec::new();
    for q in ["staging deploy VPN", "Fridays", "approval detail"] {
        hits.push(
            s.search(q, &SearchOptions::top(5))?
                .into_iter()
                .map(|h| (h.record.id, h.record.content.to_string()))
                .collect(),
        );
    }
    let mut fact = Vec::new();
    for (scope, key) in [
        (&global, "tz"),
        (&global, "region"),
        (&global, "nope"),
        (&agent, "style"),
    ] {
        fact.push(s.fact(scope, key)?);
    }
    let stats = s.stats()?;
    Ok(Reads {
        sessions,
        operations: vec![s.operation("s2", "op-1")?, s.operation("s2", "op-2")?],
        memories: vec![
            s.list(&ListOptions::all())?,
            s.list(&ListOptions::all().agent("a"))?,
            s.list(&ListOptions::all().tags(["x"]))?,
            s.list(&ListOptions::all().page(2, 4))?,
            s.list(&ListOptions::all().agent("b").page(1, 10))?,
        ],
        counts: vec![s.count(None)?, s.count(Some("a"))?, s.count(Some("b"))?],
        got,
        hits,
        facts: s.facts(&[global.clone(), agent.clone()])?,
        fact,
        state: vec![
            s.state("s1", "goals")?,
            s.state("s2", "files")?,
            s.state("s1", "nothing")?,
        ],
        stats: (stats.memories, stats.entries, stats.sessions, stats.facts),
    })
}

/// Which bytes of a page of `page_size` bytes the campaign damages: the b-tree page header
/// (at 100 on the first page, after the file header, whose bytes are sampled too) and
/// `spread` bytes spread over the page, or every byte.
fn offsets(page: usize, page_size: usize, spread: Option<usize>) -> Vec<usize> {
    let Some(spread) = spread else {
        return (0..page_size).collect();
    };
    let head = if page == 0 { 100 } else { 0 };
    let mut out: Vec<usize> = (head..head + 12).collect();
    if page == 0 {
        out.extend((0..100).step_by(7));
    }
    let step = page_size / spread.max(1);
    for k in 0..spread {
        out.push(k * step + (page * 37 + k * 11) % step.max(1));
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[derive(Debug, Default)]
struct Tally {
    at_open: u64,
    at_read: u64,
    at_check: u64,
    harmless: u64,
    silent: Vec<String>,
}

/// Verifies ADR-0036: no single damaged byte anywhere in a store's file makes a read answer
/// something other than what was written without an error.
#[test]
fn single_byte_damage_is_never_silent() {
    let spread = match std::env::var("STRATA_DAMAGE_OFFSETS").as_deref() {
        Ok("all") => None,
        Ok(n) => Some(
            n.parse()
                .expect("STRATA_DAMAGE_OFFSETS is `all` or a number"),
        ),
        Err(_) => Some(16),
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let original = dir.path().join("original.db");
    let ids = build(&original, &clock);
    let bytes = std::fs::read(&original).unwrap();
    let commits = std::fs::read(with_suffix(&original, "-commits")).unwrap();
    let page_size = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65_536,
        n => usize::from(n),
    };
    assert_eq!(bytes.len() % page_size, 0);
    let pages = bytes.len() / page_size;

    let case = dir.path().join("case.db");
    // Each case starts from the undamaged file's side files: the commit counter and, for
    // every other case, the index snapshot a handle of the undamaged store wrote (so searches
    // run both from the snapshot and from the rows).
    let mut index: Option<Vec<u8>> = None;
    let place = |data: &[u8], index: Option<&[u8]>| {
        for suffix in ["-wal", "-shm", "-index"] {
            let _ = std::fs::remove_file(with_suffix(&case, suffix));
        }
        std::fs::write(&case, data).unwrap();
        std::fs::write(with_suffix(&case, "-commits"), &commits).unwrap();
        if let Some(ix) = index {
            std::fs::write(with_suffix(&case, "-index"), ix).unwrap();
        }
    };
    place(&bytes, None);
    let expected = {
        let s = open(&case, &clock).unwrap();
        let r = read_everything(&s, &ids).unwrap();
        s.check_integrity().unwrap();
        r
    };
    if let Ok(ix) = std::fs::read(with_suffix(&case, "-index")) {
        index = Some(ix);
    }
    assert!(
        index.is_some(),
        "the undamaged store wrote its index snapshot"
    );
    let mut n = 0usize;
    assert_eq!(expected.sessions[2].entries[0].session_seq, 3);

    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    let mut damaged = bytes.clone();
    // `STRATA_DAMAGE_ONLY=page:byte` runs one case, to look at it closely.
    let only: Option<(usize, usize)> = std::env::var("STRATA_DAMAGE_ONLY").ok().map(|v| {
        let (p, b) = v.split_once(':').expect("STRATA_DAMAGE_ONLY is page:byte");
        (p.parse().unwrap(), b.parse().unwrap())
    });
    for page in 0..pages {
        for off in offsets(page, page_size, spread) {
            if only.is_some_and(|o| o != (page, off)) {
                continue;
            }
            let at = page * page_size + off;
            let mask = if (page + off).is_multiple_of(2) {
                0xff
            } else {
                0x01
            };
            damaged[at] ^= mask;
            n += 1;
            place(&damaged, index.as_deref().filter(|_| n.is_multiple_of(2)));
            damaged[at] ^= mask;
            let store = match open(&case, &clock) {
                Ok(s) => s,
                Err(_) => {
                    tally.at_open += 1;
                    continue;
                }
            };
            if only.is_some() {
                eprintln!("stats {:?}", store.vector_cache_stats());
                for q in ["staging deploy VPN"] {
                    for h in store.search(q, &SearchOptions::top(5)).unwrap() {
                        eprintln!(
                            "  {} {:.5} {:?} {:?}",
                            h.record.id, h.score, h.lexical_rank, h.vector_rank
                        );
                    }
                }
            }
            match read_everything(&store, &ids) {
                Err(_) => tally.at_read += 1,
                Ok(r) if r != expected => tally.silent.push(format!(
                    "page {page} byte {off} (file offset {at}, xor {mask:#04x}): {} {:?}",
                    describe(&expected, &r),
                    store.vector_cache_stats()
                )),
                Ok(_) => match store.check_integrity() {
                    Err(_) => tally.at_check += 1,
                    Ok(()) => tally.harmless += 1,
                },
            }
        }
    }
    let detected = tally.at_open + tally.at_read + tally.at_check;
    eprintln!(
        "sqlite single-byte damage campaign: {pages} pages of {page_size} bytes, {} cases in {:.1} s: {detected} detected ({} at open, {} by a read, {} by check_integrity) / {} harmless / {} silent",
        detected + tally.harmless + tally.silent.len() as u64,
        started.elapsed().as_secs_f64(),
        tally.at_open,
        tally.at_read,
        tally.at_check,
        tally.harmless,
        tally.silent.len()
    );
    for s in tally.silent.iter().take(20) {
        eprintln!("  silent: {s}");
    }
    assert!(
        tally.silent.is_empty(),
        "{} silent cases",
        tally.silent.len()
    );
}

/// The first field where two sets of reads differ.
fn describe(want: &Reads, got: &Reads) -> String {
    let fields: [(&str, bool); 10] = [
        ("sessions", want.sessions == got.sessions),
        ("operations", want.operations == got.operations),
        ("memories", want.memories == got.memories),
        ("counts", want.counts == got.counts),
        ("get", want.got == got.got),
        ("search", want.hits == got.hits),
        ("facts", want.facts == got.facts),
        ("fact", want.fact == got.fact),
        ("state", want.state == got.state),
        ("stats", want.stats == got.stats),
    ];
    let mut out = fields
        .iter()
        .filter(|(_, same)| !same)
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ");
    for (i, (w, g)) in want.memories.iter().zip(&got.memories).enumerate() {
        if w != g {
            let ids = |l: &[MemoryRecord]| -> Vec<String> {
                l.iter()
                    .map(|r| r.content.as_str().chars().take(9).collect())
                    .collect()
            };
            out.push_str(&format!(
                " (listing {i}: {:?} instead of {:?})",
                ids(g),
                ids(w)
            ));
        }
    }
    if want.hits != got.hits {
        let ids = |h: &[Vec<(MemoryId, String)>]| -> Vec<Vec<String>> {
            h.iter()
                .map(|q| q.iter().map(|(id, _)| id.to_string()).collect())
                .collect()
        };
        out.push_str(&format!(
            " (hits {:?} instead of {:?})",
            ids(&got.hits),
            ids(&want.hits)
        ));
    }
    out
}
