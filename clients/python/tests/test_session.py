"""The blocking client against a real `strata serve`: a tool-using conversation, memory,
session reset and delete, the agent, health and metrics."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid

import pytest

from strata_client import InvalidRequestError, Skill, StrataClient, UnknownSessionError

import scenario
from strata_server import DEMO, MODEL, Server, demo_definition


def test_tool_using_conversation(client: StrataClient, session_id: str) -> None:
    digest = client.agent().identity_digest

    first = client.prepare_turn(session_id, scenario.QUESTION, tools=[scenario.FILE_READ])
    scenario.check_first(first, session_id, digest)
    client.record_reply(session_id, tool_calls=[scenario.CALL])
    assert client.record_tool_result(session_id, scenario.CALL["id"], scenario.RESULT) is True

    second = client.prepare_turn(session_id, tools=[scenario.FILE_READ])
    scenario.check_continued(second, session_id, digest)
    client.record_reply(session_id, scenario.ANSWER)

    third = client.prepare_turn(session_id, scenario.FOLLOW_UP, tools=[scenario.FILE_READ])
    scenario.check_follow_up(third, session_id, digest)

    scenario.check_history(client.session(session_id), session_id)


def test_a_failed_tool_output_is_flagged_and_keeps_its_tail(
    client: StrataClient, session_id: str
) -> None:
    client.prepare_turn(session_id, "Why did the build fail?", tools=[scenario.FILE_READ])
    client.record_reply(session_id, tool_calls=[scenario.CALL])
    # About 60 KB (under the 64 KiB entry limit) and more tokens than the turn's budget.
    log = "".join(f"step {n:04}: compiled module {n:04} without warnings\n" for n in range(1300))
    log += "FATAL the last step failed\n"
    assert client.record_tool_result(
        session_id, scenario.CALL["id"], log, is_error=True, keep="tail"
    )
    turn = client.prepare_turn(session_id, tools=[scenario.FILE_READ])
    results = [
        block
        for message in turn.request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert len(results) == 1
    assert results[0]["is_error"] is True
    text = results[0]["content"]
    assert "FATAL the last step failed" in text
    # Cut to fit from its head: the marker comes before the newest lines.
    assert text.index("<strata:elided") < text.index("FATAL")
    assert "step 0000:" not in text
    assert "Why did the build fail?" in json.dumps(turn.request)


def test_session_ids_are_one_path_segment(client: StrataClient) -> None:
    odd = f"team:a.b_c-{uuid.uuid4().hex[:8]}"
    turn = client.prepare_turn(odd, "hello")
    assert turn.session_id == odd
    history = client.session(odd)
    assert history.session_id == odd
    assert [t.content for t in history.turns] == ["hello"]
    # A slash or a query stays inside the segment: the server refuses the id, not the route.
    # (Asked with a GET: the server answers a refused POST without reading its body and then
    # drops the kept-alive connection, which the next request on it may find closed.)
    for bad in ["team/a", "a?x=1", "a#b", "a b"]:
        with pytest.raises(InvalidRequestError):
            client.session(bad)


def test_memory_add_search_and_use(client: StrataClient, session_id: str) -> None:
    word = f"zebrafish{uuid.uuid4().hex[:8]}"
    content = f"Release trains named {word} leave on Tuesdays at nine."
    memory_id = client.add_memory(content, tags=["ops", "release"])
    assert memory_id

    hits = client.search_memories(f"when does the {word} release train leave", limit=3)
    assert 1 <= len(hits) <= 3
    assert hits[0].id == memory_id
    assert hits[0].content == content
    assert sorted(hits[0].tags) == ["ops", "release"]
    assert isinstance(hits[0].score, float)

    # Long-term memory is searched with the user's message and reaches the prompt.
    turn = client.prepare_turn(session_id, f"When does the {word} release train leave?")
    assert content in json.dumps(turn.request, ensure_ascii=False)


def test_reset_and_delete(client: StrataClient, session_id: str) -> None:
    client.prepare_turn(session_id, "first question")
    client.record_reply(session_id, "first answer")
    assert client.reset_session(session_id) == 2
    with pytest.raises(UnknownSessionError):
        client.session(session_id)

    client.prepare_turn(session_id, "second question")
    assert [t.content for t in client.session(session_id).turns] == ["second question"]
    assert client.delete_session(session_id) == 1
    with pytest.raises(UnknownSessionError):
        client.session(session_id)


def test_agent_health_and_metrics(client: StrataClient, server: Server) -> None:
    assert client.healthz().status == "ok"
    assert client.readyz().status == "ready"

    agent = client.agent()
    definition = demo_definition()
    assert (agent.agent_id, agent.version) == (definition["id"], definition["version"])
    assert re.fullmatch(r"blake3:[0-9a-f]{64}", agent.identity_digest)
    # The signed payload and the trusted key, read from the demo files themselves.
    envelope = json.loads((DEMO / "agent.signed.json").read_text())
    payload = base64.b64decode(envelope["payload"])
    assert agent.payload_sha256.removeprefix("sha256:") == hashlib.sha256(payload).hexdigest()
    trusted = re.findall(r'^id = "([0-9a-f]{64})"', (DEMO / "trust.toml").read_text(), re.M)
    assert list(agent.signers) == trusted
    assert agent.provider == "anthropic"
    assert agent.model == MODEL
    assert agent.loaded_at_ms > 1_700_000_000_000

    client.prepare_turn(f"metrics-{uuid.uuid4().hex[:8]}", "count me")
    text = client.metrics()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples, "metrics has samples"
    sample = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? -?[0-9.eE+-]+|.* (NaN|[+-]Inf)")
    bad = [line for line in samples if not sample.fullmatch(line)]
    assert not bad, f"not Prometheus text-format samples: {bad[:5]}"
    assert "# TYPE " in text


def test_the_context_path_takes_its_resolved_context(client: StrataClient, session_id: str) -> None:
    resolved = [
        {
            "layer": "delegated",
            "id": "resolved/ticket-42",
            "content": "Ticket 42: the release moved to Thursday.",
        }
    ]
    turn = client.prepare_turn(
        session_id,
        "When is the release?",
        path="context",
        operational_mode="debugger",
        resolved_context=resolved,
    )
    assert "Ticket 42&#58; the release moved to Thursday." in json.dumps(turn.request)
    with pytest.raises(InvalidRequestError):
        client.prepare_turn(f"{session_id}-b", "When?", operational_mode="sleeping")


def test_reasoning_goes_back_first_and_unchanged(client: StrataClient, session_id: str) -> None:
    client.prepare_turn(session_id, "What does notes.txt say?", tools=[scenario.FILE_READ])
    thinking = {
        "type": "thinking",
        "thinking": "Read the file before answering.",
        "signature": "EqQBCkYIBxgCKkCbz3Ck",
    }
    client.record_reply(session_id, tool_calls=[scenario.CALL], reasoning=[thinking])
    assert client.record_tool_result(session_id, scenario.CALL["id"], "Deploys freeze on Fridays.")
    turn = client.prepare_turn(session_id)
    assistant = next(m for m in turn.request["messages"] if m["role"] == "assistant")
    assert assistant["content"][0] == thinking
    assert assistant["content"][1]["type"] == "tool_use"
    # Another provider's item is refused, and nothing is stored.
    held = client.session(session_id).turns
    with pytest.raises(InvalidRequestError):
        client.record_reply(
            session_id, "more", reasoning=[{"type": "reasoning", "id": "rs_1", "summary": []}]
        )
    assert client.session(session_id).turns == held


def test_turns_tell_what_they_changed(client: StrataClient, session_id: str) -> None:
    first = client.prepare_turn(session_id, "Hello.")
    assert [e["type"] for e in first.events] == [
        "prompt_updated",
        "skills_updated",
        "tools_updated",
    ]
    assert first.events[1]["skills"] == [] and first.events[2]["tools"] == []
    client.record_reply(session_id, "Hi.")
    second = client.prepare_turn(session_id, "Again.")
    assert second.events == []
    client.record_reply(session_id, "Hi again.")
    skill: Skill = {"id": "review", "instructions": "Review the change."}
    third = client.prepare_turn(
        session_id, "Review it.", tools=[scenario.FILE_READ], skills=[skill]
    )
    told = {e["type"]: e for e in third.events}
    assert told["skills_updated"]["skills"] == ["review"]
    assert told["tools_updated"]["tools"] == ["file_read"]
