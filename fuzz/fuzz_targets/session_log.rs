//! Fuzz target: the durable session log reader (ADR-0012). Any file contents, raw or framed with
//! valid checksums around arbitrary payloads, either open cleanly or fail with a typed error;
//! nothing panics, and an opened log can be read and appended to.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_memory::{FileLog, NewEntry, WorkingMemory};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut file = Vec::new();
    file.extend_from_slice(b"STRATAWL");
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    if mode & 1 == 0 {
        file.extend_from_slice(rest);
    } else {
        // Frame each 0xff-separated chunk as a record with a correct checksum, so the JSON
        // replay logic is reached; optionally tear the last one.
        for chunk in rest.split(|b| *b == 0xff) {
            let len = (chunk.len() as u32).to_le_bytes();
            let mut h = blake3::Hasher::new();
            h.update(&len);
            h.update(chunk);
            file.extend_from_slice(&len);
            file.extend_from_slice(h.finalize().as_bytes());
            file.extend_from_slice(chunk);
        }
        if mode & 2 != 0 && file.len() > 20 {
            file.truncate(file.len() - usize::from(mode >> 4) - 1);
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("wm.log");
    std::fs::write(&path, &file).expect("write");
    if let Ok(log) = FileLog::open(&path) {
        let _ = log.recent_within("s", 10_000, &strata_core::EstimateTokenizer::new());
        log.append("s", NewEntry::user("after fuzz")).expect("an opened log accepts appends");
    }
});
