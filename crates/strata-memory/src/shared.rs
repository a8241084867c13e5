//! Shared context (layer 3): facts (key, value, scope) that the platform writes and agents only
//! read.
//!
//! The split is in the types (ADR-0006, ADR-0012): [`SharedContextWriter`] is what the platform
//! holds; agents get a [`SharedContextReader`], a distinct type that wraps a store and exposes
//! only the read methods, with no way to reach the writer behind it.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_core::Content;

use crate::error::{MemoryError, Result};
use crate::options::check_name;

/// The longest fact key accepted, in bytes (short enough to build section ids from).
pub const MAX_FACT_KEY_BYTES: usize = 96;

/// Where a fact applies: `global`, `agent:<id>`, `workspace:<name>`... 1-128 characters of
/// `[A-Za-z0-9._:/-]`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Scope(Arc<str>);

impl Scope {
    /// Validate a scope.
    pub fn new(scope: impl AsRef<str>) -> Result<Scope> {
        let s = scope.as_ref();
        check_name("scope", s, 128)?;
        Ok(Scope(Arc::from(s)))
    }

    /// The scope every agent sees.
    pub fn global() -> Scope {
        Scope(Arc::from("global"))
    }

    /// The scope of one agent (`agent:<id>`).
    pub fn agent(agent_id: &str) -> Result<Scope> {
        Scope::new(format!("agent:{agent_id}"))
    }

    /// The scope text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Scope {
    type Error = MemoryError;
    fn try_from(s: String) -> Result<Self> {
        Scope::new(s)
    }
}

impl From<Scope> for String {
    fn from(s: Scope) -> String {
        s.0.to_string()
    }
}

/// One shared fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    /// Where it applies.
    pub scope: Scope,
    /// Its key: 1-96 characters of `[A-Za-z0-9._:/-]`, unique within the scope.
    pub key: Arc<str>,
    /// Its value.
    pub value: Content,
    /// When it was last written, Unix milliseconds.
    pub updated_ms: i64,
}

/// Reading shared facts. Everything read is untrusted content for the assembler.
pub trait SharedContext: Send + Sync {
    /// The store's name, used as the provenance name of sections built from it.
    fn store_name(&self) -> &str;

    /// One fact.
    fn fact(&self, scope: &Scope, key: &str) -> Result<Option<Fact>>;

    /// Every fact of the given scopes, grouped by scope in the order given, keys ascending.
    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>>;
}

/// Writing shared facts: the platform's side of layer 3.
pub trait SharedContextWriter: SharedContext {
    /// Insert or replace a fact and return it as stored.
    fn set_fact(&self, scope: &Scope, key: &str, value: &str) -> Result<Fact>;

    /// Remove a fact; true if it existed.
    fn remove_fact(&self, scope: &Scope, key: &str) -> Result<bool>;
}

/// The agent-facing, read-only handle on a shared-context store.
///
/// It is built from a store and only ever reads it: it does not implement
/// [`SharedContextWriter`] and gives no access to the store inside (ADR-0006).
#[derive(Clone)]
pub struct SharedContextReader {
    inner: Arc<dyn SharedContext>,
}

impl fmt::Debug for SharedContextReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedContextReader")
            .field("store", &self.inner.store_name())
            .finish()
    }
}

impl SharedContextReader {
    /// A read-only handle on `store`.
    pub fn new<S: SharedContext + 'static>(store: Arc<S>) -> SharedContextReader {
        SharedContextReader { inner: store }
    }

    /// A read-only handle on a store already behind a trait object.
    pub fn from_dyn(store: Arc<dyn SharedContext>) -> SharedContextReader {
        SharedContextReader { inner: store }
    }
}

impl SharedContext for SharedContextReader {
    fn store_name(&self) -> &str {
        self.inner.store_name()
    }

    fn fact(&self, scope: &Scope, key: &str) -> Result<Option<Fact>> {
        self.inner.fact(scope, key)
    }

    fn facts(&self, scopes: &[Scope]) -> Result<Vec<Fact>> {
        self.inner.facts(scopes)
    }
}

/// Validate a fact key.
pub(crate) fn check_fact_key(key: &str) -> Result<()> {
    check_name("fact key", key, MAX_FACT_KEY_BYTES)
}
