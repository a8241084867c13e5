"""`examples/anthropic_turn.py` hands the prepared request to the official `anthropic` SDK. The
SDK is pointed at a recorder on loopback that keeps the request and answers with a canned
message; the recorder must have received exactly the prepared body, and the SDK's parsed reply
must be in the session afterwards."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import pytest

from strata_client import StrataClient

from strata_server import TOKEN, Server

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "anthropic_turn.py"

CANNED = {
    "id": "msg_01canned",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-5-5",
    "content": [
        {"type": "text", "text": "Let me read the notes."},
        {
            "type": "tool_use",
            "id": "toolu_canned",
            "name": "file_read",
            "input": {"path": "notes.txt"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 120, "output_tokens": 30},
}


@dataclass
class Recorder:
    """A loopback HTTP server that records each request and answers with ``CANNED``."""

    url: str
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length))
            rec.requests.append((self.command, self.path, body))
            reply = json.dumps(CANNED).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield rec
    httpd.shutdown()
    httpd.server_close()


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("anthropic_turn", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_sends_the_prepared_body(
    client: StrataClient, recorder: Recorder, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = _load_example()
    sent: list[dict[str, Any]] = []
    prepare = client.prepare_turn

    def keep(*args: Any, **kwargs: Any) -> Any:
        turn = prepare(*args, **kwargs)
        sent.append(turn.request)
        return turn

    monkeypatch.setattr(client, "prepare_turn", keep)
    claude = anthropic.Anthropic(base_url=recorder.url, api_key="test", max_retries=0)
    message = example.run_turn(client, claude, session_id, "What does notes.txt say?")

    assert len(sent) == 1 and len(recorder.requests) == 1
    method, path, body = recorder.requests[0]
    assert (method, path) == ("POST", "/v1/messages")
    assert body == sent[0], "the SDK sent exactly the prepared body"

    assert message.id == CANNED["id"]
    assert [b.type for b in message.content] == ["text", "tool_use"]
    turns = client.session(session_id).turns
    assert [(t.role, t.content) for t in turns[:2]] == [
        ("user", "What does notes.txt say?"),
        ("assistant", "Let me read the notes."),
    ]
    assert turns[2].role == "tool_call" and turns[2].call_id == "toolu_canned"
    assert json.loads(turns[2].content) == {"name": "file_read", "arguments": {"path": "notes.txt"}}


def test_example_script(server: Server, recorder: Recorder, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = dict(os.environ, ANTHROPIC_API_KEY="test")
    out = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--strata",
            server.url,
            "--token-file",
            str(token_file),
            "--anthropic-base-url",
            recorder.url,
            "--session",
            "example-script",
            "What does notes.txt say?",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "Let me read the notes.",
        "[tool call toolu_canned: file_read({'path': 'notes.txt'})]",
    ]
    assert len(recorder.requests) == 1
    with StrataClient(server.url, token=TOKEN) as c:
        roles = [t.role for t in c.session("example-script").turns]
    assert roles == ["user", "assistant", "tool_call"]
