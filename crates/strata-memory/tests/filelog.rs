//! The conformance suite, torn-record recovery and the crash test against the durable file
//! log. Verifies ADR-0012.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

mod conformance;

use std::sync::Arc;

use strata_memory::{FileLog, ManualClock, StoreOptions};

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> FileLog {
    FileLog::open_with(
        dir.path().join("working.log"),
        StoreOptions::default().with_clock(clock.clone()),
    )
    .unwrap()
}

/// Verifies ADR-0012: the file log conforms.
#[test]
fn working_memory_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::working_memory(&open(&dir, &clock), &clock);
}

/// Verifies ADR-0031: file-log batches are all or nothing, each one record; the records are
/// replayed when the log is opened again.
#[test]
fn batches_conform() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    let log = open(&dir, &clock);
    conformance::batches(&log, &clock);
    let held = log.entries("b1").unwrap();
    drop(log);
    let reopened = open(&dir, &clock);
    assert_eq!(reopened.entries("b1").unwrap(), held);
    assert_eq!(
        reopened.operation("b1", "key-1").unwrap().unwrap().answer,
        "second life"
    );
}

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use strata_memory::{MemoryError, NewEntry, WorkingMemory};

const HEADER: u64 = 16;
const FRAME: u64 = 36;

fn fill(log: &FileLog, n: usize) -> Vec<strata_memory::Entry> {
    (0..n)
        .map(|i| {
            log.append("s", NewEntry::user(format!("entry {i}")))
                .unwrap()
        })
        .collect()
}

/// Byte offsets of the records of a log file.
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = HEADER as usize;
    while pos + FRAME as usize <= bytes.len() {
        out.push(pos);
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += FRAME as usize + len;
    }
    out
}

/// Verifies ADR-0012: a partial last record (a crash during an append) is cut off on open and
/// every whole record is kept.
#[test]
fn torn_last_record_is_skipped_and_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working.log");
    let entries = fill(&FileLog::open(&path).unwrap(), 5);
    let good_len = std::fs::metadata(&path).unwrap().len();
    // Half a frame: a length that promises more bytes than follow.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&200u32.to_le_bytes()).unwrap();
    f.write_all(&[7u8; 50]).unwrap();
    drop(f);

    let log = FileLog::open(&path).unwrap();
    assert_eq!(log.recovery().records, 5);
    assert_eq!(log.recovery().truncated_bytes, 54);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
    assert_eq!(log.entries("s").unwrap(), entries);
    // Appending after recovery continues the log cleanly.
    let next = log.append("s", NewEntry::user("after")).unwrap();
    assert!(next.seq > entries[4].seq);
    drop(log);
    let log = FileLog::open(&path).unwrap();
    assert_eq!(log.recovery().truncated_bytes, 0);
    assert_eq!(log.entries("s").unwrap().len(), 6);
}

/// Verifies ADR-0012: a last record whose checksum does not match is a torn write: cut off.
#[test]
fn last_record_with_bad_checksum_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working.log");
    let entries = fill(&FileLog::open(&path).unwrap(), 3);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = *record_offsets(&bytes).last().unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let log = FileLog::open(&path).unwrap();
    assert_eq!(log.recovery().truncated_bytes, (n - last) as u64);
    assert_eq!(log.entries("s").unwrap(), entries[..2].to_vec());
}

/// Verifies ADR-0012: damage before the last record is not a torn write; it is reported and
/// the file is left alone.
#[test]
fn damaged_middle_record_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working.log");
    fill(&FileLog::open(&path).unwrap(), 3);
    let mut bytes = std::fs::read(&path).unwrap();
    let first = record_offsets(&bytes)[0];
    bytes[first + FRAME as usize + 3] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    match FileLog::open(&path) {
        Err(MemoryError::Corrupt { detail, .. }) => {
            assert!(detail.contains("checksum"), "{detail}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// Verifies ADR-0012: a file that is not a log, or a log of another format version, is refused.
#[test]
fn foreign_file_and_other_version_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "just some notes, not a log\n").unwrap();
    assert!(matches!(
        FileLog::open(&path),
        Err(MemoryError::Corrupt { .. })
    ));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "just some notes, not a log\n"
    );

    let path = dir.path().join("future.log");
    drop(FileLog::open(&path).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match FileLog::open(&path) {
        Err(MemoryError::SchemaVersionMismatch {
            found: 9,
            expected: 3,
            ..
        }) => {}
        other => panic!("expected SchemaVersionMismatch, got {other:?}"),
    }
}

/// Verifies ADR-0031: a log of format version 1 opens, and its header is raised to the current
/// version, so that a build without batch records refuses it afterwards.
#[test]
fn a_version_1_log_is_raised_to_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.log");
    drop(FileLog::open(&path).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let log = FileLog::open(&path).unwrap();
    log.append("s", NewEntry::user("hello")).unwrap();
    drop(log);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        bytes[8..12],
        strata_memory::filelog::FILE_LOG_VERSION.to_le_bytes()
    );
    assert_eq!(FileLog::open(&path).unwrap().entries("s").unwrap().len(), 1);
}

/// A log of format version 2 (no entry metadata) opens, and its header is raised to 3, so that a
/// build without metadata refuses it rather than dropping the metadata it cannot read; entries
/// with metadata are replayed byte for byte.
#[test]
fn a_version_2_log_is_raised_and_entry_meta_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.log");
    let log = FileLog::open(&path).unwrap();
    let old = log.append("s", NewEntry::user("old")).unwrap();
    drop(log);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let log = FileLog::open(&path).unwrap();
    let mut held = vec![old];
    for m in conformance::METAS {
        held.push(
            log.append("s", NewEntry::assistant("a").with_meta(m))
                .unwrap(),
        );
    }
    drop(log);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[8..12], 3u32.to_le_bytes());
    assert_eq!(FileLog::open(&path).unwrap().entries("s").unwrap(), held);
}

/// The file log keeps entry metadata byte for byte; a bad one refuses its batch.
#[test]
fn entry_meta_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    conformance::entry_meta(&open(&dir, &clock), &clock);
}

/// Verifies ADR-0012: clearing a session is durable.
#[test]
fn clear_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working.log");
    {
        let log = FileLog::open(&path).unwrap();
        fill(&log, 3);
        log.append("other", NewEntry::user("kept")).unwrap();
        assert_eq!(log.clear("s").unwrap(), 3);
    }
    let log = FileLog::open(&path).unwrap();
    assert!(log.entries("s").unwrap().is_empty());
    assert_eq!(log.entries("other").unwrap().len(), 1);
    assert_eq!(log.recovery().records, 5);
}

/// The environment variable that turns [`crash_child_writer`] into the writer process.
const CHILD_ENV: &str = "STRATA_MEMORY_CRASH_CHILD_LOG";

/// The content the writer stores for its `i`-th append: varied sizes, checkable text.
fn crash_payload(i: u64) -> String {
    let filler = "abcdefghij".repeat((i as usize * 37) % 400);
    format!("entry {i} <{filler}> end {i}")
}

/// The writer half of [`acknowledged_entries_survive_kill_9`]. It does nothing unless the
/// parent test starts this binary with [`CHILD_ENV`] set: then it appends to the log until it
/// is killed, printing `ACK <seq> <i>` after each append returns (after the fsync).
#[test]
fn crash_child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let log = FileLog::open(&path).unwrap();
    let mut i = log.entries("crash").unwrap().len() as u64;
    let out = std::io::stdout();
    loop {
        let entry = match i % 3 {
            0 => NewEntry::user(crash_payload(i)),
            1 => NewEntry::tool_call(format!("call-{i}"), crash_payload(i)),
            _ => NewEntry::tool_result(format!("call-{}", i - 1), crash_payload(i)),
        };
        let e = log.append("crash", entry).unwrap();
        let mut lock = out.lock();
        writeln!(lock, "ACK {} {i}", e.seq).unwrap();
        lock.flush().unwrap();
        i += 1;
    }
}

/// A small deterministic generator for kill delays (xorshift), seeded from the clock.
fn next_rand(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Verifies ADR-0012: nothing acknowledged is lost when the writer is killed at random moments.
/// This binary is started again as a writer (see [`crash_child_writer`]) and killed with
/// SIGKILL 30 times; then every acknowledged entry must be in the log, intact.
#[test]
fn acknowledged_entries_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.log");
    let exe = std::env::current_exe().unwrap();
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let started = Instant::now();
    let mut rounds = 0;
    let mut truncations = 0;
    let want = trials(30);
    while rounds < want && started.elapsed() < Duration::from_secs(120 * (want as u64 / 30).max(1))
    {
        rounds += 1;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut parts = line.split_whitespace();
                if parts.next() == Some("ACK") {
                    let seq: u64 = parts.next().unwrap().parse().unwrap();
                    let i: u64 = parts.next().unwrap().parse().unwrap();
                    got.push((seq, i));
                }
            }
            got
        });
        let delay = 20 + next_rand(&mut seed) % 130;
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();
        acked.extend(reader.join().unwrap());
        // Reopen between rounds, as the next writer will; count torn tails cut off.
        let log = FileLog::open(&path).unwrap();
        if log.recovery().truncated_bytes > 0 {
            truncations += 1;
        }
    }
    assert_eq!(rounds, want, "the rounds took too long");
    assert!(
        acked.len() >= 30,
        "the writer acknowledged only {} appends; the test proves nothing",
        acked.len()
    );
    let log = FileLog::open(&path).unwrap();
    let stored = log.entries("crash").unwrap();
    let by_seq: std::collections::HashMap<u64, &strata_memory::Entry> =
        stored.iter().map(|e| (e.seq, e)).collect();
    for (seq, i) in &acked {
        let e = by_seq
            .get(seq)
            .unwrap_or_else(|| panic!("acknowledged entry {seq} is missing"));
        assert_eq!(
            e.content.as_str(),
            crash_payload(*i),
            "entry {seq} is damaged"
        );
    }
    assert!(stored.windows(2).all(|w| w[0].seq < w[1].seq));
    eprintln!(
        "crash test: {rounds} rounds, {} acknowledged, {} stored, {truncations} torn tails cut",
        acked.len(),
        stored.len()
    );
}

/// How many trials a fault campaign runs: `default` in the normal test run, or the number in
/// `STRATA_MEMORY_CAMPAIGN_TRIALS` for the long campaigns.
fn trials(default: usize) -> usize {
    std::env::var("STRATA_MEMORY_CAMPAIGN_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Verifies ADR-0019: a second writer, in the same process, is refused with a typed error
/// while the first one lives, and may open the log once the first is closed.
#[test]
fn second_writer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working.log");
    let first = FileLog::open(&path).unwrap();
    let entries = fill(&first, 3);
    match FileLog::open(&path) {
        Err(MemoryError::Locked { location, .. }) => {
            assert!(location.ends_with("working.log"), "{location}")
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    // The refused open changed nothing; the first writer carries on.
    first.append("s", NewEntry::user("more")).unwrap();
    drop(first);
    let again = FileLog::open(&path).unwrap();
    assert_eq!(again.entries("s").unwrap()[..3], entries[..]);
    assert_eq!(again.entries("s").unwrap().len(), 4);
}

/// Verifies ADR-0019: a middle record whose length field is damaged (so that it seems to run
/// past the end of the file) is damage, not a torn tail: the open fails and no byte of the
/// file is removed.
#[test]
fn damaged_length_in_a_middle_record_truncates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working.log");
    fill(&FileLog::open(&path).unwrap(), 6);
    let mut bytes = std::fs::read(&path).unwrap();
    let offsets = record_offsets(&bytes);
    for (k, bad_len) in [(2usize, 0x00ff_ff00u32), (4, u32::MAX), (1, 60_000)] {
        let mut damaged = bytes.clone();
        damaged[offsets[k]..offsets[k] + 4].copy_from_slice(&bad_len.to_le_bytes());
        std::fs::write(&path, &damaged).unwrap();
        match FileLog::open(&path) {
            Err(MemoryError::Corrupt { detail, .. }) => {
                assert!(detail.contains("followed by a valid record"), "{detail}")
            }
            other => panic!("record {k} with length {bad_len}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "the file was changed"
        );
    }
    // The same damage in the last record is a torn tail: only that record goes.
    let last = *offsets.last().unwrap();
    bytes[last..last + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let log = FileLog::open(&path).unwrap();
    assert_eq!(log.entries("s").unwrap().len(), 5);
    assert_eq!(log.recovery().truncated_bytes, (bytes.len() - last) as u64);
}

/// Verifies ADR-0019: the damage campaign. Each trial writes a log of records of varied
/// sizes, damages it (one flipped byte, or a run of random bytes) anywhere, and opens it.
/// Whatever the damage, the open either fails as `Corrupt` or `SchemaVersionMismatch` with
/// the file untouched, or returns exactly the records written, where only a damaged last
/// record may be missing (and its cut is reported). No damaged text is ever served and no
/// intact record is ever removed.
#[test]
fn damage_campaign_never_serves_damage_or_cuts_intact_records() {
    let n = trials(100);
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let (mut refused, mut cut_last, mut intact) = (0, 0, 0);
    for trial in 0..n {
        let path = dir.path().join(format!("t{trial}.log"));
        let written: Vec<String> = {
            let log = FileLog::open(&path).unwrap();
            let count = 3 + next_rand(&mut seed) % 20;
            (0..count)
                .map(|i| {
                    let text = crash_payload(next_rand(&mut seed) % 50 + i);
                    log.append("s", NewEntry::user(text.clone())).unwrap();
                    text
                })
                .collect()
        };
        let clean = std::fs::read(&path).unwrap();
        let offsets = record_offsets(&clean);
        let last = *offsets.last().unwrap();
        let mut damaged = clean.clone();
        let at = (next_rand(&mut seed) % clean.len() as u64) as usize;
        let run = if trial % 2 == 0 {
            1
        } else {
            1 + (next_rand(&mut seed) % 8) as usize
        };
        for b in damaged.iter_mut().skip(at).take(run) {
            let x = (next_rand(&mut seed) % 255 + 1) as u8;
            *b ^= x;
        }
        std::fs::write(&path, &damaged).unwrap();
        match FileLog::open(&path) {
            Err(MemoryError::Corrupt { .. } | MemoryError::SchemaVersionMismatch { .. }) => {
                assert_eq!(
                    std::fs::read(&path).unwrap(),
                    damaged,
                    "trial {trial}: file changed"
                );
                refused += 1;
            }
            Err(other) => panic!("trial {trial}: unexpected error {other}"),
            Ok(log) => {
                let got: Vec<String> = log
                    .entries("s")
                    .unwrap()
                    .iter()
                    .map(|e| e.content.as_str().to_owned())
                    .collect();
                if got.len() == written.len() {
                    assert_eq!(got, written, "trial {trial}: damaged text served");
                    intact += 1;
                } else {
                    assert!(
                        at >= last,
                        "trial {trial}: records lost though the damage at {at} was before the last record at {last}"
                    );
                    assert_eq!(got[..], written[..written.len() - 1], "trial {trial}");
                    assert!(log.recovery().truncated_bytes > 0);
                    cut_last += 1;
                }
            }
        }
    }
    eprintln!(
        "damage campaign: {n} trials, {refused} refused as corrupt, {cut_last} damaged last records cut, {intact} opened intact"
    );
    assert_eq!(refused + cut_last + intact, n);
}

/// The environment variable that turns [`contend_child_writer`] into a contending writer.
const CONTEND_ENV: &str = "STRATA_MEMORY_CONTEND_CHILD_LOG";

/// The writer half of [`concurrent_writers_are_refused_not_interleaved`]: it does nothing
/// unless started with [`CONTEND_ENV`]; then it opens the log and either prints `LOCKED`
/// or appends 50 entries, printing `ACK <seq> <text>` after each.
#[test]
fn contend_child_writer() {
    let Ok(path) = std::env::var(CONTEND_ENV) else {
        return;
    };
    let out = std::io::stdout();
    let log = match FileLog::open(&path) {
        Ok(log) => log,
        Err(MemoryError::Locked { .. }) => {
            writeln!(out.lock(), "LOCKED").unwrap();
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let me = std::process::id();
    for i in 0..50 {
        let text = format!("writer {me} entry {i}");
        let e = log.append("c", NewEntry::user(text.clone())).unwrap();
        let mut lock = out.lock();
        writeln!(lock, "ACK {} {text}", e.seq).unwrap();
        lock.flush().unwrap();
    }
    // Hold the log past the others' patience, so that they are refused rather than queued.
    std::thread::sleep(Duration::from_millis(600));
}

/// Verifies ADR-0019: the concurrency campaign. Four processes start at once on one log;
/// every round, the ones that do not get the lock are refused with `Locked`, and every entry
/// acknowledged by any of them is in the log afterwards, intact.
#[test]
fn concurrent_writers_are_refused_not_interleaved() {
    let rounds = trials(5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contended.log");
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<(u64, String)> = Vec::new();
    let mut locked = 0;
    for _ in 0..rounds {
        let children: Vec<_> = (0..4)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "contend_child_writer",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(CONTEND_ENV, &path)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "a writer failed");
            for line in String::from_utf8(out.stdout).unwrap().lines() {
                // The test harness prints `test name ... ` on the line where output starts.
                if line.ends_with("LOCKED") {
                    locked += 1;
                } else if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                    let (seq, text) = rest.split_once(' ').unwrap();
                    acked.push((seq.parse().unwrap(), text.to_owned()));
                }
            }
        }
        // Every round leaves a log that opens.
        drop(FileLog::open(&path).unwrap());
    }
    let log = FileLog::open(&path).unwrap();
    let stored = log.entries("c").unwrap();
    let by_seq: std::collections::HashMap<u64, &str> =
        stored.iter().map(|e| (e.seq, e.content.as_str())).collect();
    for (seq, text) in &acked {
        assert_eq!(
            by_seq.get(seq).copied(),
            Some(text.as_str()),
            "entry {seq} lost or changed"
        );
    }
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        {
            let mut s: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
            s.sort_unstable();
            s
        },
        "the log holds entries nobody acknowledged, or lost some"
    );
    eprintln!(
        "concurrency campaign: {rounds} rounds of 4 writers, {} acknowledged, {locked} refused with Locked, 0 lost",
        acked.len()
    );
}

/// The file log keeps no session state: a batch that asks it to remove state documents is
/// refused, and nothing it held changes.
#[test]
fn a_batch_removing_state_is_refused_by_the_file_log() {
    use strata_memory::{Batch, MemoryError, NewEntry, Tail, WorkingMemory as _};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(conformance::T0));
    let log = open(&dir, &clock);
    log.apply(
        "f1",
        Batch {
            tail: Tail::At(None),
            entries: vec![NewEntry::user("hello")],
            ..Batch::default()
        },
    )
    .unwrap();
    let refused = log.apply(
        "f1",
        Batch {
            clear: true,
            remove_state: vec!["files".into()],
            ..Batch::default()
        },
    );
    assert!(
        matches!(refused, Err(MemoryError::Invalid { .. })),
        "{refused:?}"
    );
    assert_eq!(log.entries("f1").unwrap().len(), 1);
}
