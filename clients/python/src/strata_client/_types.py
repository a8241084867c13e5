"""Request and response types of the strata serve API.

Requests are ``TypedDict`` s (plain dictionaries, checked by a type checker); responses are
frozen dataclasses built from the server's JSON by ``from_json``, which checks every field it
reads and raises ``TransportError`` when the server's answer does not have the documented shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar

from ._errors import TransportError

T = TypeVar("T")


class _AnnouncedToolRequired(TypedDict):
    name: str


class AnnouncedTool(_AnnouncedToolRequired, total=False):
    """A tool offered for one turn; narrowed by the server to the agent's signed allowlist."""

    description: str
    parameters: dict[str, Any]
    server: str


class ToolCall(TypedDict):
    """A tool call in the model's reply, as the provider gave it."""

    id: str
    name: str
    arguments: dict[str, Any]


def _bad(what: str, value: Any) -> TransportError:
    return TransportError(
        None,
        "unexpected_response",
        f"the server's answer has {what} = {value!r}, not what the API documents; "
        "check that the client and `strata serve` are the same version",
    )


def _get(data: Any, key: str, kind: type[T]) -> T:
    if not isinstance(data, dict) or key not in data:
        raise _bad(f"no field `{key}` in", data)
    value = data[key]
    # bool is an int in Python; an integer field must not accept it.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _bad(f"`{key}`", value)
    return value


def _get_optional(data: Any, key: str, kind: type[T]) -> T | None:
    if isinstance(data, dict) and data.get(key) is None:
        return None
    return _get(data, key, kind)


def _number(data: Any, key: str) -> float:
    if not isinstance(data, dict) or key not in data:
        raise _bad(f"no field `{key}` in", data)
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"`{key}`", value)
    return float(value)


def _str_list(data: Any, key: str) -> tuple[str, ...]:
    items = _get(data, key, list)
    if not all(isinstance(item, str) for item in items):
        raise _bad(f"`{key}`", items)
    return tuple(items)


@dataclass(frozen=True)
class Status:
    """The answer of ``healthz`` and ``readyz``."""

    status: str

    @classmethod
    def from_json(cls, data: Any) -> Status:
        return cls(status=_get(data, "status", str))


@dataclass(frozen=True)
class ReloadInfo:
    """The outcome of the server's last attempt to reload the agent definition."""

    at_ms: int
    ok: bool
    error: str | None

    @classmethod
    def from_json(cls, data: Any) -> ReloadInfo:
        return cls(
            at_ms=_get(data, "at_ms", int),
            ok=_get(data, "ok", bool),
            error=_get_optional(data, "error", str),
        )


@dataclass(frozen=True)
class AgentInfo:
    """The agent definition the server verified and serves. ``not_before`` and ``not_after``
    bound its validity window in Unix seconds; ``last_reload`` says whether the last reload
    (on SIGHUP or a changed file) was verified and swapped in, and why not."""

    agent_id: str
    version: int
    identity_digest: str
    payload_sha256: str
    signers: tuple[str, ...]
    not_before: int | None
    not_after: int | None
    provider: str
    model: str
    loaded_at_ms: int
    last_reload: ReloadInfo | None

    @classmethod
    def from_json(cls, data: Any) -> AgentInfo:
        reload = _get_optional(data, "last_reload", dict)
        return cls(
            agent_id=_get(data, "agent_id", str),
            version=_get(data, "version", int),
            identity_digest=_get(data, "identity_digest", str),
            payload_sha256=_get(data, "payload_sha256", str),
            signers=_str_list(data, "signers"),
            not_before=_get_optional(data, "not_before", int),
            not_after=_get_optional(data, "not_after", int),
            provider=_get(data, "provider", str),
            model=_get(data, "model", str),
            loaded_at_ms=_get(data, "loaded_at_ms", int),
            last_reload=None if reload is None else ReloadInfo.from_json(reload),
        )


@dataclass(frozen=True)
class PreparedTurn:
    """A prepared turn: ``request`` is the provider request body, ready for the official SDK
    (``anthropic.Anthropic().messages.create(**turn.request)``,
    ``openai.OpenAI().chat.completions.create(**turn.request)``)."""

    session_id: str
    provider: str
    request: dict[str, Any]
    report: dict[str, Any]
    identity_digest: str
    receipt: dict[str, Any] | None

    @classmethod
    def from_json(cls, data: Any) -> PreparedTurn:
        return cls(
            session_id=_get(data, "session_id", str),
            provider=_get(data, "provider", str),
            request=_get(data, "request", dict),
            report=_get(data, "report", dict),
            identity_digest=_get(data, "identity_digest", str),
            receipt=_get_optional(data, "receipt", dict),
        )


@dataclass(frozen=True)
class RecordedReply:
    """What recording a reply did: the goal manager's report on the reply's markers."""

    goals: dict[str, Any]

    @classmethod
    def from_json(cls, data: Any) -> RecordedReply:
        return cls(goals=_get(data, "goals", dict))


Role = Literal["user", "assistant", "tool_call", "tool_result"]
ROLES: tuple[Role, ...] = ("user", "assistant", "tool_call", "tool_result")


@dataclass(frozen=True)
class SessionTurn:
    """One recorded turn of a session. A ``tool_call`` turn's content is the JSON
    ``{"name": ..., "arguments": ...}``; ``call_id`` pairs calls with their results."""

    seq: int
    role: Role
    content: str
    call_id: str | None

    @classmethod
    def from_json(cls, data: Any) -> SessionTurn:
        role = _get(data, "role", str)
        for known in ROLES:
            if role == known:
                return cls(
                    seq=_get(data, "seq", int),
                    role=known,
                    content=_get(data, "content", str),
                    call_id=_get_optional(data, "call_id", str),
                )
        raise _bad("`role`", role)


@dataclass(frozen=True)
class SessionHistory:
    """A session's recorded turns, oldest first."""

    session_id: str
    turns: tuple[SessionTurn, ...]

    @classmethod
    def from_json(cls, data: Any) -> SessionHistory:
        return cls(
            session_id=_get(data, "session_id", str),
            turns=tuple(SessionTurn.from_json(t) for t in _get(data, "turns", list)),
        )


@dataclass(frozen=True)
class MemoryHit:
    """A long-term memory found by a search, best first."""

    id: str
    content: str
    score: float
    tags: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Any) -> MemoryHit:
        return cls(
            id=_get(data, "id", str),
            content=_get(data, "content", str),
            score=_number(data, "score"),
            tags=_str_list(data, "tags"),
        )


def removed_count(data: Any) -> int:
    """The ``removed`` count of a reset or a delete."""
    return _get(data, "removed", int)


def memory_id(data: Any) -> str:
    """The ``id`` of a memory just added."""
    return _get(data, "id", str)


def search_results(data: Any) -> list[MemoryHit]:
    """The hits of a memory search."""
    return [MemoryHit.from_json(hit) for hit in _get(data, "results", list)]


def recorded(data: Any) -> bool:
    """The ``recorded`` flag of a tool result."""
    return _get(data, "recorded", bool)


def openapi_document(data: Any) -> dict[str, Any]:
    """The OpenAPI document, which must be a JSON object naming its version."""
    if not isinstance(data, dict) or not isinstance(data.get("openapi"), str):
        raise _bad("an OpenAPI document", str(data)[:80])
    return data
