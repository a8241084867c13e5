//! Tools: the allowlist of layer 1, tools announced at run time, and delegated restrictions.
//!
//! Capabilities only narrow downwards (I4, ADR-0007): the effective tool set is layer 1's
//! allowlist, intersected with what the delegating caller permits, intersected with what is
//! actually announced. Descriptions announced by MCP servers are untrusted text.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::content::Content;
use crate::error::CoreError;

/// A tool name: 1-64 characters of `[A-Za-z0-9._-]`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolName(Arc<str>);

impl ToolName {
    /// Validate a name.
    pub fn new(name: impl AsRef<str>) -> Result<ToolName, CoreError> {
        let n = name.as_ref();
        if !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Ok(ToolName(Arc::from(n)))
        } else {
            Err(CoreError::InvalidToolName {
                given: n.chars().take(80).collect(),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}
impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl FromStr for ToolName {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, CoreError> {
        ToolName::new(s)
    }
}
impl Serialize for ToolName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}
impl<'de> Deserialize<'de> for ToolName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ToolName::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Usage hints of an allowlisted tool, from which tool-usage guidance is generated (no
/// hard-coded rules): "prefer `file_read` for reading files", "prefer `file_read` over `shell`".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolUsageHint {
    /// Tasks this tool is the preferred choice for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefer_for: Vec<String>,
    /// Other tools this one should be preferred over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefer_over: Vec<ToolName>,
}

/// A tool's input schema: a JSON object (JSON Schema), kept in one canonical serialisation
/// (keys sorted, no insignificant whitespace) so that equal schemas compare and hash equal, and
/// the digest pinned by a signed definition can be checked against an announcement (ADR-0015).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ToolSchema {
    canonical: Arc<str>,
}

impl ToolSchema {
    /// Canonicalise a JSON value; it must be an object.
    pub fn from_value(value: &serde_json::Value) -> Result<ToolSchema, CoreError> {
        if !value.is_object() {
            return Err(CoreError::InvalidToolSchema {
                why:
                    "a tool's parameters must be a JSON object (a JSON Schema with `type: object`)"
                        .into(),
            });
        }
        // serde_json's default map is ordered by key, so this serialisation is canonical.
        let canonical = serde_json::to_string(value)
            .map_err(|e| CoreError::InvalidToolSchema { why: e.to_string() })?;
        Ok(ToolSchema {
            canonical: Arc::from(canonical),
        })
    }

    /// Parse and canonicalise JSON text.
    pub fn from_json(text: &str) -> Result<ToolSchema, CoreError> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| CoreError::InvalidToolSchema { why: e.to_string() })?;
        ToolSchema::from_value(&v)
    }

    /// The canonical JSON text.
    pub fn as_json(&self) -> &str {
        &self.canonical
    }

    /// The schema as a JSON value.
    pub fn to_value(&self) -> serde_json::Value {
        // The canonical text was produced by serde_json from a value, so it parses.
        serde_json::from_str(&self.canonical).unwrap_or(serde_json::Value::Null)
    }

    /// BLAKE3 of the canonical text; names the schema in reports.
    pub fn digest(&self) -> crate::ContentHash {
        crate::ContentHash::of(&self.canonical)
    }
}

impl fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

impl Serialize for ToolSchema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolSchema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        ToolSchema::from_value(&v).map_err(serde::de::Error::custom)
    }
}

/// A tool as announced at run time (built in, or by an MCP server). Its description and schema
/// are untrusted: the description is replaced by the signed one unless a loud policy says
/// otherwise, and a schema that differs from the one pinned by the signed definition makes the
/// assembler refuse the tool (ADR-0015).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnouncedTool {
    /// Name.
    pub name: ToolName,
    /// Description, untrusted.
    #[serde(default)]
    pub description: Content,
    /// The JSON Schema of the tool's arguments, as announced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<ToolSchema>,
    /// The MCP server that announced it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Arc<str>>,
}

impl AnnouncedTool {
    /// A tool with a description and no schema, announced by the runtime.
    pub fn new(name: ToolName, description: impl Into<Content>) -> AnnouncedTool {
        AnnouncedTool {
            name,
            description: description.into(),
            parameters: None,
            server: None,
        }
    }
}

/// What the delegating caller (layer 4) permits. It can only narrow the allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolPolicy {
    /// No restriction beyond layer 1's allowlist.
    #[default]
    AllAllowlisted,
    /// Only these tools (and only those that layer 1 also allows).
    Only(BTreeSet<ToolName>),
}

impl ToolPolicy {
    /// Whether the policy lets `name` through (before the allowlist is applied).
    pub fn permits(&self, name: &ToolName) -> bool {
        match self {
            ToolPolicy::AllAllowlisted => true,
            ToolPolicy::Only(set) => set.contains(name),
        }
    }
}
