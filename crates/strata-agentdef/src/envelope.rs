//! The DSSE envelope (ADR-0010).
//!
//! Signatures are made over DSSE's pre-authentication encoding
//! `"DSSEv1" SP len(type) SP type SP len(body) SP body`, so the payload type is part of the signed
//! bytes and cannot be swapped. Parsing is strict: unknown and duplicate fields are refused, base64
//! must be canonical, and every part has a size limit.

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::AgentDefError;
use crate::keys::KeyPair;

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
