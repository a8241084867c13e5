//! The loader: verify, then read (ADR-0010). The only producer of [`VerifiedAgent`].
//!
//! Order of checks: strict envelope parse with size limits; signatures over DSSE's
//! pre-authentication encoding with `verify_strict`, counting distinct trusted, unrevoked,
//! currently valid keys against the threshold; payload type; only then the payload is parsed
//! (from the exact verified bytes) and referenced files are checked against their digests;
//! validity window; rollback guard. Any failure is a rejection (fail closed).

use std::collections::BTreeSet;
use std::path::Path;

use ed25519_dalek::Signature;
use sha2::{Digest as _, Sha256};

use crate::definition::parse_payload;
use crate::envelope::{pae, Envelope, MAX_ENVELOPE_BYTES, PAYLOAD_TYPE};
use crate::error::AgentDefError;
use crate::keys::KeyId;
use crate::rollback::RollbackGuard;
use crate::time::format_rfc3339;
use crate::trust::TrustStore;
use crate::verified::VerifiedAgent;

/// Whether the definition's validity window is enforced. Skipping it weakens security, hence
/// the loud name; there is no boolean form of this switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiry {
    /// Refuse definitions outside their `not_before` / `not_after` window (the default).
    #[default]
    Enforce,
    /// Accept expired and not-yet-valid definitions. For forensics on old definitions only;
    /// never in a runtime that serves users.
    IgnoreDangerously,
}

/// Loads signed agent definitions against a trust store and a rollback guard.
#[derive(Debug)]
pub struct Loader<'a> {
    trust: &'a TrustStore,
    guard: &'a RollbackGuard,
    expiry: Expiry,
    now: Option<i64>,
}

impl<'a> Loader<'a> {
    /// A loader that enforces expiry at the current time.
    pub fn new(trust: &'a TrustStore, guard: &'a RollbackGuard) -> Loader<'a> {
        Loader {
            trust,
            guard,
            expiry: Expiry::Enforce,
            now: None,
        }
    }

    /// Set the expiry policy.
    pub fn expiry(mut self, expiry: Expiry) -> Loader<'a> {
        self.expiry = expiry;
        self
    }

    /// Check validity windows at `unix_secs` instead of the clock (tests, audits).
    pub fn at_time(mut self, unix_secs: i64) -> Loader<'a> {
        self.now = Some(unix_secs);
        self
    }

    fn now(&self) -> i64 {
        self.now.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        })
    }

    /// Load a signed definition file; referenced files resolve next to it.
    pub fn load_file(&self, path: &Path) -> Result<VerifiedAgent, AgentDefError> {
        let bytes = crate::read_limited(path, MAX_ENVELOPE_BYTES as u64, "envelope")?;
        self.load_bytes(&bytes, path.parent())
    }

    /// Load a signed definition from bytes; `base` is where referenced files are looked up.
    pub fn load_bytes(
        &self,
        bytes: &[u8],
        base: Option<&Path>,
    ) -> Result<VerifiedAgent, AgentDefError> {
        let result = self.load_inner(bytes, base);
        match &result {
            Ok(a) => {
                tracing::info!(agent = a.agent_id(), version = a.version(), digest = %a.identity_digest(), "agent definition verified")
            }
            Err(e) => tracing::warn!(cause = e.cause(), error = %e, "agent definition refused"),
        }
        result
    }

    fn load_inner(
        &self,
        bytes: &[u8],
        base: Option<&Path>,
    ) -> Result<VerifiedAgent, AgentDefError> {
        let env = Envelope::parse(bytes)?;
        let now = self.now();
        let signers = verify_signatures(&env, self.trust, now)?;
        if env.payload_type != PAYLOAD_TYPE {
            return Err(AgentDefError::WrongPayloadType {
                found: env.payload_type.clone(),
                expected: PAYLOAD_TYPE,
            });
        }
        // Verify, then read: the payload is parsed only now, from the exact verified bytes.
        let parsed = parse_payload(&env.payload, base)?;
        if self.expiry == Expiry::Enforce {
            if let Some(nb) = parsed.not_before.filter(|nb| now < *nb) {
                return Err(AgentDefError::NotYetValid {
                    agent: parsed.def.id.clone(),
                    not_before: format_rfc3339(nb),
                });
            }
            if let Some(na) = parsed.not_after.filter(|na| now > *na) {
                return Err(AgentDefError::Expired {
                    agent: parsed.def.id.clone(),
                    not_after: format_rfc3339(na),
                });
            }
        } else {
            tracing::warn!("expiry checks skipped (Expiry::IgnoreDangerously)");
        }
        let sha: String = Sha256::digest(&env.payload)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.guard
            .check_and_record(&parsed.def.id, parsed.def.version, &sha)?;
        Ok(VerifiedAgent::seal(parsed, signers, sha))
    }
}

/// Check every signature; succeed only with `threshold` distinct trusted, unrevoked, currently
/// valid keys whose signatures verify strictly. Returns the distinct signer ids, sorted.
fn verify_signatures(
    env: &Envelope,
    trust: &TrustStore,
    now: i64,
) -> Result<Vec<KeyId>, AgentDefError> {
    if env.signatures.is_empty() {
        return Err(AgentDefError::NoSignatures);
    }
    let message = pae(&env.payload_type, &env.payload);
    let mut valid = BTreeSet::new();
    let (mut bad, mut revoked, mut expired, mut unknown) = (None, None, None, Vec::new());
    for s in &env.signatures {
        if let Some(reason) = trust.revoked(&s.keyid) {
            revoked.get_or_insert((s.keyid.clone(), reason.to_owned()));
            continue;
        }
        let Some(key) = trust.key(&s.keyid) else {
            unknown.push(s.keyid.clone());
            continue;
        };
        if !key.valid_at(now) {
            expired.get_or_insert((s.keyid.clone(), key.window()));
            continue;
        }
        if key
            .key
            .verify_strict(&message, &Signature::from_bytes(&s.sig))
            .is_ok()
        {
            valid.insert(key.id.clone());
        } else {
            bad.get_or_insert(s.keyid.clone());
        }
    }
    if valid.len() >= trust.threshold() {
        return Ok(valid.into_iter().collect());
    }
    if let Some(keyid) = bad {
        return Err(AgentDefError::BadSignature { keyid });
    }
    if let Some((keyid, reason)) = revoked {
        return Err(AgentDefError::RevokedKey { keyid, reason });
    }
    if let Some((keyid, window)) = expired {
        return Err(AgentDefError::KeyNotValid { keyid, window });
    }
    if valid.is_empty() {
        return Err(AgentDefError::UnknownKey {
            keyids: unknown.join(", "),
        });
    }
    Err(AgentDefError::ThresholdNotMet {
        valid: valid.len(),
        threshold: trust.threshold(),
    })
}
