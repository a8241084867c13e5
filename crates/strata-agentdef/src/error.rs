//! Errors of loading and verifying signed agent definitions. Every failure is a rejection with
//! a cause an operator can act on (ADR-0010: fail closed).

use std::path::PathBuf;

/// Why a signed definition, key file or trust store was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentDefError {
    /// An input is larger than its limit.
    #[error("{what} is {size} bytes, over the limit of {limit} bytes; refusing to read it")]
    TooLarge {
        /// Which input.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The envelope is not a well-formed DSSE envelope.
    #[error("malformed envelope: {0}; expected DSSE JSON with payloadType, payload (base64) and signatures [{{keyid, sig}}]")]
    MalformedEnvelope(String),
    /// The envelope carries no signature.
    #[error("the envelope has no signatures; sign it with `strata sign`")]
    NoSignatures,
    /// No signature was made by a key the trust store knows.
    #[error("no signature is from a trusted key (key ids in the envelope: {keyids}); add the signer's public key to the trust store or sign with a trusted key")]
    UnknownKey {
        /// The key ids seen.
        keyids: String,
    },
    /// A signature by a trusted key does not verify: the payload, its type or the signature changed.
    #[error("signature by key {keyid} does not verify: the envelope was modified after signing or signed with another key")]
    BadSignature {
        /// The key id.
        keyid: String,
    },
    /// A signature was made by a key the trust store revokes.
    #[error("key {keyid} is revoked in the trust store ({reason}); re-sign with a current key")]
    RevokedKey {
        /// The key id.
        keyid: String,
        /// The revocation reason.
        reason: String,
    },
    /// A trusted key is outside its validity dates.
    #[error(
        "key {keyid} is not valid at this time (valid {window}); renew the key in the trust store"
    )]
    KeyNotValid {
        /// The key id.
        keyid: String,
        /// Its validity window.
        window: String,
    },
    /// Fewer distinct trusted keys signed than the threshold requires.
    #[error("{valid} distinct trusted signature(s), but the trust store requires {threshold}; collect more signatures with `strata sign --append`")]
    ThresholdNotMet {
        /// Distinct valid signatures.
        valid: usize,
        /// Required.
        threshold: usize,
    },
    /// The payload type is not that of a strata agent definition.
    #[error("payload type is `{found}`, expected `{expected}`; this envelope does not hold a strata agent definition")]
    WrongPayloadType {
        /// What the envelope says.
        found: String,
        /// What we accept.
        expected: &'static str,
    },
    /// The definition's validity window has ended.
    #[error("agent definition {agent} expired at {not_after}; publish a new version")]
    Expired {
        /// Agent id.
        agent: String,
        /// End of validity.
        not_after: String,
    },
    /// The definition's validity window has not started.
    #[error("agent definition {agent} is not valid before {not_before}")]
    NotYetValid {
        /// Agent id.
        agent: String,
        /// Start of validity.
        not_before: String,
    },
    /// A lower version than one already accepted.
    #[error("agent {agent} version {version} is older than version {seen} already accepted; refusing a rollback")]
    RolledBack {
        /// Agent id.
        agent: String,
        /// Offered version.
        version: u64,
        /// Highest accepted version.
        seen: u64,
    },
    /// The same version number with different content.
    #[error("agent {agent} version {version} was already accepted with different content; bump the version for every change")]
    VersionReused {
        /// Agent id.
        agent: String,
        /// Version.
        version: u64,
    },
    /// A referenced file's SHA-256 digest does not match the one in the signed definition.
    #[error("referenced file {path} has digest sha256:{found}, the signed definition says sha256:{expected}")]
    DigestMismatch {
        /// The file.
        path: PathBuf,
        /// Expected hex digest.
        expected: String,
        /// Found hex digest.
        found: String,
    },
    /// The definition (verified bytes) is not a valid strata agent definition.
    #[error("invalid agent definition: {0}")]
    InvalidDefinition(String),
    /// The trust store file is invalid.
    #[error("invalid trust store: {0}")]
    InvalidTrustStore(String),
    /// A key file is invalid.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The rollback state file is unreadable or invalid.
    #[error("rollback state {path}: {reason}; it records the highest accepted version per agent and must not be edited by hand")]
    RollbackState {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The rollback state file was changed or damaged (its integrity check failed).
    #[error("rollback state {path} is damaged: {reason}; restore it from a backup (or, knowing that rollbacks to any earlier version become possible, move it away and run `strata verify --init-rollback-state`)")]
    RollbackStateDamaged {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The rollback state file does not exist.
    #[error("rollback state {path} does not exist; a missing file is never taken as empty, because deleting it would reset the protection. Restore it, or create it once with `strata verify --init-rollback-state`")]
    RollbackStateMissing {
        /// The state file.
        path: PathBuf,
    },
    /// The trust store's SHA-256 is not the pinned one.
    #[error("trust store {path} has digest sha256:{found}, but sha256:{expected} is pinned; the store was changed (or the pin is stale): review the change, then update the pin")]
    TrustStoreNotPinned {
        /// The trust store file.
        path: PathBuf,
        /// The pinned digest.
        expected: String,
        /// The file's digest.
        found: String,
    },
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl AgentDefError {
    /// A short stable name of the cause (used by the CLI's verdict line and by tests).
    pub fn cause(&self) -> &'static str {
        match self {
            AgentDefError::TooLarge { .. } => "too_large",
            AgentDefError::MalformedEnvelope(_) => "malformed",
            AgentDefError::NoSignatures => "no_signatures",
            AgentDefError::UnknownKey { .. } => "unknown_key",
            AgentDefError::BadSignature { .. } => "bad_signature",
            AgentDefError::RevokedKey { .. } => "revoked_key",
            AgentDefError::KeyNotValid { .. } => "key_not_valid",
            AgentDefError::ThresholdNotMet { .. } => "threshold_not_met",
            AgentDefError::WrongPayloadType { .. } => "wrong_payload_type",
            AgentDefError::Expired { .. } => "expired",
            AgentDefError::NotYetValid { .. } => "not_yet_valid",
            AgentDefError::RolledBack { .. } => "rolled_back",
            AgentDefError::VersionReused { .. } => "version_reused",
            AgentDefError::DigestMismatch { .. } => "digest_mismatch",
            AgentDefError::InvalidDefinition(_) => "invalid_definition",
            AgentDefError::InvalidTrustStore(_) => "invalid_trust_store",
            AgentDefError::InvalidKey(_) => "invalid_key",
            AgentDefError::RollbackState { .. } => "rollback_state",
            AgentDefError::RollbackStateDamaged { .. } => "rollback_state_damaged",
            AgentDefError::RollbackStateMissing { .. } => "rollback_state_missing",
            AgentDefError::TrustStoreNotPinned { .. } => "trust_store_not_pinned",
            AgentDefError::Io { .. } => "io",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> AgentDefError {
        AgentDefError::Io {
            path: path.into(),
            source,
        }
    }
}
