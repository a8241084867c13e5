//! Options every store takes: the entry size limit and the clock.

use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::error::{MemoryError, Result};

/// The default limit on one working-memory entry, memory or shared fact: 64 KiB.
pub const DEFAULT_MAX_ENTRY_BYTES: usize = 64 * 1024;

/// Options shared by all store adapters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The largest entry, memory or fact value accepted, in bytes of UTF-8 text
    /// (default [`DEFAULT_MAX_ENTRY_BYTES`]).
    pub max_entry_bytes: usize,
    /// Where timestamps come from (default: the system clock).
    pub clock: Arc<dyn Clock>,
    /// The store's name in provenance records (default: the adapter kind and location).
    pub name: Option<String>,
    /// Run the database's own structural check when the store opens (SQLite:
    /// `PRAGMA quick_check`; it reads the whole file, so it is off by default). ADR-0019.
    pub check_on_open: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            clock: Arc::new(SystemClock),
            name: None,
            check_on_open: false,
        }
    }
}

impl StoreOptions {
    /// Set the entry size limit in bytes.
    #[must_use]
    pub fn with_max_entry_bytes(mut self, bytes: usize) -> Self {
        self.max_entry_bytes = bytes;
        self
    }

    /// Set the clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Set the store's name in provenance records.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Run the database's structural check when the store opens.
    #[must_use]
    pub fn with_check_on_open(mut self, check: bool) -> Self {
        self.check_on_open = check;
        self
    }

    /// The configured name, or `default`.
    pub(crate) fn name_or(&self, default: impl FnOnce() -> String) -> String {
        self.name.clone().unwrap_or_else(default)
    }

    /// Refuse text over the size limit, and text with NUL characters (which PostgreSQL cannot
    /// store in `text` columns; refusing them everywhere keeps the adapters interchangeable).
    pub(crate) fn check_size(&self, what: &'static str, text: &str) -> Result<()> {
        if text.len() > self.max_entry_bytes {
            return Err(MemoryError::EntryTooLarge {
                what,
                size: text.len(),
                limit: self.max_entry_bytes,
            });
        }
        if text.contains('\0') {
            return Err(MemoryError::invalid(
                what,
                "text contains a NUL character; replace it (for example with U+FFFD) before storing",
            ));
        }
        Ok(())
    }

    /// Now, from the clock.
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// Check a name made of `[A-Za-z0-9._:/-]`, 1 to `max` bytes (ids, keys, scopes, tags).
pub(crate) fn check_name(what: &'static str, s: &str, max: usize) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(MemoryError::invalid(
            what,
            format!(
                "`{}` must be 1-{max} characters of letters, digits and . _ : / -",
                s.chars().take(140).collect::<String>()
            ),
        ))
    }
}

/// Check free text used as an identifier (session ids, agent ids, call ids): 1 to `max` bytes,
/// no control characters.
pub(crate) fn check_label(what: &'static str, s: &str, max: usize) -> Result<()> {
    if s.is_empty() || s.len() > max || s.chars().any(char::is_control) {
        return Err(MemoryError::invalid(
            what,
            format!(
                "`{}` must be 1-{max} bytes without control characters",
                s.chars().take(140).collect::<String>()
            ),
        ));
    }
    Ok(())
}
