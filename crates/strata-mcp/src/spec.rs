//! Which MCP server to reach, and the limits every connection runs under.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::McpError;

/// How a server is reached.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP over its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Streamable HTTP at a URL.
    Http {
        /// The endpoint.
        url: String,
    },
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio { command, args } => write!(f, "stdio `{command}` {args:?}"),
            Transport::Http { url } => write!(f, "http {url}"),
        }
    }
}

/// A named server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    name: Arc<str>,
    /// How it is reached.
    pub transport: Transport,
}

impl ServerSpec {
    /// A server named `name` (1-64 characters of `[A-Za-z0-9._-]`: the name appears in tool
    /// pins and in the `mcp:<name>` provenance of its sections).
    pub fn new(name: &str, transport: Transport) -> Result<ServerSpec, McpError> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(McpError::BadName {
                given: name.chars().take(80).collect(),
            });
        }
        if let Transport::Stdio { command, .. } = &transport {
            if command.is_empty() {
                return Err(McpError::BadSpec(format!(
                    "MCP server `{name}` has an empty command: give the program to start"
                )));
            }
        }
        if let Transport::Http { url } = &transport {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(McpError::BadSpec(format!(
                    "MCP server `{name}`: `{url}` is not an http:// or https:// URL"
                )));
            }
        }
        Ok(ServerSpec {
            name: Arc::from(name),
            transport,
        })
    }

    /// A stdio server from a command line: the program and its arguments.
    pub fn stdio(name: &str, command_line: &[String]) -> Result<ServerSpec, McpError> {
        let Some((command, args)) = command_line.split_first() else {
            return Err(McpError::BadSpec(format!(
                "MCP server `{name}` has no command: give the program to start after `--`"
            )));
        };
        ServerSpec::new(
            name,
            Transport::Stdio {
                command: command.clone(),
                args: args.to_vec(),
            },
        )
    }

    /// `NAME=VALUE`, as the command line's `--mcp` and `--mcp-url` take it: a stdio command
    /// line (split on whitespace) or a URL.
    pub fn parse_assignment(text: &str, url: bool) -> Result<ServerSpec, McpError> {
        let Some((name, value)) = text.split_once('=') else {
            return Err(McpError::BadSpec(format!(
                "`{text}` is not NAME=VALUE: name the server, then `=`, then its {}",
                if url { "URL" } else { "command" }
            )));
        };
        if url {
            ServerSpec::new(
                name,
                Transport::Http {
                    url: value.to_owned(),
                },
            )
        } else {
            let words: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
            ServerSpec::stdio(name, &words)
        }
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's name, shared.
    pub fn name_arc(&self) -> Arc<str> {
        self.name.clone()
    }
}

/// The limits every connection runs under. Defaults are generous for real servers and keep a
/// hostile one from holding a runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Starting or reaching the server and the protocol's initialisation.
    pub connect_timeout: Duration,
    /// Each request (a listing page, a prompt, a tool call).
    pub request_timeout: Duration,
    /// The largest message accepted from a server (a stdio line, an SSE event, a JSON body).
    pub max_message_bytes: usize,
    /// The most pages one listing may take.
    pub max_pages: usize,
    /// The most tools, or prompts, one listing may return.
    pub max_entries: usize,
    /// The most text kept of one tool result or prompt; the rest is cut and said so.
    pub max_text_bytes: usize,
    /// How often a connected server is listed again even without a change notification: a
    /// server that changes silently is caught, and a lost HTTP server is noticed.
    pub relist_every: Duration,
    /// The first wait before reconnecting; doubled after each failure.
    pub backoff_initial: Duration,
    /// The longest wait before reconnecting.
    pub backoff_max: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connect_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_message_bytes: 4 * 1024 * 1024,
            max_pages: 64,
            max_entries: 1024,
            max_text_bytes: 256 * 1024,
            relist_every: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_assignments_are_checked() {
        assert!(ServerSpec::new(
            "docs-1.b_c",
            Transport::Http {
                url: "http://127.0.0.1:1/mcp".into()
            }
        )
        .is_ok());
        assert!(matches!(
            ServerSpec::new(
                "bad/name",
                Transport::Http {
                    url: "http://x".into()
                }
            ),
            Err(McpError::BadName { .. })
        ));
        assert!(matches!(
            ServerSpec::new(
                "a",
                Transport::Http {
                    url: "file:///etc/passwd".into()
                }
            ),
            Err(McpError::BadSpec(_))
        ));
        let s = ServerSpec::parse_assignment("docs=node server.js --flag", false).expect("parses");
        assert_eq!(s.name(), "docs");
        assert_eq!(
            s.transport,
            Transport::Stdio {
                command: "node".into(),
                args: vec!["server.js".into(), "--flag".into()]
            }
        );
        assert!(ServerSpec::parse_assignment("docs", false).is_err());
        assert!(ServerSpec::parse_assignment("docs=", false).is_err());
    }
}
