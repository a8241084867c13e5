"""Without `--token-file` the server makes `.strata/serve.token` with a random token; the
client's ``token_file`` reads that file as the server wrote it."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_client import StrataClient, UnauthorizedError

from strata_server import DEMO_ID, Server


def test_the_generated_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)
    server = Server.start(tmp_path, token_file=False)
    try:
        token_file = tmp_path / ".strata" / "serve.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        with StrataClient(server.url, token_file=token_file) as client:
            assert client.agent().agent_id == DEMO_ID
        with StrataClient(server.url) as anonymous, pytest.raises(UnauthorizedError):
            anonymous.agent()
    finally:
        status = server.stop()
    assert status == 0, server.stderr()
