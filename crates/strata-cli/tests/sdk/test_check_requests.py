"""Tests of `check_requests.py`: bodies shaped as strata builds them pass, and bodies with one
planted defect each (a message, content block, tool, tool choice, system block or Responses input
item the provider's SDK types do not allow) are refused, by `problems` and by the script itself.

Run with the pinned SDKs and pytest: `python -m pytest crates/strata-cli/tests/sdk`.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import check_requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
# An OpenAI Chat body strata produced: system text, user turns, a tool call and its result.
RECEIPT_REQUEST = ROOT / "crates/strata-assembler/tests/fixtures/receipts/valid/request.json"

TOOL_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
SYSTEM = '<strata:section layer="1" id="core.identity">\nYou are Tester.\n</strata:section>\n\n'
RESULT = '<strata:section layer="5" id="turn.3" authority="data">\nmarker\n</strata:section>\n\n'


def chat_receipt() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(RECEIPT_REQUEST.read_text(encoding="utf-8"))
    return body


def chat_developer() -> dict[str, Any]:
    """OpenAI Chat with the developer role, assistant text, a schema'd tool and metadata."""
    return {
        "model": "gpt-test",
        "messages": [
            {"role": "developer", "content": SYSTEM},
            {"role": "user", "content": "What does notes.txt say?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "file_read", "arguments": '{"path":"notes.txt"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
            {"role": "assistant", "content": "They freeze on Fridays."},
            {"role": "user", "content": "Is Thursday fine?"},
        ],
        "max_completion_tokens": 512,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "file_read",
                    "description": "Read a file.",
                    "parameters": TOOL_SCHEMA,
                },
            }
        ],
        "metadata": {"user_id": "u-1"},
    }


def responses() -> dict[str, Any]:
    """OpenAI Responses: instructions, message, function call and output items, a tool."""
    return {
        "model": "gpt-test",
        "instructions": SYSTEM,
        "input": [
            {"type": "message", "role": "user", "content": "What does notes.txt say?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "file_read",
                "arguments": '{"path":"notes.txt"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": RESULT},
            {"type": "message", "role": "assistant", "content": "They freeze on Fridays."},
            {"type": "message", "role": "user", "content": "Is Thursday fine?"},
        ],
        "max_output_tokens": 512,
        "tools": [
            {
                "type": "function",
                "name": "file_read",
                "description": "Read a file.",
                "parameters": TOOL_SCHEMA,
                "strict": False,
            }
        ],
        "metadata": {"user_id": "u-1"},
    }


def anthropic_body() -> dict[str, Any]:
    """Anthropic: a cached system block, text, tool_use and tool_result blocks, a tool."""
    return {
        "model": "claude-test",
        "max_tokens": 512,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "the deploy needs the VPN\n\n"},
                    {"type": "text", "text": "What does notes.txt say?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "file_read",
                        "input": {"path": "notes.txt"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": RESULT},
                    {
                        "type": "text",
                        "text": "Is Thursday fine?",
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
        ],
        "tools": [
            {"name": "file_read", "description": "Read a file.", "input_schema": TOOL_SCHEMA}
        ],
        "metadata": {"user_id": "u-1"},
    }


VALID: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
    ("chat-receipt", "openai-chat", chat_receipt),
    ("chat-developer", "openai-chat", chat_developer),
    ("responses", "openai-responses", responses),
    ("anthropic", "anthropic", anthropic_body),
]


def planted(make: Callable[[], dict[str, Any]], change: Callable[[dict[str, Any]], Any]) -> Any:
    body = copy.deepcopy(make())
    change(body)
    return body


def tool_message(body: dict[str, Any]) -> None:
    body["messages"].insert(2, {"role": "tool", "tool_use_id": "call_1", "content": "x"})


def drop_function(body: dict[str, Any]) -> None:
    del body["messages"][2]["tool_calls"][0]["function"]


# (name, provider, body, what the report must name: the item's path and the complaint)
PLANTED: list[tuple[str, str, Any, tuple[str, str]]] = [
    (
        "anthropic-role-tool-message",
        "anthropic",
        planted(anthropic_body, tool_message),
        ("messages[2]", "item_tag_invalid"),
    ),
    (
        "anthropic-tool-as-string",
        "anthropic",
        planted(anthropic_body, lambda b: b.update(tools=["file_read"])),
        ("tools[0]", "item_tag_invalid"),
    ),
    (
        "chat-tool-as-string",
        "openai-chat",
        planted(chat_developer, lambda b: b.update(tools=["file_read"])),
        ("tools[0]", "item_tag_invalid"),
    ),
    (
        "responses-tool-as-string",
        "openai-responses",
        planted(responses, lambda b: b.update(tools=["file_read"])),
        ("tools[0]", "item_tag_invalid"),
    ),
    (
        "anthropic-unknown-key-in-message",
        "anthropic",
        planted(anthropic_body, lambda b: b["messages"][1].update(name="helper")),
        ("messages[1].assistant.name", "extra_forbidden"),
    ),
    (
        "chat-unknown-key-in-message",
        "openai-chat",
        planted(chat_developer, lambda b: b["messages"][3].update(tool_use_id="call_1")),
        ("messages[3].tool.tool_use_id", "extra_forbidden"),
    ),
    (
        "anthropic-unknown-key-in-content-block",
        "anthropic",
        planted(anthropic_body, lambda b: b["messages"][2]["content"][0].update(is_final=True)),
        ("messages[2].user.content[0].tool_result.is_final", "extra_forbidden"),
    ),
    (
        "chat-unknown-key-in-tool-call",
        "openai-chat",
        planted(chat_developer, lambda b: b["messages"][2]["tool_calls"][0].update(index=0)),
        ("messages[2].assistant.tool_calls[0].function.index", "extra_forbidden"),
    ),
    (
        "chat-tool-call-without-function",
        "openai-chat",
        planted(chat_developer, drop_function),
        ("messages[2].assistant.tool_calls[0].function.function", "missing"),
    ),
    (
        "responses-unknown-input-item-type",
        "openai-responses",
        planted(responses, lambda b: b["input"].insert(3, {"type": "tool_result", "id": "x"})),
        ("input[3]", "item_tag_invalid"),
    ),
    (
        "responses-function-call-without-call-id",
        "openai-responses",
        planted(responses, lambda b: b["input"][1].pop("call_id")),
        ("input[1].function_call.call_id", "missing"),
    ),
    (
        "responses-unknown-key-in-message-item",
        "openai-responses",
        planted(responses, lambda b: b["input"][4].update(name="user")),
        ("input[4].message.EasyInputMessageParam.name", "extra_forbidden"),
    ),
    (
        "anthropic-unknown-key-in-system-block",
        "anthropic",
        planted(anthropic_body, lambda b: b["system"][0].update(role="system")),
        ("system[0].role", "extra_forbidden"),
    ),
    (
        "anthropic-tool-choice-without-name",
        "anthropic",
        planted(anthropic_body, lambda b: b.update(tool_choice={"type": "tool"})),
        ("tool_choice.tool.name", "missing"),
    ),
    (
        "anthropic-unknown-key-in-tool",
        "anthropic",
        planted(anthropic_body, lambda b: b["tools"][0].update(parameters=TOOL_SCHEMA)),
        ("tools[0].(no type).parameters", "extra_forbidden"),
    ),
    (
        "chat-unknown-key-in-body",
        "openai-chat",
        planted(chat_developer, lambda b: b.update(system="x")),
        ("system", "extra_forbidden"),
    ),
]


@pytest.mark.parametrize(("name", "provider", "make"), VALID, ids=[v[0] for v in VALID])
def test_bodies_shaped_as_strata_builds_them_pass(
    name: str, provider: str, make: Callable[[], dict[str, Any]]
) -> None:
    assert check_requests.problems(provider, make()) == []


@pytest.mark.parametrize(
    ("name", "provider", "body", "expected"), PLANTED, ids=[p[0] for p in PLANTED]
)
def test_planted_defects_are_refused_at_their_item(
    name: str, provider: str, body: Any, expected: tuple[str, str]
) -> None:
    found = check_requests.problems(provider, body)
    assert found, f"{name}: the check accepted the body"
    path, kind = expected
    assert any(line.startswith(path) and f"[{kind}" in line for line in found), "\n".join(found)


def test_a_defect_behind_many_valid_items_is_found() -> None:
    body = anthropic_body()
    turns = body["messages"]
    body["messages"] = [copy.deepcopy(turns[i % 2]) for i in range(40)] + turns
    body["messages"][-1]["content"][1]["bogus"] = 1
    found = check_requests.problems("anthropic", body)
    assert any(line.startswith("messages[42].user.content") for line in found), found


def test_the_sdk_types_themselves_are_left_alone() -> None:
    from anthropic.types.text_block_param import TextBlockParam

    assert "__pydantic_config__" not in TextBlockParam.__dict__


def corpus(path: Path, bodies: list[tuple[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for provider, body in bodies:
            wire = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
            record = {"provider": provider, "body": body, "wire": wire}
            f.write(json.dumps(record) + "\n")
    return path


def test_script_passes_valid_bodies_and_sends_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    valid = [(provider, make()) for _, provider, make in VALID]
    assert check_requests.main([str(corpus(tmp_path / "valid.jsonl", valid))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{len(valid)} passed, 0 failed", out
    assert out[-2].startswith("sent through the official clients: ")


def test_script_fails_on_planted_bodies(tmp_path: Path) -> None:
    valid = [(provider, make()) for _, provider, make in VALID]
    bad = [(provider, body) for _, provider, body, _ in PLANTED]
    path = corpus(tmp_path / "mixed.jsonl", valid + bad)
    run = subprocess.run(
        [sys.executable, str(HERE / "check_requests.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 1, run.stdout + run.stderr
    assert lines[-1] == f"{len(valid)} passed, {len(bad)} failed", run.stdout
    refused = {int(line.split()[1]) for line in lines if line.startswith("record ")}
    assert refused == set(range(len(valid), len(valid) + len(bad))), run.stdout
