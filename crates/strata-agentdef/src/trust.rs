//! The trust store: the public keys operators trust to sign agent definitions (ADR-0010).
//!
//! A TOML file operators edit:
//!
//! ```toml
//! threshold = 1                      # distinct trusted signatures required (k of n)
//!
//! [[keys]]
//! id = "<hex sha256 of the public key>"   # checked against the key
//! name = "release-2026"
//! public_key = "ed25519:<base64>"
//! not_before = "2026-01-01T00:00:00Z"    # optional
//! not_after = "2027-01-01T00:00:00Z"     # optional
//!
//! [[revoked]]
//! id = "<key id>"
//! reason = "laptop lost"
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use crate::error::AgentDefError;
use crate::keys::{format_public_key, parse_public_key, KeyId};
use crate::time::{format_rfc3339, parse_rfc3339};

/// Largest trust store file accepted.
pub const MAX_TRUST_STORE_BYTES: usize = 256 * 1024;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    #[serde(default = "one")]
    threshold: usize,
    #[serde(default)]
    keys: Vec<RawKey>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    revoked: Vec<RawRevoked>,
}

fn one() -> usize {
    1
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    name: String,
    public_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_after: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRevoked {
    id: String,
    #[serde(default)]
    reason: String,
}

/// A trusted public key.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    /// Its id.
    pub id: KeyId,
    /// A human name.
    pub name: String,
    /// The key.
    pub key: VerifyingKey,
    /// Start of validity, Unix seconds.
    pub not_before: Option<i64>,
    /// End of validity, Unix seconds.
    pub not_after: Option<i64>,
}

impl TrustedKey {
    /// Whether the key is valid at `now`.
    pub fn valid_at(&self, now: i64) -> bool {
        self.not_before.is_none_or(|nb| now >= nb) && self.not_after.is_none_or(|na| now <= na)
    }

    /// The validity window as text.
    pub fn window(&self) -> String {
        format!(
            "{} to {}",
            self.not_before.map_or("any time".into(), format_rfc3339),
            self.not_after.map_or("no end".into(), format_rfc3339)
        )
    }
}

/// The parsed trust store.
#[derive(Debug, Clone)]
pub struct TrustStore {
    threshold: usize,
    keys: BTreeMap<String, TrustedKey>,
    revoked: BTreeMap<String, String>,
}

impl TrustStore {
    /// Parse a trust store's TOML text.
    pub fn from_toml(text: &str) -> Result<TrustStore, AgentDefError> {
        if text.len() > MAX_TRUST_STORE_BYTES {
            return Err(AgentDefError::TooLarge {
                what: "trust store",
                size: text.len() as u64,
                limit: MAX_TRUST_STORE_BYTES as u64,
            });
        }
        let raw: RawStore =
            toml::from_str(text).map_err(|e| AgentDefError::InvalidTrustStore(e.to_string()))?;
        let mut keys = BTreeMap::new();
        for k in raw.keys {
            let key = parse_public_key(&k.public_key)
                .map_err(|e| AgentDefError::InvalidTrustStore(format!("key `{}`: {e}", k.name)))?;
            let id = KeyId::of(&key);
            if id.as_str() != k.id {
                return Err(AgentDefError::InvalidTrustStore(format!(
                    "key `{}` says id {} but its public key has id {id}",
                    k.name, k.id
                )));
            }
            let parse = |v: &Option<String>| {
                v.as_deref()
                    .map(parse_rfc3339)
                    .transpose()
                    .map_err(|e| AgentDefError::InvalidTrustStore(format!("key `{}`: {e}", k.name)))
            };
            let tk = TrustedKey {
                id: id.clone(),
                name: k.name.clone(),
                key,
                not_before: parse(&k.not_before)?,
                not_after: parse(&k.not_after)?,
            };
            if keys.insert(id.to_string(), tk).is_some() {
                return Err(AgentDefError::InvalidTrustStore(format!(
                    "key {id} is listed twice"
                )));
            }
        }
        let mut revoked = BTreeMap::new();
        for r in raw.revoked {
            revoked.insert(r.id, r.reason);
        }
        if raw.threshold == 0 {
            return Err(AgentDefError::InvalidTrustStore(
                "threshold must be at least 1".into(),
            ));
        }
        let usable = keys.keys().filter(|k| !revoked.contains_key(*k)).count();
        if raw.threshold > usable {
            return Err(AgentDefError::InvalidTrustStore(format!(
                "threshold {} is more than the {usable} usable (trusted, unrevoked) keys",
                raw.threshold
            )));
        }
        Ok(TrustStore {
            threshold: raw.threshold,
            keys,
            revoked,
        })
    }

    /// Read a trust store file.
    pub fn read(path: &Path) -> Result<TrustStore, AgentDefError> {
        let bytes = crate::read_limited(path, MAX_TRUST_STORE_BYTES as u64, "trust store")?;
        let text = String::from_utf8(bytes)
            .map_err(|_| AgentDefError::InvalidTrustStore("not UTF-8".into()))?;
        TrustStore::from_toml(&text)
    }

    /// A trust store text trusting exactly the given keys (name, key), threshold 1.
    pub fn toml_for(keys: &[(&str, &VerifyingKey)]) -> String {
        let raw = RawStore {
            threshold: 1,
            keys: keys
                .iter()
                .map(|(name, k)| RawKey {
                    id: KeyId::of(k).to_string(),
                    name: (*name).to_owned(),
                    public_key: format_public_key(k),
                    not_before: None,
                    not_after: None,
                })
                .collect(),
            revoked: Vec::new(),
        };
        toml::to_string(&raw).unwrap_or_default()
    }

    /// Distinct trusted signatures required.
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// The trusted key with this id, if not revoked.
    pub fn key(&self, id: &str) -> Option<&TrustedKey> {
        self.keys.get(id)
    }

    /// The revocation reason if `id` is revoked.
    pub fn revoked(&self, id: &str) -> Option<&str> {
        self.revoked.get(id).map(String::as_str)
    }

    /// All trusted keys.
    pub fn keys(&self) -> impl Iterator<Item = &TrustedKey> {
        self.keys.values()
    }
}
