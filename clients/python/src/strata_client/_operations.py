"""The API's operations as data, and what the sync and async clients share: request bodies,
the token, headers and the reading of responses.

``OPERATIONS`` names, for every client method, the HTTP method and path it calls and the
``operationId`` the OpenAPI document gives that route; the tests compare it with the document
the server publishes, so an endpoint without a client method cannot go unnoticed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ._errors import StrataError, TransportError, error_from_response
from ._types import AnnouncedTool, ToolCall

__version__ = "0.1.0"

DEFAULT_BASE_URL = "http://127.0.0.1:8177"
"""Where `strata serve` listens unless told otherwise."""

DEFAULT_TIMEOUT = 30.0
"""Seconds a request may take, connecting included."""

TOKEN_ENV = "STRATA_TOKEN"
"""The environment variable read for the bearer token when neither a token nor a file is given."""


@dataclass(frozen=True)
class Operation:
    """One route of the API as a client method calls it."""

    operation_id: str
    method: str
    path: str
    auth: bool = True


OPERATIONS: Mapping[str, Operation] = {
    "healthz": Operation("healthz", "GET", "/healthz", auth=False),
    "readyz": Operation("readyz", "GET", "/readyz", auth=False),
    "openapi": Operation("openapi", "GET", "/openapi.json", auth=False),
    "metrics": Operation("metrics", "GET", "/metrics"),
    "agent": Operation("agent", "GET", "/v1/agent"),
    "prepare_turn": Operation("prepare_turn", "POST", "/v1/sessions/{session_id}/turns"),
    "record_reply": Operation("record_reply", "POST", "/v1/sessions/{session_id}/replies"),
    "record_tool_result": Operation(
        "record_tool_result", "POST", "/v1/sessions/{session_id}/tool-results"
    ),
    "session": Operation("get_session", "GET", "/v1/sessions/{session_id}"),
    "reset_session": Operation("reset_session", "POST", "/v1/sessions/{session_id}/reset"),
    "delete_session": Operation("delete_session", "DELETE", "/v1/sessions/{session_id}"),
    "add_memory": Operation("add_memory", "POST", "/v1/memories"),
    "search_memories": Operation("search_memories", "POST", "/v1/memories/search"),
}


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The first usable token of a token file: blank lines, ``#`` comments and ``sha256:``
    lines (hashes the server accepts, but no client can send) are skipped."""
    text = Path(path).read_text(encoding="utf-8")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and not line.startswith("sha256:"):
            return line
    raise ValueError(
        f"the token file {os.fspath(path)!r} holds no usable token (only blank lines, comments "
        "or sha256: hashes); put the plain token on a line of its own"
    )


def resolve_token(token: str | None, token_file: str | os.PathLike[str] | None) -> str | None:
    """The token to send: the one given, else the file's, else ``$STRATA_TOKEN``, else none."""
    if token is not None and token_file is not None:
        raise ValueError("give either token or token_file, not both")
    if token is not None:
        return token
    if token_file is not None:
        return read_token_file(token_file)
    return os.environ.get(TOKEN_ENV) or None


def headers() -> dict[str, str]:
    """Headers of every request."""
    return {
        "Accept": "application/json",
        "User-Agent": f"strata-client-python/{__version__}",
    }


def auth_headers(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header, sent only to the operations that need it."""
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def base_url(url: str | None, uds: str | os.PathLike[str] | None) -> str:
    """The base URL; over a Unix socket the host is only a name in the ``Host`` header."""
    if url is not None:
        return url.rstrip("/")
    return "http://strata" if uds is not None else DEFAULT_BASE_URL


def path_of(name: str, session_id: str | None) -> str:
    """The request path of an operation, with the session id percent-encoded as one segment."""
    path = OPERATIONS[name].path
    if "{session_id}" in path:
        if not session_id:
            raise ValueError("session_id must be a non-empty string")
        path = path.replace("{session_id}", quote(session_id, safe=""))
    return path


def turn_body(
    message: str | None,
    mode: str | None,
    path: str | None,
    context_window: int | None,
    tools: Sequence[AnnouncedTool] | None,
    sections: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """The body of ``prepare_turn``: only the fields given."""
    body: dict[str, Any] = {}
    if message is not None:
        body["message"] = message
    if mode is not None:
        body["mode"] = mode
    if path is not None:
        body["path"] = path
    if context_window is not None:
        body["context_window"] = context_window
    if tools is not None:
        body["tools"] = [dict(t) for t in tools]
    if sections is not None:
        body["sections"] = [dict(s) for s in sections]
    return body


def reply_body(text: str | None, tool_calls: Sequence[ToolCall] | None) -> dict[str, Any]:
    """The body of ``record_reply``."""
    body: dict[str, Any] = {}
    if text is not None:
        body["text"] = text
    if tool_calls is not None:
        body["tool_calls"] = [dict(c) for c in tool_calls]
    return body


def memory_body(content: str, tags: Sequence[str] | None) -> dict[str, Any]:
    """The body of ``add_memory``."""
    body: dict[str, Any] = {"content": content}
    if tags is not None:
        body["tags"] = list(tags)
    return body


def search_body(query: str, limit: int | None) -> dict[str, Any]:
    """The body of ``search_memories``."""
    body: dict[str, Any] = {"query": query}
    if limit is not None:
        body["limit"] = limit
    return body


def transport_error(err: httpx.HTTPError, method: str, url: str) -> StrataError:
    """A connection or timeout failure, with what to check."""
    return TransportError(
        None,
        "connection",
        f"{method} {url} failed before a response arrived ({type(err).__name__}: {err}); "
        "check that `strata serve` is running at that address and that the timeout is long "
        "enough",
    )


def check(response: httpx.Response) -> None:
    """Raises the response's ``StrataError`` unless its status is 2xx."""
    if not response.is_success:
        raise error_from_response(response.status_code, response.headers, response.content)


def json_of(response: httpx.Response) -> Any:
    """The JSON body of a successful response."""
    check(response)
    try:
        return json.loads(response.content)
    except ValueError as err:
        raise TransportError(
            response.status_code,
            "unexpected_response",
            f"the server answered {response.request.method} {response.request.url.path} with "
            f"a body that is not JSON ({err}); check that the base URL points at `strata serve`",
        ) from err
