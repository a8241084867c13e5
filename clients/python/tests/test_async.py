"""The asyncio client drives the same conversation, with turns of several sessions in flight
at once, and refusals arrive as the same typed errors."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strata_client import AsyncStrataClient, UnauthorizedError, UnknownSessionError

import scenario
from strata_server import TOKEN, Server


async def _conversation(client: AsyncStrataClient, session_id: str, digest: str) -> None:
    tools = [scenario.FILE_READ]
    first = await client.prepare_turn(session_id, scenario.QUESTION, tools=tools)
    scenario.check_first(first, session_id, digest)
    await client.record_reply(session_id, tool_calls=[scenario.CALL])
    assert await client.record_tool_result(session_id, scenario.CALL["id"], scenario.RESULT)
    second = await client.prepare_turn(session_id, tools=tools)
    scenario.check_continued(second, session_id, digest)
    await client.record_reply(session_id, scenario.ANSWER)
    third = await client.prepare_turn(session_id, scenario.FOLLOW_UP, tools=tools)
    scenario.check_follow_up(third, session_id, digest)
    scenario.check_history(await client.session(session_id), session_id)


def test_concurrent_conversations(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)

    async def run() -> None:
        async with AsyncStrataClient(server.url, token=TOKEN) as client:
            assert (await client.healthz()).status == "ok"
            digest = (await client.agent()).identity_digest
            ids = [f"async-{uuid.uuid4().hex[:10]}" for _ in range(4)]
            await asyncio.gather(*(_conversation(client, sid, digest) for sid in ids))

            memory = f"The {uuid.uuid4().hex[:8]} pager rotates every Monday."
            memory_id = await client.add_memory(memory, tags=["oncall"])
            hits = await client.search_memories(memory, limit=1)
            assert [(h.id, h.content, h.tags) for h in hits] == [(memory_id, memory, ("oncall",))]

            assert await client.delete_session(ids[0]) == 5
            with pytest.raises(UnknownSessionError):
                await client.session(ids[0])
            assert await client.reset_session(ids[1]) == 5
            assert "# TYPE " in await client.metrics()
            assert (await client.openapi())["openapi"].startswith("3.1")

    asyncio.run(run())


def test_async_refusals(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)

    async def run() -> None:
        async with AsyncStrataClient(server.url, token="wrong") as wrong:
            with pytest.raises(UnauthorizedError) as err:
                await wrong.agent()
            assert (err.value.status, err.value.code) == (401, "unauthorized")
        async with AsyncStrataClient(server.url, token=TOKEN) as client:
            with pytest.raises(UnknownSessionError) as missing:
                await client.prepare_turn(f"never-{uuid.uuid4().hex}")
            assert (missing.value.status, missing.value.code) == (404, "unknown_session")

    asyncio.run(run())
