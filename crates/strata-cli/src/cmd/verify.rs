//! `strata verify`: run the loader on a signed definition and print a one-line verdict
//! (ADR-0010, invariant I5).
//!
//! The verdict comes only from `strata_agentdef::Loader`: on success the line names what the
//! sealed `VerifiedAgent` says; on any refusal the command exits with code 3 and prints
//! `REFUSED <cause>: <message>` with the loader's stable cause name. Nothing here re-implements
//! a check.
//!
//! ADR-0017: the rollback state must exist (`--init-rollback-state` creates it once); the
//! trust store's digest is printed on the verdict line and can be pinned (`--trust-sha256`);
//! checking validity at another instant is `--time-travel-dangerously`, logged at `warn`.

use std::path::PathBuf;

use clap::Args;
use strata_agentdef::{Expiry, Loader, RollbackGuard, VerifiedAgent};

use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata verify ada.signed.json --trust trust.toml \\
      --rollback-state /var/lib/strata/rollback.json
  strata verify ada.signed.json --trust trust.toml --trust-sha256 sha256:<hex> \\
      --rollback-state s.json
  strata verify ada.signed.json --trust trust.toml \\
      --rollback-state new.json --init-rollback-state
  strata verify old.signed.json --trust trust.toml \\
      --time-travel-dangerously 2026-06-01T00:00:00Z

On success: exit code 0 and
`OK agent=<id> version=<n> digest=blake3:<hex> signers=<n> trust=sha256:<hex>` on stdout; pin
the `trust=` value with --trust-sha256 (or STRATA_TRUST_SHA256). On refusal: exit code 3 and
`REFUSED <cause>: <message>` on stderr, where <cause> is one of too_large, malformed,
no_signatures, unknown_key, bad_signature, revoked_key, key_not_valid, threshold_not_met,
wrong_payload_type, expired, not_yet_valid, rolled_back, version_reused, digest_mismatch,
invalid_definition, rollback_state_damaged, rollback_state_missing (the --rollback-state file
is damaged, or missing: create it once with --init-rollback-state). Other errors (unreadable,
unpinned or invalid trust store, a rollback state that cannot be read or written, or that
--init-rollback-state would overwrite) exit with code 1. The trust store format:
docs/reference/formats.md.";

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

    /// Refuse the trust store unless the SHA-256 of its bytes is this (`sha256:<hex>`, as the
    /// verdict line's `trust=` field prints it).
    #[arg(long, value_name = "SHA256", env = "STRATA_TRUST_SHA256")]
    trust_sha256: Option<String>,

    /// The rollback state file. It must exist (a missing file is refused, never taken as
    /// empty); create it once with --init-rollback-state. Without this option, rollbacks
    /// across runs are not detected.
    #[arg(long, value_name = "FILE")]
    rollback_state: Option<PathBuf>,

    /// Create the --rollback-state file (empty) before verifying; refused if it exists.
    #[arg(long, requires = "rollback_state")]
    init_rollback_state: bool,

    /// Accept definitions outside their validity window. For forensics on old definitions only.
    #[arg(long, conflicts_with = "time_travel_dangerously")]
    ignore_expiry_dangerously: bool,

    /// Check every validity window (definition and keys) at this instant (RFC 3339 with an
    /// offset) instead of now: an expired definition signed by an expired key is accepted if
    /// both were valid then. For audits only; logged as a warning.
    #[arg(long, value_name = "RFC3339", value_parser = super::parse_at)]
    time_travel_dangerously: Option<i64>,
}

/// The verdict line of an accepted definition.
pub fn ok_line(agent: &VerifiedAgent) -> String {
    format!(
        "OK agent={} version={} digest={} signers={} trust={}",
        agent.agent_id(),
        agent.version(),
        agent.identity_digest(),
        agent.signers().len(),
        agent.trust_digest()
    )
}

/// The time policy chosen on the command line; the weak ones are logged loudly.
pub fn expiry_policy(ignore_dangerously: bool, time_travel: Option<i64>) -> Expiry {
    if ignore_dangerously {
        tracing::warn!(
            "--ignore-expiry-dangerously: expired and not-yet-valid definitions are accepted; \
             never do this for a runtime that serves users"
        );
        Expiry::IgnoreDangerously
    } else if let Some(at) = time_travel {
        tracing::warn!(
            "--time-travel-dangerously: validity is checked at another instant than now, so \
             expired definitions and keys may be accepted; never do this for a runtime that \
             serves users"
        );
        Expiry::TimeTravelDangerously(at)
    } else {
        Expiry::Enforce
    }
}

/// Run `strata verify`.
pub fn run(args: &VerifyArgs, out: &Output) -> Result<(), CliError> {
    super::require_file(&args.envelope, "envelope")?;
    let trust = super::read_trust(&args.trust, args.trust_sha256.as_deref())?;
    let guard = match &args.rollback_state {
        Some(path) => {
            super::require_parent_dir(path, "the rollback state")?;
            let opened = if args.init_rollback_state {
                RollbackGuard::init(path)
            } else {
                RollbackGuard::open(path)
            };
            let guard = opened.map_err(|e| super::rollback_error(path, e))?;
            if args.init_rollback_state {
                out.status(&format!(
                    "created the rollback state {} (empty); it records the highest version \
                     accepted from now on",
                    path.display()
                ));
            }
            guard
        }
        None => {
            tracing::debug!(
                "no --rollback-state given: using an in-memory rollback guard, so a rollback \
                 to an older version is not detected across runs"
            );
            RollbackGuard::in_memory()
        }
    };
    let loader = Loader::new(&trust, &guard).expiry(expiry_policy(
        args.ignore_expiry_dangerously,
        args.time_travel_dangerously,
    ));
    let agent = loader
        .load_file(&args.envelope)
        .map_err(super::load_error)?;
    let signers: Vec<&str> = agent.signers().iter().map(|k| k.as_str()).collect();
    tracing::info!(
        signers = %signers.join(","),
        payload_sha256 = agent.payload_sha256(),
        "verified"
    );
    out.line(&ok_line(&agent))
}
