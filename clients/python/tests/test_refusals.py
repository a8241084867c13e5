"""Refusals reach the caller as typed errors with the server's status, code and message."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from strata_client import (
    BodyTooLargeError,
    InvalidRequestError,
    StrataClient,
    StrataError,
    TransportError,
    UnauthorizedError,
    UnknownSessionError,
)

from strata_server import DEMO_ID, HASHED_TOKEN, TOKEN, Server


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)


def _refused(err: StrataError, status: int, code: str) -> None:
    assert err.status == status
    assert err.code == code
    assert err.message, "every refusal says what went wrong and what to do"
    assert code in str(err)


def test_no_token(server: Server) -> None:
    with StrataClient(server.url) as anonymous:
        assert anonymous.healthz().status == "ok", "health needs no token"
        with pytest.raises(UnauthorizedError) as err:
            anonymous.agent()
    _refused(err.value, 401, "unauthorized")


def test_wrong_token(server: Server) -> None:
    with StrataClient(server.url, token=TOKEN + "x") as wrong:
        assert wrong.healthz().status == "ok", "the token goes only where it is needed"
        with pytest.raises(UnauthorizedError) as err:
            wrong.prepare_turn("any", "hello")
    _refused(err.value, 401, "unauthorized")


def test_token_from_hash_file_and_env(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server's file holds only the SHA-256 of this token.
    with StrataClient(server.url, token=HASHED_TOKEN) as hashed:
        assert hashed.agent().agent_id == DEMO_ID
    # The client reads the first plain token of a token file, skipping comments and hashes.
    token_file = tmp_path / "token"
    token_file.write_text(f"# mine\nsha256:{'0' * 64}\n\n{TOKEN}\n")
    with StrataClient(server.url, token_file=token_file) as from_file:
        assert from_file.agent().agent_id == DEMO_ID
    monkeypatch.setenv("STRATA_TOKEN", TOKEN)
    with StrataClient(server.url) as from_env:
        assert from_env.agent().agent_id == DEMO_ID


def test_unknown_session(client: StrataClient) -> None:
    unknown = f"never-{uuid.uuid4().hex}"
    calls: list[Callable[[], object]] = [
        lambda: client.session(unknown),
        lambda: client.prepare_turn(unknown),
        lambda: client.record_reply(unknown, "hello"),
        lambda: client.record_tool_result(unknown, "call_1", "output"),
        lambda: client.reset_session(unknown),
        lambda: client.delete_session(unknown),
    ]
    for call in calls:
        with pytest.raises(UnknownSessionError) as err:
            call()
        _refused(err.value, 404, "unknown_session")


def test_invalid_request(client: StrataClient, session_id: str) -> None:
    with pytest.raises(InvalidRequestError) as err:
        client.prepare_turn(session_id, "hello", mode="no-such-mode")
    _refused(err.value, 400, "invalid_request")


def test_body_too_large(client: StrataClient, session_id: str) -> None:
    # The server's default limit is 1 MiB per request body.
    with pytest.raises(BodyTooLargeError) as err:
        client.prepare_turn(session_id, "x" * (2 << 20))
    _refused(err.value, 413, "body_too_large")


def test_nothing_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        StrataClient(f"http://127.0.0.1:{port}", token=TOKEN, timeout=5, max_retries=0) as client,
        pytest.raises(TransportError) as err,
    ):
        client.healthz()
    assert err.value.status is None
    assert err.value.code == "connection"
    assert f"127.0.0.1:{port}" in err.value.message


def test_client_timeout() -> None:
    # A socket that listens but never answers: the kernel completes the connection, nobody
    # reads the request.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with (
            StrataClient(f"http://127.0.0.1:{port}", token=TOKEN, timeout=0.5) as client,
            pytest.raises(TransportError) as err,
        ):
            client.healthz()
        elapsed = time.monotonic() - started
    assert err.value.code == "connection"
    assert "Timeout" in err.value.message
    assert 0.4 < elapsed < 5, elapsed
