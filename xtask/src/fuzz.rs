//! `cargo xtask fuzz`: runs every fuzz target of `fuzz/` for a few seconds.
//!
//! The fuzz crate is its own workspace (it needs unstable compiler flags). Its targets are the
//! `[[bin]]` entries of `fuzz/Cargo.toml`. Each run starts from the committed seeds in
//! `fuzz/seeds/<target>/`, copied into the working corpus `fuzz/corpus/<target>/` (ignored by
//! git), and stops after `-max_total_time` seconds. A crash fails the task and names the
//! reproducer that libFuzzer saved under `fuzz/artifacts/<target>/`.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::process::{self, human, Toolchain};
use crate::Error;

/// Options of `cargo xtask fuzz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzOptions {
    /// Print the targets and stop.
    pub list: bool,
    /// Seconds per target.
    pub seconds: u64,
    /// Targets to run; all when empty.
    pub targets: Vec<String>,
}

/// Each `[[bin]]` table's `name` with its `required-features` (a one-line array), in order.
pub fn parse_bins(manifest: &str) -> Vec<(String, Vec<String>)> {
    let mut bins: Vec<(String, Vec<String>)> = Vec::new();
    let (mut in_bin, mut name, mut features) = (false, None::<String>, Vec::new());
    let mut finish = |name: &mut Option<String>, features: &mut Vec<String>| {
        if let Some(n) = name.take() {
            if !n.is_empty() && !bins.iter().any(|(b, _)| *b == n) {
                bins.push((n, std::mem::take(features)));
            }
        }
        features.clear();
    };
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            finish(&mut name, &mut features);
            in_bin = line == "[[bin]]";
            continue;
        }
        if !in_bin {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            match key.trim() {
                "name" => name = Some(value.trim().trim_matches('"').to_string()),
                "required-features" => {
                    features = value
                        .trim()
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .split(',')
                        .map(|f| f.trim().trim_matches('"').to_string())
                        .filter(|f| !f.is_empty())
                        .collect();
                }
                _ => {}
            }
        }
    }
    finish(&mut name, &mut features);
    bins
}

/// What one libFuzzer run reported.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RunStats {
    /// Inputs executed (`stat::number_of_executed_units`, or the `#N DONE` line).
    pub executions: Option<u64>,
    /// Executions per second (`stat::average_exec_per_sec`).
    pub per_second: Option<u64>,
    /// The file libFuzzer wrote the failing input to, if it said so.
    pub artifact: Option<String>,
}

impl RunStats {
    /// Reads one line of libFuzzer's output.
    pub fn add_line(&mut self, line: &str) {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("stat::number_of_executed_units:") {
            if let Ok(n) = v.trim().parse() {
                self.executions = Some(n);
            }
        } else if let Some(v) = line.strip_prefix("stat::average_exec_per_sec:") {
            self.per_second = v.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix('#') {
            let mut words = rest.split_whitespace();
            if let (Some(n), Some("DONE")) = (words.next(), words.next()) {
                if self.executions.is_none() {
                    self.executions = n.parse().ok();
                }
            }
        } else if let Some(pos) = line.find("Test unit written to ") {
            let path = line[pos + "Test unit written to ".len()..].trim();
            self.artifact = Some(path.to_string());
        }
    }
}

/// Installs cargo-fuzz if `cargo fuzz` is not available.
fn ensure_cargo_fuzz() -> Result<(), Error> {
    if process::succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        return Ok(());
    }
    println!("fuzz: cargo-fuzz is missing; installing it with `cargo install cargo-fuzz --locked`");
    process::run(
        Command::new("cargo")
            .args(["install", "cargo-fuzz", "--locked"])
            .stdin(Stdio::null()),
    )
}

/// Copies the committed seeds of a target into its working corpus (existing files are kept).
fn seed_corpus(seeds: &Path, corpus: &Path) -> Result<usize, Error> {
    fs::create_dir_all(corpus)?;
    let mut copied = 0;
    if !seeds.is_dir() {
        return Ok(0);
    }
    let mut stack = vec![seeds.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(seeds).unwrap_or(&path);
            let dest = corpus.join(rel);
            if dest.exists() {
                continue;
            }
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::copy(&path, &dest)?;
            copied += 1;
        }
    }
    Ok(copied)
}

/// The newest file in the target's artifact folder, as a fallback for finding a reproducer.
fn newest_artifact(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |d| d.filter_map(|e| e.ok()).count())
}

/// Runs one target; returns its statistics and whether it passed, printing the output tail
/// on failure.
fn run_target(
    root: &Path,
    toolchain: Toolchain,
    target: &str,
    features: &[String],
    seconds: u64,
) -> Result<(RunStats, bool), Error> {
    let fuzz_dir = root.join("fuzz");
    let corpus = fuzz_dir.join("corpus").join(target);
    seed_corpus(&fuzz_dir.join("seeds").join(target), &corpus)?;
    let mut cmd = toolchain.cargo();
    cmd.current_dir(root).args(["fuzz", "run", target]);
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    cmd.arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start `{}`: {e}", process::describe(&cmd)))?;
    let mut stats = RunStats::default();
    let mut tail: VecDeque<String> = VecDeque::new();
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines() {
            let line = line?;
            stats.add_line(&line);
            if tail.len() == 60 {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    let status = child.wait()?;
    if status.success() {
        return Ok((stats, true));
    }
    eprintln!("---- last lines of the `{target}` run ----");
    for line in &tail {
        eprintln!("{line}");
    }
    eprintln!("---- end of `{target}` output ----");
    let artifact = stats
        .artifact
        .clone()
        .map(PathBuf::from)
        .or_else(|| newest_artifact(&fuzz_dir.join("artifacts").join(target)));
    match artifact {
        Some(path) => {
            let shown = path
                .strip_prefix(root)
                .map(Path::to_path_buf)
                .unwrap_or(path);
            eprintln!(
                "fuzz: {target} failed ({status}); reproducer: {}\n      reproduce with: {} fuzz run {target} {}",
                shown.display(),
                match toolchain {
                    Toolchain::Nightly => "cargo +nightly",
                    Toolchain::StableBootstrap => "RUSTC_BOOTSTRAP=1 cargo",
                },
                shown.display()
            );
        }
        None => eprintln!("fuzz: {target} failed ({status}) without saving a reproducer"),
    }
    Ok((stats, false))
}

/// Runs the task.
pub fn run(root: &Path, opts: &FuzzOptions) -> Result<(), Error> {
    let manifest = root.join("fuzz/Cargo.toml");
    let bins = match fs::read_to_string(&manifest) {
        Ok(text) => parse_bins(&text),
        Err(_) => Vec::new(),
    };
    let all: Vec<String> = bins.iter().map(|(name, _)| name.clone()).collect();
    if opts.list {
        for t in &all {
            println!("{t}");
        }
        return Ok(());
    }
    if let Some(unknown) = opts.targets.iter().find(|t| !all.contains(t)) {
        return Err(format!(
            "no fuzz target `{unknown}` in fuzz/Cargo.toml; the targets are: {}",
            if all.is_empty() {
                "(none)".to_string()
            } else {
                all.join(", ")
            }
        )
        .into());
    }
    let targets: Vec<String> = if opts.targets.is_empty() {
        all
    } else {
        opts.targets.clone()
    };
    if targets.is_empty() {
        println!("fuzz: no targets in fuzz/Cargo.toml; nothing to run");
        return Ok(());
    }
    // The features the chosen targets require, used for the build and every run alike so that
    // no run rebuilds: a target that needs none is built lean when it runs alone.
    let mut features: Vec<String> = Vec::new();
    for (name, required) in &bins {
        if targets.contains(name) {
            for f in required {
                if !features.contains(f) {
                    features.push(f.clone());
                }
            }
        }
    }
    ensure_cargo_fuzz()?;
    let toolchain = Toolchain::detect();
    // Build every target once, so that the runs below do not rebuild.
    let mut build = toolchain.cargo();
    build
        .current_dir(root)
        .args(["fuzz", "build"])
        .stdin(Stdio::null());
    if !features.is_empty() {
        build.arg("--features").arg(features.join(","));
    }
    if opts.targets.len() == 1 {
        build.arg(&opts.targets[0]);
    }
    println!("fuzz: building with `{}`", process::describe(&build));
    let t = Instant::now();
    process::run(&mut build)?;
    println!("fuzz: built in {}", human(t.elapsed()));

    let mut failed = Vec::new();
    for target in &targets {
        let t = Instant::now();
        let (stats, ok) = run_target(root, toolchain, target, &features, opts.seconds)?;
        let corpus = count_files(&root.join("fuzz/corpus").join(target));
        println!(
            "fuzz: {target:<28} {:>5}  {:>12} executions  {:>8} exec/s  corpus {corpus}  ({})",
            if ok { "ok" } else { "CRASH" },
            stats
                .executions
                .map_or_else(|| "?".to_string(), |n| n.to_string()),
            stats
                .per_second
                .map_or_else(|| "?".to_string(), |n| n.to_string()),
            human(t.elapsed())
        );
        if !ok {
            failed.push(target.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("fuzz targets failed: {}", failed.join(", ")).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bin_targets_of_the_fuzz_manifest() {
        let manifest = r#"
[package]
name = "strata-fuzz"

[dependencies]
libfuzzer-sys = "0.4"

[[bin]]
name = "render_parse"   # I3
path = "fuzz_targets/render_parse.rs"
test = false

[[bin]]
path = "fuzz_targets/agentdef.rs"
name = "agentdef"

[workspace]
"#;
        let names = |m: &str| {
            parse_bins(m)
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(manifest), vec!["render_parse", "agentdef"]);
        let with_features = "[[bin]]\nname = \"diff\"\nrequired-features = [\"exact\", \"x\"]\n\n[[bin]]\nname = \"lean\"\n";
        assert_eq!(
            parse_bins(with_features),
            vec![
                (
                    "diff".to_string(),
                    vec!["exact".to_string(), "x".to_string()]
                ),
                ("lean".to_string(), Vec::new()),
            ]
        );
        assert!(names("[package]\nname = \"x\"\n").is_empty());
    }

    #[test]
    fn reads_libfuzzer_statistics() {
        let mut s = RunStats::default();
        for line in [
            "#2      INITED cov: 10 ft: 10 corp: 1/1b exec/s: 0 rss: 30Mb",
            "#524288 pulse  cov: 55 ft: 80 corp: 9/40b lim: 4096 exec/s: 174762 rss: 40Mb",
            "#1750000 DONE   cov: 60 ft: 90 corp: 10/44b lim: 4096 exec/s: 175000 rss: 40Mb",
            "Done 1750000 runs in 11 second(s)",
            "stat::number_of_executed_units: 1750123",
            "stat::average_exec_per_sec:     159102",
        ] {
            s.add_line(line);
        }
        assert_eq!(s.executions, Some(1_750_123));
        assert_eq!(s.per_second, Some(159_102));

        let mut crash = RunStats::default();
        crash.add_line("#1000 DONE cov: 1");
        crash.add_line("artifact_prefix='/w/fuzz/artifacts/parse/'; Test unit written to /w/fuzz/artifacts/parse/crash-da39a3ee");
        assert_eq!(crash.executions, Some(1000));
        assert_eq!(
            crash.artifact.as_deref(),
            Some("/w/fuzz/artifacts/parse/crash-da39a3ee")
        );
    }

    #[test]
    fn seeds_are_copied_without_overwriting() {
        let dir = std::env::temp_dir().join(format!("xtask-seed-test-{}", std::process::id()));
        let seeds = dir.join("seeds");
        let corpus = dir.join("corpus");
        fs::create_dir_all(seeds.join("nested")).unwrap();
        fs::write(seeds.join("a"), b"seed a").unwrap();
        fs::write(seeds.join("nested/b"), b"seed b").unwrap();
        fs::create_dir_all(&corpus).unwrap();
        fs::write(corpus.join("a"), b"found by the fuzzer").unwrap();
        assert_eq!(seed_corpus(&seeds, &corpus).unwrap(), 1);
        assert_eq!(fs::read(corpus.join("a")).unwrap(), b"found by the fuzzer");
        assert_eq!(fs::read(corpus.join("nested/b")).unwrap(), b"seed b");
        fs::remove_dir_all(&dir).unwrap();
    }
}
