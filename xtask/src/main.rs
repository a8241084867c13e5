//! Developer tasks for the strata workspace, run as `cargo xtask <task>` through the alias in
//! `.cargo/config.toml`.
//!
//! - `bench-ab`: the benchmarks of another revision against the working tree, run in turn.
//! - `ci`: the whole test suite as the CI runs it (format, lints, tests, documentation check,
//!   example programs, the Python and TypeScript clients' tests, a fuzz smoke run).
//! - `clients`: only the client packages' checks of `ci`.
//! - `docs`: documentation generated from the decision records and the code (ADR-0005).
//! - `fuzz`: runs the fuzz targets of `fuzz/` for a few seconds each.
//!
//! The crate uses only the standard library, so it builds in seconds on a cold cache.
#![forbid(unsafe_code)]
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "xtask is a command-line tool: the terminal is its user interface"
)]

mod args;
mod bench_ab;
mod ci;
mod clients;
mod docs;
mod fuzz;
mod layering;
mod process;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use args::Args;

/// Errors end the task with a message; nothing here is recoverable.
pub type Error = Box<dyn std::error::Error>;

const USAGE: &str = "\
Developer tasks for strata.

Usage: cargo xtask <TASK> [OPTIONS]

Tasks:
  bench-ab
         Build a bench target at another revision (in a git worktree with its own target
         directory under target/bench-ab/) and in the working tree, run the two in turn,
         one run of each per round, and print each benchmark's median of the rounds with
         the machine and its load
           --base REV          the revision to compare with (required)
           --bench NAME        the bench target (required), e.g. workloads or assemble
           --package PKG       the package that holds it (default strata-assembler)
           --rounds N          rounds (default 3)
           [FILTER]            criterion's filter of benchmark ids
  ci     Run the full check: fmt, clippy, tests, docs --check, examples, client tests,
         fuzz smoke run
           --thorough          run property tests with PROPTEST_CASES=10000
           --skip-clients      leave out the Python and TypeScript client checks
           --skip-fuzz         leave out the fuzz smoke run
           --fuzz-seconds N    seconds per fuzz target (default 10)
  clients
         Only the client packages' checks of `ci`: build strata, then ruff, mypy and pytest
         for clients/python, pytest for crates/strata-cli/tests/sdk (the provider SDK
         check), prettier, tsc and node --test for clients/typescript
  docs   Generate docs/ from adr/*.md and the ADR and invariant citations in the code
           --check             compare with the files on disk and fail when stale or broken
  fuzz   Run the fuzz targets of fuzz/Cargo.toml (all, or the ones named)
           --list              print the targets and exit
           --seconds N         seconds per target (default 10)
           [TARGET...]         only these targets
  help   Print this text
";

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(argv: Vec<String>) -> Result<(), Error> {
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    let mut argv = argv.into_iter();
    let task = argv.next().unwrap_or_else(|| "help".to_string());
    let mut args = Args::new(argv.collect());
    match task.as_str() {
        "bench-ab" => {
            let base = args.value("--base")?;
            let bench = args.value("--bench")?;
            let package = args.value("--package")?;
            let rounds = args.number("--rounds")?.unwrap_or(3);
            let mut rest = args.finish()?;
            if rest.len() > 1 {
                return Err(format!("one filter at most, not `{}`", rest.join(" ")).into());
            }
            let (Some(base), Some(bench)) = (base, bench) else {
                return Err("`bench-ab` needs `--base REV` and `--bench NAME`".into());
            };
            let opts = bench_ab::AbOptions {
                base,
                package: package.unwrap_or_else(|| "strata-assembler".to_owned()),
                bench,
                rounds,
                filter: rest.pop(),
            };
            bench_ab::run(&root, &opts)
        }
        "ci" => {
            let opts = ci::CiOptions {
                thorough: args.flag("--thorough"),
                skip_fuzz: args.flag("--skip-fuzz"),
                skip_clients: args.flag("--skip-clients"),
                fuzz_seconds: args.number("--fuzz-seconds")?.unwrap_or(10),
            };
            args.finish_empty()?;
            ci::run(&root, &opts)
        }
        "clients" => {
            args.finish_empty()?;
            ci::run_clients(&root)
        }
        "docs" => {
            let check = args.flag("--check");
            args.finish_empty()?;
            if docs::run(&root, check)? {
                Ok(())
            } else {
                Err(format!("documentation check failed; run `{}`", docs::COMMAND).into())
            }
        }
        "fuzz" => {
            let opts = fuzz::FuzzOptions {
                list: args.flag("--list"),
                seconds: args.number("--seconds")?.unwrap_or(10),
                targets: args.finish()?,
            };
            fuzz::run(&root, &opts)
        }
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown task `{other}`\n\n{USAGE}").into()),
    }
}
