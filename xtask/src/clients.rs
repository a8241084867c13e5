//! The client packages' checks in `cargo xtask ci` (ADR-0028): the Python client's formatting
//! and lints (ruff), types (`mypy --strict`) and pytest suite, and the TypeScript client's
//! formatting (prettier), build (`tsc`) and `node --test` suite; the suites run against a real
//! `strata serve` started from the freshly built binary (`STRATA_BIN`). With them, in the same
//! Python, the tests of the provider SDK check (`crates/strata-cli/tests/sdk`), which show it
//! refusing planted invalid request bodies.
//!
//! The Python interpreter is `$STRATA_SDK_PYTHON` (the virtual environment `.ci/run` fills with
//! the provider SDKs, the client and its pinned test tools), else `python3`. The TypeScript
//! suite needs `npm ci` to have run in `clients/typescript`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the Python client lives.
pub const PYTHON: &str = "clients/python";
/// Where the TypeScript client lives.
pub const TYPESCRIPT: &str = "clients/typescript";
/// Where the provider SDK check (`check_requests.py`) and its tests live.
pub const SDK_CHECK: &str = "crates/strata-cli/tests/sdk";

/// The interpreter that has the client and its test tools installed.
pub fn python() -> OsString {
    std::env::var_os("STRATA_SDK_PYTHON")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// The `strata` binary `cargo build -p strata-cli` leaves in the target directory.
pub fn strata_bin(root: &Path) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|t| !t.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    root.join(target).join("debug").join("strata")
}

fn with_bin(mut cmd: Command, root: &Path, dir: &str) -> Command {
    cmd.current_dir(root.join(dir))
        .env("STRATA_BIN", strata_bin(root))
        .stdin(Stdio::null());
    cmd
}

/// `cargo build -p strata-cli`: the binary the client tests start.
pub fn build() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--locked", "-p", "strata-cli"])
        .stdin(Stdio::null());
    cmd
}

/// A Python tool over the Python client, its tests and its examples, configured by its
/// `pyproject.toml`.
fn python_tool(root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(python());
    cmd.arg("-m")
        .args(args)
        .current_dir(root.join(PYTHON))
        .stdin(Stdio::null());
    cmd
}

/// `ruff format --check`: the Python sources are formatted.
pub fn python_format(root: &Path) -> Command {
    python_tool(root, &["ruff", "format", "--check"])
}

/// `ruff check`: the Python lints pass.
pub fn python_lint(root: &Path) -> Command {
    python_tool(root, &["ruff", "check"])
}

/// `mypy --strict`: the Python client, its tests and its examples type-check.
pub fn python_types(root: &Path) -> Command {
    python_tool(root, &["mypy", "--strict"])
}

/// `prettier --check`: the TypeScript sources are formatted.
pub fn typescript_format(root: &Path) -> Command {
    let mut cmd = Command::new("npm");
    cmd.args(["run", "--silent", "check-format"])
        .current_dir(root.join(TYPESCRIPT))
        .stdin(Stdio::null());
    cmd
}

/// The Python client's tests.
pub fn python_tests(root: &Path) -> Command {
    let mut cmd = with_bin(Command::new(python()), root, PYTHON);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
    cmd
}

/// The provider SDK check's tests: request bodies shaped as strata builds them pass, and
/// bodies with a planted defect in a message, content block, tool or input item are refused.
pub fn sdk_check_tests(root: &Path) -> Command {
    let mut cmd = Command::new(python());
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .current_dir(root.join(SDK_CHECK))
        .stdin(Stdio::null());
    cmd
}

/// The TypeScript client's build and tests (`npm test` compiles with `tsc` first).
pub fn typescript_tests(root: &Path) -> Command {
    let mut cmd = with_bin(Command::new("npm"), root, TYPESCRIPT);
    cmd.args(["test", "--silent"]);
    cmd
}

/// Fails with what to run when the TypeScript client's dev dependencies are not installed.
pub fn check_node_modules(root: &Path) -> Result<(), crate::Error> {
    if root
        .join(TYPESCRIPT)
        .join("node_modules/.bin/tsc")
        .is_file()
    {
        Ok(())
    } else {
        Err(format!(
            "{TYPESCRIPT}/node_modules is missing: run `npm ci` in {TYPESCRIPT} (`.ci/run` does), \
             or pass --skip-clients"
        )
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::describe;

    /// Verifies ADR-0028: the client suites run in their packages against the binary just built.
    #[test]
    fn commands_run_in_the_client_directories_with_the_built_binary() {
        let root = crate::workspace_root();
        let py = python_tests(&root);
        assert_eq!(py.get_current_dir(), Some(root.join(PYTHON).as_path()));
        assert!(describe(&py).contains("-m pytest -q"));
        let bin = py
            .get_envs()
            .find(|(k, _)| *k == "STRATA_BIN")
            .and_then(|(_, v)| v)
            .map(PathBuf::from);
        assert_eq!(bin, Some(strata_bin(&root)));
        assert!(bin.is_some_and(|b| b.ends_with("debug/strata")));

        let sdk = sdk_check_tests(&root);
        assert_eq!(sdk.get_current_dir(), Some(root.join(SDK_CHECK).as_path()));
        assert!(describe(&sdk).contains("-m pytest -q"));
        assert!(root
            .join(SDK_CHECK)
            .join("test_check_requests.py")
            .is_file());

        let ts = typescript_tests(&root);
        assert_eq!(ts.get_current_dir(), Some(root.join(TYPESCRIPT).as_path()));
        assert!(describe(&ts).ends_with("npm test --silent"));
    }
}
