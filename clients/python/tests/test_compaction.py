"""Conversation compaction through both clients against a real `strata serve`: a turn names the
entries it left out, a summary of a range stands in for it on the next turn, a refused summary
stores nothing, and a keyed one is retry-safe."""

from __future__ import annotations

import asyncio

import pytest

from strata_client import (
    AsyncStrataClient,
    IdempotencyKeyReusedError,
    InvalidRequestError,
    StrataClient,
)

from strata_server import TOKEN, Server


def _conversation(client: StrataClient, session_id: str) -> list[int]:
    """Four exchanges; the ``seq`` of their eight entries (the store numbers the entries of
    every session in one sequence)."""
    for i in range(1, 5):
        client.prepare_turn(session_id, f"Question number {i}?")
        client.record_reply(session_id, f"Answer number {i}: " + "details " * 300)
    return [t.seq for t in client.session(session_id).turns]


def test_a_summary_stands_in_for_its_range(client: StrataClient, session_id: str) -> None:
    seqs = _conversation(client, session_id)
    tight = client.prepare_turn(session_id, "Question number 5?", context_window=3000)
    assert tight.dropped_turns and set(tight.dropped_turns) <= set(seqs)

    first, last = seqs[0], seqs[3]
    stored = client.compact_session(
        session_id,
        first,
        last,
        "Fridays are frozen.",
        model="claude-haiku-4-5",
        idempotency_key="c-1",
    )
    assert (stored.first_seq, stored.last_seq, stored.entries) == (first, last, 4)
    assert stored.model == "claude-haiku-4-5"
    again = client.compact_session(
        session_id,
        first,
        last,
        "Fridays are frozen.",
        model="claude-haiku-4-5",
        idempotency_key="c-1",
    )
    assert again == stored
    with pytest.raises(IdempotencyKeyReusedError):
        client.compact_session(session_id, seqs[4], seqs[5], "Other.", idempotency_key="c-1")
    with pytest.raises(InvalidRequestError, match="overlaps"):
        client.compact_session(session_id, seqs[2], seqs[5], "Overlapping.")
    assert client.compactions(session_id) == [stored]

    turn = client.prepare_turn(session_id)
    body = str(turn.request)
    assert "Fridays are frozen." in body
    assert "Question number 1?" not in body and "Question number 3?" in body
    assert len(client.session(session_id).turns) == 9


def test_the_async_client_compacts_too(server: Server, session_id: str) -> None:
    with StrataClient(server.url, token=TOKEN) as sync_client:
        seqs = _conversation(sync_client, session_id)
        sync_client.prepare_turn(session_id, "Question number 5?")

    async def run() -> None:
        async with AsyncStrataClient(server.url, token=TOKEN) as client:
            stored = await client.compact_session(session_id, seqs[0], seqs[1], "They met.")
            assert stored.entries == 2
            assert await client.compactions(session_id) == [stored]

    asyncio.run(run())
