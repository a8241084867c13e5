//! A throwaway PostgreSQL server for tests: `initdb` and `pg_ctl` from Debian's
//! `/usr/lib/postgresql/<version>/bin`, run as the `postgres` user (initdb refuses root) in a
//! temporary directory owned by that user, listening on 127.0.0.1 on a free port with its
//! socket in the temporary directory.
//!
//! [`shared`] starts one server per test binary; tests take a fresh schema each with
//! [`fresh_schema`]. A test that must stop and restart a server owns one with
//! [`PgServer::start`]; dropping it stops it (`pg_ctl -m fast stop`). The shared server lives
//! in a static, which is never dropped, so a small watchdog process stops it and removes its
//! directory when the test binary exits.
//!
//! Without the server binaries the tests fail, with a message saying what to install: a
//! missing database must never look like a passing test.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The database every harness server creates.
pub const DB: &str = "strata_test";

/// A running PostgreSQL server.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    port: u16,
    as_postgres: bool,
}

fn find_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL server binaries (initdb, pg_ctl) were not found in /usr/lib/postgresql/*/bin; \
             the PostgreSQL tests need them: install Debian's `postgresql` package \
             (apt-get update && apt-get install -y postgresql)"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free local port")
}

impl PgServer {
    /// Create a cluster in a new temporary directory and start it.
    pub fn start() -> PgServer {
        let bin = find_bin();
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("strata-pg-")
            .tempdir_in("/tmp")
            .expect("create a temporary directory");
        let root = dir.path().to_path_buf();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&root)
                .status()
                .expect("run chown")
                .success();
            assert!(ok, "could not give {} to the postgres user", root.display());
        }
        let mut server = PgServer {
            bin,
            dir: Some(dir),
            root,
            port: 0,
            as_postgres,
        };
        let out = server
            .command("initdb")
            .arg("-D")
            .arg(server.data())
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server.port = free_port();
        server.run_pg_ctl_start();
        let mut c = postgres::Client::connect(&server.params("postgres"), postgres::NoTls)
            .expect("connect to the new server");
        c.batch_execute(&format!("CREATE DATABASE {DB}"))
            .expect("create the test database");
        server
    }

    /// Start the cluster kept in `root` (created there the first time), for benchmarks that
    /// reuse a large store between runs. Dropping the value stops the server and keeps the
    /// directory.
    pub fn start_kept(root: &Path) -> PgServer {
        let bin = find_bin();
        let as_postgres = is_root();
        std::fs::create_dir_all(root).expect("create the kept cluster directory");
        let root = root
            .canonicalize()
            .expect("resolve the kept cluster directory");
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&root)
                .status()
                .expect("run chown")
                .success();
            assert!(ok, "could not give {} to the postgres user", root.display());
        }
        let server = PgServer {
            bin,
            dir: None,
            root,
            port: free_port(),
            as_postgres,
        };
        let fresh = !server.data().join("PG_VERSION").is_file();
        if fresh {
            let out = server
                .command("initdb")
                .arg("-D")
                .arg(server.data())
                .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
                .output()
                .expect("run initdb");
            assert!(
                out.status.success(),
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        server.run_pg_ctl_start();
        if fresh {
            let mut c = postgres::Client::connect(&server.params("postgres"), postgres::NoTls)
                .expect("connect to the new server");
            c.batch_execute(&format!("CREATE DATABASE {DB}"))
                .expect("create the test database");
        }
        server
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        cmd.current_dir("/tmp")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    fn run_pg_ctl_start(&self) {
        let opts = format!(
            "-k {} -c listen_addresses=127.0.0.1 -p {}",
            self.root.display(),
            self.port
        );
        // The server inherits pg_ctl's output unless it has a log file; with one, nothing
        // holds the test's pipes open.
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.root.join("server.log"))
            .args(["-w", "-t", "60", "-o", &opts, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run pg_ctl start");
        let log = std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default();
        assert!(out.success(), "pg_ctl start failed; server log:\n{log}");
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match postgres::Client::connect(&self.params("postgres"), postgres::NoTls) {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!("server not ready after 30 s: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Connection parameters for database `db`.
    pub fn params(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname={db} connect_timeout=5",
            self.port
        )
    }

    /// Connection parameters for the test database.
    pub fn test_params(&self) -> String {
        self.params(DB)
    }

    /// Stop the server (`pg_ctl -m fast stop`), keeping its data.
    pub fn stop(&self) {
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run pg_ctl stop");
        assert!(status.success(), "pg_ctl stop failed");
    }

    /// Start the stopped server again on the same port.
    pub fn restart(&self) {
        self.run_pg_ctl_start();
    }

    /// Stop the server and remove its directory when this process exits, even though the
    /// value itself is never dropped (it lives in a static).
    fn stop_at_exit(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = format!(
            "{}{} -D {} -m fast -w stop",
            if self.as_postgres {
                "runuser -u postgres -- "
            } else {
                ""
            },
            pg_ctl.display(),
            self.data().display()
        );
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {root}",
            pid = std::process::id(),
            root = self.root.display()
        );
        // The watchdog must outlive this process, so it is deliberately not waited for.
        #[allow(
            clippy::zombie_processes,
            reason = "the watchdog outlives the test process"
        )]
        Command::new("sh")
            .args(["-c", &script])
            .current_dir("/tmp")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the watchdog that stops the shared server");
    }

    /// The directory of the cluster.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        drop(self.dir.take());
    }
}

/// The server shared by every test of this binary, started on first use.
pub fn shared() -> &'static PgServer {
    static SERVER: OnceLock<PgServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let s = PgServer::start();
        s.stop_at_exit();
        s
    })
}

/// A schema name no other test of this process uses.
pub fn fresh_schema(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}
