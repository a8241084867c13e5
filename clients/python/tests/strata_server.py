"""Starting a real `strata serve` for the tests: the binary, a temporary SQLite store, a token
file with known tokens, the demo agent, and the `listening ...` line read from its stdout."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import tomllib

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "crates" / "strata-cli" / "demo"
OPENAPI = REPO / "docs" / "openapi.json"

TOKEN = "client-tests-token-0123456789abcdef"
"""Accepted: written to the token file in plain text."""

HASHED_TOKEN = "client-tests-hashed-token-fedcba9876543210"
"""Accepted: the token file holds only its SHA-256 (`sha256:<hex>`)."""

MODEL = "claude-sonnet-5-5"


def demo_definition() -> dict[str, Any]:
    """The demo agent's definition, read from its signed envelope's payload (TOML)."""
    envelope = json.loads((DEMO / "agent.signed.json").read_text())
    return tomllib.loads(base64.b64decode(envelope["payload"]).decode())


DEMO_ID: str = demo_definition()["id"]
START_TIMEOUT = 120.0


def strata_bin() -> Path:
    """`$STRATA_BIN`, else the debug binary `cargo build -p strata-cli` leaves in the target dir."""
    given = os.environ.get("STRATA_BIN")
    if given:
        return Path(given)
    cargo = shutil.which("cargo")
    if cargo is None:
        raise RuntimeError("set STRATA_BIN to a strata binary, or put cargo on PATH to build one")
    subprocess.run([cargo, "build", "--quiet", "-p", "strata-cli"], cwd=REPO, check=True)
    meta = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--no-deps"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return Path(json.loads(meta.stdout)["target_directory"]) / "debug" / "strata"


def write_token_file(path: Path) -> None:
    digest = hashlib.sha256(HASHED_TOKEN.encode()).hexdigest()
    path.write_text(f"# tokens of the client tests\n\n{TOKEN}\nsha256:{digest}\n")
    path.chmod(0o600)


@dataclass
class Server:
    """A running `strata serve`; ``url`` is what it printed after `listening `."""

    process: subprocess.Popen[str]
    url: str
    workdir: Path
    stderr_path: Path
    _stderr: IO[str] = field(repr=False)

    @classmethod
    def start(
        cls,
        workdir: Path,
        *extra: str,
        unix: Path | None = None,
        token_file: bool = True,
        agent: Path = DEMO / "agent.signed.json",
        trust: Path = DEMO / "trust.toml",
    ) -> Server:
        """Starts the server in ``workdir`` on ``agent`` (the demo agent by default); without
        ``token_file`` it makes its own token file, ``.strata/serve.token`` in ``workdir``."""
        workdir.mkdir(parents=True, exist_ok=True)
        tokens: list[str] = []
        if token_file:
            write_token_file(workdir / "tokens")
            tokens = ["--token-file", str(workdir / "tokens")]
        where = ["--unix", str(unix)] if unix is not None else ["--listen", "127.0.0.1:0"]
        args = [
            str(strata_bin()),
            "serve",
            "--agent",
            str(agent),
            "--trust",
            str(trust),
            "--store",
            str(workdir / "memory.db"),
            *where,
            *tokens,
            "--model",
            MODEL,
            "--max-tokens",
            "1024",
            *extra,
        ]
        stderr_path = workdir / "stderr.log"
        stderr = stderr_path.open("w")
        process = subprocess.Popen(
            args,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put("")

        threading.Thread(target=read, daemon=True).start()
        try:
            first = lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            first = ""
        if not first.startswith("listening "):
            process.kill()
            process.wait()
            stderr.close()
            raise RuntimeError(
                f"`{' '.join(args)}` did not print `listening ...` (got {first!r}); "
                f"its stderr:\n{stderr_path.read_text()}"
            )
        return cls(process, first.removeprefix("listening ").strip(), workdir, stderr_path, stderr)

    def stop(self) -> int:
        """SIGTERM, then the exit status (0 when it drained and exited cleanly)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()
        return self.process.returncode

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text()
