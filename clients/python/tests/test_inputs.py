"""Per-turn inputs (skills, thinking, sender and channel, voice, language, model, time zone)
reach the prepared request through both clients against a real `strata serve`, and a bad value
is refused with the server's words and stores nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from strata_client import (
    AsyncStrataClient,
    InvalidRequestError,
    StrataClient,
    UnknownSessionError,
)

from strata_server import MODEL, TOKEN, Server


def _ids(report: object) -> list[str]:
    """Every section id named anywhere in a report."""
    found: list[str] = []
    stack = [report]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("id"), str):
                found.append(v["id"])
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found


def test_inputs_reach_the_turn(client: StrataClient, session_id: str) -> None:
    plain = client.prepare_turn(session_id, "Hello")
    # The server's model fills the model input: the runtime section names it.
    assert f"Model&#58; {MODEL}" in json.dumps(plain.request)

    turn = client.prepare_turn(
        f"{session_id}-b",
        "Review the release notes.",
        skills=[{"id": "review/notes", "instructions": "Check every date twice."}],
        thinking="medium",
        inbound={"sender": "maria-from-ops", "channel": "slack"},
        voice=True,
        language="Portuguese",
        model="other-model",
        time_zone="Asia/Kolkata +05:30",
    )
    text = json.dumps(turn.request)
    for want in ["Check every date twice.", "maria-from-ops", "Asia/Kolkata", "other-model"]:
        assert want in text, want
    assert turn.request["model"] == "other-model"
    ids = _ids(turn.report)
    for want in ["skill/review/notes", "thinking", "inbound", "voice"]:
        assert want in ids, (want, ids)


def test_a_bad_input_is_refused_and_stores_nothing(client: StrataClient, session_id: str) -> None:
    with pytest.raises(InvalidRequestError) as err:
        client.prepare_turn(session_id, "Hi", thinking="max")
    assert str(err.value.message).startswith("unknown thinking level `max`")
    with pytest.raises(InvalidRequestError) as err:
        client.prepare_turn(session_id, "Hi", time_zone="Mars")
    assert str(err.value.message).startswith("time zone `Mars` is not valid")
    with pytest.raises(UnknownSessionError):
        client.session(session_id)


def test_async_inputs(server: Server, session_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)

    async def run() -> None:
        async with AsyncStrataClient(server.url, token=TOKEN) as client:
            turn = await client.prepare_turn(
                session_id,
                "Hello",
                skills=[{"id": "tone", "instructions": "Keep it friendly."}],
                model="async-model",
            )
            assert "Keep it friendly." in json.dumps(turn.request)
            assert "skill/tone" in _ids(turn.report)
            assert turn.request["model"] == "async-model"
            with pytest.raises(InvalidRequestError):
                await client.prepare_turn(session_id, "Hi", thinking="max")

    asyncio.run(run())


def test_footprint_and_business_context_reach_the_turn(
    client: StrataClient, session_id: str
) -> None:
    turn = client.prepare_turn(
        session_id,
        "Did the build pass?",
        recent_footprint=["ran cargo build: ok", "ran cargo test: 1 failure"],
        business_context="Customer Acme, plan Enterprise.",
        sanity_checks=False,
    )
    text = json.dumps(turn.request)
    assert "ran cargo test" in text
    assert "plan Enterprise" in text
    ids = _ids(turn.report)
    assert "recent-footprint" in ids and "business-context" in ids, ids
    with pytest.raises(InvalidRequestError) as err:
        client.prepare_turn(f"{session_id}-bad", "Hi", recent_footprint=["two\nlines"])
    assert str(err.value.message).startswith("recent footprint entry 1:")
    with pytest.raises(UnknownSessionError):
        client.session(f"{session_id}-bad")


def test_async_footprint(server: Server, session_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)

    async def run() -> None:
        async with AsyncStrataClient(server.url, token=TOKEN) as client:
            turn = await client.prepare_turn(
                session_id, "Hello", recent_footprint=["edited notes.txt"]
            )
            assert "edited notes.txt" in json.dumps(turn.request)

    asyncio.run(run())
