"""A multi-turn, tool-using conversation and what each prepared request must contain; the sync
and async tests drive the same conversation and run the same checks."""

from __future__ import annotations

import json
from typing import Any

from strata_client import AnnouncedTool, PreparedTurn, SessionHistory, ToolCall

from anthropic_check import blocks, text_of, validate_messages_request
from strata_server import MODEL

QUESTION = "What does notes.txt say about deploys?"
# The demo agent pins file_read's argument schema in its signed definition; the announcement
# carries the same schema.
FILE_READ: AnnouncedTool = {
    "name": "file_read",
    "description": "Read a file in the workspace.",
    "parameters": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace."}
        },
        "required": ["path"],
    },
}
CALL: ToolCall = {"id": "toolu_01", "name": "file_read", "arguments": {"path": "notes.txt"}}
RESULT = "Deploys freeze on Fridays at noon."
ANSWER = "The notes say deploys freeze on Fridays at noon."
FOLLOW_UP = "Thanks. Is Thursday afternoon fine?"


def _common(turn: PreparedTurn, session_id: str, identity_digest: str) -> list[dict[str, Any]]:
    assert turn.session_id == session_id
    assert turn.provider == "anthropic"
    assert turn.identity_digest == identity_digest
    assert turn.report, "a prepared turn reports what was kept and dropped"
    request = turn.request
    validate_messages_request(request)
    assert request["model"] == MODEL
    assert request["max_tokens"] == 1024
    messages: list[dict[str, Any]] = request["messages"]
    assert messages[0]["role"] == "user"
    return messages


def check_first(turn: PreparedTurn, session_id: str, identity_digest: str) -> None:
    """The question is the last user message and file_read is offered natively."""
    messages = _common(turn, session_id, identity_digest)
    assert messages[-1]["role"] == "user"
    assert QUESTION in text_of(messages[-1]["content"])
    assert [t["name"] for t in turn.request["tools"]] == ["file_read"]
    assert turn.request["tools"][0]["input_schema"] == FILE_READ["parameters"]


def _tool_exchange(messages: list[dict[str, Any]]) -> int:
    """Index of the assistant message holding the tool_use block of CALL; checks that the next
    message carries its tool_result block with RESULT."""
    uses = [
        (i, b)
        for i, m in enumerate(messages)
        if m["role"] == "assistant"
        for b in blocks(m, "tool_use")
    ]
    assert len(uses) == 1, f"one native tool_use block, got {uses}"
    i, use = uses[0]
    assert use["id"] == CALL["id"]
    assert use["name"] == CALL["name"]
    assert use["input"] == CALL["arguments"]
    after = messages[i + 1]
    assert after["role"] == "user"
    results = blocks(after, "tool_result")
    assert len(results) == 1, f"the tool_result right after the tool_use, got {after}"
    assert results[0]["tool_use_id"] == CALL["id"]
    assert RESULT in text_of(results[0]["content"])
    return i


def check_continued(turn: PreparedTurn, session_id: str, identity_digest: str) -> None:
    """After the tool result: question, tool_use, tool_result, and the result is the last turn."""
    messages = _common(turn, session_id, identity_digest)
    i = _tool_exchange(messages)
    assert i + 2 == len(messages), "the tool result is the newest message"
    assert any(QUESTION in text_of(m["content"]) for m in messages[:i] if m["role"] == "user")


def check_follow_up(turn: PreparedTurn, session_id: str, identity_digest: str) -> None:
    """The whole exchange is history, the final answer an assistant turn, the follow-up last."""
    messages = _common(turn, session_id, identity_digest)
    i = _tool_exchange(messages)
    answers = [m for m in messages[i + 2 :] if m["role"] == "assistant"]
    assert [text_of(m["content"]) for m in answers] == [ANSWER]
    assert messages[-1]["role"] == "user"
    assert FOLLOW_UP in text_of(messages[-1]["content"])


def check_history(history: SessionHistory, session_id: str) -> None:
    """The session holds exactly what was recorded, in order."""
    assert history.session_id == session_id
    turns = history.turns
    assert [t.role for t in turns] == ["user", "tool_call", "tool_result", "assistant", "user"]
    seqs = [t.seq for t in turns]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert turns[0].content == QUESTION
    assert json.loads(turns[1].content) == {"name": CALL["name"], "arguments": CALL["arguments"]}
    assert turns[1].call_id == CALL["id"]
    assert turns[2].content == RESULT
    assert turns[2].call_id == CALL["id"]
    assert turns[3].content == ANSWER
    assert turns[4].content == FOLLOW_UP
    assert turns[0].call_id is None and turns[3].call_id is None
