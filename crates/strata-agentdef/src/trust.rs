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
//!
//! ADR-0017 hardens the store against mistakes and damage: every key id (listed or revoked) is
//! validated and normalised by [`KeyId::parse`]; a revocation must name a listed key (a
//! revocation of an unlisted key has no effect, so it is a typo or damage and is refused);
//! validity dates must be after 1970 and `not_before` before `not_after`; and the store itself
//! can be pinned by the SHA-256 of its exact bytes ([`TrustStore::digest`],
//! [`TrustStore::read_pinned`]), which `strata verify` prints and checks.

use std::collections::BTreeMap;
use std::path::Path;

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::AgentDefError;
use crate::keys::{format_public_key, parse_public_key, KeyId};
use crate::time::{format_rfc3339, parse_rfc3339};

/// Largest trust store file accepted.
pub const MAX_TRUST_STORE_BYTES: usize = 256 * 1024;

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    /// Distinct trusted signatures a definition needs (k of n); at least 1, at most the
    /// number of listed, unrevoked keys.
    #[serde(default = "one")]
    threshold: usize,
    /// The trusted public keys (`strata keygen --trust-entry NAME` prints one).
    #[serde(default)]
    keys: Vec<RawKey>,
    /// Revoked keys: each must name a listed key; signatures by it no longer count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    revoked: Vec<RawRevoked>,
}

/// The JSON Schema of a trust store file (the format reference is generated from it).
#[cfg(feature = "schema")]
pub fn trust_store_schema() -> schemars::Schema {
    schemars::schema_for!(RawStore)
}

fn one() -> usize {
    1
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    /// The key id: hex SHA-256 of the public key (checked against it; `sha256:` prefix and
    /// upper case accepted).
    id: String,
    /// A name for people (shown by `strata inspect` and in logs).
    name: String,
    /// `ed25519:` and the base64 public key.
    public_key: String,
    /// Signatures by this key count from this instant on (RFC 3339, with an offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_before: Option<String>,
    /// Signatures by this key count until this instant (RFC 3339, with an offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_after: Option<String>,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRevoked {
    /// The id of a listed key.
    id: String,
    /// Why it was revoked, for people.
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
    digest: String,
}

/// Earliest validity date accepted in a trust store (1970-01-01): an earlier one is a typo or
/// damage (a flipped byte can turn 2026 into 0026).
const EARLIEST_DATE: i64 = 0;

/// Lower-case hex SHA-256 of the exact bytes of a trust store (ADR-0017).
pub fn trust_store_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Parse a pin: 64 hex digits, optionally after `sha256:`; normalised to lower case.
pub fn parse_pin(pin: &str) -> Result<String, AgentDefError> {
    KeyId::parse(pin)
        .map(|k| k.as_str().to_owned())
        .map_err(|_| {
            AgentDefError::InvalidTrustStore(format!(
                "trust store pin {pin:?} is not `sha256:<64 hex digits>`; copy it from the `trust=` field `strata verify` prints"
            ))
        })
}

/// The listed keys by id: each public key well-formed and matching its listed id, its
/// validity dates after 1970 and in order, no id listed twice.
fn trusted_keys(raw: Vec<RawKey>) -> Result<BTreeMap<String, TrustedKey>, AgentDefError> {
    let mut keys = BTreeMap::new();
    for k in raw {
        let tk = trusted_key(&k)?;
        let id = tk.id.clone();
        if keys.insert(id.to_string(), tk).is_some() {
            return Err(AgentDefError::InvalidTrustStore(format!(
                "key {id} is listed twice"
            )));
        }
    }
    Ok(keys)
}

/// One listed key, checked: its public key parses and has the listed id, and its validity
/// dates (if any) are after 1970 and in order.
fn trusted_key(k: &RawKey) -> Result<TrustedKey, AgentDefError> {
    let key = parse_public_key(&k.public_key)
        .map_err(|e| AgentDefError::InvalidTrustStore(format!("key `{}`: {e}", k.name)))?;
    let id = KeyId::of(&key);
    let listed = KeyId::parse(&k.id)
        .map_err(|e| AgentDefError::InvalidTrustStore(format!("key `{}`: {e}", k.name)))?;
    if id != listed {
        return Err(AgentDefError::InvalidTrustStore(format!(
            "key `{}` says id {} but its public key has id {id}",
            k.name, k.id
        )));
    }
    let bad = |e: String| AgentDefError::InvalidTrustStore(format!("key `{}`: {e}", k.name));
    let parse = |v: &Option<String>| -> Result<Option<i64>, AgentDefError> {
        let Some(text) = v.as_deref() else {
            return Ok(None);
        };
        let t = parse_rfc3339(text).map_err(bad)?;
        if t < EARLIEST_DATE {
            return Err(bad(format!(
                "validity date `{text}` is before 1970; check the year"
            )));
        }
        Ok(Some(t))
    };
    let tk = TrustedKey {
        id,
        name: k.name.clone(),
        key,
        not_before: parse(&k.not_before)?,
        not_after: parse(&k.not_after)?,
    };
    if let (Some(nb), Some(na)) = (tk.not_before, tk.not_after) {
        if nb >= na {
            return Err(bad(format!(
                "not_before {} is not before not_after {}",
                format_rfc3339(nb),
                format_rfc3339(na)
            )));
        }
    }
    Ok(tk)
}

/// The revocations by key id, each naming a listed key, none twice; with their reasons.
fn revocations(
    raw: Vec<RawRevoked>,
    keys: &BTreeMap<String, TrustedKey>,
) -> Result<BTreeMap<String, String>, AgentDefError> {
    let mut revoked = BTreeMap::new();
    for r in raw {
        let id = KeyId::parse(&r.id)
            .map_err(|e| AgentDefError::InvalidTrustStore(format!("[[revoked]] entry: {e}")))?;
        if !keys.contains_key(id.as_str()) {
            return Err(AgentDefError::InvalidTrustStore(format!(
                "[[revoked]] id {id} matches no key in [[keys]]; a revocation only acts on a listed key, so this one is a typo or damage. Fix the id, and keep the revoked key's [[keys]] entry next to its revocation"
            )));
        }
        if revoked.insert(id.to_string(), r.reason).is_some() {
            return Err(AgentDefError::InvalidTrustStore(format!(
                "key {id} is revoked twice"
            )));
        }
    }
    Ok(revoked)
}

/// The threshold is at least 1, and at most the number of listed keys that are not revoked
/// (of which there is at least one).
fn check_threshold(
    threshold: usize,
    keys: &BTreeMap<String, TrustedKey>,
    revoked: &BTreeMap<String, String>,
) -> Result<(), AgentDefError> {
    if threshold == 0 {
        return Err(AgentDefError::InvalidTrustStore(
            "threshold must be at least 1".into(),
        ));
    }
    if keys.is_empty() {
        return Err(AgentDefError::InvalidTrustStore(
            "the trust store lists no keys, so no signature can be trusted; add one with \
             `strata keygen --out release.key --trust-entry release-2026 >> trust.toml` \
             (or `--public KEY --trust-entry NAME` for an existing key)"
                .into(),
        ));
    }
    let usable = keys.keys().filter(|k| !revoked.contains_key(*k)).count();
    if threshold > usable {
        return Err(AgentDefError::InvalidTrustStore(format!(
            "threshold {threshold} is more than the {usable} usable (trusted, unrevoked) keys"
        )));
    }
    Ok(())
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
        let keys = trusted_keys(raw.keys)?;
        let revoked = revocations(raw.revoked, &keys)?;
        check_threshold(raw.threshold, &keys, &revoked)?;
        Ok(TrustStore {
            threshold: raw.threshold,
            keys,
            revoked,
            digest: trust_store_digest(text.as_bytes()),
        })
    }

    /// Read a trust store file.
    pub fn read(path: &Path) -> Result<TrustStore, AgentDefError> {
        let bytes = crate::read_limited(path, MAX_TRUST_STORE_BYTES as u64, "trust store")?;
        let text = String::from_utf8(bytes)
            .map_err(|_| AgentDefError::InvalidTrustStore("not UTF-8".into()))?;
        TrustStore::from_toml(&text)
    }

    /// Read a trust store file and refuse it unless the SHA-256 of its exact bytes is `pin`
    /// (`sha256:<hex>` or bare hex, as [`TrustStore::digest`] gives it). The digest is checked
    /// before the file is parsed (ADR-0017).
    pub fn read_pinned(path: &Path, pin: &str) -> Result<TrustStore, AgentDefError> {
        let expected = parse_pin(pin)?;
        let bytes = crate::read_limited(path, MAX_TRUST_STORE_BYTES as u64, "trust store")?;
        let found = trust_store_digest(&bytes);
        if found != expected {
            return Err(AgentDefError::TrustStoreNotPinned {
                path: path.to_owned(),
                expected,
                found,
            });
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| AgentDefError::InvalidTrustStore("not UTF-8".into()))?;
        TrustStore::from_toml(&text)
    }

    /// `sha256:<hex>` of the exact bytes this store was parsed from: the value to pin.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.digest)
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

    /// The trusted key with this id (in any form [`KeyId::parse`] accepts), revoked or not.
    pub fn key(&self, id: &str) -> Option<&TrustedKey> {
        let id = KeyId::parse(id).ok()?;
        self.keys.get(id.as_str())
    }

    /// The revocation reason if `id` (in any form [`KeyId::parse`] accepts) is revoked.
    pub fn revoked(&self, id: &str) -> Option<&str> {
        let id = KeyId::parse(id).ok()?;
        self.revoked.get(id.as_str()).map(String::as_str)
    }

    /// All trusted keys.
    pub fn keys(&self) -> impl Iterator<Item = &TrustedKey> {
        self.keys.values()
    }
}
