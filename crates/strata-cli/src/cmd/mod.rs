//! One module per command, and the small helpers they share (reading keys and trust stores
//! with errors that say what to do, parsing `--at` timestamps, writing files atomically).

pub mod assemble;
pub mod completions;
pub mod demo;
pub mod explain;
pub mod inspect;
pub mod keygen;
pub mod mcp;
pub mod receipt;
pub mod serve;
pub mod session;
pub mod sign;
pub mod verify;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use strata_agentdef::{KeyPair, TrustStore};

use crate::error::CliError;

/// Parse an RFC 3339 timestamp with an offset into Unix seconds (clap value parser of `--at`).
pub fn parse_at(s: &str) -> Result<i64, String> {
    strata_agentdef::time::parse_rfc3339(s)
}

/// The error of a failed load: a refusal (exit 3) when a check failed, an error (exit 1) when a
/// file could not be read or written, such as a rollback state in a read-only folder.
pub fn load_error(e: strata_agentdef::AgentDefError) -> CliError {
    match e {
        strata_agentdef::AgentDefError::Io { .. } => CliError::agentdef(
            "nothing was refused, but a file could not be read or written (check the path and \
             that its folder is writable)",
            e,
        ),
        e => CliError::Refused(e),
    }
}

/// The error of opening a rollback state (ADR-0017): a missing or damaged state is a refusal
/// (exit 3, `REFUSED rollback_state_missing` or `rollback_state_damaged`), as the loader's own
/// check of it is; a state that cannot be read or written, or that `--init-rollback-state`
/// would overwrite, is an error (exit 1).
pub fn rollback_error(path: &Path, e: strata_agentdef::AgentDefError) -> CliError {
    match e {
        strata_agentdef::AgentDefError::RollbackStateMissing { .. }
        | strata_agentdef::AgentDefError::RollbackStateDamaged { .. } => CliError::Refused(e),
        e => CliError::agentdef(format!("opening rollback state {}", path.display()), e),
    }
}

/// Read a private key file.
pub fn read_key(path: &Path) -> Result<KeyPair, CliError> {
    KeyPair::read_private(path).map_err(|e| {
        CliError::agentdef(
            format!(
                "reading private key {} (create one with `strata keygen --out FILE`)",
                path.display()
            ),
            e,
        )
    })
}

/// Read a trust store file; with a pin (`--trust-sha256`), refuse it unless the SHA-256 of its
/// exact bytes is the pin, checked before it is parsed (ADR-0017). Every command that reads a
/// trust store reads it here.
pub fn read_trust(path: &Path, pin: Option<&str>) -> Result<TrustStore, CliError> {
    match pin {
        None => TrustStore::read(path).map_err(|e| {
            CliError::agentdef(
                format!(
                    "reading trust store {} (add keys with `strata keygen --public KEY --trust-entry NAME`)",
                    path.display()
                ),
                e,
            )
        }),
        Some(pin) => TrustStore::read_pinned(path, pin).map_err(|e| {
            CliError::agentdef(format!("reading pinned trust store {}", path.display()), e)
        }),
    }
}

/// Fail with exit code 1 unless `path` is an existing file.
pub fn require_file(path: &Path, what: &str) -> Result<(), CliError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(CliError::Other(format!(
            "{what} {} is not a regular file; give the path of the file",
            path.display()
        ))),
        Err(e) => Err(CliError::io(path, e, "check the path")),
    }
}

/// Fail with exit code 1 unless the directory `path` would be created in exists.
pub fn require_parent_dir(path: &Path, what: &str) -> Result<(), CliError> {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => Err(CliError::Other(format!(
            "the directory of {what} {} does not exist; create it first",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Write `bytes` to `path` through a temporary file in the same directory that is synced and
/// renamed over the target, so a reader never sees half a file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        CliError::Usage(format!(
            "{} does not name a file; give an output file path",
            path.display()
        ))
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let hint = "check that the directory exists and is writable";
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| CliError::io(path, e, hint));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_accepts_rfc3339_with_offset_only() {
        assert_eq!(parse_at("2026-06-01T00:00:00Z"), Ok(1_780_272_000));
        assert!(parse_at("2026-06-01").is_err());
        assert!(parse_at("yesterday").is_err());
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        write_atomically(&p, b"one").unwrap();
        write_atomically(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(write_atomically(&dir.path().join("missing/out.json"), b"x").is_err());
    }
}
