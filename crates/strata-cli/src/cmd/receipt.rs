//! `strata receipt`: signed assembly receipts (ADR-0021).
//!
//! `assemble` assembles as `strata assemble` does, writes the exact bytes a runtime sends (a
//! provider request body, or the plain text), signs a receipt naming them with the runtime key
//! and can append it to a receipt log; `verify` checks a receipt's signature and, when given,
//! the body and the definition; `show` says what a receipt records in words; `audit` checks a
//! receipt log's chain. Every check is the library's (`strata_assembler::receipt`,
//! `strata_assembler::receipt::log`); a refusal exits with code 3 and `REFUSED <cause>: ...`.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use strata_assembler::receipt::log::{self as receipt_log, ReceiptLog};
use strata_assembler::receipt::{self, VerifiedReceipt};
use strata_assembler::{
    assemble::{Assembler, RequestParams},
    Loader, RollbackGuard, TrustStore,
};

use crate::cmd::assemble::{build_request, load_agent, AssembleArgs};
use crate::error::CliError;
use crate::output::Output;

const AFTER_HELP: &str = "\
Examples:
  strata keygen --out runtime.key --trust-entry runtime >> runtime-trust.toml
  strata receipt assemble --agent ada.signed.json --trust trust.toml \\
      --input turn.json --format anthropic --model claude-sonnet-4-5 \\
      --max-tokens 1024 --key runtime.key --body request.json \\
      --receipt receipt.json --log receipts.log
  strata receipt verify receipt.json --trust runtime-trust.toml \\
      --trust-sha256 sha256:<hex> \\
      --request request.json --agent ada.signed.json --agent-trust trust.toml
  strata receipt show receipt.json --trust runtime-trust.toml
  strata receipt audit receipts.log --trust runtime-trust.toml --head <digest>
  strata receipt audit --postgres postgres://u@db/strata \\
      --trust runtime-trust.toml

Refusals exit with code 3 and print `REFUSED <cause>: <message>` on stderr. Receipt causes:
malformed_envelope, wrong_payload_type, no_signatures, bad_signature, revoked_key, unknown_key,
malformed_statement, wrong_statement_type, not_canonical, key_mismatch, subject_mismatch,
agent_mismatch. Log causes: bad_header, malformed, edited, deleted, reordered, chain_broken,
receipt, head_mismatch, too_large, locked, database, not_initialised.";

/// Arguments of `strata receipt`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct ReceiptArgs {
    #[command(subcommand)]
    command: ReceiptCommand,
}

#[derive(Debug, Subcommand)]
enum ReceiptCommand {
    /// Assemble, write what is sent, and sign a receipt for it with the runtime key.
    Assemble(Box<MakeArgs>),
    /// Verify a receipt, and optionally the request body and definition it names.
    Verify(VerifyArgs),
    /// Say in words what a receipt records.
    Show(ShowArgs),
    /// Check a receipt log's chain (and, with --trust, every receipt in it).
    Audit(AuditArgs),
}

/// Arguments of `strata receipt assemble`.
#[derive(Debug, Args)]
struct MakeArgs {
    #[command(flatten)]
    assemble: AssembleArgs,
    /// The runtime's private key (create it with `strata keygen --out FILE`).
    #[arg(long, value_name = "KEY")]
    key: PathBuf,
    /// Write the exact bytes to send here: the request body (compact JSON) with a provider
    /// format, the plain text otherwise.
    #[arg(long, value_name = "FILE")]
    body: PathBuf,
    /// Write the receipt (a DSSE envelope) here.
    #[arg(long, value_name = "FILE")]
    receipt: PathBuf,
    /// Also append the receipt to this receipt log (created if missing).
    #[arg(long, value_name = "LOG")]
    log: Option<PathBuf>,
}

/// Arguments of `strata receipt verify`.
#[derive(Debug, Args)]
struct VerifyArgs {
    /// The receipt (DSSE envelope JSON).
    #[arg(value_name = "RECEIPT")]
    receipt: PathBuf,
    /// Trust store holding the runtime keys allowed to sign receipts.
    #[arg(long, value_name = "TRUST.toml")]
    trust: PathBuf,
    /// Refuse --trust unless the SHA-256 of its exact bytes is this (`sha256:<hex>`).
    #[arg(long, value_name = "SHA256")]
    trust_sha256: Option<String>,
    /// The request body (or plain text) that was sent; its SHA-256 must be the receipt's
    /// subject.
    #[arg(long, value_name = "BODY")]
    request: Option<PathBuf>,
    /// The signed agent definition; it is verified, and its payload digest, identity digest,
    /// id, version and signers must be the ones the receipt records.
    #[arg(long, value_name = "SIGNED_DEFINITION")]
    agent: Option<PathBuf>,
    /// Trust store for the definition's signers (default: --trust).
    #[arg(long, value_name = "TRUST.toml", requires = "agent")]
    agent_trust: Option<PathBuf>,
    /// Refuse --agent-trust unless the SHA-256 of its exact bytes is this (`sha256:<hex>`).
    #[arg(long, value_name = "SHA256", requires = "agent_trust")]
    agent_trust_sha256: Option<String>,
}

/// Arguments of `strata receipt show`.
#[derive(Debug, Args)]
struct ShowArgs {
    /// The receipt.
    #[arg(value_name = "RECEIPT")]
    receipt: PathBuf,
    /// Verify the signature first (without it, the receipt is shown marked as unverified).
    #[arg(long, value_name = "TRUST.toml")]
    trust: Option<PathBuf>,
    /// Refuse --trust unless the SHA-256 of its exact bytes is this (`sha256:<hex>`).
    #[arg(long, value_name = "SHA256", requires = "trust")]
    trust_sha256: Option<String>,
}

/// Arguments of `strata receipt audit`.
#[derive(Debug, Args)]
struct AuditArgs {
    /// The receipt log file.
    #[arg(value_name = "LOG", required_unless_present = "postgres")]
    log: Option<PathBuf>,
    /// Audit the receipt log kept in this PostgreSQL database (`strata serve
    /// --receipt-log-postgres`) instead of a file. A LOG file named on the command line wins,
    /// so an exported STRATA_POSTGRES does not get in the way of auditing a file.
    #[arg(long, value_name = "URL", env = "STRATA_POSTGRES")]
    postgres: Option<String>,
    /// Also verify every receipt's signature against these runtime keys.
    #[arg(long, value_name = "TRUST.toml")]
    trust: Option<PathBuf>,
    /// Refuse --trust unless the SHA-256 of its exact bytes is this (`sha256:<hex>`).
    #[arg(long, value_name = "SHA256", requires = "trust")]
    trust_sha256: Option<String>,
    /// The head digest kept outside the log (printed by `receipt assemble --log`); detects
    /// entries removed from the end.
    #[arg(long, value_name = "DIGEST")]
    head: Option<String>,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, CliError> {
    super::require_file(path, what)?;
    std::fs::read(path).map_err(|e| CliError::io(path, e, "check the path and its permissions"))
}

fn verified(path: &Path, trust: &TrustStore) -> Result<VerifiedReceipt, CliError> {
    receipt::verify(&read(path, "receipt")?, trust).map_err(CliError::ReceiptRefused)
}

/// Run `strata receipt`.
pub fn run(args: &ReceiptArgs, out: &Output) -> Result<(), CliError> {
    match &args.command {
        ReceiptCommand::Assemble(a) => make(a, out),
        ReceiptCommand::Verify(a) => verify(a, out),
        ReceiptCommand::Show(a) => show(a, out),
        ReceiptCommand::Audit(a) => audit(a, out),
    }
}

fn make(args: &MakeArgs, out: &Output) -> Result<(), CliError> {
    let a = &args.assemble;
    let key = super::read_key(&args.key)?;
    let agent = load_agent(
        &a.agent,
        &a.trust,
        a.trust_sha256.as_deref(),
        a.rollback_state.as_deref(),
        a.ignore_expiry_dangerously,
    )?;
    let req = build_request(a, &agent)?;
    if req.provider.is_some() && a.model.is_none() {
        return Err(CliError::Usage(
            "provider request bodies need --model NAME".into(),
        ));
    }
    let params = RequestParams {
        model: a.model.clone().unwrap_or_default(),
        max_tokens: a.max_tokens,
        ..RequestParams::default()
    };
    let r = Assembler::o200k()
        .assemble_with_receipt(&agent, &req, &params, &key)
        .map_err(|e| CliError::Other(e.to_string()))?;
    if a.report {
        out.status(&crate::cmd::explain::terminal(r.context.report(), 40));
    }
    super::write_atomically(&args.body, &r.sent)?;
    super::write_atomically(&args.receipt, r.receipt.to_json().as_bytes())?;
    let subject = &r.receipt.statement().subject[0];
    out.line(&format!(
        "receipt {} names {} {} sha256:{}",
        args.receipt.display(),
        subject.name,
        args.body.display(),
        subject.digest.get("sha256").map_or("", String::as_str)
    ))?;
    if let Some(path) = &args.log {
        let mut log = ReceiptLog::open(path).map_err(CliError::LogRefused)?;
        let e = log
            .append(r.receipt.to_json().as_bytes())
            .map_err(CliError::LogRefused)?;
        out.line(&format!(
            "appended entry {} to {}; head {} (keep it elsewhere for `strata receipt audit --head`)",
            e.seq,
            path.display(),
            e.digest
        ))?;
    }
    Ok(())
}

fn verify(args: &VerifyArgs, out: &Output) -> Result<(), CliError> {
    let runtime_trust = super::read_trust(&args.trust, args.trust_sha256.as_deref())?;
    let v = verified(&args.receipt, &runtime_trust)?;
    let st = v.statement();
    let mut lines = vec![format!(
        "OK receipt signed by runtime key {} for agent {} version {}",
        v.signer(),
        st.predicate.agent.id,
        st.predicate.agent.version
    )];
    if let Some(body) = &args.request {
        let s = v
            .check_sent(&read(body, "request body")?)
            .map_err(CliError::ReceiptRefused)?;
        lines.push(format!(
            "OK {} is the {} the receipt names (sha256:{})",
            body.display(),
            s.name,
            s.digest.get("sha256").map_or("", String::as_str)
        ));
    }
    if let Some(def) = &args.agent {
        super::require_file(def, "signed agent definition")?;
        let agent_trust = match &args.agent_trust {
            Some(path) => Some(super::read_trust(path, args.agent_trust_sha256.as_deref())?),
            None => None,
        };
        let trust = agent_trust.as_ref().unwrap_or(&runtime_trust);
        // A receipt is about the past: the definition may have expired since, and its
        // rollback state belongs to the runtime, not to the auditor.
        let guard = RollbackGuard::in_memory();
        let agent = Loader::new(trust, &guard)
            .expiry(strata_assembler::agent::Expiry::IgnoreDangerously)
            .for_audit()
            .load_file(def)
            .map_err(|e| {
                CliError::agentdef(
                    format!(
                        "verifying the definition {} (give the trust store of its signers with --agent-trust)",
                        def.display()
                    ),
                    e,
                )
            })?;
        let rec = v.check_agent(&agent).map_err(CliError::ReceiptRefused)?;
        lines.push(format!(
            "OK {} is the definition the receipt records (payload sha256:{}, identity {})",
            def.display(),
            rec.payload_sha256,
            rec.identity_digest
        ));
    }
    out.line(&lines.join("\n"))
}

fn show(args: &ShowArgs, out: &Output) -> Result<(), CliError> {
    let (statement, header) = match &args.trust {
        Some(t) => {
            let v = verified(
                &args.receipt,
                &super::read_trust(t, args.trust_sha256.as_deref())?,
            )?;
            let h = format!("VERIFIED: signature by trusted runtime key {}", v.signer());
            (v.statement().clone(), h)
        }
        None => (
            receipt::read_unverified(&read(&args.receipt, "receipt")?)
                .map_err(CliError::ReceiptRefused)?,
            "NOT VERIFIED: the signature was not checked; pass --trust to check it".to_owned(),
        ),
    };
    out.result(&format!("{header}\n{}", receipt::describe(&statement)))
}

fn audit(args: &AuditArgs, out: &Output) -> Result<(), CliError> {
    let trust = args
        .trust
        .as_deref()
        .map(|t| super::read_trust(t, args.trust_sha256.as_deref()))
        .transpose()?;
    let a = match (&args.log, &args.postgres) {
        (Some(log), _) => {
            super::require_file(log, "receipt log")?;
            receipt_log::audit(log, trust.as_ref(), args.head.as_deref())
        }
        (None, Some(url)) => strata_assembler::receipt::log_pg::audit(
            url,
            strata_memory::pg::DEFAULT_PG_SCHEMA,
            trust.as_ref(),
            args.head.as_deref(),
        ),
        (None, None) => {
            return Err(CliError::Usage(
                "give the receipt log file, or --postgres URL for the log in PostgreSQL".into(),
            ))
        }
    };
    let a = a.map_err(CliError::LogRefused)?;
    let mut line = format!("OK {} entries chained, head {}", a.entries.len(), a.head);
    line.push_str(match (&trust, &args.head) {
        (Some(_), Some(_)) => "; every receipt verified; the log ends at the expected head",
        (Some(_), None) => "; every receipt verified; without --head, entries removed from the end are not detected",
        (None, Some(_)) => "; the log ends at the expected head; receipts not verified (pass --trust)",
        (None, None) => "; receipts not verified (pass --trust); without --head, entries removed from the end are not detected",
    });
    out.line(&line)
}
