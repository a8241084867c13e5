//! `strata verify` processes racing on one rollback state file, and trust-store pinning.
//! Verifies ADR-0017.
//!
//! Short runs by default; `STRATA_LONG_RUNS=1` multiplies the rounds.
#![allow(
    clippy::unwrap_used,
    reason = "integration tests fail loudly on unexpected errors"
)]

use std::path::Path;
use std::process::{Command, Stdio};

use strata_agentdef::{sign_definition, KeyPair, RollbackGuard, TrustStore};

const SOUL: &str = "You are Ada.\n";

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Trust store, `SOUL.md` and `v<n>.json` for versions 1..=n in `dir`.
fn setup(dir: &Path, versions: u64) {
    let key = KeyPair::from_seed(&[0x42; 32]);
    std::fs::write(
        dir.join("trust.toml"),
        TrustStore::toml_for(&[("k", &key.public())]),
    )
    .unwrap();
    std::fs::write(dir.join("SOUL.md"), SOUL).unwrap();
    for v in 1..=versions {
        let def = format!(
            "id = \"ada\"\nname = \"Ada\"\nversion = {v}\nnot_before = \"2020-01-01T00:00:00Z\"\n\
             not_after = \"2099-01-01T00:00:00Z\"\n\n[budget]\ntotal_tokens = 8192\n\n[core]\n\
             identity = {{ file = \"SOUL.md\", sha256 = \"{}\" }}\n\n[characteristics]\n\
             style = \"Plain.\"\n",
            sha256_hex(SOUL.as_bytes())
        );
        let env = sign_definition(&def, Some(dir), &[&key]).unwrap();
        std::fs::write(dir.join(format!("v{v}.json")), env.to_json()).unwrap();
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Verifies ADR-0017: parallel `strata verify --rollback-state` processes on one state file,
/// in waves. Every process must end with `OK` or `REFUSED rolled_back`; a rollback refusal
/// must be justified by a higher version that was accepted; no version may be accepted below
/// one accepted in an earlier wave; and after each wave the file records the highest version
/// accepted so far (no lost update).
#[test]
fn parallel_verify_processes_never_accept_a_rollback_or_fail_spuriously() {
    let long = std::env::var_os("STRATA_LONG_RUNS").is_some();
    let (rounds, waves, procs, versions) = if long { (500, 3, 8, 6) } else { (50, 2, 6, 4) };
    // `STRATA_LONG_RUNS=<rounds>` sets the rounds of a long run.
    let rounds = std::env::var("STRATA_LONG_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rounds);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    setup(dir, versions);
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let (mut accepted_rollbacks, mut spurious, mut runs) = (0u64, 0u64, 0u64);
    for round in 0..rounds {
        let state = dir.join(format!("state-{round}.json"));
        drop(RollbackGuard::init(&state).unwrap());
        let mut max_before = 0u64;
        for wave in 0..waves {
            let offered: Vec<u64> = (0..procs).map(|_| 1 + rng.below(versions)).collect();
            let children: Vec<_> = offered
                .iter()
                .map(|v| {
                    Command::new(env!("CARGO_BIN_EXE_strata"))
                        .args(["verify", &format!("v{v}.json"), "--trust", "trust.toml"])
                        .arg("--rollback-state")
                        .arg(&state)
                        .current_dir(dir)
                        .env_remove("RUST_LOG")
                        .env_remove("STRATA_TRUST_SHA256")
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let results: Vec<(u64, i32, String)> = offered
                .iter()
                .zip(children)
                .map(|(v, c)| {
                    let out = c.wait_with_output().unwrap();
                    let text = String::from_utf8_lossy(&out.stdout).into_owned()
                        + &String::from_utf8_lossy(&out.stderr);
                    (*v, out.status.code().unwrap_or(-1), text)
                })
                .collect();
            runs += results.len() as u64;
            let max_now = results
                .iter()
                .filter(|r| r.1 == 0)
                .map(|r| r.0)
                .max()
                .unwrap_or(0)
                .max(max_before);
            for (v, code, text) in &results {
                match code {
                    0 if *v < max_before => {
                        eprintln!("round {round} wave {wave}: v{v} accepted after v{max_before}");
                        accepted_rollbacks += 1;
                    }
                    0 => {}
                    3 if text.contains("REFUSED rolled_back: ") && *v < max_now => {}
                    _ => {
                        eprintln!("round {round} wave {wave}: v{v} exit {code}: {text}");
                        spurious += 1;
                    }
                }
            }
            let recorded = RollbackGuard::open(&state)
                .unwrap()
                .seen("ada")
                .unwrap()
                .map_or(0, |s| s.version);
            assert_eq!(
                recorded, max_now,
                "round {round} wave {wave}: v{max_now} was accepted but the state records v{recorded}"
            );
            max_before = max_now;
        }
    }
    eprintln!(
        "{rounds} rounds, {runs} verify processes: {accepted_rollbacks} rollbacks accepted, {spurious} spurious refusals"
    );
    assert_eq!(accepted_rollbacks, 0);
    assert_eq!(spurious, 0);
}

fn verify(dir: &Path, extra: &[&str], pin_env: Option<&str>) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.args(["verify", "v1.json", "--trust", "trust.toml"])
        .args(extra)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("STRATA_TRUST_SHA256");
    if let Some(p) = pin_env {
        c.env("STRATA_TRUST_SHA256", p);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Verifies ADR-0017: the verdict line carries the SHA-256 of the trust store's exact bytes
/// (checked against an independent hash of the file), and a pin refuses any other store.
#[test]
fn the_trust_store_digest_is_printed_and_can_be_pinned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    setup(dir, 1);
    let expected = format!(
        "sha256:{}",
        sha256_hex(&std::fs::read(dir.join("trust.toml")).unwrap())
    );
    let (code, out, err) = verify(dir, &[], None);
    assert_eq!(code, 0, "{err}");
    let printed = out
        .split_whitespace()
        .find_map(|f| f.strip_prefix("trust="))
        .unwrap();
    assert_eq!(printed, expected);

    let (code, _, err) = verify(dir, &["--trust-sha256", &expected], None);
    assert_eq!(code, 0, "{err}");
    let upper = expected.to_ascii_uppercase();
    assert_eq!(verify(dir, &[], Some(&upper)).0, 0);

    // One more byte in the store (even a comment) breaks the pin.
    let mut text = std::fs::read_to_string(dir.join("trust.toml")).unwrap();
    text.push_str("# reviewed\n");
    std::fs::write(dir.join("trust.toml"), text).unwrap();
    for (code, out, err) in [
        verify(dir, &["--trust-sha256", &expected], None),
        verify(dir, &[], Some(&expected)),
    ] {
        assert_eq!(code, 1, "{out}{err}");
        assert!(err.contains("is pinned"), "{err}");
        assert!(out.is_empty());
    }
    let (code, _, err) = verify(dir, &["--trust-sha256", "sha256:1234"], None);
    assert_eq!(code, 1);
    assert!(err.contains("not `sha256:<64 hex digits>`"), "{err}");
}

/// Verifies ADR-0017: `--time-travel-dangerously` is the only way to check another instant, and
/// it warns; the old `--at` of `verify` is gone.
#[test]
fn time_travel_is_loud() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    setup(dir, 1);
    let (code, _, err) = verify(
        dir,
        &["--time-travel-dangerously", "2030-01-01T00:00:00Z"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("time-travel-dangerously"), "{err}");
    assert!(err.contains("WARN"), "{err}");
    // The library's own warning is shown too, at the default log level.
    assert!(
        err.contains("loading an agent definition: time travel"),
        "{err}"
    );
    let (code, _, err) = verify(dir, &[], None);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("WARN"), "{err}");
    let (code, _, err) = verify(dir, &["--at", "2030-01-01T00:00:00Z"], None);
    assert_eq!(code, 2, "{err}");
}
