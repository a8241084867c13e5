"""`strata serve --unix PATH` and the client's ``uds=`` option, sync and async."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strata_client import AsyncStrataClient, StrataClient

from strata_server import TOKEN, Server


def test_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "strata.sock"
    server = Server.start(tmp_path / "serve", unix=path)
    try:
        assert server.url == f"unix:{path}"
        with StrataClient(uds=path, token=TOKEN) as client:
            assert client.healthz().status == "ok"
            turn = client.prepare_turn("over-a-socket", "hello")
            assert turn.request["messages"][-1]["role"] == "user"

        async def run() -> list[str]:
            async with AsyncStrataClient(uds=path, token=TOKEN) as aclient:
                history = await aclient.session("over-a-socket")
                return [t.content for t in history.turns]

        assert asyncio.run(run()) == ["hello"]
    finally:
        status = server.stop()
    assert status == 0, server.stderr()
