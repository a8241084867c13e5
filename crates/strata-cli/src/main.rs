//! The `strata` command line: glue over the libraries, no logic of its own.
//!
//! This file parses the arguments, sets up logging, dispatches to one module per command under
//! `cmd/`, and maps errors to exit codes (see `error.rs`). To add a command, add a module under
//! `cmd/`, a variant to [`Command`] holding its clap arguments, and one arm in [`run`].
#![forbid(unsafe_code)]
// A function a reader takes in on one screen (threshold in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod cmd;
mod error;
#[cfg(test)]
mod formats;
mod memory_cmd;
mod output;
mod report_view;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory as _, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::error::{CliError, EXIT_OK};
use crate::output::Output;

const EXAMPLES: &str = "\
Examples (the example agent in examples/ada; formats in docs/reference/formats.md):
  strata keygen --out release.key --trust-entry release-2026 >> trust.toml
  strata sign ada.toml --key release.key
  strata verify ada.signed.json --trust trust.toml \\
      --rollback-state rollback.json --init-rollback-state
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json \\
      --format json > out.json
  strata explain out.json --html explain.html
  strata memory add \"The staging deploy needs the VPN\" --agent ada --tag ops
  strata demo";

const LONG_AFTER_HELP: &str = "\
Examples (the example agent in examples/ada; formats in docs/reference/formats.md):
  strata keygen --out release.key --trust-entry release-2026 >> trust.toml
  strata sign ada.toml --key release.key
  strata verify ada.signed.json --trust trust.toml \\
      --rollback-state rollback.json --init-rollback-state
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json
  strata assemble --agent ada.signed.json --trust trust.toml --input turn.json \\
      --format json > out.json
  strata explain out.json --html explain.html
  strata memory add \"The staging deploy needs the VPN\" --agent ada --tag ops
  strata demo

Exit codes:
  0  success
  1  error (a missing or unreadable file, an invalid key, trust store or definition)
  2  usage error (unknown option, missing argument, arguments that do not go together)
  3  verification refused: a signed agent definition (or the rollback state it is checked
     against), an assembly receipt or a receipt log failed a check; the verdict line on
     stderr reads `REFUSED <cause>: <message>`
  4  `strata memory check` found damage
  5  `strata mcp diff` found a server that drifted from its pins

Logging:
  Logs go to stderr. The default level is `warn` (`info` for `strata serve`, which logs its
  requests and lifecycle); each -v shows one level more (info, debug, trace); --quiet shows
  errors only and silences status lines. RUST_LOG, when set, replaces the level
  chosen by these flags (for example RUST_LOG=strata_agentdef=debug).";

const MEMORY_EXAMPLES: &str = "\
Examples:
  strata memory add \"The staging deploy needs the VPN\" --agent ada --tag ops
  strata memory search \"how do I deploy to staging\" --agent ada --top 5
  strata memory import ./notes --agent ada
  strata memory import memories.jsonl --agent ada
  strata memory stats --json
  strata memory check

The store is ./.strata/memory.db unless --store (or STRATA_MEMORY_STORE) names another; `add`
and `import` create it. A JSONL import reads one memory per line, for example:
  {\"content\": \"Deploys freeze on Fridays.\", \"agent_id\": \"ada\", \"tags\": [\"ops\"], \"id\": \"m-17\"}
(only content is required; agent_id defaults to --agent). Formats: docs/reference/formats.md.";

/// Signed agent definitions and six-layer context assembly for LLM agents.
///
/// An agent definition (TOML) holds layers 1-2 of an agent: who it is, its rules, its tools and
/// its characteristics. Operators sign it into a DSSE envelope with ed25519 keys (`keygen`,
/// `sign`); runtimes load only envelopes that verify against their trust store (`verify`,
/// `inspect`). `assemble` builds the context a model is sent from the signed layers and runtime
/// layers 3-6 (shared, delegated, working memory, long-term memory), `explain` shows what was
/// kept, cut or dropped and why, `session` runs a conversation turn by turn, `memory` manages
/// the embedded long-term memory, `receipt` signs and audits what the model was shown, and
/// `demo` runs it all with no setup. Start with the example agent in examples/ada (README,
/// "Getting started"); every file format is described in docs/reference/formats.md.
#[derive(Debug, Parser)]
#[command(
    name = "strata",
    version,
    propagate_version = true,
    after_help = EXAMPLES,
    after_long_help = LONG_AFTER_HELP
)]
struct Cli {
    /// Show errors only; silence status lines and warnings.
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        display_order = 900
    )]
    quiet: bool,

    /// Show more logs on stderr, one level per -v: info, debug, trace (`serve`, which logs at
    /// info by default: debug, trace).
    #[arg(short, long, global = true, action = ArgAction::Count, display_order = 901)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

/// The commands. Each variant holds the clap arguments of its module under `cmd/`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Create a signing key, or show the public key of one.
    Keygen(cmd::keygen::KeygenArgs),
    /// Check an agent definition and sign it into a DSSE envelope.
    Sign(cmd::sign::SignArgs),
    /// Verify a signed agent definition against a trust store.
    Verify(cmd::verify::VerifyArgs),
    /// Show what a signed agent definition contains and who signed it.
    Inspect(cmd::inspect::InspectArgs),
    /// Add, search, import and count long-term memories in the embedded store.
    #[command(after_help = MEMORY_EXAMPLES)]
    Memory(memory_cmd::MemoryArgs),
    /// Assemble a context from a signed definition and runtime input (layers 3-6).
    Assemble(cmd::assemble::AssembleArgs),
    /// Run a conversation step by step: prepare a request, record replies and tool results.
    Session(cmd::session::SessionArgs),
    /// Serve the session API over HTTP/JSON for runtimes in any language.
    Serve(Box<cmd::serve::ServeArgs>),
    /// Show an assembly report as a terminal table or a self-contained HTML page.
    Explain(cmd::explain::ExplainArgs),
    /// Run the example agent on an embedded SQLite memory, no setup needed.
    Demo(cmd::demo::DemoArgs),
    /// Sign, verify, show and audit assembly receipts: what the model was shown and why.
    Receipt(cmd::receipt::ReceiptArgs),
    /// Pin the tools of an MCP server into a definition, or compare a server with its pins.
    Mcp(cmd::mcp::McpArgs),
    /// Print a shell completion script.
    Completions(cmd::completions::CompletionsArgs),
}

fn run(command: Command, out: &Output) -> Result<(), CliError> {
    match command {
        Command::Keygen(args) => cmd::keygen::run(&args, out),
        Command::Sign(args) => cmd::sign::run(&args, out),
        Command::Verify(args) => cmd::verify::run(&args, out),
        Command::Inspect(args) => cmd::inspect::run(&args, out),
        Command::Memory(args) => memory_cmd::run(args).map_err(|e| {
            if e.is::<memory_cmd::StoreDamaged>() {
                CliError::Damaged(e.to_string())
            } else {
                CliError::Failed(e)
            }
        }),
        Command::Assemble(args) => cmd::assemble::run(&args, out),
        Command::Session(args) => cmd::session::run(&args, out),
        Command::Serve(args) => cmd::serve::run(&args, out),
        Command::Explain(args) => cmd::explain::run(&args, out),
        Command::Demo(args) => cmd::demo::run(&args, out),
        Command::Receipt(args) => cmd::receipt::run(&args, out),
        Command::Mcp(args) => cmd::mcp::run(&args, out),
        Command::Completions(args) => cmd::completions::run(&args, &mut Cli::command(), out),
    }
}

/// The log filter: RUST_LOG when set, otherwise a level from `--quiet` / `-v`.
///
/// At the default level the loader's and the receipt verifier's own "refused" warnings are
/// hidden, because the command prints the verdict itself; `-v` shows them.
fn log_filter(quiet: bool, verbose: u8, serving: bool) -> EnvFilter {
    let from_flags = match (quiet, verbose) {
        (true, _) => "error",
        // A service logs its requests and lifecycle (never their content) by default, and
        // each -v goes one level further from there.
        (false, 0) if serving => "info",
        (false, 1) if serving => "debug",
        (false, 0) => "warn,strata_agentdef::loader=error,strata_assembler::receipt=error",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    match std::env::var("RUST_LOG") {
        Ok(s) if !s.trim().is_empty() => EnvFilter::try_new(&s).unwrap_or_else(|e| {
            Output::new(false).error(&format!(
                "warning: RUST_LOG={s:?} is not a valid filter ({e}); using `{from_flags}`"
            ));
            EnvFilter::new(from_flags)
        }),
        _ => EnvFilter::new(from_flags),
    }
}

/// Standard error as the logs' writer, which loses what it cannot write: a reader that went
/// away (`strata demo 2>&1 | head -1`) or a closed stream is no reason to fail, or to panic,
/// in a command that otherwise works.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

fn init_logging(quiet: bool, verbose: u8, serving: bool) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(log_filter(quiet, verbose, serving))
        .with_writer(|| LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_target(verbose >= 2)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(
        cli.quiet,
        cli.verbose,
        matches!(cli.command, Command::Serve(_)),
    );
    let out = Output::new(cli.quiet);
    match run(cli.command, &out) {
        Ok(()) => ExitCode::from(EXIT_OK),
        // The reader of standard output went away (`| head`): stop quietly.
        Err(CliError::OutputClosed) => ExitCode::from(EXIT_OK),
        Err(e) => {
            match &e {
                CliError::Refused(_) | CliError::ReceiptRefused(_) => out.error(&e.to_string()),
                CliError::LogRefused(l) if l.cause() != "io" => out.error(&e.to_string()),
                CliError::Usage(_) => out.error(&format!(
                    "error: {e}\n\nFor more information, try '--help'."
                )),
                _ => out.error(&format!("error: {e}")),
            }
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every `strata ...` command in every help text's examples, one command per line (or
    /// continued with a trailing backslash), with comments, pipes and redirections removed.
    fn help_examples(cmd: &clap::Command, out: &mut Vec<(String, String)>) {
        let mut cmd = cmd.clone();
        cmd.build();
        for text in [cmd.get_after_help(), cmd.get_after_long_help()]
            .into_iter()
            .flatten()
        {
            examples_in(&text.to_string(), cmd.get_name(), out);
        }
        for sub in cmd.get_subcommands() {
            help_examples(sub, out);
        }
    }

    /// The examples of every command's help as clap prints it in a terminal `width` columns
    /// wide, wrapping included.
    fn rendered_examples(cmd: &clap::Command, width: usize, out: &mut Vec<(String, String)>) {
        let mut cmd = cmd.clone().term_width(width);
        cmd.build();
        let text = cmd.render_long_help().to_string();
        examples_in(&text, cmd.get_name(), out);
        for sub in cmd.get_subcommands() {
            rendered_examples(sub, width, out);
        }
    }

    /// The `strata ...` commands of one help text: lines continued with a trailing backslash
    /// are joined, then each pipeline is split and its comments and redirections removed. A
    /// line of options right under a command is a command wrapped in the middle; it is kept as
    /// an example of its own, which does not parse.
    fn examples_in(text: &str, name: &str, out: &mut Vec<(String, String)>) {
        let mut logical = Vec::new();
        let mut pending = String::new();
        for line in text.lines() {
            let line = line.trim();
            let (body, continued) = match line.strip_suffix('\\') {
                Some(head) => (head.trim(), true),
                None => (line, false),
            };
            if !pending.is_empty() {
                pending.push(' ');
            }
            pending.push_str(body);
            if !continued {
                logical.push(std::mem::take(&mut pending));
            }
        }
        let mut after_command = false;
        for line in logical {
            if after_command && line.starts_with('-') {
                out.push((name.to_owned(), line));
                continue;
            }
            after_command = false;
            for part in line.split(" | ") {
                let part = part.trim();
                if !part.starts_with("strata ") && part != "strata" {
                    continue;
                }
                let part = part.split("  #").next().unwrap_or(part).trim();
                let part = part.split(" >").next().unwrap_or(part).trim();
                out.push((name.to_owned(), part.to_owned()));
                after_command = true;
            }
        }
    }

    /// The examples in `--help` can be pasted: each is one complete command that parses, with
    /// no command wrapped in the middle without a continuation backslash.
    #[test]
    fn every_help_example_is_a_complete_command() {
        let mut examples = Vec::new();
        help_examples(&Cli::command(), &mut examples);
        assert!(examples.len() > 30, "{examples:?}");
        assert_examples_parse(examples);
    }

    /// The examples stay whole as clap prints them in an 80-column terminal: none is wrapped
    /// in the middle of a command.
    #[test]
    fn help_examples_stay_whole_in_an_80_column_terminal() {
        let mut examples = Vec::new();
        rendered_examples(&Cli::command(), 80, &mut examples);
        assert!(examples.len() > 30, "{examples:?}");
        assert_examples_parse(examples);
    }

    /// Every example parses as a command line; the failures are listed together.
    fn assert_examples_parse(examples: Vec<(String, String)>) {
        let mut failures = Vec::new();
        for (at, example) in examples {
            // Placeholders stand for values the reader fills in.
            let filled = example.replace("<hex>", &"0".repeat(64));
            let Some(words) = shlex::split(&filled) else {
                failures.push(format!("{at}: `{example}` is not valid shell"));
                continue;
            };
            if let Err(e) = Cli::try_parse_from(&words) {
                if !matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ) {
                    failures.push(format!("{at}: `{example}` does not parse: {e}"));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
