//! Running child processes and reporting on them.

use std::process::Command;
use std::time::Duration;

use crate::Error;

/// The command line as a person would type it, with the environment it sets.
pub fn describe(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        .collect();
    parts.push(cmd.get_program().to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Runs a command with the terminal as its input and output; fails unless it exits with 0.
pub fn run(cmd: &mut Command) -> Result<(), Error> {
    let status = cmd
        .status()
        .map_err(|e| format!("could not start `{}`: {e}", describe(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", describe(cmd)).into())
    }
}

/// Whether a command runs and exits with 0, with its output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .stdin(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Free space on the file system holding `dir`, as `df` reports it (`12.3 GiB free`), or
/// `None` where `df` is missing or answers something else. CI machines have run out of disk in
/// the fuzz step; the step lines say how close each step came.
pub fn disk_free(dir: &std::path::Path) -> Option<String> {
    let out = Command::new("df")
        .args(["-Pk"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    free_from_df(&text)
}

/// The available column of `df -Pk` output for one file system, in GiB.
fn free_from_df(text: &str) -> Option<String> {
    let line = text.lines().nth(1)?;
    let kib: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(format!("{:.1} GiB free", kib as f64 / (1024.0 * 1024.0)))
}

/// `4.2s` below a minute, `3m 07s` above.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = d.as_secs();
        format!("{}m {:02}s", whole / 60, whole % 60)
    }
}

/// The toolchain that builds fuzz targets, which need unstable compiler flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toolchain {
    /// An installed nightly toolchain: `cargo +nightly`.
    Nightly,
    /// The default stable toolchain with `RUSTC_BOOTSTRAP=1`.
    StableBootstrap,
}

impl Toolchain {
    /// Nightly if rustup lists one, otherwise stable with `RUSTC_BOOTSTRAP=1`.
    pub fn detect() -> Toolchain {
        let listed = Command::new("rustup")
            .args(["toolchain", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("nightly"))
            .unwrap_or(false);
        if listed {
            Toolchain::Nightly
        } else {
            Toolchain::StableBootstrap
        }
    }

    /// A `cargo` command on this toolchain.
    pub fn cargo(self) -> Command {
        let mut cmd = Command::new("cargo");
        match self {
            Toolchain::Nightly => {
                cmd.arg("+nightly");
            }
            Toolchain::StableBootstrap => {
                cmd.env("RUSTC_BOOTSTRAP", "1");
            }
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_millis(4_240)), "4.2s");
        assert_eq!(human(Duration::from_secs(187)), "3m 07s");
    }

    #[test]
    fn describes_commands_with_their_environment() {
        let mut cmd = Command::new("cargo");
        cmd.args(["test", "--workspace"])
            .env("PROPTEST_CASES", "10000");
        assert_eq!(
            describe(&cmd),
            "PROPTEST_CASES=10000 cargo test --workspace"
        );
    }

    #[test]
    fn reads_the_available_column_of_df() {
        let out = "Filesystem 1024-blocks Used Available Capacity Mounted on\n\
                   /dev/vda 263174212 81565520 13421772 86% /\n";
        assert_eq!(free_from_df(out).as_deref(), Some("12.8 GiB free"));
        assert_eq!(free_from_df("Filesystem\n"), None);
        assert_eq!(free_from_df("h\n/dev/vda 1 2 lots 86% /\n"), None);
    }
}
