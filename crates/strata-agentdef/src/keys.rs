//! ed25519 keys, key ids and key files (ADR-0010).
//!
//! A key id is the lower-case hex SHA-256 of the raw 32-byte public key, so anyone holding the
//! public key can recompute it and a trust store entry cannot claim another key's id.
//! Private key files hold the 32-byte seed in base64 under a versioned header and are written
//! with mode 0600; the seed is never printed or logged.

use std::fmt;
use std::io::Write as _;
use std::path::Path;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::error::AgentDefError;

const PRIVATE_HEADER: &str = "strata-ed25519-private-key-v1";
const PUBLIC_PREFIX: &str = "ed25519:";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The id of a public key: hex SHA-256 of its 32 raw bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct KeyId(String);

impl KeyId {
    /// The id of `key`.
    pub fn of(key: &VerifyingKey) -> KeyId {
        let digest = Sha256::digest(key.as_bytes());
        KeyId(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Parse a key id as written in a trust store or an envelope (ADR-0017).
    ///
    /// The canonical form is 64 lower-case hex digits. Upper-case hex digits are normalised to
    /// lower case and a leading `sha256:` (the form `strata verify` prints digests in) is
    /// removed; anything else, including surrounding or inner whitespace, is refused with a
    /// message saying what is wrong, so a mistyped id can never silently match nothing.
    pub fn parse(text: &str) -> Result<KeyId, String> {
        if text.chars().any(char::is_whitespace) {
            return Err(format!(
                "key id {text:?} contains whitespace; a key id is 64 hex digits"
            ));
        }
        let hex = match text.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("sha256:") => &text[7..],
            _ => text,
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "key id {text:?} is not 64 hex digits (the SHA-256 of the public key, as `strata keygen` prints it)"
            ));
        }
        Ok(KeyId(hex.to_ascii_lowercase()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", &self.0[..self.0.len().min(16)])
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A public key in its text form `ed25519:<base64>`.
pub fn format_public_key(key: &VerifyingKey) -> String {
    format!("{PUBLIC_PREFIX}{}", B64.encode(key.as_bytes()))
}

/// Parse `ed25519:<base64 of 32 bytes>`; refuses weak (small-order) keys.
pub fn parse_public_key(s: &str) -> Result<VerifyingKey, AgentDefError> {
    let b64 = s.trim().strip_prefix(PUBLIC_PREFIX).ok_or_else(|| {
        AgentDefError::InvalidKey("public keys are written `ed25519:<base64>`".into())
    })?;
    let bytes = B64
        .decode(b64)
        .map_err(|e| AgentDefError::InvalidKey(format!("public key is not base64: {e}")))?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| AgentDefError::InvalidKey("an ed25519 public key is 32 bytes".into()))?;
    let key = VerifyingKey::from_bytes(&arr)
        .map_err(|_| AgentDefError::InvalidKey("not a valid ed25519 public key".into()))?;
    if key.is_weak() {
        return Err(AgentDefError::InvalidKey(
            "weak (small-order) ed25519 public key".into(),
        ));
    }
    Ok(key)
}

/// A signing key held in memory. Its `Debug` never shows the secret.
pub struct KeyPair {
    signing: SigningKey,
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair")
            .field("id", &self.key_id())
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// A new key from the operating system's random source.
    pub fn generate() -> KeyPair {
        KeyPair {
            signing: SigningKey::generate(&mut rand_core::OsRng),
        }
    }

    /// A key from a 32-byte seed (deterministic; for fixtures and the demo key).
    pub fn from_seed(seed: &[u8; 32]) -> KeyPair {
        KeyPair {
            signing: SigningKey::from_bytes(seed),
        }
    }

    /// The public half.
    pub fn public(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    /// The key id.
    pub fn key_id(&self) -> KeyId {
        KeyId::of(&self.public())
    }

    /// Sign `message` (the caller passes DSSE's pre-authentication encoding).
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }

    /// The private key file's text.
    pub fn to_private_file_text(&self) -> String {
        format!(
            "{PRIVATE_HEADER}\n{}\n",
            B64.encode(self.signing.to_bytes())
        )
    }

    /// Parse a private key file's text.
    pub fn from_private_file_text(text: &str) -> Result<KeyPair, AgentDefError> {
        let mut lines = text.lines();
        if lines.next().map(str::trim) != Some(PRIVATE_HEADER) {
            return Err(AgentDefError::InvalidKey(format!(
                "private key files start with `{PRIVATE_HEADER}`; create one with `strata keygen`"
            )));
        }
        let body = lines.next().unwrap_or("").trim();
        if lines.any(|l| !l.trim().is_empty()) {
            return Err(AgentDefError::InvalidKey(
                "unexpected lines after the key".into(),
            ));
        }
        let seed = B64
            .decode(body)
            .map_err(|_| AgentDefError::InvalidKey("private key is not base64".into()))?;
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| AgentDefError::InvalidKey("an ed25519 seed is 32 bytes".into()))?;
        Ok(KeyPair::from_seed(&seed))
    }

    /// Read a private key file.
    pub fn read_private(path: &Path) -> Result<KeyPair, AgentDefError> {
        let text = crate::read_limited(path, 4 * 1024, "private key file")?;
        KeyPair::from_private_file_text(&String::from_utf8_lossy(&text))
    }

    /// Write the private key file with mode 0600, refusing to overwrite an existing file.
    pub fn write_private(&self, path: &Path) -> Result<(), AgentDefError> {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let mut f = opts.open(path).map_err(|e| AgentDefError::io(path, e))?;
        let written = f
            .write_all(self.to_private_file_text().as_bytes())
            .and_then(|()| f.sync_all());
        if let Err(e) = written {
            // A half-written key (a full disk, a quota) must not stay behind: it is no key, and
            // since key files are never overwritten it would block the retry.
            drop(f);
            let _ = std::fs::remove_file(path);
            return Err(AgentDefError::io(path, e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_round_trip_and_ids_are_stable() {
        let k = KeyPair::from_seed(&[7; 32]);
        let back = KeyPair::from_private_file_text(&k.to_private_file_text()).unwrap();
        assert_eq!(back.key_id(), k.key_id());
        assert_eq!(k.key_id().as_str().len(), 64);
        let pk = format_public_key(&k.public());
        assert_eq!(KeyId::of(&parse_public_key(&pk).unwrap()), k.key_id());
        assert!(!format!("{k:?}").contains(&k.to_private_file_text()[30..40]));
        assert!(parse_public_key("ed25519:AAAA").is_err());
        assert!(parse_public_key("rsa:xyz").is_err());
        assert!(KeyPair::from_private_file_text("garbage").is_err());
    }

    /// Verifies ADR-0017: key ids are normalised (case, `sha256:` prefix) or refused.
    #[test]
    fn key_ids_are_normalised_or_refused() {
        let id = KeyPair::from_seed(&[7; 32]).key_id();
        let canon = id.as_str();
        for form in [
            canon.to_owned(),
            canon.to_ascii_uppercase(),
            format!("sha256:{canon}"),
            format!("SHA256:{}", canon.to_ascii_uppercase()),
        ] {
            assert_eq!(KeyId::parse(&form).unwrap(), id, "{form}");
        }
        for bad in [
            format!("{canon} "),
            format!(" {canon}"),
            format!("{canon}\n"),
            canon[..63].to_owned(),
            format!("{canon}0"),
            format!("sha512:{canon}"),
            format!("g{}", &canon[1..]),
            String::new(),
            format!("{}\u{a0}", &canon[..63]),
        ] {
            assert!(KeyId::parse(&bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[cfg(unix)]
    #[test]
    fn private_key_file_is_0600_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.key");
        KeyPair::generate().write_private(&p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(KeyPair::generate().write_private(&p).is_err());
    }
}
