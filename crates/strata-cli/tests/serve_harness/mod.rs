//! Runs the real `strata serve` binary for tests: a temporary directory, a token file, the
//! bundled demo agent (or one signed in the test), `--listen 127.0.0.1:0`, and the address read
//! from the one line the server prints when it is ready. Requests go through `ureq`, a real
//! HTTP client.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// The token every harness server accepts.
pub const TOKEN: &str = "harness-token-0123456789abcdef";

/// The workspace root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("workspace root")
}

/// The bundled demo agent and its trust store.
pub fn demo_agent() -> (PathBuf, PathBuf) {
    let demo = root().join("crates/strata-cli/demo");
    (demo.join("agent.signed.json"), demo.join("trust.toml"))
}

/// Run `strata` with `args` to completion; panics on failure.
pub fn strata(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("run strata");
    assert!(
        out.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh key, a trust store trusting it, and `agent.toml` + `SOUL.md` copied from the demo
/// with `version` and the extra top-level lines; signed into `agent.signed.json`.
pub fn sign_agent(dir: &Path, version: u64, extra_top: &str) -> (PathBuf, PathBuf) {
    let demo = root().join("crates/strata-cli/demo");
    if !dir.join("release.key").exists() {
        let entry = strata(
            dir,
            &[
                "keygen",
                "--out",
                "release.key",
                "--trust-entry",
                "test-release",
            ],
        );
        std::fs::write(dir.join("trust.toml"), format!("threshold = 1\n\n{entry}")).unwrap();
        std::fs::copy(demo.join("SOUL.md"), dir.join("SOUL.md")).unwrap();
    }
    let toml = std::fs::read_to_string(demo.join("agent.toml")).unwrap();
    // Whatever version the demo definition has, this one is `version`.
    let toml: String = toml
        .lines()
        .map(|l| {
            if l.starts_with("version = ") {
                format!("version = {version}\n{extra_top}")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert!(toml.contains(&format!("version = {version}")));
    std::fs::write(dir.join("agent.toml"), toml).unwrap();
    strata(
        dir,
        &[
            "sign",
            "agent.toml",
            "--key",
            "release.key",
            "--out",
            "agent.signed.json",
        ],
    );
    (dir.join("agent.signed.json"), dir.join("trust.toml"))
}

/// A running `strata serve`.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The server's log file.
    pub log: PathBuf,
    agent: ureq::Agent,
}

/// A response: status, headers of interest, JSON body (or the text as a JSON string).
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Body parsed as JSON (a string when it is not JSON).
    pub body: Value,
    /// `Retry-After`.
    pub retry_after: Option<String>,
    /// `WWW-Authenticate`.
    pub www_authenticate: Option<String>,
    /// `Idempotent-Replayed: true` was sent: the answer is a repeat's.
    pub replayed: bool,
    /// The body as sent.
    pub text: String,
}

impl Resp {
    /// The error code of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// An HTTP client that returns every status as a response.
pub fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

impl Server {
    /// Start a server on the demo agent with a SQLite store in `dir`.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        let (agent, trust) = demo_agent();
        Server::start_with(dir, &agent, &trust, extra)
    }

    /// Start a server on `agent` / `trust`.
    pub fn start_with(dir: &Path, agent: &Path, trust: &Path, extra: &[&str]) -> Server {
        Server::try_start(dir, agent, trust, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start a server; on failure, the server's log.
    pub fn try_start(
        dir: &Path,
        agent: &Path,
        trust: &Path,
        extra: &[&str],
    ) -> Result<Server, String> {
        let token_file = dir.join("tokens");
        if !token_file.exists() {
            std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        }
        let log = dir.join(format!(
            "serve-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
        cmd.arg("serve")
            .arg("--agent")
            .arg(agent)
            .arg("--trust")
            .arg(trust)
            .arg("--token-file")
            .arg(&token_file)
            .args(["--listen", "127.0.0.1:0"]);
        if !extra.contains(&"--model") {
            cmd.args(["--model", "test-model"]);
        }
        if !extra.contains(&"--watch-secs") {
            cmd.args(["--watch-secs", "0"]);
        }
        if !extra.contains(&"--postgres") {
            cmd.arg("--store").arg(dir.join("memory.db"));
        }
        cmd.args(extra)
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .env_remove("STRATA_POSTGRES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = cmd.spawn().expect("spawn strata serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        let Some(url) = line.trim().strip_prefix("listening ") else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "strata serve did not start (stdout {line:?}); log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        };
        Ok(Server {
            url: url.to_owned(),
            child: Some(child),
            log,
            agent: client(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// A request with the harness token (or `token`).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
    ) -> Resp {
        self.call_with(method, path, body, token, &[])
    }

    /// A request with the token and an `Idempotency-Key`.
    pub fn keyed(&self, method: &str, path: &str, body: Option<&Value>, key: &str) -> Resp {
        self.call_with(method, path, body, Some(TOKEN), &[("Idempotency-Key", key)])
    }

    /// A request with the harness token (or `token`) and more headers.
    pub fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let url = format!("{}{path}", self.url);
        let auth = token.map(|t| format!("Bearer {t}"));
        let resp = match (method, body) {
            ("GET", _) | ("DELETE", None) => {
                let mut r = if method == "GET" {
                    self.agent.get(&url)
                } else {
                    self.agent.delete(&url)
                };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                r.call()
            }
            (_, b) => {
                let mut r = self.agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                for (k, v) in headers {
                    r = r.header(*k, *v);
                }
                match b {
                    Some(v) => r
                        .header("Content-Type", "application/json")
                        .send(v.to_string()),
                    None => r.send_empty(),
                }
            }
        };
        let mut resp = resp
            .unwrap_or_else(|e| panic!("{method} {path}: {e}; server log:\n{}", self.log_text()));
        let status = resp.status().as_u16();
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header("retry-after");
        let www_authenticate = header("www-authenticate");
        let replayed = header("idempotent-replayed").as_deref() == Some("true");
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
        Resp {
            status,
            body,
            retry_after,
            www_authenticate,
            replayed,
            text,
        }
    }

    /// GET with the token.
    pub fn get(&self, path: &str) -> Resp {
        self.call("GET", path, None, Some(TOKEN))
    }

    /// POST JSON with the token.
    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.call("POST", path, Some(body), Some(TOKEN))
    }

    /// DELETE with the token.
    pub fn delete(&self, path: &str) -> Resp {
        self.call("DELETE", path, None, Some(TOKEN))
    }

    /// Send a signal (`kill -s NAME`).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// SIGKILL and reap.
    pub fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for the exit.
    pub fn stop(mut self) -> ExitStatus {
        self.signal("TERM");
        let mut c = self.child.take().expect("running");
        c.wait().expect("wait")
    }

    /// Wait for the exit after a signal was sent.
    pub fn stop_after_signal(mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        c.wait().expect("wait")
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
