//! Live tool sources: what connected MCP servers announce right now, behind a trait so that a
//! runtime can offer those tools without this crate (or the assembler) knowing how they are
//! reached. `strata-mcp` implements it over the network; this crate does no networking.
//!
//! Everything a source returns is untrusted: descriptions and schemas are announcements that
//! the assembler checks against the signed pins (ADR-0015, ADR-0041), and a tool result is data
//! for the tool-result slot, never an instruction.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use strata_core::{AnnouncedTool, ToolName};

/// What one configured server offers now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveServer {
    /// The server's name, as configured (the `mcp:<name>` of its sections' provenance).
    pub name: Arc<str>,
    /// Changes whenever what the server offers changes (a reconnect, a re-listing), so that a
    /// runtime re-registers the server's prompts only then.
    pub generation: u64,
    /// Connected with its offer, or why not.
    pub state: LiveState,
}

/// A server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveState {
    /// Connected: the tools and prompts it announces now.
    Connected {
        /// Its tools, each with `server` set to the server's name.
        tools: Vec<AnnouncedTool>,
        /// Its prompts that take no arguments, with their text.
        prompts: Vec<LivePrompt>,
    },
    /// Not connected now (not yet, or lost and being retried), with the last reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// A prompt of a server, untrusted text: it becomes a fenced layer-3 section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePrompt {
    /// The prompt's name (`[A-Za-z0-9._-]`, at most 64 characters; others are not offered).
    pub name: String,
    /// Its text.
    pub text: String,
}

/// The result of one tool call, as the server returned it: untrusted data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveToolResult {
    /// The result's text content, joined; non-text content is named, not embedded.
    pub text: String,
    /// Whether the server marked the result as an error.
    pub is_error: bool,
}

/// Why a tool call could not be made or got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LiveCallError {
    /// No connected server announces the tool now.
    #[error("no connected MCP server announces the tool `{tool}`; it may have disconnected, retry when it is back")]
    NotAnnounced {
        /// The tool.
        tool: String,
    },
    /// The server did not answer in time, or the connection failed during the call.
    #[error("MCP server `{server}` did not complete the call of `{tool}`: {why}")]
    Failed {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// What went wrong.
        why: String,
    },
}

/// A source of tools and prompts offered live by MCP servers.
pub trait LiveSource: Send + Sync + fmt::Debug {
    /// Every configured server and what it offers now.
    fn servers(&self) -> Vec<LiveServer>;

    /// Call `tool` of the server that announces it with `arguments` (a JSON object), waiting
    /// at most the source's request timeout. Blocking: call it off an async executor.
    fn call(&self, tool: &ToolName, arguments: &Value) -> Result<LiveToolResult, LiveCallError>;
}
