//! `strata verify`: run the loader on a signed definition and print a one-line verdict
//! (ADR-0010, invariant I5).
//!
//! The verdict comes only from `strata_agentdef::Loader`: on success the line names what the
//! sealed `VerifiedAgent` says; on any refusal the command exits with code 3 and prints
//! `REFUSED <cause>: <message>` with the loader's stable cause name. Nothing here re-implements
//! a check.

use std::path::PathBuf;

use clap::Args;
use strata_agentdef::{Expiry, Loader, RollbackGuard, VerifiedAgent};

use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata verify ada.signed.json --trust trust.toml --rollback-state /var/lib/strata/rollback.json
  strata verify ada.signed.json --trust trust.toml --at 2026-06-01T00:00:00Z

On success: exit code 0 and `OK agent=<id> version=<n> digest=blake3:<hex> signers=<n>` on
stdout. On refusal: exit code 3 and `REFUSED <cause>: <message>` on stderr, where <cause> is one
of too_large, malformed, no_signatures, unknown_key, bad_signature, revoked_key, key_not_valid,
threshold_not_met, wrong_payload_type, expired, not_yet_valid, rolled_back, version_reused,
digest_mismatch, invalid_definition, io. Other errors (unreadable trust store or rollback
state) exit with code 1.";

/// Arguments of `strata verify`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct VerifyArgs {
    /// The signed definition (DSSE envelope JSON); referenced files resolve next to it.
    #[arg(value_name = "ENVELOPE")]
    envelope: PathBuf,

    /// The trust store (TOML) listing the keys allowed to sign definitions.
    #[arg(long, value_name = "TRUST.toml")]
    trust: PathBuf,

    /// The rollback state file (JSON; created on first accept, its directory must exist).
    /// Without it, rollbacks across runs are not detected.
    #[arg(long, value_name = "FILE")]
    rollback_state: Option<PathBuf>,

    /// Accept definitions outside their validity window. For forensics on old definitions only.
    #[arg(long)]
    ignore_expiry_dangerously: bool,

    /// Check validity windows at this instant (RFC 3339 with an offset) instead of now.
    #[arg(long, value_name = "RFC3339", value_parser = super::parse_at)]
    at: Option<i64>,
}

/// The verdict line of an accepted definition.
pub fn ok_line(agent: &VerifiedAgent) -> String {
    format!(
        "OK agent={} version={} digest={} signers={}",
        agent.agent_id(),
        agent.version(),
        agent.identity_digest(),
        agent.signers().len()
    )
}

/// The expiry policy chosen on the command line; the weak one is logged loudly.
pub fn expiry_policy(ignore_dangerously: bool) -> Expiry {
    if ignore_dangerously {
        tracing::warn!(
            "--ignore-expiry-dangerously: expired and not-yet-valid definitions are accepted; \
             never do this for a runtime that serves users"
        );
        Expiry::IgnoreDangerously
    } else {
        Expiry::Enforce
    }
}

/// Run `strata verify`.
pub fn run(args: &VerifyArgs, out: &Output) -> Result<(), CliError> {
    super::require_file(&args.envelope, "envelope")?;
    let trust = super::read_trust(&args.trust)?;
    let guard = match &args.rollback_state {
        Some(path) => {
            super::require_parent_dir(path, "the rollback state")?;
            RollbackGuard::open(path).map_err(|e| {
                CliError::agentdef(format!("opening rollback state {}", path.display()), e)
            })?
        }
        None => {
            tracing::debug!(
                "no --rollback-state given: using an in-memory rollback guard, so a rollback \
                 to an older version is not detected across runs"
            );
            RollbackGuard::in_memory()
        }
    };
    let mut loader =
        Loader::new(&trust, &guard).expiry(expiry_policy(args.ignore_expiry_dangerously));
    if let Some(at) = args.at {
        loader = loader.at_time(at);
    }
    let agent = loader
        .load_file(&args.envelope)
        .map_err(CliError::Refused)?;
    let signers: Vec<&str> = agent.signers().iter().map(|k| k.as_str()).collect();
    tracing::info!(
        signers = %signers.join(","),
        payload_sha256 = agent.payload_sha256(),
        "verified"
    );
    out.line(&ok_line(&agent))
}
