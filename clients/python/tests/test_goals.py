"""A session's goals and files through both clients against a real `strata serve`: a model's
marker only proposes a lock, the client's answer confirms or refuses it, every change is
retry-safe under its idempotency key, and a refused change leaves the goals as they were."""

from __future__ import annotations

import asyncio

import pytest

from strata_client import (
    AsyncStrataClient,
    IdempotencyKeyReusedError,
    InvalidRequestError,
    NotFoundError,
    StrataClient,
)

from strata_server import TOKEN, Server


def test_a_proposed_lock_waits_for_the_client(client: StrataClient, session_id: str) -> None:
    assert client.goals(session_id)["goals"] == []
    client.prepare_turn(session_id, "Plan the login work.")
    client.record_reply(session_id, "[GOAL] Ship login\n[DECISION] Tokens: use JWT - LOCKED")
    goals = client.goals(session_id)
    decision = goals["goals"][0]["decisions"][0]
    assert (decision["locked"], decision["lock_proposed"]) == (False, True)
    assert goals["pending_locks"] == [
        {"goal": "goal-1", "decision": 1, "description": "Tokens: use JWT"}
    ]
    before = client.goals(session_id)
    with pytest.raises(NotFoundError):
        client.answer_lock(session_id, 7, True)
    assert client.goals(session_id) == before
    goal = client.answer_lock(session_id, 1, True)
    assert goal["decisions"][0]["locked"] is True
    assert client.goals(session_id)["pending_locks"] == []


def test_every_change_is_retry_safe(client: StrataClient, session_id: str) -> None:
    goal = client.create_goal(session_id, "Ship v2", priority="high", idempotency_key="g1")
    assert goal["priority"] == "high"
    assert client.create_goal(session_id, "Ship v2", priority="high", idempotency_key="g1") == goal
    with pytest.raises(IdempotencyKeyReusedError):
        client.create_goal(session_id, "Ship v3", idempotency_key="g1")
    assert len(client.goals(session_id)["goals"]) == 1

    client.add_checkpoint(session_id, "Write tests", status="in_progress", idempotency_key="c1")
    client.add_checkpoint(session_id, "Write tests", status="in_progress", idempotency_key="c1")
    client.record_decision(
        session_id, "Database: PostgreSQL", rationale="shared", idempotency_key="d1"
    )
    client.record_artifact(session_id, "tests/v2.rs", "created", kind="test", idempotency_key="a1")
    assert client.record_file(session_id, "src/v2.rs", "modified", idempotency_key="f1")
    assert client.record_file(session_id, "src/v2.rs", "modified", idempotency_key="f1")
    with pytest.raises(IdempotencyKeyReusedError):
        client.record_file(session_id, "src/other.rs", "read", idempotency_key="f1")
    goal = client.goals(session_id)["goals"][0]
    assert [c["description"] for c in goal["checkpoints"]] == ["Write tests"]
    assert goal["decisions"][0]["rationale"] == "shared"
    assert goal["artifacts"] == [{"kind": "test", "path": "tests/v2.rs", "action": "created"}]

    before = client.goals(session_id)
    with pytest.raises(InvalidRequestError) as err:
        client.record_artifact(session_id, "a.rs", "created", kind="movie")  # type: ignore[arg-type]
    assert "kind `movie`" in err.value.message
    with pytest.raises(NotFoundError):
        client.add_checkpoint(session_id, "x", goal="goal-9")
    assert client.goals(session_id) == before


def test_async_goals(server: Server, session_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)

    async def run() -> None:
        async with AsyncStrataClient(server.url, token=TOKEN) as client:
            await client.create_goal(session_id, "Ship async")
            await client.add_checkpoint(session_id, "Await everything")
            await client.record_decision(session_id, "Runtime: asyncio", rationale="stdlib")
            goal = await client.record_artifact(
                session_id, "docs/async.md", "created", kind="documentation"
            )
            assert goal["artifacts"][0]["kind"] == "documentation"
            assert await client.record_file(session_id, "src/a.py", "read")
            goals = await client.goals(session_id)
            assert goals["goals"][0]["total"] == 1
            with pytest.raises(InvalidRequestError):
                await client.answer_lock(session_id, 1, True)

    asyncio.run(run())
