//! Verifying a receipt, then reading it: [`verify`] is the only maker of a
//! [`VerifiedReceipt`] (ADR-0021).

use strata_agentdef::envelope::{self, Envelope, KeyWindows, Policy, Threshold};
use strata_agentdef::{AgentDefError, TrustStore, VerifiedAgent};

use super::statement::{AgentRecord, Statement, Subject};
use super::{sha256_hex, PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE};

/// Why a receipt was refused. Each failure has its own variant (ADR-0021).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The file is not a well-formed DSSE envelope.
    #[error("not a DSSE envelope: {0}; a receipt file is the JSON envelope `strata receipt` wrote, unmodified")]
    MalformedEnvelope(String),
    /// The envelope is not an in-toto statement.
    #[error("payload type is `{found}`, expected `{PAYLOAD_TYPE}`: this envelope is not an assembly receipt")]
    WrongPayloadType {
        /// What the envelope says.
        found: String,
    },
    /// No signature at all.
    #[error("the receipt has no signature; receipts are signed with the runtime key")]
    NoSignatures,
    /// A signature by a trusted key does not verify: the payload or the signature was changed.
    #[error("the signature of key {keyid} does not verify: the receipt was changed after signing")]
    BadSignature {
        /// The key id.
        keyid: String,
    },
    /// The signing key is revoked in the trust store.
    #[error("the receipt is signed by key {keyid}, which the trust store revokes ({reason})")]
    RevokedKey {
        /// The key id.
        keyid: String,
        /// The reason given.
        reason: String,
    },
    /// No signature is by a key in the trust store.
    #[error("the receipt is signed by {keyids}, none of them in the trust store; add the runtime key's public key with `strata keygen --public KEY --trust-entry NAME`")]
    UnknownKey {
        /// The key ids on the envelope.
        keyids: String,
    },
    /// The signed payload is not a statement of this version.
    #[error("the signed payload is not a strata receipt statement: {0}")]
    MalformedStatement(String),
    /// The statement or predicate type is not the expected one.
    #[error("statement type `{found}` is not `{expected}`")]
    WrongStatementType {
        /// What the statement says.
        found: String,
        /// What is expected.
        expected: &'static str,
    },
    /// The signed payload is valid JSON but not in canonical form.
    #[error("the signed statement is not in canonical form (sorted keys, compact, integers); it was not written by strata")]
    NotCanonical,
    /// The statement names a different runtime key than the one that signed it.
    #[error("the statement names runtime key {recorded} but was signed by {signer}")]
    KeyMismatch {
        /// The key id in the predicate.
        recorded: String,
        /// The signer's key id.
        signer: String,
    },
    /// The request body or text does not have the digest the receipt names.
    #[error("the {name} given has SHA-256 {found} but the receipt names {expected}: it is not what was sent")]
    SubjectMismatch {
        /// Subject name.
        name: String,
        /// The receipt's digest.
        expected: String,
        /// The given bytes' digest.
        found: String,
    },
    /// The definition given is not the one the receipt records.
    #[error("the definition's {what} is {found} but the receipt records {expected}: it is not the definition that was assembled from")]
    AgentMismatch {
        /// `payload SHA-256`, `identity digest`, `id`, `version` or `signers`.
        what: &'static str,
        /// Recorded.
        expected: String,
        /// Found.
        found: String,
    },
}

impl ReceiptError {
    /// A stable name of the failure (for logs and verdict lines).
    pub fn cause(&self) -> &'static str {
        match self {
            ReceiptError::MalformedEnvelope(_) => "malformed_envelope",
            ReceiptError::WrongPayloadType { .. } => "wrong_payload_type",
            ReceiptError::NoSignatures => "no_signatures",
            ReceiptError::BadSignature { .. } => "bad_signature",
            ReceiptError::RevokedKey { .. } => "revoked_key",
            ReceiptError::UnknownKey { .. } => "unknown_key",
            ReceiptError::MalformedStatement(_) => "malformed_statement",
            ReceiptError::WrongStatementType { .. } => "wrong_statement_type",
            ReceiptError::NotCanonical => "not_canonical",
            ReceiptError::KeyMismatch { .. } => "key_mismatch",
            ReceiptError::SubjectMismatch { .. } => "subject_mismatch",
            ReceiptError::AgentMismatch { .. } => "agent_mismatch",
        }
    }
}

/// A receipt whose signature verified against a trust store. Only [`verify`] makes one.
#[derive(Debug, Clone)]
pub struct VerifiedReceipt {
    statement: Statement,
    signer: String,
    payload: Vec<u8>,
}

impl VerifiedReceipt {
    /// The statement, parsed from the signed bytes after verification.
    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    /// The key id of the trusted runtime key whose signature verified.
    pub fn signer(&self) -> &str {
        &self.signer
    }

    /// The exact signed statement bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Check that `sent` (a request body file's bytes, or the plain text) is what the receipt
    /// names; returns the subject it matched.
    pub fn check_sent(&self, sent: &[u8]) -> Result<&Subject, ReceiptError> {
        let found = sha256_hex(sent);
        let subject = self
            .statement
            .subject
            .first()
            .ok_or_else(|| ReceiptError::MalformedStatement("no subject".into()))?;
        let expected = subject.digest.get("sha256").cloned().unwrap_or_default();
        if expected != found {
            return Err(ReceiptError::SubjectMismatch {
                name: subject.name.clone(),
                expected,
                found,
            });
        }
        Ok(subject)
    }

    /// Check that `agent` is the definition the receipt records: payload SHA-256, identity
    /// digest, id, version and signers. Returns the record it matched.
    pub fn check_agent(&self, agent: &VerifiedAgent) -> Result<&AgentRecord, ReceiptError> {
        let rec = &self.statement.predicate.agent;
        let signers: Vec<String> = agent.signers().iter().map(|k| k.to_string()).collect();
        let checks: [(&'static str, String, String); 4] = [
            (
                "payload SHA-256",
                rec.payload_sha256.clone(),
                agent.payload_sha256().to_owned(),
            ),
            (
                "identity digest",
                rec.identity_digest.clone(),
                agent.identity_digest().to_string(),
            ),
            ("id", rec.id.clone(), agent.agent_id().to_owned()),
            (
                "version",
                rec.version.to_string(),
                agent.version().to_string(),
            ),
        ];
        for (what, expected, found) in checks {
            if expected != found {
                return Err(ReceiptError::AgentMismatch {
                    what,
                    expected,
                    found,
                });
            }
        }
        // The auditor's trust store may hold other keys than the runtime's: the payload digest
        // already pins the definition, and at least one signer must be one the receipt records.
        if !signers.iter().any(|s| rec.signers.contains(s)) {
            return Err(ReceiptError::AgentMismatch {
                what: "signers",
                expected: rec.signers.join(", "),
                found: signers.join(", "),
            });
        }
        Ok(rec)
    }
}

/// Verify a receipt envelope against the trust store of runtime keys, then parse its statement
/// from the signed bytes (ADR-0021). One valid signature by a trusted, unrevoked key is enough;
/// key validity windows are not checked, because a receipt carries no trusted signing time.
pub fn verify(envelope: &[u8], trust: &TrustStore) -> Result<VerifiedReceipt, ReceiptError> {
    let result = verify_inner(envelope, trust);
    match &result {
        Ok(r) => tracing::info!(signer = r.signer(), "assembly receipt verified"),
        Err(e) => tracing::warn!(cause = e.cause(), error = %e, "assembly receipt refused"),
    }
    result
}

/// What a receipt envelope must satisfy: the in-toto payload type and one trusted runtime key;
/// key windows are not checked, because a receipt carries no trusted signing time.
const POLICY: Policy = Policy {
    payload_type: PAYLOAD_TYPE,
    threshold: Threshold::One,
    key_windows: KeyWindows::NotChecked,
};

/// The receipt's own words for a refusal of the shared envelope check.
fn refusal(e: AgentDefError) -> ReceiptError {
    match e {
        AgentDefError::NoSignatures => ReceiptError::NoSignatures,
        AgentDefError::BadSignature { keyid } => ReceiptError::BadSignature { keyid },
        AgentDefError::RevokedKey { keyid, reason } => ReceiptError::RevokedKey { keyid, reason },
        AgentDefError::UnknownKey { keyids } => ReceiptError::UnknownKey { keyids },
        AgentDefError::WrongPayloadType { found, .. } => ReceiptError::WrongPayloadType { found },
        // Parse errors, and what the receipt policy never yields (an expired key, a threshold
        // above one): a refusal all the same.
        other => ReceiptError::MalformedEnvelope(other.to_string()),
    }
}

fn verify_inner(bytes: &[u8], trust: &TrustStore) -> Result<VerifiedReceipt, ReceiptError> {
    let env = Envelope::parse(bytes).map_err(refusal)?;
    let verified = envelope::verify(&env, trust, &POLICY).map_err(refusal)?;
    let payload = verified.payload();
    // Verify, then read: parse only the exact verified bytes.
    let statement: Statement = serde_json::from_slice(payload)
        .map_err(|e| ReceiptError::MalformedStatement(e.to_string()))?;
    if statement.statement_type != STATEMENT_TYPE {
        return Err(ReceiptError::WrongStatementType {
            found: statement.statement_type,
            expected: STATEMENT_TYPE,
        });
    }
    if statement.predicate_type != PREDICATE_TYPE {
        return Err(ReceiptError::WrongStatementType {
            found: statement.predicate_type,
            expected: PREDICATE_TYPE,
        });
    }
    if statement.canonical_bytes() != payload.as_ref() {
        return Err(ReceiptError::NotCanonical);
    }
    // The runtime key the statement names must be one whose signature verified.
    let recorded = &statement.predicate.runtime_key_id;
    let Some(signer) = verified
        .signers()
        .iter()
        .find(|k| k.as_str() == recorded.as_str())
        .map(|k| k.to_string())
    else {
        return Err(ReceiptError::KeyMismatch {
            recorded: recorded.clone(),
            signer: verified
                .signers()
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    Ok(VerifiedReceipt {
        statement,
        signer,
        payload: payload.to_vec(),
    })
}

/// Parse a receipt's statement WITHOUT checking its signature, for display only: nothing in
/// it may be trusted. Use [`verify`] for anything that decides.
pub fn read_unverified(envelope: &[u8]) -> Result<Statement, ReceiptError> {
    let env =
        Envelope::parse(envelope).map_err(|e| ReceiptError::MalformedEnvelope(e.to_string()))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(ReceiptError::WrongPayloadType {
            found: env.payload_type,
        });
    }
    serde_json::from_slice(&env.payload)
        .map_err(|e| ReceiptError::MalformedStatement(e.to_string()))
}
