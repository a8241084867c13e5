//! `cargo xtask bench-ab`: the benchmarks of another revision against the working tree, run
//! in turn on the same machine.
//!
//! One run of a criterion benchmark on a shared or virtual machine moves by several percent
//! between runs of the same binary (frequency, the other core's load, where the allocator
//! puts things), which is as much as most changes measured here. Running the two versions
//! alternately, one run of each per round, and comparing the medians of the rounds puts both
//! under the same drift. Both versions are built first (the other revision in a git worktree
//! under `target/bench-ab/`, with a target directory of its own there, kept for the next
//! comparison) and copied aside, so a later build cannot replace one mid-comparison. The base
//! must not share the working tree's target directory: cargo names a workspace crate's
//! artifacts without its path, so the two checkouts would build the same files, and each
//! would then take the other's as up to date.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::describe;
use crate::Error;

/// What `bench-ab` compares.
#[derive(Debug)]
pub struct AbOptions {
    /// The revision the working tree is compared with.
    pub base: String,
    /// The package that holds the bench target.
    pub package: String,
    /// The bench target.
    pub bench: String,
    /// Rounds: each runs the base, then the working tree.
    pub rounds: u64,
    /// Criterion's filter of benchmark ids, if any.
    pub filter: Option<String>,
}

/// The two sides of a comparison, in the order each round runs them.
const SIDES: [&str; 2] = ["base", "head"];

pub fn run(root: &Path, opts: &AbOptions) -> Result<(), Error> {
    if opts.rounds == 0 {
        return Err("`--rounds` must be at least 1".into());
    }
    let sha = git_output(
        root,
        &[
            "rev-parse",
            "--verify",
            &format!("{}^{{commit}}", opts.base),
        ],
    )
    .map_err(|e| format!("`{}` is not a revision here: {e}", opts.base))?;
    let target = root.join("target");
    let work = target.join("bench-ab");
    let tree = work.join(format!("base-{}", &sha[..12.min(sha.len())]));
    if !tree.join("Cargo.toml").is_file() {
        std::fs::create_dir_all(&work)?;
        let status = Command::new("git")
            .current_dir(root)
            .args(["worktree", "add", "--detach", "--force"])
            .arg(&tree)
            .arg(&sha)
            .status()?;
        if !status.success() {
            return Err(format!("could not check out {sha} in {}", tree.display()).into());
        }
    }
    let mut exes = Vec::new();
    let base_target = work.join("target");
    for ((side, dir), target) in SIDES
        .iter()
        .zip([tree.as_path(), root])
        .zip([base_target.as_path(), target.as_path()])
    {
        println!(
            "bench-ab: building `{}` ({side}) in {}",
            opts.bench,
            dir.display()
        );
        let built = build(dir, target, opts)?;
        let kept = work.join(format!("{side}-{}", opts.bench));
        std::fs::copy(&built, &kept)
            .map_err(|e| format!("could not copy {}: {e}", built.display()))?;
        exes.push(kept);
    }
    if std::fs::read(&exes[0])? == std::fs::read(&exes[1])? {
        eprintln!(
            "bench-ab: warning: the two builds are the same binary; nothing the bench runs \
             differs between {} and the working tree",
            opts.base
        );
    }
    // Benches that read shared workloads find them beside the repository they were built in;
    // the base's worktree has none beside it, so both are pointed at this repository's.
    let workloads = root.join("../shared/bench");
    let package_dir = root.join("crates").join(&opts.package);
    println!("bench-ab: {}", machine());
    println!("bench-ab: load average at the start: {}", load_average());
    let mut results: BTreeMap<String, [Vec<f64>; 2]> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for round in 1..=opts.rounds {
        for (i, (side, exe)) in SIDES.iter().zip(&exes).enumerate() {
            let mut cmd = Command::new(exe);
            cmd.current_dir(&package_dir).arg("--bench");
            if let Some(f) = &opts.filter {
                cmd.arg(f);
            }
            cmd.args([
                "--noplot",
                "--discard-baseline",
                "--output-format",
                "bencher",
            ]);
            if std::env::var_os("STRATA_BENCH_WORKLOADS").is_none() && workloads.is_dir() {
                cmd.env("STRATA_BENCH_WORKLOADS", &workloads);
            }
            println!(
                "bench-ab: round {round}/{}, {side}: {}",
                opts.rounds,
                describe(&cmd)
            );
            let out = cmd
                .output()
                .map_err(|e| format!("could not start `{}`: {e}", describe(&cmd)))?;
            if !out.status.success() {
                eprintln!("{}", String::from_utf8_lossy(&out.stderr));
                return Err(format!("`{}` failed ({})", describe(&cmd), out.status).into());
            }
            for (name, ns) in bencher_lines(&String::from_utf8_lossy(&out.stdout)) {
                if !results.contains_key(&name) {
                    order.push(name.clone());
                }
                results.entry(name).or_default()[i].push(ns);
            }
        }
    }
    println!("bench-ab: load average at the end: {}", load_average());
    if results.is_empty() {
        return Err("no benchmark ran; check the filter".into());
    }
    println!();
    println!(
        "base {} ({}), head: the working tree; medians of {} rounds",
        &sha[..12.min(sha.len())],
        opts.base,
        opts.rounds
    );
    println!();
    println!("| benchmark | base | head | change | base runs | head runs |");
    println!("|---|---:|---:|---:|---|---|");
    for name in &order {
        let [base, head] = &results[name];
        println!("{}", table_row(name, base, head));
    }
    Ok(())
}

/// Build the bench target in `dir` into the target directory `target`; the path of the binary.
fn build(dir: &Path, target: &Path, opts: &AbOptions) -> Result<PathBuf, Error> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(dir).env("CARGO_TARGET_DIR", target).args([
        "bench",
        "-p",
        &opts.package,
        "--bench",
        &opts.bench,
        "--no-run",
    ]);
    let out = cmd
        .output()
        .map_err(|e| format!("could not start `{}`: {e}", describe(&cmd)))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!("{stderr}");
        return Err(format!("`{}` failed ({})", describe(&cmd), out.status).into());
    }
    let exe = executable_of(&stderr, &opts.bench)
        .ok_or_else(|| format!("`{}` named no executable", describe(&cmd)))?;
    Ok(if exe.is_absolute() {
        exe
    } else {
        dir.join(exe)
    })
}

/// The executable cargo names for bench target `bench` in its output: the line
/// `Executable benches/<bench>.rs (<path>)`.
fn executable_of(cargo_stderr: &str, bench: &str) -> Option<PathBuf> {
    cargo_stderr.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("Executable ")?;
        let (source, path) = rest.split_once(" (")?;
        let stem = Path::new(source).file_stem()?;
        (stem == bench).then(|| PathBuf::from(path.strip_suffix(')').unwrap_or(path)))
    })
}

/// The benchmarks of criterion's `bencher` output: `test <id> ... bench: <n> ns/iter (+/- <m>)`,
/// with the time in nanoseconds (digits may be grouped with commas).
fn bencher_lines(stdout: &str) -> Vec<(String, f64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("test ")?;
            let (name, value) = rest.split_once(" ... bench:")?;
            let number: String = value
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
                .filter(|c| *c != ',')
                .collect();
            Some((name.trim().to_owned(), number.parse().ok()?))
        })
        .collect()
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// A time in nanoseconds in the unit that reads best: `812 ns`, `4.21 µs`, `1.30 ms`, `2.05 s`.
fn human_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if v >= 100.0 {
        format!("{v:.0} {unit}")
    } else if v >= 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// One row of the result table.
fn table_row(name: &str, base: &[f64], head: &[f64]) -> String {
    let runs = |v: &[f64]| {
        v.iter()
            .map(|x| human_ns(*x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (b, h) = (median(base), median(head));
    let cell = |m: Option<f64>| m.map_or_else(|| "-".to_owned(), human_ns);
    let change = match (b, h) {
        (Some(b), Some(h)) if b > 0.0 => format!("{:+.1}%", (h / b - 1.0) * 100.0),
        _ => "-".to_owned(),
    };
    format!(
        "| {name} | {} | {} | {change} | {} | {} |",
        cell(b),
        cell(h),
        runs(base),
        runs(head)
    )
}

/// The processor and how many of them, from `/proc/cpuinfo` where there is one.
fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|x| x.1.trim())
        })
        .unwrap_or("unknown processor");
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cpus} x {model}")
}

/// `/proc/loadavg`'s first three fields, where there is one.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn git_output(root: &Path, args: &[&str]) -> Result<String, Error> {
    let out = Command::new("git").current_dir(root).args(args).output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .trim()
            .to_owned()
            .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_criterion_bencher_output() {
        let out = "\
Gnuplot not found, using plotters backend
test workload_n30/cold ... bench:     2,269,187 ns/iter (+/- 12,345)
test large_tool_result_cold/head/1MiB ... bench:     1878201 ns/iter (+/- 9001)
test broken ... bench: n/a
not a result line
";
        assert_eq!(
            bencher_lines(out),
            vec![
                ("workload_n30/cold".to_owned(), 2_269_187.0),
                ("large_tool_result_cold/head/1MiB".to_owned(), 1_878_201.0),
            ]
        );
    }

    #[test]
    fn finds_the_bench_executable_in_cargo_output() {
        let err = "\
   Compiling strata-assembler v0.1.0 (/work/main/crates/strata-assembler)
    Finished `bench` profile [optimized + debuginfo] target(s) in 3m 20s
  Executable benches/assemble.rs (target/release/deps/assemble-3f265debd9c1e204)
  Executable benches/workloads.rs (/abs/target/release/deps/workloads-d91d50f632fefdfa)
";
        assert_eq!(
            executable_of(err, "workloads"),
            Some(PathBuf::from(
                "/abs/target/release/deps/workloads-d91d50f632fefdfa"
            ))
        );
        assert_eq!(
            executable_of(err, "assemble"),
            Some(PathBuf::from(
                "target/release/deps/assemble-3f265debd9c1e204"
            ))
        );
        assert_eq!(executable_of(err, "scaling"), None);
    }

    #[test]
    fn medians_and_rows() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(human_ns(812.0), "812 ns");
        assert_eq!(human_ns(4_210.0), "4.21 µs");
        assert_eq!(human_ns(1_296_000.0), "1.30 ms");
        assert_eq!(human_ns(2_050_000_000.0), "2.05 s");
        assert_eq!(
            table_row("g/b", &[2e6, 2.2e6, 1.8e6], &[1e6, 1.1e6, 0.9e6]),
            "| g/b | 2.00 ms | 1.00 ms | -50.0% | 2.00 ms, 2.20 ms, 1.80 ms | 1.00 ms, 1.10 ms, 900 µs |"
        );
        assert_eq!(
            table_row("g/c", &[], &[1.0]),
            "| g/c | - | 1.00 ns | - |  | 1.00 ns |"
        );
    }
}
