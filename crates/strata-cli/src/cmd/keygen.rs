//! `strata keygen`: create an ed25519 signing key, or show the public half of one (ADR-0010).
//!
//! The private key file is written by `KeyPair::write_private`: mode 0600, and an existing file
//! is never overwritten (there is deliberately no `--force`: replacing a signing key by accident
//! cannot be undone). The secret is never printed or logged; only the key id and the public key
//! are shown.

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};
use serde::Serialize;
use strata_agentdef::{format_public_key, AgentDefError, KeyPair};

use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata keygen --out release.key
  strata keygen --out release.key --trust-entry release-2026 >> trust.toml
  strata keygen --public release.key --trust-entry release-2026

Without --trust-entry, stdout holds two lines: `key id: <hex>` and `public key: ed25519:<base64>`.
With --trust-entry, stdout holds only a `[[keys]]` TOML block (which carries the same id and
public key), ready to append to a trust store (format: docs/reference/formats.md).";

/// Arguments of `strata keygen`.
#[derive(Debug, Args)]
#[command(
    after_help = AFTER_HELP,
    group(ArgGroup::new("mode").required(true).args(["out", "public"]))
)]
pub struct KeygenArgs {
    /// Write a new private key to this file (mode 0600; an existing file is never overwritten).
    #[arg(long, value_name = "KEY")]
    out: Option<PathBuf>,

    /// Show the key id and public key of an existing private key file instead.
    #[arg(long, value_name = "KEY")]
    public: Option<PathBuf>,

    /// Print a `[[keys]]` trust-store block for the key, with this name.
    #[arg(long, value_name = "NAME")]
    trust_entry: Option<String>,

    /// With --trust-entry: add the block to this trust store (created if missing, written
    /// atomically) instead of printing it, and print the store's new pin (`sha256:<hex>`, for
    /// --trust-sha256).
    #[arg(long, value_name = "TRUST.toml", requires = "trust_entry")]
    trust_store: Option<PathBuf>,
}

#[derive(Serialize)]
struct TrustEntry<'a> {
    keys: [TrustKey<'a>; 1],
}

#[derive(Serialize)]
struct TrustKey<'a> {
    id: &'a str,
    name: &'a str,
    public_key: &'a str,
}

/// The `[[keys]]` block of a trust store for one key (TOML, strings escaped by the serializer).
fn trust_entry(key: &KeyPair, name: &str) -> Result<String, CliError> {
    let id = key.key_id();
    let public_key = format_public_key(&key.public());
    let entry = TrustEntry {
        keys: [TrustKey {
            id: id.as_str(),
            name,
            public_key: &public_key,
        }],
    };
    toml::to_string(&entry)
        .map_err(|e| CliError::Other(format!("cannot write the trust entry as TOML: {e}")))
}

fn write_new_key(path: &Path) -> Result<KeyPair, CliError> {
    if path.is_dir() {
        return Err(CliError::Other(format!(
            "{} is a folder; --out takes the path of the new key file, such as {}",
            path.display(),
            path.join("release.key").display()
        )));
    }
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(CliError::Other(format!(
            "{} already exists; strata never overwrites a key file: choose another path, or move \
             the old key away yourself if you really mean to replace it",
            path.display()
        )));
    }
    let key = KeyPair::generate();
    key.write_private(path).map_err(|e| match e {
        AgentDefError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists => {
            CliError::Other(format!(
                "{} already exists; strata never overwrites a key file: choose another path",
                path.display()
            ))
        }
        AgentDefError::Io { source, .. } => CliError::io(
            path,
            source,
            "check that the directory exists and is writable",
        ),
        other => CliError::agentdef(format!("writing private key {}", path.display()), other),
    })?;
    Ok(key)
}

/// Run `strata keygen`.
pub fn run(args: &KeygenArgs, out: &Output) -> Result<(), CliError> {
    if let Some(name) = &args.trust_entry {
        if name.trim().is_empty() {
            return Err(CliError::Usage(
                "--trust-entry needs a non-empty name, such as `release-2026`".into(),
            ));
        }
    }
    let key = match (&args.out, &args.public) {
        (Some(path), None) => {
            let key = write_new_key(path)?;
            tracing::info!(key_id = %key.key_id(), path = %path.display(), "private key written");
            out.status(&format!(
                "wrote private key {} (mode 0600); keep it secret and out of version control",
                path.display()
            ));
            key
        }
        (None, Some(path)) => super::read_key(path)?,
        // clap's argument group requires exactly one of --out and --public.
        _ => {
            return Err(CliError::Usage(
                "give either --out FILE (new key) or --public FILE (existing key)".into(),
            ))
        }
    };
    match (&args.trust_entry, &args.trust_store) {
        (Some(name), Some(store)) => {
            let mut text = match std::fs::read_to_string(store) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(CliError::io(store, e, "give a readable trust store")),
            };
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push('\n');
            text.push_str(&trust_entry(&key, name)?);
            // The store as it will be must still parse: refuse rather than write a broken one.
            let parsed = strata_agentdef::TrustStore::from_toml(&text).map_err(|e| {
                CliError::agentdef(format!("adding the key to {}", store.display()), e)
            })?;
            super::write_atomically(store, text.as_bytes())?;
            out.status(&format!(
                "added key {} to {}; pin the store with --trust-sha256 {}",
                key.key_id(),
                store.display(),
                parsed.digest()
            ));
            out.result(&format!("{}\n", parsed.digest()))
        }
        (Some(name), None) => out.result(&format!("\n{}", trust_entry(&key, name)?)),
        (None, _) => out.result(&format!(
            "key id: {}\npublic key: {}\n",
            key.key_id(),
            format_public_key(&key.public())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_entry_is_accepted_by_the_trust_store() {
        let key = KeyPair::from_seed(&[5; 32]);
        let block = trust_entry(&key, "ops \"2026\"").unwrap();
        assert!(block.starts_with("[[keys]]\n"), "{block}");
        let store = strata_agentdef::TrustStore::from_toml(&block).unwrap();
        let k = store.key(key.key_id().as_str()).unwrap();
        assert_eq!(k.name, "ops \"2026\"");
    }
}
