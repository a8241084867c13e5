//! Pins for a definition from a live listing, and the drift of a live server from its pins.
//!
//! A pin is a `[[core.tools]]` entry naming the tool, its description, its canonical input
//! schema and its server. Once signed, the assembler refuses an announcement that differs from
//! it (`definition_changed`); [`diff`] tells an operator the same before a turn does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::Value;
use strata_agentdef::definition::ToolDef;
use strata_core::{identity::AllowedTool, ToolName, ToolSchema};

use crate::client::ServerTool;
use crate::error::McpError;

/// Which of a server's tools to pin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only these (all when `None`).
    pub only: Option<BTreeSet<String>>,
    /// Never these.
    pub except: BTreeSet<String>,
}

impl Selection {
    /// Whether `name` is selected.
    pub fn includes(&self, name: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(name)) && !self.except.contains(name)
    }
}

#[derive(Serialize)]
struct Pin<'a> {
    name: &'a str,
    description: &'a str,
    server: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct Tools<'a> {
    tools: Vec<Pin<'a>>,
}

#[derive(Serialize)]
struct Doc<'a> {
    core: Tools<'a>,
}

/// The `[[core.tools]]` pins of the `tools` of `server` that `selection` keeps, as TOML to
/// append to an unsigned definition. Refused whole when a selected tool's name is not a strata
/// tool name, when a name in `selection` is not announced, or when a schema cannot be written
/// as TOML (it holds a `null`).
pub fn pins_toml(
    server: &str,
    tools: &[ServerTool],
    selection: &Selection,
) -> Result<String, McpError> {
    let named: BTreeSet<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let asked = selection.only.iter().flatten().chain(&selection.except);
    if let Some(missing) = asked.into_iter().find(|n| !named.contains(n.as_str())) {
        return Err(McpError::BadSpec(format!(
            "MCP server `{server}` announces no tool `{missing}`; it announces: {}",
            named.iter().copied().collect::<Vec<_>>().join(", ")
        )));
    }
    let mut pins = Vec::new();
    for t in tools.iter().filter(|t| selection.includes(&t.name)) {
        ToolName::new(&t.name).map_err(|e| McpError::BadSpec(format!(
            "MCP server `{server}` announces a tool strata cannot pin ({e}); leave it out with --except"
        )))?;
        ToolSchema::from_value(&t.schema).map_err(|e| {
            McpError::BadSpec(format!(
                "MCP server `{server}`: the schema of `{}` is unusable ({e})",
                t.name
            ))
        })?;
        pins.push(Pin {
            name: &t.name,
            description: &t.description,
            server,
            parameters: &t.schema,
        });
    }
    let doc = Doc {
        core: Tools { tools: pins },
    };
    toml::to_string(&doc).map_err(|e| {
        McpError::BadSpec(format!(
            "MCP server `{server}`: a pin cannot be written as TOML ({e}); leave that tool out with --except"
        ))
    })
}

/// One difference between a live server and the pins of a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The announced description differs from the pinned one.
    Description {
        /// The tool.
        tool: String,
    },
    /// The announced schema differs from the pinned one (canonical JSON compared).
    Schema {
        /// The tool.
        tool: String,
        /// BLAKE3 of the pinned canonical schema.
        pinned: String,
        /// BLAKE3 of the announced canonical schema.
        live: String,
    },
    /// A pinned tool the server no longer announces.
    Removed {
        /// The tool.
        tool: String,
    },
    /// A tool the server announces that no pin names.
    Unpinned {
        /// The tool.
        tool: String,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Description { tool } => {
                write!(f, "changed description: `{tool}` announces a description that differs from its pin")
            }
            Change::Schema { tool, pinned, live } => write!(
                f,
                "changed schema: `{tool}` announces schema {live}, its pin is {pinned}"
            ),
            Change::Removed { tool } => {
                write!(f, "removed: `{tool}` is pinned but no longer announced")
            }
            Change::Unpinned { tool } => write!(f, "new: `{tool}` is announced but not pinned"),
        }
    }
}

/// The differences between what a server announces and what a definition pins for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drift {
    /// Every change, by tool name.
    pub changes: Vec<Change>,
}

impl Drift {
    /// Whether the server matches its pins exactly.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// A tool as a definition pins it: from a definition's text ([`ToolDef`]) or from a verified
/// agent ([`AllowedTool`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedTool {
    /// The name.
    pub name: String,
    /// The signed description.
    pub description: String,
    /// The pinned schema, if any.
    pub parameters: Option<ToolSchema>,
    /// The pinned server, if any.
    pub server: Option<String>,
}

impl From<&ToolDef> for PinnedTool {
    fn from(t: &ToolDef) -> PinnedTool {
        PinnedTool {
            name: t.name.to_string(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
            server: t.server.clone(),
        }
    }
}

impl From<&AllowedTool> for PinnedTool {
    fn from(t: &AllowedTool) -> PinnedTool {
        PinnedTool {
            name: t.name.to_string(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
            server: t.server.as_deref().map(str::to_owned),
        }
    }
}

/// Compare `live` (a server's listing) with the `pinned` tools of a definition that name
/// `server`. Descriptions compare exactly; schemas by their canonical JSON.
pub fn diff(server: &str, pinned: &[PinnedTool], live: &[ServerTool]) -> Drift {
    let pins: BTreeMap<&str, &PinnedTool> = pinned
        .iter()
        .filter(|a| a.server.as_deref() == Some(server))
        .map(|a| (a.name.as_str(), a))
        .collect();
    let announced: BTreeMap<&str, &ServerTool> =
        live.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut changes = Vec::new();
    for (name, pin) in &pins {
        let Some(t) = announced.get(name) else {
            changes.push(Change::Removed {
                tool: (*name).to_owned(),
            });
            continue;
        };
        if t.description != pin.description {
            changes.push(Change::Description {
                tool: (*name).to_owned(),
            });
        }
        if let Some(pinned_schema) = &pin.parameters {
            match ToolSchema::from_value(&t.schema) {
                Ok(s) if &s == pinned_schema => {}
                Ok(s) => changes.push(Change::Schema {
                    tool: (*name).to_owned(),
                    pinned: pinned_schema.digest().to_string(),
                    live: s.digest().to_string(),
                }),
                Err(_) => changes.push(Change::Schema {
                    tool: (*name).to_owned(),
                    pinned: pinned_schema.digest().to_string(),
                    live: "(not a JSON object)".to_owned(),
                }),
            }
        }
    }
    for name in announced.keys().filter(|n| !pins.contains_key(*n)) {
        changes.push(Change::Unpinned {
            tool: (*name).to_owned(),
        });
    }
    changes.sort_by(|a, b| key(a).cmp(key(b)));
    Drift { changes }
}

fn key(c: &Change) -> &str {
    match c {
        Change::Description { tool }
        | Change::Schema { tool, .. }
        | Change::Removed { tool }
        | Change::Unpinned { tool } => tool,
    }
}
