//! Errors of the MCP client, each saying what went wrong and what to do.

/// A failure to reach, talk to or understand an MCP server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server's name is not usable.
    #[error(
        "`{given}` is not a server name: use 1-64 characters of letters, digits, `.`, `_` and `-`"
    )]
    BadName {
        /// The name given.
        given: String,
    },
    /// The spec of a server could not be read.
    #[error("{0}")]
    BadSpec(String),
    /// The child process could not be started.
    #[error("could not start MCP server `{server}` (`{command}`): {why}; check the command and that it is installed")]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        command: String,
        /// The operating system's answer.
        why: String,
    },
    /// The connection or the protocol's initialisation failed.
    #[error("could not connect to MCP server `{server}`: {why}")]
    Connect {
        /// The server.
        server: String,
        /// What went wrong.
        why: String,
    },
    /// A request was not answered within the timeout.
    #[error("MCP server `{server}` did not answer `{method}` within {seconds} s; it may be stuck, or raise the timeout")]
    Timeout {
        /// The server.
        server: String,
        /// The request's method.
        method: &'static str,
        /// The timeout.
        seconds: u64,
    },
    /// A request failed (the server answered an error, or the connection closed).
    #[error("MCP server `{server}` failed `{method}`: {why}")]
    Request {
        /// The server.
        server: String,
        /// The request's method.
        method: &'static str,
        /// What went wrong.
        why: String,
    },
    /// The server's answer breaks a limit or the protocol.
    #[error("MCP server `{server}` sent an unusable answer to `{method}`: {why}")]
    Invalid {
        /// The server.
        server: String,
        /// The request's method.
        method: &'static str,
        /// What was wrong with it.
        why: String,
    },
}
