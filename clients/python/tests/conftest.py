"""Fixtures: one real `strata serve` for the whole run (Anthropic requests, demo agent, SQLite
store in a temporary directory), and clients of it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata_client import StrataClient

from strata_server import TOKEN, Server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server.start(tmp_path_factory.mktemp("serve"))
    yield srv
    status = srv.stop()
    assert status == 0, f"strata serve exited with {status} on SIGTERM; stderr:\n{srv.stderr()}"


@pytest.fixture
def client(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[StrataClient]:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)
    with StrataClient(server.url, token=TOKEN) as c:
        yield c


@pytest.fixture
def session_id() -> str:
    """A session id no other test uses."""
    return f"py-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
