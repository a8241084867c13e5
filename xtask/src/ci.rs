//! `cargo xtask ci`: every check the CI runs, in order, stopping at the first failure.
//!
//! Steps: `cargo fmt --check`, `cargo clippy -D warnings`, `cargo test` (unit, integration,
//! doc and compile-fail tests), `cargo xtask docs --check`, the example programs of
//! strata-assembler, the client packages' checks (`mypy --strict` and pytest for Python,
//! `tsc` and `node --test` for TypeScript, against a real `strata serve`) with the provider SDK
//! check's pytest suite, and a short fuzz run of every target. Each step prints its command and
//! its duration. The test steps' output is passed through unchanged and their counts (libtest,
//! pytest and node's runner) are added up into one closing line.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{describe, human};
use crate::{clients, fuzz, Error};

/// Options of `cargo xtask ci`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiOptions {
    /// Run property tests with `PROPTEST_CASES=10000`.
    pub thorough: bool,
    /// Leave out the fuzz step.
    pub skip_fuzz: bool,
    /// Leave out the client packages' checks.
    pub skip_clients: bool,
    /// Seconds per fuzz target.
    pub fuzz_seconds: u64,
}

/// The crate whose `examples/` are run.
const EXAMPLES_CRATE: (&str, &str) = ("strata-assembler", "crates/strata-assembler/examples");

/// What a step does.
#[derive(Debug)]
enum Action {
    /// Run a command.
    Command(Command),
    /// Run the test command, passing its output through and counting its results.
    Tests(Command),
    /// Run every fuzz target for this many seconds.
    Fuzz(u64),
}

/// A check made before a step runs, failing with what to install.
type Precheck = fn(&Path) -> Result<(), Error>;

/// One step of the plan.
#[derive(Debug)]
struct Step {
    name: String,
    action: Action,
    precheck: Option<Precheck>,
}

impl Step {
    fn describe(&self) -> String {
        match &self.action {
            Action::Command(c) | Action::Tests(c) => describe(c),
            Action::Fuzz(s) => format!("cargo xtask fuzz --seconds {s}"),
        }
    }
}

fn cargo(args: &[&str]) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Example names of the examples crate: `examples/NAME.rs` and `examples/NAME/main.rs`.
fn examples(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join(EXAMPLES_CRATE.1)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if path.is_file() {
                name.strip_suffix(".rs").map(String::from)
            } else if path.join("main.rs").is_file() {
                Some(name)
            } else {
                None
            }
        })
        .collect();
    names.sort();
    names
}

fn plan(root: &Path, opts: &CiOptions) -> Vec<Step> {
    let mut steps = vec![
        Step {
            name: "fmt".into(),
            action: Action::Command(cargo(&["fmt", "--all", "--", "--check"])),
            precheck: None,
        },
        Step {
            name: "clippy".into(),
            action: Action::Command(cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ])),
            precheck: None,
        },
    ];
    let mut test = cargo(&["test", "--workspace", "--locked"]);
    if opts.thorough {
        test.env("PROPTEST_CASES", "10000");
    }
    mcp_test_servers(root, &mut test);
    steps.push(Step {
        name: "test".into(),
        action: Action::Tests(test),
        precheck: None,
    });
    steps.push(Step {
        name: "docs".into(),
        action: Action::Command(cargo(&[
            "run", "--locked", "-p", "xtask", "--", "docs", "--check",
        ])),
        precheck: None,
    });
    for example in examples(root) {
        steps.push(Step {
            name: format!("example {example}"),
            action: Action::Command(cargo(&[
                "run",
                "--quiet",
                "--locked",
                "-p",
                EXAMPLES_CRATE.0,
                "--example",
                &example,
            ])),
            precheck: None,
        });
    }
    if !opts.skip_clients {
        steps.extend(client_steps(root));
    }
    if !opts.skip_fuzz && root.join("fuzz/Cargo.toml").is_file() {
        steps.push(Step {
            name: "fuzz".into(),
            action: Action::Fuzz(opts.fuzz_seconds),
            precheck: None,
        });
    }
    steps
}

/// The MCP servers the tests run against (ADR-0041), where `.ci/run` installs them: the
/// reference server from npm (`$STRATA_MCP_EVERYTHING`) and a Python with the official SDK
/// (`$STRATA_MCP_PYTHON`). A variable already set wins; one whose server is not installed is
/// left unset, and the tests then skip, unless `STRATA_REQUIRE_MCP=1` (which `.ci/run` sets)
/// makes them fail. The Rust tests and both clients' tests get them.
fn mcp_test_servers(root: &Path, test: &mut Command) {
    let servers = [
        (
            "STRATA_MCP_EVERYTHING",
            "target/mcp-node/node_modules/.bin/mcp-server-everything",
        ),
        ("STRATA_MCP_PYTHON", "target/mcp-venv/bin/python"),
    ];
    for (var, default) in servers {
        let set = std::env::var_os(var).is_some_and(|v| !v.is_empty());
        let path = root.join(default);
        if !set && path.is_file() {
            test.env(var, path);
        }
    }
}

/// The client packages' steps: build the binary their tests start; check the Python client's
/// formatting, lints and types and run its tests, then the provider SDK check's tests in the same
/// Python; check the TypeScript client's formatting, build it and run its tests.
fn client_steps(root: &Path) -> Vec<Step> {
    let node: Option<Precheck> = Some(clients::check_node_modules);
    let step = |name: &str, action: Action, precheck: Option<Precheck>| Step {
        name: format!("clients: {name}"),
        action,
        precheck,
    };
    vec![
        step("build strata", Action::Command(clients::build()), None),
        step(
            "python format",
            Action::Command(clients::python_format(root)),
            None,
        ),
        step(
            "python lint",
            Action::Command(clients::python_lint(root)),
            None,
        ),
        step(
            "python mypy",
            Action::Command(clients::python_types(root)),
            None,
        ),
        step(
            "python tests",
            Action::Tests({
                let mut tests = clients::python_tests(root);
                mcp_test_servers(root, &mut tests);
                tests
            }),
            None,
        ),
        step(
            "sdk check tests",
            Action::Tests(clients::sdk_check_tests(root)),
            None,
        ),
        step(
            "typescript format",
            Action::Command(clients::typescript_format(root)),
            node,
        ),
        step(
            "typescript tests",
            Action::Tests({
                let mut tests = clients::typescript_tests(root);
                mcp_test_servers(root, &mut tests);
                tests
            }),
            node,
        ),
    ]
}

/// Totals of the test runners' summary lines: libtest's `test result:`, pytest's closing
/// `N passed, M failed in 1.2s` and the `# pass N` / `# fail N` lines of node's runner.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestCounts {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests that were ignored.
    pub ignored: u64,
    /// Number of summaries seen (one per test binary or suite).
    pub binaries: u64,
}

impl TestCounts {
    /// Adds one line of output if it is a summary line of one of the runners.
    pub fn add_line(&mut self, line: &str) {
        let line = line.trim();
        if self.add_node_line(line) || self.add_pytest_line(line) {
            return;
        }
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        let number_before = |word: &str| -> u64 {
            rest.split(';')
                .filter_map(|part| part.trim().strip_suffix(word))
                .filter_map(|n| n.trim().rsplit(' ').next()?.parse().ok())
                .next()
                .unwrap_or(0)
        };
        self.passed += number_before("passed");
        self.failed += number_before("failed");
        self.ignored += number_before("ignored");
        self.binaries += 1;
    }

    /// node's runner, TAP (`# pass 3`) or spec (`ℹ pass 3`) reporter.
    fn add_node_line(&mut self, line: &str) -> bool {
        let Some(rest) = line
            .strip_prefix("# ")
            .or_else(|| line.strip_prefix("\u{2139} "))
        else {
            return false;
        };
        let Some((word, n)) = rest.split_once(' ') else {
            return false;
        };
        let Ok(n) = n.parse::<u64>() else {
            return false;
        };
        match word {
            "tests" => self.binaries += 1,
            "pass" => self.passed += n,
            "fail" | "cancelled" => self.failed += n,
            "skipped" | "todo" => self.ignored += n,
            _ => return false,
        }
        true
    }

    /// pytest's closing line, `12 passed, 1 skipped in 3.45s`, with or without `=` around it.
    fn add_pytest_line(&mut self, line: &str) -> bool {
        let line = line.trim_matches(|c: char| c == '=' || c == ' ');
        let Some((counts, time)) = line.rsplit_once(" in ") else {
            return false;
        };
        let seconds = time.split(' ').next().unwrap_or("");
        if seconds
            .strip_suffix('s')
            .is_none_or(|s| s.parse::<f64>().is_err())
        {
            return false;
        }
        let mut found = TestCounts::default();
        for part in counts.split(", ") {
            let Some((n, word)) = part.split_once(' ') else {
                return false;
            };
            let Ok(n) = n.parse::<u64>() else {
                return false;
            };
            match word {
                "passed" | "xpassed" => found.passed += n,
                "failed" | "error" | "errors" => found.failed += n,
                "skipped" | "xfailed" | "deselected" => found.ignored += n,
                "warning" | "warnings" => {}
                _ => return false,
            }
        }
        self.passed += found.passed;
        self.failed += found.failed;
        self.ignored += found.ignored;
        self.binaries += 1;
        true
    }
}

/// Runs the test command with its output passed through line by line, and counts results.
fn run_tests(cmd: &mut Command, counts: &mut TestCounts) -> Result<(), Error> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start `{}`: {e}", describe(cmd)))?;
    if let Some(out) = child.stdout.take() {
        let stdout = std::io::stdout();
        for line in BufReader::new(out).lines() {
            let line = line?;
            counts.add_line(&line);
            let mut lock = stdout.lock();
            writeln!(lock, "{line}")?;
            lock.flush()?;
        }
    }
    let status = child.wait()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", describe(cmd)).into())
    }
}

/// Runs the plan; prints each step's name and time and a summary at the end.
pub fn run(root: &Path, opts: &CiOptions) -> Result<(), Error> {
    run_steps(root, plan(root, opts))
}

/// Runs only the client packages' steps (`cargo xtask clients`).
pub fn run_clients(root: &Path) -> Result<(), Error> {
    run_steps(root, client_steps(root))
}

fn run_steps(root: &Path, steps: Vec<Step>) -> Result<(), Error> {
    let total = steps.len();
    let started = Instant::now();
    let mut done: Vec<(String, Duration)> = Vec::new();
    let mut counts = TestCounts::default();
    let mut failure = None;
    for (n, mut step) in steps.into_iter().enumerate() {
        println!(
            "\n==> [{}/{total}] {}: {}",
            n + 1,
            step.name,
            step.describe()
        );
        let t = Instant::now();
        let ready = match step.precheck {
            Some(check) => check(root),
            None => Ok(()),
        };
        let result = ready.and_then(|()| match &mut step.action {
            Action::Command(cmd) => crate::process::run(cmd),
            Action::Tests(cmd) => run_tests(cmd, &mut counts),
            Action::Fuzz(seconds) => fuzz::run(
                root,
                &fuzz::FuzzOptions {
                    list: false,
                    seconds: *seconds,
                    targets: Vec::new(),
                },
            ),
        });
        let took = t.elapsed();
        let disk = crate::process::disk_free(root)
            .map(|f| format!(" ({f})"))
            .unwrap_or_default();
        match result {
            Ok(()) => {
                println!("<== {} passed in {}{disk}", step.name, human(took));
                done.push((step.name, took));
            }
            Err(e) => {
                println!("<== {} FAILED after {}{disk}", step.name, human(took));
                failure = Some((step.name, e));
                break;
            }
        }
    }
    println!("\nci summary ({} in all):", human(started.elapsed()));
    for (name, took) in &done {
        println!("  ok      {name:<28} {}", human(*took));
    }
    if let Some((name, _)) = &failure {
        println!("  FAILED  {name}");
    }
    if counts.binaries > 0 {
        println!(
            "tests: {} passed, {} failed, {} skipped",
            counts.passed, counts.failed, counts.ignored
        );
    }
    match failure {
        None => Ok(()),
        Some((name, e)) => Err(format!("ci step `{name}` failed: {e}").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_libtest_result_lines() {
        let mut c = TestCounts::default();
        c.add_line("test result: ok. 11 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.00s");
        c.add_line("test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.02s");
        c.add_line("test docs::tests::fresh ... ok");
        assert_eq!(
            c,
            TestCounts {
                passed: 14,
                failed: 1,
                ignored: 2,
                binaries: 2
            }
        );
    }

    #[test]
    fn counts_pytest_and_node_summaries() {
        let mut c = TestCounts::default();
        c.add_line("18 passed, 1 skipped, 2 warnings in 6.41s");
        c.add_line(
            "==================== 1 failed, 3 passed in 0.52s (0:00:00) ====================",
        );
        c.add_line("# tests 9");
        c.add_line("# suites 4");
        c.add_line("# pass 8");
        c.add_line("# fail 1");
        c.add_line("# skipped 0");
        c.add_line("\u{2139} tests 2");
        c.add_line("\u{2139} pass 2");
        // Not summaries.
        c.add_line("tests/test_session.py ....                       [ 40%]");
        c.add_line("the release trains leave in 3 days");
        c.add_line("# Subtest: a tool-using conversation");
        assert_eq!(
            c,
            TestCounts {
                passed: 31,
                failed: 2,
                ignored: 1,
                binaries: 4
            }
        );
    }

    #[test]
    fn plan_follows_the_documented_order() {
        let root = crate::workspace_root();
        let opts = CiOptions {
            thorough: true,
            skip_fuzz: true,
            skip_clients: false,
            fuzz_seconds: 10,
        };
        let steps = plan(&root, &opts);
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(&names[..4], ["fmt", "clippy", "test", "docs"]);
        let examples = names.iter().filter(|n| n.starts_with("example ")).count();
        assert!(names[4..4 + examples]
            .iter()
            .all(|n| n.starts_with("example ")));
        assert_eq!(
            &names[4 + examples..],
            [
                "clients: build strata",
                "clients: python format",
                "clients: python lint",
                "clients: python mypy",
                "clients: python tests",
                "clients: sdk check tests",
                "clients: typescript format",
                "clients: typescript tests"
            ]
        );
        let without = plan(
            &root,
            &CiOptions {
                skip_clients: true,
                ..opts.clone()
            },
        );
        assert_eq!(without.len(), steps.len() - 8);
        // The MCP test servers are handed over only where `.ci/run` installed them.
        let test = steps[2].describe();
        assert!(test.starts_with("PROPTEST_CASES=10000 "), "{test}");
        assert!(test.ends_with(" cargo test --workspace --locked"), "{test}");
        assert_eq!(
            steps[1].describe(),
            "cargo clippy --workspace --all-targets --locked -- -D warnings"
        );
    }
}
