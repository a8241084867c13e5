"""Errors of the strata serve API: one class per stable error code, all under ``StrataError``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class StrataError(Exception):
    """A request the server refused or could not answer.

    ``status`` is the HTTP status (``None`` when no response arrived), ``code`` the server's
    stable error code (``unauthorized``, ``unknown_session``...), ``message`` what went wrong
    and what to do. ``retry_after`` is the server's ``Retry-After`` in seconds, when it sent one.
    """

    def __init__(
        self,
        status: int | None,
        code: str,
        message: str,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no response"
        return f"{self.code} ({where}): {self.message}"


class UnauthorizedError(StrataError):
    """``unauthorized``: the bearer token is missing or wrong."""


class InvalidRequestError(StrataError):
    """``invalid_request``: bad JSON, an unknown field or a bad value."""


class UnknownSessionError(StrataError):
    """``unknown_session``: the session has no turns (or never existed)."""


class NotFoundError(StrataError):
    """``not_found``: no such route."""


class MethodNotAllowedError(StrataError):
    """``method_not_allowed``: the route exists, but not with this HTTP method."""


class BodyTooLargeError(StrataError):
    """``body_too_large``: the request body is over the server's limit."""


class BudgetError(StrataError):
    """``budget``: the identity and sticky sections do not fit the token budget."""


class MessageTooLargeError(StrataError):
    """``message_too_large``: the user's message cannot fit even cut to its head and tail;
    nothing was recorded."""


class IdempotencyKeyReusedError(StrataError):
    """``idempotency_key_reused``: the ``Idempotency-Key`` was used before for another request
    on this session; a new request needs a new key."""


class ToolNotAllowedError(StrataError):
    """``tool_not_allowed``: a reply calls a tool that is not on the agent's signed allowlist;
    nothing was recorded."""


class ToolNotOfferedError(StrataError):
    """``tool_not_offered``: a recorded tool call cannot be run: the session's last prepared
    turn did not offer its tool, or no connected MCP server offers it as signed now; nothing
    was run or recorded."""


class SessionConflictError(StrataError):
    """``session_conflict``: the session kept changing while the request was prepared; retry
    after ``retry_after``."""


class StoreUnavailableError(StrataError):
    """``store_unavailable``: the server cannot reach its memory store; retry after
    ``retry_after``."""


class RequestTimeoutError(StrataError):
    """``request_timeout``: the request body did not reach the server within its read
    timeout."""


class OverloadedError(StrataError):
    """``overloaded``: the server is at its concurrency limit; retry after ``retry_after``."""


class ServerTimeoutError(StrataError):
    """``timeout``: the server gave up on the request after its per-request timeout."""


class AgentUnavailableError(StrataError):
    """``agent_unavailable``: the loaded agent definition has expired or is not yet valid."""


class ToolCallFailedError(StrataError):
    """``tool_call_failed``: the MCP server of a recorded tool call did not complete it (502);
    nothing was recorded. Not retried: the server may have run the tool before the connection
    failed, so the caller decides whether to run it again."""


class InternalServerError(StrataError):
    """``internal``: the server failed; its log says why."""


class TransportError(StrataError):
    """No usable response: the connection failed or timed out, or the reply was not the API's."""


ERROR_CLASSES: Mapping[str, type[StrataError]] = {
    "unauthorized": UnauthorizedError,
    "invalid_request": InvalidRequestError,
    "unknown_session": UnknownSessionError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "body_too_large": BodyTooLargeError,
    "budget": BudgetError,
    "message_too_large": MessageTooLargeError,
    "idempotency_key_reused": IdempotencyKeyReusedError,
    "tool_not_allowed": ToolNotAllowedError,
    "tool_not_offered": ToolNotOfferedError,
    "session_conflict": SessionConflictError,
    "store_unavailable": StoreUnavailableError,
    "request_timeout": RequestTimeoutError,
    "overloaded": OverloadedError,
    "timeout": ServerTimeoutError,
    "agent_unavailable": AgentUnavailableError,
    "tool_call_failed": ToolCallFailedError,
    "internal": InternalServerError,
}


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def error_from_response(status: int, headers: Mapping[str, str], body: bytes) -> StrataError:
    """The error a non-2xx response stands for, from its ``{"error": {...}}`` body."""
    retry_after = _retry_after(headers)
    try:
        data: Any = json.loads(body)
        error = data["error"]
        code = error["code"]
        message = error["message"]
        if not isinstance(code, str) or not isinstance(message, str):
            raise TypeError("code and message must be strings")
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        return TransportError(
            status,
            "unexpected_response",
            f"the server answered HTTP {status} without a strata error body ({text!r}); "
            "check that the base URL points at `strata serve`",
            retry_after=retry_after,
        )
    cls = ERROR_CLASSES.get(code, StrataError)
    return cls(status, code, message, retry_after=retry_after)
