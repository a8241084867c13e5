//! Where the command's words go: results on stdout, status and diagnostics on stderr.
//!
//! Results (a key id, a verdict, an inspection, an envelope written to `-`) are what scripts
//! read, so they always go to stdout. Status lines ("wrote ada.signed.json") go to stderr and
//! are silenced by `--quiet`. Logs go through `tracing` (see `main.rs`).

use std::io::Write as _;

use crate::error::CliError;

/// The command's two output streams.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    quiet: bool,
}

impl Output {
    /// Output that drops status lines when `quiet`.
    pub fn new(quiet: bool) -> Output {
        Output { quiet }
    }

    /// Write a result to stdout, exactly as given.
    pub fn result(&self, text: &str) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| match e.kind() {
                // The reader stopped reading (`| head`): stop quietly, nothing went wrong.
                std::io::ErrorKind::BrokenPipe => CliError::OutputClosed,
                _ => CliError::Other(format!("cannot write to standard output: {e}")),
            })
    }

    /// Write a result line to stdout.
    pub fn line(&self, line: &str) -> Result<(), CliError> {
        self.result(&format!("{line}\n"))
    }

    /// Whether `--quiet` was given (commands that print a report print a short summary).
    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Write a status line to stderr unless `--quiet` was given.
    pub fn status(&self, line: &str) {
        if !self.quiet {
            // A closed stderr is not worth failing a command that otherwise succeeded.
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    /// Write an error line to stderr, even with `--quiet`.
    pub fn error(&self, line: &str) {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}
