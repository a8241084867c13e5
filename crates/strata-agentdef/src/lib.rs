//! `strata-agentdef`: signed agent definitions, the only door to layers 1-2.
//!
//! An operator writes an agent definition (TOML, see [`definition`]), signs it into a DSSE
//! envelope with ed25519 ([`Envelope`], [`KeyPair`]), and runtimes load it with a [`Loader`]
//! against a [`TrustStore`] and a [`RollbackGuard`]. The result, [`VerifiedAgent`], is the only
//! value that carries layers 1-2 into an assembly; nothing outside this crate can construct one
//! (ADR-0004, ADR-0010; invariants I5 and I7).
//!
//! ```no_run
//! use strata_agentdef::{Loader, RollbackGuard, TrustStore};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let trust = TrustStore::read("trust.toml".as_ref())?;
//! // Created once by the operator: `strata verify --init-rollback-state` (RollbackGuard::init).
//! let guard = RollbackGuard::open("rollback.json")?;
//! let agent = Loader::new(&trust, &guard).load_file("agent.signed.json".as_ref())?;
//! println!("{} v{} digest {}", agent.agent_id(), agent.version(), agent.identity_digest());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
// Every function fits on one screen for a reader (threshold in clippy.toml); tests are exempt.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod definition;
pub mod envelope;
pub mod error;
pub mod keys;
pub mod loader;
pub mod rollback;
#[cfg(feature = "postgres")]
mod rollback_pg;
pub mod time;
pub mod trust;
pub mod verified;

pub use definition::{
    check_definition, embed_files, AgentDefinition, EmbeddedFile, ModeTemplates, ResolvedTemplate,
};
pub use envelope::{Envelope, PAYLOAD_TYPE};
pub use error::AgentDefError;
pub use keys::{format_public_key, parse_public_key, KeyId, KeyPair};
pub use loader::{now_unix, Expiry, Loader};
pub use rollback::RollbackGuard;
#[cfg(feature = "schema")]
pub use trust::trust_store_schema;
pub use trust::{parse_pin, trust_store_digest, TrustStore};
pub use verified::{render_identity, VerifiedAgent};

use std::io::Read as _;
use std::path::Path;

/// Read at most `limit` bytes of a file, refusing larger ones before reading them whole.
pub(crate) fn read_limited(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, AgentDefError> {
    let f = std::fs::File::open(path).map_err(|e| AgentDefError::io(path, e))?;
    let mut buf = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| AgentDefError::io(path, e))?;
    if buf.len() as u64 > limit {
        return Err(AgentDefError::TooLarge {
            what,
            size: buf.len() as u64,
            limit,
        });
    }
    Ok(buf)
}

/// Sign a definition's TOML text into an envelope after checking that it is a valid definition
/// (referenced files are resolved against `base` and their digests checked).
pub fn sign_definition(
    text: &str,
    base: Option<&Path>,
    keys: &[&KeyPair],
) -> Result<Envelope, AgentDefError> {
    let text = match base {
        Some(base) => embed_files(text, base)?,
        None => text.to_owned(),
    };
    check_definition(&text, None)?;
    let mut env = Envelope::new(text.into_bytes());
    for k in keys {
        env.sign(k);
    }
    Ok(env)
}
