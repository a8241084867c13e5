"""The API's operations as data, and what the sync and async clients share: request bodies,
the token, headers, idempotency keys, when to retry, and the reading of responses.

``OPERATIONS`` names, for every client method, the HTTP method and path it calls and the
``operationId`` the OpenAPI document gives that route; the tests compare it with the document
the server publishes, so an endpoint without a client method cannot go unnoticed.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ._errors import StrataError, TransportError, error_from_response
from ._types import AnnouncedTool, Inbound, Skill, ToolCall

__version__ = "0.1.0"

DEFAULT_BASE_URL = "http://127.0.0.1:8177"
"""Where `strata serve` listens unless told otherwise."""

DEFAULT_TIMEOUT = 30.0
"""Seconds a request may take, connecting included."""

TOKEN_ENV = "STRATA_TOKEN"
"""The environment variable read for the bearer token when neither a token nor a file is given."""

DEFAULT_MAX_RETRIES = 4
"""Retries of a call after its first attempt, unless the client is told otherwise."""

IDEMPOTENCY_KEY = "Idempotency-Key"
"""The header that makes an operation changing a session retry-safe."""

RETRYABLE_CODES = frozenset(
    {"overloaded", "store_unavailable", "timeout", "session_conflict", "request_timeout"}
)
"""Error codes of passing conditions: a later attempt of the same request may succeed."""

UNTOUCHED_CODES = frozenset({"overloaded", "request_timeout"})
"""Error codes given before the server acted on the request: even an operation that is not safe
to repeat (``add_memory``) is retried on them."""


@dataclass(frozen=True)
class Operation:
    """One route of the API as a client method calls it.

    ``keyed`` operations change a session and carry an ``Idempotency-Key``, so that a repeat is
    answered from the first attempt. ``repeatable`` operations may be sent again whatever
    happened to an earlier attempt: reads, and keyed operations. An operation that is neither
    (adding a memory) is retried only when the server certainly did not act on it.
    """

    operation_id: str
    method: str
    path: str
    auth: bool = True
    keyed: bool = False
    repeatable: bool = True


OPERATIONS: Mapping[str, Operation] = {
    "healthz": Operation("healthz", "GET", "/healthz", auth=False),
    "readyz": Operation("readyz", "GET", "/readyz", auth=False),
    "openapi": Operation("openapi", "GET", "/openapi.json", auth=False),
    "metrics": Operation("metrics", "GET", "/metrics"),
    "agent": Operation("agent", "GET", "/v1/agent"),
    "prepare_turn": Operation(
        "prepare_turn", "POST", "/v1/sessions/{session_id}/turns", keyed=True
    ),
    "record_reply": Operation(
        "record_reply", "POST", "/v1/sessions/{session_id}/replies", keyed=True
    ),
    "record_tool_result": Operation(
        "record_tool_result", "POST", "/v1/sessions/{session_id}/tool-results", keyed=True
    ),
    "run_tool_call": Operation(
        "run_tool_call",
        "POST",
        "/v1/sessions/{session_id}/tool-calls/{call_id}/run",
        keyed=True,
    ),
    "session": Operation("get_session", "GET", "/v1/sessions/{session_id}"),
    "reset_session": Operation(
        "reset_session", "POST", "/v1/sessions/{session_id}/reset", keyed=True
    ),
    "delete_session": Operation(
        "delete_session", "DELETE", "/v1/sessions/{session_id}", keyed=True
    ),
    "goals": Operation("get_goals", "GET", "/v1/sessions/{session_id}/goals"),
    "create_goal": Operation("create_goal", "POST", "/v1/sessions/{session_id}/goals", keyed=True),
    "add_checkpoint": Operation(
        "add_checkpoint", "POST", "/v1/sessions/{session_id}/goals/checkpoints", keyed=True
    ),
    "record_decision": Operation(
        "record_decision", "POST", "/v1/sessions/{session_id}/goals/decisions", keyed=True
    ),
    "record_artifact": Operation(
        "record_artifact", "POST", "/v1/sessions/{session_id}/goals/artifacts", keyed=True
    ),
    "answer_lock": Operation(
        "answer_lock", "POST", "/v1/sessions/{session_id}/goals/locks", keyed=True
    ),
    "record_file": Operation("record_file", "POST", "/v1/sessions/{session_id}/files", keyed=True),
    "compact_session": Operation(
        "compact_session", "POST", "/v1/sessions/{session_id}/compactions", keyed=True
    ),
    "compactions": Operation("list_compactions", "GET", "/v1/sessions/{session_id}/compactions"),
    "add_memory": Operation("add_memory", "POST", "/v1/memories", repeatable=False),
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


def new_idempotency_key() -> str:
    """A fresh key for one logical call: a random UUID."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Call:
    """One logical call, sent the same on every attempt: the same body bytes and, for an
    operation that changes a session, the same ``Idempotency-Key``."""

    op: Operation
    path: str
    headers: dict[str, str]
    content: bytes | None


def call(
    name: str,
    session_id: str | None,
    body: Mapping[str, Any] | None,
    auth: Mapping[str, str],
    idempotency_key: str | None,
    call_id: str | None = None,
) -> Call:
    """The call ``name`` makes; a keyed operation gets ``idempotency_key``, else a new key."""
    op = OPERATIONS[name]
    if idempotency_key is not None and not op.keyed:
        raise ValueError(f"{name} takes no idempotency key")
    headers = dict(auth) if op.auth else {}
    if op.keyed:
        headers[IDEMPOTENCY_KEY] = (
            new_idempotency_key() if idempotency_key is None else idempotency_key
        )
    content: bytes | None = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        content = text.encode()
    return Call(op, path_of(name, session_id, call_id), headers, content)


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before sending a call again.

    A call is sent at most ``1 + max_retries`` times. The wait before retry ``n`` (from 0) is
    drawn between half and all of ``min(max_delay, base_delay * 2**n)``, and is never shorter
    than the server's ``Retry-After``; a ``Retry-After`` longer than ``max_delay`` ends the
    retries, leaving the wait to the caller (the error's ``retry_after``).
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay: float = 0.2
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("max_retries and the retry delays must not be negative")

    def wait(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry ``retry``, or ``None`` when there is none to make."""
        if retry >= self.max_retries:
            return None
        if retry_after is not None and retry_after > self.max_delay:
            return None
        backoff = min(self.max_delay, self.base_delay * 2.0**retry)
        jittered = backoff * random.uniform(0.5, 1.0)
        return max(jittered, retry_after or 0.0)

    def after_refusal(self, op: Operation, retry: int, error: StrataError) -> float | None:
        """The wait before retrying ``op`` after the refusal ``error``, or ``None``.

        Refusals of passing conditions are retried: a retryable code, or a 503 without the
        API's error body (as a proxy in front may give). An operation that is not safe to send
        again is retried only when the server did not act on it at all.
        """
        if error.code in UNTOUCHED_CODES:
            passing = True
        else:
            passing = op.repeatable and (
                error.code in RETRYABLE_CODES
                or (error.status == 503 and error.code == "unexpected_response")
            )
        return self.wait(retry, error.retry_after) if passing else None

    def after_failure(self, op: Operation, retry: int, err: httpx.HTTPError) -> float | None:
        """The wait before retrying ``op`` after it got no response, or ``None``.

        A refused connection (nothing was sent) is retried; a connection that broke before the
        answer came, when ``op`` is safe to send again. The client's own timeout is final: the
        time given to the call is spent.
        """
        if isinstance(err, httpx.TimeoutException):
            return None
        lost = isinstance(err, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError))
        if isinstance(err, httpx.ConnectError) or (lost and op.repeatable):
            return self.wait(retry, None)
        return None


def base_url(url: str | None, uds: str | os.PathLike[str] | None) -> str:
    """The base URL; over a Unix socket the host is only a name in the ``Host`` header."""
    if url is not None:
        return url.rstrip("/")
    return "http://strata" if uds is not None else DEFAULT_BASE_URL


def path_of(name: str, session_id: str | None, call_id: str | None = None) -> str:
    """The request path of an operation, with the session id (and a tool call's id)
    percent-encoded as one segment each."""
    path = OPERATIONS[name].path
    if "{session_id}" in path:
        if not session_id:
            raise ValueError("session_id must be a non-empty string")
        path = path.replace("{session_id}", quote(session_id, safe=""))
    if "{call_id}" in path:
        if not call_id:
            raise ValueError("call_id must be a non-empty string")
        path = path.replace("{call_id}", quote(call_id, safe=""))
    return path


def turn_body(
    message: str | None,
    mode: str | None,
    path: str | None,
    context_window: int | None,
    tools: Sequence[AnnouncedTool] | None,
    sections: Sequence[Mapping[str, Any]] | None,
    operational_mode: str | None = None,
    resolved_context: Sequence[Mapping[str, Any]] | None = None,
    retrieved_tools: Sequence[AnnouncedTool] | None = None,
    inputs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of ``prepare_turn``: only the fields given."""
    body: dict[str, Any] = dict(inputs or {})
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
    if operational_mode is not None:
        body["operational_mode"] = operational_mode
    if resolved_context is not None:
        body["resolved_context"] = [dict(s) for s in resolved_context]
    if retrieved_tools is not None:
        body["retrieved_tools"] = [dict(t) for t in retrieved_tools]
    return body


def turn_inputs(
    skills: Sequence[Skill] | None = None,
    thinking: str | None = None,
    inbound: Inbound | None = None,
    voice: bool | None = None,
    language: str | None = None,
    model: str | None = None,
    time_zone: str | None = None,
    recent_footprint: Sequence[str] | None = None,
    business_context: str | None = None,
    sanity_checks: bool | None = None,
) -> dict[str, Any]:
    """The per-turn inputs of a ``prepare_turn`` body that the built-in sections and the signed
    templates read: only the ones given."""
    body: dict[str, Any] = {}
    if skills is not None:
        body["skills"] = [dict(s) for s in skills]
    if thinking is not None:
        body["thinking"] = thinking
    if inbound is not None:
        body["inbound"] = dict(inbound)
    if voice is not None:
        body["voice"] = voice
    if language is not None:
        body["language"] = language
    if model is not None:
        body["model"] = model
    if time_zone is not None:
        body["time_zone"] = time_zone
    if recent_footprint is not None:
        body["recent_footprint"] = list(recent_footprint)
    if business_context is not None:
        body["business_context"] = business_context
    if sanity_checks is not None:
        body["sanity_checks"] = sanity_checks
    return body


def only_given(**fields: Any) -> dict[str, Any]:
    """A body of the fields that are not ``None``."""
    return {k: v for k, v in fields.items() if v is not None}


def reply_body(
    text: str | None,
    tool_calls: Sequence[ToolCall] | None,
    reasoning: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The body of ``record_reply``."""
    body: dict[str, Any] = {}
    if text is not None:
        body["text"] = text
    if tool_calls is not None:
        body["tool_calls"] = [dict(c) for c in tool_calls]
    if reasoning:
        body["reasoning"] = [dict(b) for b in reasoning]
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


def transport_error(err: httpx.HTTPError, method: str, url: str, attempts: int = 1) -> StrataError:
    """A connection or timeout failure, with what to check."""
    tries = f" (attempt {attempts})" if attempts > 1 else ""
    return TransportError(
        None,
        "connection",
        f"{method} {url} failed before a response arrived{tries} ({type(err).__name__}: "
        f"{err}); check that `strata serve` is running at that address and that the timeout "
        "is long enough",
    )


def error_of(response: httpx.Response) -> StrataError:
    """The ``StrataError`` a non-2xx response stands for."""
    return error_from_response(response.status_code, response.headers, response.content)


def json_of(response: httpx.Response) -> Any:
    """The JSON body of a successful response."""
    try:
        return json.loads(response.content)
    except ValueError as err:
        raise TransportError(
            response.status_code,
            "unexpected_response",
            f"the server answered {response.request.method} {response.request.url.path} with "
            f"a body that is not JSON ({err}); check that the base URL points at `strata serve`",
        ) from err
