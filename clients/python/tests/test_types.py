"""The typed views of a prepared turn: the assembly report's ``TypedDict`` s hold to what the
server sends (every kind of section included), and ``request_for`` gives the request typed as
the provider SDK's parameters, and works where the SDKs are not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from strata_client import AssemblyReport, PreparedTurn, SectionReport, StrataClient

import scenario
from shape import problems

WORDS = " ".join(f"word{i}" for i in range(3000))
SECTIONS: list[dict[str, Any]] = [
    # Two sections contesting one key: the higher layer wins, the other is overridden.
    {"layer": "shared", "id": "winner", "content": "Deploys freeze on Fridays.", "key": "freeze"},
    {"layer": "delegated", "id": "loser", "content": "Deploys never freeze.", "key": "freeze"},
    # More than the budget holds: one is cut to fit, the other dropped.
    {"layer": "delegated", "id": "long-brief", "content": WORDS, "priority": 1},
    {"layer": "long_term_memory", "id": "long-memory", "content": WORDS},
    # Not taking part in this prompt mode.
    {"layer": "shared", "id": "minimal-only", "content": "Be brief.", "modes": ["minimal"]},
]


def test_the_report_is_what_its_types_say(client: StrataClient, session_id: str) -> None:
    first = client.prepare_turn(
        session_id, scenario.QUESTION, tools=[scenario.FILE_READ], sections=SECTIONS
    )
    client.record_reply(session_id, tool_calls=[scenario.CALL])
    client.record_tool_result(session_id, scenario.CALL["id"], scenario.RESULT)
    second = client.prepare_turn(
        session_id, tools=[scenario.FILE_READ], context_window=8192, sections=SECTIONS
    )
    for turn in (first, second):
        assert problems(turn.report, AssemblyReport) == []

    report = second.report
    by_id: dict[str, SectionReport] = {s["id"]: s for s in report["sections"]}
    assert {s["status"] for s in report["sections"]} == {
        "kept",
        "cut",
        "dropped",
        "filtered",
        "overridden",
    }
    loser = by_id["loser"]
    assert loser["status"] == "overridden"
    assert (loser["by_id"], loser["by_layer"], loser["on"]) == ("winner", "shared", "freeze")
    assert report["conflicts"] == [
        {"on": "freeze", "winner": ["shared", "winner"], "loser": ["delegated", "loser"]}
    ]
    cut = by_id["long-brief"]
    assert cut["status"] == "cut"
    assert 0 < cut["head_bytes"] < cut["bytes"]
    assert by_id["long-memory"]["status"] == "dropped"
    assert by_id["minimal-only"]["status"] == "filtered"
    roles = [s.get("role") for s in report["sections"] if s["layer"] == "working_memory"]
    assert roles == ["user", "tool_call", "tool_result"]
    assert "request" in report and report["request"]["provider"] == "anthropic"
    assert report["tools"]["effective"] == ["file_read"]


def test_the_report_types_refuse_what_the_server_does_not_send() -> None:
    section = {
        "id": "s",
        "layer": "shared",
        "tokens": 1,
        "chars": 1,
        "bytes": 1,
        "sticky": False,
        "stable": True,
        "status": "dropped",
        "provenance": {"source": {"kind": "static"}, "name": "n", "content_hash": "h"},
    }
    assert problems(section, SectionReport) != [], "a dropped section has a reason"
    assert problems({**section, "reason": "budget"}, SectionReport) == []
    assert problems({**section, "reason": "budget", "extra": 1}, SectionReport) != []
    assert problems({**section, "reason": "budget", "layer": "attic"}, SectionReport) != []


def _turn(provider: str) -> PreparedTurn:
    return PreparedTurn.from_json(
        {
            "session_id": "s1",
            "provider": provider,
            "request": {"model": "m", "messages": []},
            "report": {},
            "identity_digest": "blake3:00",
        }
    )


def test_request_for_the_provider_the_server_wrote_for() -> None:
    assert _turn("anthropic").request_for("anthropic")["model"] == "m"
    assert _turn("openai-chat").request_for("openai-chat")["model"] == "m"
    assert _turn("openai-responses").request_for("openai-responses")["model"] == "m"
    with pytest.raises(ValueError, match="prepared for 'openai-chat', not 'anthropic'"):
        _turn("openai-chat").request_for("anthropic")


def test_the_client_runs_without_the_provider_sdks() -> None:
    # The SDK types are for type checkers only: block their import and use the client.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["anthropic"] = None
        sys.modules["openai"] = None
        from strata_client import PreparedTurn, StrataClient
        turn = PreparedTurn.from_json({"session_id": "s", "provider": "anthropic",
            "request": {"model": "m"}, "report": {}, "identity_digest": "d"})
        print(turn.request_for("anthropic")["model"])
        StrataClient(token="t").close()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "m\n", "")
