//! Signed assembly receipts: what the model was shown and why, as an in-toto Statement signed
//! in DSSE by a runtime key (ADR-0021).
//!
//! A receipt is built after an assembly from the [`AssembledContext`], the
//! [`AssemblyRequest`] it came from and the exact bytes the runtime sends. Its subject is the
//! SHA-256 of those bytes: for a provider-native assembly, the request body serialised by
//! [`body_bytes`] (compact `serde_json`, keys sorted, no whitespace); for the plain-text format,
//! the UTF-8 bytes of [`AssembledContext::text`]. Its predicate records the verified definition
//! (payload SHA-256, signer key ids, identity digest), every runtime section of the report with
//! its layer, authority, source, content digest, status and reason, the tools offered and
//! refused, the tokenizer, budget, counts, provider and breakpoints, and the strata version.
//! Content is referenced by digest only: a receipt carries no prompt text.
//!
//! The statement is written in one canonical form (ADR-0021): the JSON value with every
//! object's keys sorted, no insignificant whitespace, integers only. The same assembly gives the
//! same bytes, and a verifier refuses a statement that is not in this form.
//!
//! Verification follows "verify, then read": [`verify`] checks the envelope's signature against
//! a [`TrustStore`] over DSSE's pre-authentication encoding, through the same
//! `strata_agentdef::envelope::verify` that checks agent definitions, and only then parses the
//! statement from the exact signed bytes into a [`VerifiedReceipt`], which nothing else can
//! construct.

mod build;
mod describe;
mod sign;
mod statement;
mod verify;

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

#[cfg(doc)]
use crate::output::AssembledContext;
#[cfg(doc)]
use crate::request::AssemblyRequest;
#[cfg(doc)]
use strata_agentdef::TrustStore;

pub use build::{statement, statement_bytes};
pub use describe::describe;
pub use sign::{Receipted, ReceiptedError, SignedReceipt};
pub use statement::{
    AgentRecord, BreakpointRecord, BudgetRecord, CountsRecord, OfferedTool, OmissionRecord,
    Predicate, RefusedTool, RequestRecord, SectionRecord, Sent, Statement, Subject, ToolsRecord,
};
pub use verify::{read_unverified, verify, ReceiptError, VerifiedReceipt};

pub mod log;
#[cfg(feature = "postgres")]
pub mod log_pg;
mod signer;

pub use log::{Audit, LogError, ReceiptLog};
#[cfg(feature = "postgres")]
pub use log_pg::PgReceiptLog;
pub use signer::{ReceiptSigner, ReceiptSink, SignerError};

/// The in-toto Statement type of every receipt.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The predicate type of a strata assembly receipt.
pub const PREDICATE_TYPE: &str = "https://example.invalid/strata/assembly-receipt/v1";
/// The DSSE payload type of an in-toto Statement, as in-toto tooling expects it.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// Subject name of a provider request body.
pub const SUBJECT_BODY: &str = "request-body";
/// Subject name of the plain-text context.
pub const SUBJECT_TEXT: &str = "context-text";

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The exact bytes a runtime sends for a request body, and that a receipt's subject names:
/// compact `serde_json` (object keys sorted, no whitespace) (ADR-0021).
pub fn body_bytes(body: &Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail: its keys are strings and it holds no non-finite float.
    serde_json::to_vec(body).unwrap_or_default()
}
