//! The MCP client of strata: connects to Model Context Protocol servers (a child process over
//! stdio, or Streamable HTTP), lists their tools and prompts, and keeps them live for a runtime
//! (ADR-0041).
//!
//! Built on the protocol's official Rust SDK (`rmcp`). Every exchange runs under a timeout,
//! incoming messages are bounded in size, listings are paginated with a bound on pages and
//! entries, and a lost server is reconnected with backoff. Everything a server sends is
//! untrusted data: tool descriptions and schemas are announcements the assembler holds to the
//! signed pins, prompts become fenced layer-3 sections, and tool results go to the tool-result
//! slot.
//!
//! - [`client`]: one connection ([`Client`]) and the untrusted values it returns.
//! - [`spec`]: which server to start or reach ([`ServerSpec`]) and the [`Limits`].
//! - [`pin`]: pins for a definition from a live listing, and the [`Drift`] of a live server
//!   from the pins of a definition.
//! - [`live`]: [`LiveServers`], the reconnecting supervisor a runtime reads through the
//!   registry's `LiveSource` trait.
#![forbid(unsafe_code)]
// Every function fits on a screen (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod client;
pub mod error;
pub mod live;
pub mod pin;
pub mod spec;

pub use client::{Client, ServerPrompt, ServerTool};
pub use error::McpError;
pub use live::LiveServers;
pub use pin::{diff, pins_toml, Change, Drift, PinnedTool, Selection};
pub use spec::{Limits, ServerSpec, Transport};
