"""``run_tool_call`` against a live MCP server: the glossary server of
``crates/strata-mcp/tests/servers`` (written with the official Python SDK, run by
``$STRATA_MCP_PYTHON``), pinned with ``strata mcp pin``, signed, and served with ``--mcp``.
Skipped without that interpreter, unless ``STRATA_REQUIRE_MCP=1`` (set by ``.ci/run``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from strata_client import StrataClient

from strata_server import DEMO, REPO, TOKEN, Server, strata_bin

GLOSSARY = REPO / "crates" / "strata-mcp" / "tests" / "servers" / "glossary.py"


def mcp_python() -> str:
    python = os.environ.get("STRATA_MCP_PYTHON", "")
    if not python:
        if os.environ.get("STRATA_REQUIRE_MCP") == "1":
            pytest.fail("STRATA_REQUIRE_MCP=1 but $STRATA_MCP_PYTHON is not set (.ci/run sets it)")
        pytest.skip("$STRATA_MCP_PYTHON is not set (see .ci/run)")
    return python


def signed_with_pins(workdir: Path, python: str) -> tuple[Path, Path]:
    """The demo definition with the glossary's `shout` tool pinned, signed with a fresh key."""
    workdir.mkdir(parents=True, exist_ok=True)

    def strata(*args: str) -> str:
        done = subprocess.run(
            [str(strata_bin()), *args], cwd=workdir, check=True, capture_output=True, text=True
        )
        return done.stdout

    entry = strata("keygen", "--out", "k.key", "--trust-entry", "k")
    (workdir / "trust.toml").write_text(f"threshold = 1\n\n{entry}")
    for name in ("agent.toml", "SOUL.md"):
        shutil.copy(DEMO / name, workdir / name)
    strata(
        "mcp", "pin", "--server", "glossary", "--out", "agent.toml", "--only", "shout",
        "--", python, str(GLOSSARY),
    )  # fmt: skip
    strata("sign", "agent.toml", "--key", "k.key", "--out", "agent.signed.json")
    return workdir / "agent.signed.json", workdir / "trust.toml"


def test_a_recorded_call_runs_once_through_its_server(tmp_path: Path) -> None:
    python = mcp_python()
    agent, trust = signed_with_pins(tmp_path / "agent", python)
    srv = Server.start(
        tmp_path / "serve", "--mcp", f"glossary={python} {GLOSSARY}", agent=agent, trust=trust
    )
    try:
        with StrataClient(srv.url, token=TOKEN) as client:
            turn = client.prepare_turn("py-mcp", "Shout hello.")
            assert "shout" in [t["name"] for t in turn.request["tools"]]
            client.record_reply(
                "py-mcp",
                "",
                tool_calls=[{"id": "call-1", "name": "shout", "arguments": {"text": "hello"}}],
            )
            first = client.run_tool_call("py-mcp", "call-1", idempotency_key="run-1")
            again = client.run_tool_call("py-mcp", "call-1", idempotency_key="run-1")
            assert first == again
            assert (first.tool, first.output, first.is_error) == ("shout", "HELLO", False)
            results = [t for t in client.session("py-mcp").turns if t.role == "tool_result"]
            assert [r.content for r in results] == ["HELLO"]
    finally:
        srv.stop()
