//! The DSSE envelope (ADR-0010).
//!
//! Signatures are made over DSSE's pre-authentication encoding
//! `"DSSEv1" SP len(type) SP type SP len(body) SP body`, so the payload type is part of the signed
//! bytes and cannot be swapped. Parsing is strict: unknown and duplicate fields are refused, base64
//! must be canonical, and every part has a size limit.
//!
//! [`verify`] is the one signature check of the workspace: agent definitions ([`crate::Loader`])
//! and assembly receipts go through it with their own [`Policy`], so a change to how key ids,
//! revocations or thresholds are handled lands in one place.

use std::collections::BTreeSet;

use base64::Engine as _;
use bytes::Bytes;
use ed25519_dalek::Signature;
use serde::{Deserialize, Serialize};

use crate::error::AgentDefError;
use crate::keys::{KeyId, KeyPair};
use crate::trust::TrustStore;

/// The payload type of a strata agent definition.
pub const PAYLOAD_TYPE: &str = "application/vnd.strata.agent-definition+toml; version=1";

/// Largest envelope file accepted.
pub const MAX_ENVELOPE_BYTES: usize = 1024 * 1024;
/// Largest decoded payload accepted.
pub const MAX_PAYLOAD_BYTES: usize = 512 * 1024;
/// Most signatures accepted on one envelope.
pub const MAX_SIGNATURES: usize = 16;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// DSSE's pre-authentication encoding of a payload type and body.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + payload_type.len() + body.len());
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(body);
    out
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSignature {
    keyid: String,
    sig: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvelope {
    #[serde(rename = "payloadType")]
    payload_type: String,
    payload: String,
    signatures: Vec<RawSignature>,
}

/// One signature of an envelope, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeSignature {
    /// The key id the signer claims.
    pub keyid: String,
    /// The 64 signature bytes (not yet verified).
    pub sig: [u8; 64],
}

/// A parsed, not yet verified envelope. Nothing in it may be trusted until
/// [`crate::Loader`] has verified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The payload type, as written.
    pub payload_type: String,
    /// The exact payload bytes that were signed.
    pub payload: Bytes,
    /// Signatures.
    pub signatures: Vec<EnvelopeSignature>,
}

impl Envelope {
    /// Parse an envelope strictly.
    pub fn parse(bytes: &[u8]) -> Result<Envelope, AgentDefError> {
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(AgentDefError::TooLarge {
                what: "envelope",
                size: bytes.len() as u64,
                limit: MAX_ENVELOPE_BYTES as u64,
            });
        }
        let raw: RawEnvelope = serde_json::from_slice(bytes)
            .map_err(|e| AgentDefError::MalformedEnvelope(e.to_string()))?;
        if raw.payload.len() > MAX_PAYLOAD_BYTES.div_ceil(3) * 4 {
            return Err(AgentDefError::TooLarge {
                what: "payload",
                size: (raw.payload.len() / 4 * 3) as u64,
                limit: MAX_PAYLOAD_BYTES as u64,
            });
        }
        let payload = B64
            .decode(raw.payload.as_bytes())
            .map_err(|e| AgentDefError::MalformedEnvelope(format!("payload is not base64: {e}")))?;
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(AgentDefError::TooLarge {
                what: "payload",
                size: payload.len() as u64,
                limit: MAX_PAYLOAD_BYTES as u64,
            });
        }
        if raw.signatures.len() > MAX_SIGNATURES {
            return Err(AgentDefError::MalformedEnvelope(format!(
                "{} signatures, at most {MAX_SIGNATURES} are accepted",
                raw.signatures.len()
            )));
        }
        let mut signatures = Vec::with_capacity(raw.signatures.len());
        for s in raw.signatures {
            if s.keyid.is_empty() || s.keyid.len() > 128 {
                return Err(AgentDefError::MalformedEnvelope(
                    "keyid must be 1-128 characters".into(),
                ));
            }
            let sig = B64.decode(s.sig.as_bytes()).map_err(|e| {
                AgentDefError::MalformedEnvelope(format!("signature is not base64: {e}"))
            })?;
            let sig: [u8; 64] = sig.try_into().map_err(|_| {
                AgentDefError::MalformedEnvelope("an ed25519 signature is 64 bytes".into())
            })?;
            signatures.push(EnvelopeSignature {
                keyid: s.keyid,
                sig,
            });
        }
        Ok(Envelope {
            payload_type: raw.payload_type,
            payload: Bytes::from(payload),
            signatures,
        })
    }

    /// A new unsigned envelope of a strata agent definition.
    pub fn new(payload: impl Into<Bytes>) -> Envelope {
        Envelope::with_type(PAYLOAD_TYPE, payload)
    }

    /// A new unsigned envelope with another payload type (tests and tamper fixtures).
    pub fn with_type(payload_type: &str, payload: impl Into<Bytes>) -> Envelope {
        Envelope {
            payload_type: payload_type.to_owned(),
            payload: payload.into(),
            signatures: Vec::new(),
        }
    }

    /// Add a signature by `key` over the pre-authentication encoding.
    pub fn sign(&mut self, key: &KeyPair) {
        let sig = key.sign(&pae(&self.payload_type, &self.payload));
        self.signatures.push(EnvelopeSignature {
            keyid: key.key_id().to_string(),
            sig,
        });
    }

    /// The JSON text of the envelope (pretty, with a trailing newline).
    pub fn to_json(&self) -> String {
        let raw = RawEnvelope {
            payload_type: self.payload_type.clone(),
            payload: B64.encode(&self.payload),
            signatures: self
                .signatures
                .iter()
                .map(|s| RawSignature {
                    keyid: s.keyid.clone(),
                    sig: B64.encode(s.sig),
                })
                .collect(),
        };
        let mut s = serde_json::to_string_pretty(&raw).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Which signatures count towards an envelope's threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Threshold {
    /// As many distinct trusted keys as the trust store's `threshold` (agent definitions).
    TrustStore,
    /// One trusted key: a payload signed by a single runtime key (assembly receipts).
    One,
}

/// Whether the signing keys' validity windows are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyWindows {
    /// A key counts only if its window holds this instant (Unix seconds).
    At(i64),
    /// Windows are not checked, for payloads that carry no trusted signing time (assembly
    /// receipts, which may be audited long after the runtime key's window has closed).
    NotChecked,
}

/// What an envelope must satisfy to verify: its payload type and which signatures count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The one payload type accepted.
    pub payload_type: &'static str,
    /// How many distinct trusted keys must sign.
    pub threshold: Threshold,
    /// Whether the keys' validity windows are checked, and when.
    pub key_windows: KeyWindows,
}

/// An envelope whose signatures met a [`Policy`]. Only [`verify`] makes one.
#[derive(Debug, Clone)]
pub struct VerifiedEnvelope<'e> {
    envelope: &'e Envelope,
    signers: Vec<KeyId>,
}

impl<'e> VerifiedEnvelope<'e> {
    /// The exact payload bytes the signatures cover: the only bytes that may now be parsed.
    pub fn payload(&self) -> &'e Bytes {
        &self.envelope.payload
    }

    /// The distinct trusted keys whose signatures verified, sorted.
    pub fn signers(&self) -> &[KeyId] {
        &self.signers
    }

    /// The signers, owned.
    pub fn into_signers(self) -> Vec<KeyId> {
        self.signers
    }
}

/// Verify an envelope's signatures against a trust store, the one DSSE check of the workspace
/// for agent definitions and assembly receipts alike (ADR-0010, ADR-0021).
///
/// Each signature is taken over DSSE's pre-authentication encoding of the payload type and
/// body. A signature counts when its key id is written in canonical form (64 lower-case hex
/// digits; every byte of an envelope counts, I5), names a key of the trust store that is not
/// revoked, whose window holds the policy's instant, and it verifies strictly. The envelope
/// verifies when the distinct keys that count reach the policy's threshold; only then is its
/// payload type compared with the policy's, so that a payload type changed after signing reads
/// as the bad signature it is.
///
/// Refusals, most telling first: `no_signatures`; `bad_signature` (a trusted key's signature
/// does not verify); `revoked_key`; `key_not_valid`; `unknown_key` (no signature by a listed
/// key); `threshold_not_met`; then `wrong_payload_type`.
pub fn verify<'e>(
    envelope: &'e Envelope,
    trust: &TrustStore,
    policy: &Policy,
) -> Result<VerifiedEnvelope<'e>, AgentDefError> {
    if envelope.signatures.is_empty() {
        return Err(AgentDefError::NoSignatures);
    }
    let message = pae(&envelope.payload_type, &envelope.payload);
    let mut valid = BTreeSet::new();
    let (mut bad, mut revoked, mut expired, mut unknown) = (None, None, None, Vec::new());
    for s in &envelope.signatures {
        // Trust stores, written by people, are normalised (ADR-0017); an envelope is
        // machine-written, so only the canonical spelling of a key id names a key there.
        if !KeyId::parse(&s.keyid).is_ok_and(|id| id.as_str() == s.keyid) {
            unknown.push(s.keyid.clone());
            continue;
        }
        if let Some(reason) = trust.revoked(&s.keyid) {
            revoked.get_or_insert((s.keyid.clone(), reason.to_owned()));
            continue;
        }
        let Some(key) = trust.key(&s.keyid) else {
            unknown.push(s.keyid.clone());
            continue;
        };
        if let KeyWindows::At(now) = policy.key_windows {
            if !key.valid_at(now) {
                expired.get_or_insert((s.keyid.clone(), key.window()));
                continue;
            }
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
    let threshold = match policy.threshold {
        Threshold::TrustStore => trust.threshold(),
        Threshold::One => 1,
    };
    if valid.len() < threshold {
        return Err(if let Some(keyid) = bad {
            AgentDefError::BadSignature { keyid }
        } else if let Some((keyid, reason)) = revoked {
            AgentDefError::RevokedKey { keyid, reason }
        } else if let Some((keyid, window)) = expired {
            AgentDefError::KeyNotValid { keyid, window }
        } else if valid.is_empty() {
            AgentDefError::UnknownKey {
                keyids: unknown.join(", "),
            }
        } else {
            AgentDefError::ThresholdNotMet {
                valid: valid.len(),
                threshold,
            }
        });
    }
    if envelope.payload_type != policy.payload_type {
        return Err(AgentDefError::WrongPayloadType {
            found: envelope.payload_type.clone(),
            expected: policy.payload_type,
        });
    }
    Ok(VerifiedEnvelope {
        envelope,
        signers: valid.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_spec_example() {
        // The example from the DSSE protocol description.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    /// Verifies ADR-0010 and ADR-0021: the policy decides how many keys must sign and whether
    /// their windows count; nothing else differs between definitions and receipts.
    #[test]
    fn the_policy_sets_threshold_and_key_windows() {
        let (a, b) = (KeyPair::from_seed(&[1; 32]), KeyPair::from_seed(&[2; 32]));
        let text = TrustStore::toml_for(&[("a", &a.public()), ("b", &b.public())])
            .replace("threshold = 1", "threshold = 2")
            .replacen(
                "public_key",
                "not_after = \"2001-01-01T00:00:00Z\"\npublic_key",
                1,
            );
        let trust = TrustStore::from_toml(&text).unwrap();
        let expired = trust
            .keys()
            .find(|k| k.not_after.is_some())
            .unwrap()
            .id
            .clone();
        let signer = if expired == a.key_id() { &a } else { &b };
        let mut env = Envelope::with_type("t", &b"x"[..]);
        env.sign(signer);
        let policy = |threshold, key_windows| Policy {
            payload_type: "t",
            threshold,
            key_windows,
        };
        let now = 1_800_000_000;
        let cause = |p: Policy| verify(&env, &trust, &p).map_or_else(|e| e.cause(), |_| "ok");
        assert_eq!(cause(policy(Threshold::One, KeyWindows::NotChecked)), "ok");
        assert_eq!(
            cause(policy(Threshold::One, KeyWindows::At(now))),
            "key_not_valid"
        );
        assert_eq!(
            cause(policy(Threshold::TrustStore, KeyWindows::NotChecked)),
            "threshold_not_met"
        );
        let ok = verify(
            &env,
            &trust,
            &policy(Threshold::One, KeyWindows::NotChecked),
        )
        .unwrap();
        assert_eq!(ok.signers(), std::slice::from_ref(&expired));
        assert_eq!(ok.payload().as_ref(), b"x");
    }

    #[test]
    fn strict_parsing() {
        let mut e = Envelope::new(&b"x = 1"[..]);
        e.sign(&KeyPair::from_seed(&[1; 32]));
        let json = e.to_json();
        assert_eq!(Envelope::parse(json.as_bytes()).unwrap(), e);
        let extra = json.replacen("\"payload\"", "\"extra\": 1,\n  \"payload\"", 1);
        assert!(matches!(
            Envelope::parse(extra.as_bytes()),
            Err(AgentDefError::MalformedEnvelope(_))
        ));
        let dup = json.replacen("\"payload\"", "\"payloadType\": \"x\",\n  \"payload\"", 1);
        assert!(Envelope::parse(dup.as_bytes()).is_err());
        let big = vec![b' '; MAX_ENVELOPE_BYTES + 1];
        assert!(matches!(
            Envelope::parse(&big),
            Err(AgentDefError::TooLarge { .. })
        ));
    }
}
