//! Section content: immutable, cheap to clone, always valid UTF-8, hashed once.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Immutable text shared by reference count. Cloning never copies the text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Content(Arc<str>);

impl Content {
    /// Text from owned or borrowed UTF-8.
    pub fn new(text: impl Into<Arc<str>>) -> Content {
        Content(text.into())
    }

    /// Text from arbitrary bytes; invalid UTF-8 sequences become U+FFFD.
    ///
    /// Stores and callers may hand us any bytes; this is the one place they become text.
    pub fn from_utf8_lossy(bytes: &[u8]) -> Content {
        Content(Arc::from(String::from_utf8_lossy(bytes)))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is no text.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The BLAKE3 hash of the text.
    pub fn hash(&self) -> ContentHash {
        ContentHash::of(self.as_str())
    }
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Default for Content {
    fn default() -> Self {
        Content::new("")
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::new(s)
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::new(s)
    }
}

impl AsRef<str> for Content {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Content::from(String::deserialize(d)?))
    }
}

/// A BLAKE3 content hash: the key of token-count caches and part of every provenance record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    /// Hash of a text.
    pub fn of(text: &str) -> ContentHash {
        ContentHash(*blake3::hash(text.as_bytes()).as_bytes())
    }

    /// Hash of bytes.
    pub fn of_bytes(bytes: &[u8]) -> ContentHash {
        ContentHash(*blake3::hash(bytes).as_bytes())
    }

    /// From raw hash bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> ContentHash {
        ContentHash(bytes)
    }

    /// The raw 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from(self.0).to_hex().to_string()
    }

    /// Parse 64 hex characters.
    pub fn from_hex(s: &str) -> Option<ContentHash> {
        blake3::Hash::from_hex(s)
            .ok()
            .map(|h| ContentHash(*h.as_bytes()))
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "blake3:{}", &self.to_hex()[..16])
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hex is written from a stack buffer: displaying a hash allocates nothing.
        write!(f, "blake3:{}", blake3::Hash::from(self.0).to_hex())
    }
}

impl Serialize for ContentHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&blake3::Hash::from(self.0).to_hex())
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let hex = s.strip_prefix("blake3:").unwrap_or(&s);
        ContentHash::from_hex(hex)
            .ok_or_else(|| serde::de::Error::custom("expected 64 hex characters of a BLAKE3 hash"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_bytes_become_text() {
        let c = Content::from_utf8_lossy(b"ok \xff\xfe end");
        assert_eq!(c.as_str(), "ok \u{fffd}\u{fffd} end");
    }

    #[test]
    fn hash_hex_round_trip() {
        let h = Content::from("hello").hash();
        assert_eq!(ContentHash::from_hex(&h.to_hex()), Some(h));
        assert_ne!(h, Content::from("hello!").hash());
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<ContentHash>(&json).unwrap(), h);
    }
}
