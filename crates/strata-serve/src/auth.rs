//! Bearer tokens (ADR-0022): read from a file, kept only as SHA-256 hashes, compared in
//! constant time.
//!
//! A token file holds one entry per line; blank lines and lines starting with `#` are ignored.
//! An entry is either a token (at least 16 characters, no whitespace) or `sha256:` followed by
//! the 64 lowercase hex digits of a token's SHA-256, so an operator can hand the server hashes
//! only. Whatever the file holds, the server keeps hashes: a memory dump does not give tokens
//! away, and the comparison runs over the hash of the presented token against every stored
//! hash without stopping early.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rand_core::{OsRng, RngCore as _};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// Shortest token accepted, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Why a token file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The file could not be read or created.
    #[error("token file {path}: {source}; check the path and its permissions")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is neither a token nor a `sha256:` hash.
    #[error("token file {path}, line {line}: {why}")]
    Line {
        /// The file.
        path: PathBuf,
        /// Line number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The file has no entries.
    #[error("token file {0} holds no token; add one line with a token of at least 16 characters")]
    Empty(PathBuf),
}

/// The accepted tokens, as SHA-256 hashes.
#[derive(Clone, Default)]
pub struct TokenSet {
    hashes: Vec<[u8; 32]>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("tokens", &self.hashes.len())
            .finish()
    }
}

fn hash(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl TokenSet {
    /// A set holding these tokens (hashed at once).
    pub fn from_tokens<I, S>(tokens: I) -> TokenSet
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        TokenSet {
            hashes: tokens
                .into_iter()
                .map(|t| hash(t.as_ref().as_bytes()))
                .collect(),
        }
    }

    /// Parse the contents of a token file.
    pub fn parse(path: &Path, text: &str) -> Result<TokenSet, TokenError> {
        let mut hashes = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| TokenError::Line {
                path: path.to_owned(),
                line: i + 1,
                why: why.to_owned(),
            };
            if let Some(hex) = line.strip_prefix("sha256:") {
                let bytes = decode_hex(hex).ok_or_else(|| {
                    bad("after `sha256:` come exactly 64 lowercase hex digits (the SHA-256 of a token)")
                })?;
                hashes.push(bytes);
            } else if line.chars().any(char::is_whitespace) {
                return Err(bad("a token has no whitespace inside it"));
            } else if line.chars().count() < MIN_TOKEN_CHARS {
                return Err(bad(
                    "a token has at least 16 characters; generate one with `openssl rand -hex 32`",
                ));
            } else {
                hashes.push(hash(line.as_bytes()));
            }
        }
        if hashes.is_empty() {
            return Err(TokenError::Empty(path.to_owned()));
        }
        Ok(TokenSet { hashes })
    }

    /// Read a token file.
    pub fn read(path: &Path) -> Result<TokenSet, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Io {
            path: path.to_owned(),
            source,
        })?;
        TokenSet::parse(path, &text)
    }

    /// Read a token file, creating it first with one random token (mode 0600 on Unix) when it
    /// does not exist. Returns the set and whether the file was created.
    pub fn read_or_create(path: &Path) -> Result<(TokenSet, bool), TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_owned(),
            source,
        };
        if path.exists() {
            return Ok((TokenSet::read(path)?, false));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut bytes = [0u8; 32];
        OsRng.fill_bytes(&mut bytes);
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let mut file = opts.open(path).map_err(io)?;
        let text = format!(
            "# Bearer token for `strata serve` (send `Authorization: Bearer <token>`).\n{token}\n"
        );
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok((TokenSet::from_tokens([token]), true))
    }

    /// Number of accepted tokens.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether no token is accepted (then every protected request is refused).
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Whether `presented` is one of the tokens. Every stored hash is compared, in constant
    /// time, whatever matches.
    pub fn accepts(&self, presented: &str) -> bool {
        let h = hash(presented.as_bytes());
        let mut ok = subtle::Choice::from(0);
        for stored in &self.hashes {
            ok |= stored.ct_eq(&h);
        }
        bool::from(ok)
    }
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_hashes_are_accepted_and_nothing_else() {
        let token = "0123456789abcdef-token";
        let hex: String = hash(b"another-token-of-enough-length")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let text = format!("# comment\n\n{token}\nsha256:{hex}\n");
        let set = TokenSet::parse(Path::new("t"), &text).expect("parses");
        assert_eq!(set.len(), 2);
        assert!(set.accepts(token));
        assert!(set.accepts("another-token-of-enough-length"));
        assert!(!set.accepts("0123456789abcdef-toke"));
        assert!(!set.accepts(""));
        assert!(!set.accepts(&format!("sha256:{hex}")));
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, needle) in [
            ("short\n", "at least 16"),
            ("sha256:abc\n", "64 lowercase hex"),
            ("two words here and more\n", "whitespace"),
            ("# only a comment\n", "holds no token"),
        ] {
            let err = TokenSet::parse(Path::new("t"), text).expect_err(text);
            assert!(err.to_string().contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn a_created_file_is_private_and_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/serve.token");
        let (set, created) = TokenSet::read_or_create(&path).expect("creates");
        assert!(created);
        let text = std::fs::read_to_string(&path).expect("reads");
        let token = text.lines().last().expect("a line");
        assert!(set.accepts(token));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (again, created) = TokenSet::read_or_create(&path).expect("reads");
        assert!(!created);
        assert!(again.accepts(token));
    }
}
