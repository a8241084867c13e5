//! Errors of the `strata` command and the exit code each one maps to.
//!
//! Exit codes are part of the command's interface (scripts branch on them):
//! 0 success, 1 an error (missing file, bad key, bad trust store...), 2 a usage error (clap
//! exits with 2 on its own), 3 a signed definition was refused by verification (ADR-0010: the
//! loader fails closed, and the command says why with the loader's stable cause name; a
//! missing or damaged rollback state is such a refusal, ADR-0017), or an assembly receipt or
//! receipt log was refused (ADR-0021), 4 `strata memory check` found damage in a memory store
//! (ADR-0036).

use std::path::{Path, PathBuf};

use strata_agentdef::AgentDefError;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: an error that is not a verification verdict.
pub const EXIT_ERROR: u8 = 1;
/// Exit code: the command line was wrong.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a signed agent definition was refused.
pub const EXIT_REFUSED: u8 = 3;
/// Exit code: a check found damage in a memory store.
pub const EXIT_DAMAGED: u8 = 4;
/// `strata mcp diff` found a server that drifted from its pins (ADR-0041).
pub const EXIT_DRIFT: u8 = 5;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The loader refused a signed definition (exit code 3). Printed as the verdict line
    /// `REFUSED <cause>: <message>`.
    #[error("REFUSED {cause}: {0}", cause = .0.cause())]
    Refused(#[source] AgentDefError),
    /// An assembly receipt was refused (exit code 3), ADR-0021.
    #[error("REFUSED {cause}: {0}", cause = .0.cause())]
    ReceiptRefused(#[source] strata_assembler::receipt::ReceiptError),
    /// A receipt log failed its audit (exit code 3), ADR-0021.
    #[error("REFUSED {cause}: {0}", cause = .0.cause())]
    LogRefused(#[source] strata_assembler::receipt::LogError),
    /// A library call failed on some input; `doing` says what the command was doing.
    #[error("{doing}: {source}")]
    AgentDef {
        /// What the command was doing, e.g. "reading trust store trust.toml".
        doing: String,
        /// The library's error, which says what to do.
        #[source]
        source: AgentDefError,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}; {hint}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// The arguments are valid one by one but not together (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// A command module that reports its own errors failed; its message says what to do.
    #[error("{0}")]
    Failed(#[source] Box<dyn std::error::Error>),
    /// Anything else, with a message that says what to do.
    #[error("{0}")]
    Other(String),
    /// A check found damage in a memory store (exit code 4); the findings were printed.
    #[error("{0}")]
    Damaged(String),
    /// A live MCP server differs from its pins (exit code 5); the changes were printed.
    #[error("{0}")]
    Drift(String),
    /// The reader of standard output went away (`strata demo | head -1`): not a failure of
    /// the command, which stops quietly with exit code 0.
    #[error("standard output was closed by its reader")]
    OutputClosed,
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Refused(_) | CliError::ReceiptRefused(_) => EXIT_REFUSED,
            // A log that cannot be read is an error; one that fails its audit is a refusal.
            CliError::LogRefused(
                strata_assembler::receipt::LogError::Io { .. }
                | strata_assembler::receipt::LogError::Database { .. }
                | strata_assembler::receipt::LogError::NotInitialised { .. },
            ) => EXIT_ERROR,
            CliError::LogRefused(_) => EXIT_REFUSED,
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Damaged(_) => EXIT_DAMAGED,
            CliError::Drift(_) => EXIT_DRIFT,
            CliError::OutputClosed => EXIT_OK,
            CliError::AgentDef { .. }
            | CliError::Io { .. }
            | CliError::Failed(_)
            | CliError::Other(_) => EXIT_ERROR,
        }
    }

    /// A library error met while `doing` something.
    pub fn agentdef(doing: impl Into<String>, source: AgentDefError) -> CliError {
        CliError::AgentDef {
            doing: doing.into(),
            source,
        }
    }

    /// An I/O error on `path`, with a hint.
    pub fn io(path: &Path, source: std::io::Error, hint: &'static str) -> CliError {
        CliError::Io {
            path: path.to_owned(),
            source,
            hint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_exit_with_3_and_carry_the_cause() {
        let e = CliError::Refused(AgentDefError::NoSignatures);
        assert_eq!(e.exit_code(), EXIT_REFUSED);
        assert!(e.to_string().starts_with("REFUSED no_signatures: "), "{e}");
        assert_eq!(CliError::Usage("x".into()).exit_code(), EXIT_USAGE);
        assert_eq!(CliError::Other("x".into()).exit_code(), EXIT_ERROR);
    }
}
