"""Request and response types of the strata serve API.

Requests are ``TypedDict`` s (plain dictionaries, checked by a type checker); responses are
frozen dataclasses built from the server's JSON by ``from_json``, which checks every field it
reads and raises ``TransportError`` when the server's answer does not have the documented shape.
The assembly report is a ``TypedDict`` too, and a prepared request is typed as the official
provider SDK's own parameters (``PreparedTurn.request_for``) when that SDK is installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, cast, overload

from ._errors import TransportError

if TYPE_CHECKING:
    # Types only: the client runs without the SDKs, and a type checker without them sees Any.
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

T = TypeVar("T")

Provider = Literal["anthropic", "openai-chat", "openai-responses"]
"""The request formats `strata serve --provider` writes."""


class _AnnouncedToolRequired(TypedDict):
    name: str


class AnnouncedTool(_AnnouncedToolRequired, total=False):
    """A tool offered for one turn; narrowed by the server to the agent's signed allowlist."""

    description: str
    parameters: dict[str, Any]
    server: str


class Skill(TypedDict):
    """A skill activated for one turn: its id (1-100 characters of ``[A-Za-z0-9._:/-]``) and
    its instructions; the turn shows it as the section ``skill/<id>``."""

    id: str
    instructions: str


class Inbound(TypedDict, total=False):
    """Who sent a turn's message, through which channel, with further metadata."""

    sender: str
    channel: str
    metadata: dict[str, str]


class GoalCheckpoint(TypedDict):
    """A step towards a goal; ``status`` is ``pending``, ``in_progress`` or ``completed``."""

    id: int
    description: str
    status: str


class GoalDecision(TypedDict):
    """A decision of a goal. Only the caller locks one; ``lock_proposed`` means the model asked
    for the lock and it waits for ``answer_lock``."""

    id: int
    description: str
    rationale: str
    locked: bool
    lock_proposed: bool


class GoalArtifact(TypedDict):
    """Something produced for a goal: ``kind`` is ``file``, ``test`` or ``documentation``,
    ``action`` is ``created``, ``modified`` or ``deleted``."""

    kind: str
    path: str
    action: str


class Goal(TypedDict):
    """A goal of a session, as the server shows it."""

    id: str
    description: str
    priority: str
    status: str
    completed: int
    total: int
    checkpoints: list[GoalCheckpoint]
    decisions: list[GoalDecision]
    artifacts: list[GoalArtifact]
    next: str | None


class PendingLock(TypedDict):
    """A decision whose lock the model proposed, waiting for the caller's answer."""

    goal: str
    decision: int
    description: str


class Goals(TypedDict):
    """A session's goals, oldest first, and the locks waiting for an answer."""

    session_id: str
    goals: list[Goal]
    pending_locks: list[PendingLock]


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


Layer = Literal[
    "core", "characteristics", "shared", "delegated", "working_memory", "long_term_memory"
]
"""The six layers, in authority order: a smaller layer outranks a larger one."""

Tier = Literal["T1", "T2", "T3", "T4", "T5"]
"""The context tier chosen from the model's context window."""


class _SourceRequired(TypedDict):
    kind: Literal["static", "config", "mcp", "store", "caller"]


class SourceKind(_SourceRequired, total=False):
    """The kind of source a section came from; ``server`` names an MCP server."""

    server: str


class _ProvenanceRequired(TypedDict):
    source: SourceKind
    name: str
    content_hash: str


class Provenance(_ProvenanceRequired, total=False):
    """Where a section came from: its producer, content hash, and, when known, the record id
    in its source, when it was recorded (Unix ms) and its retrieval score."""

    record: str
    created_ms: int
    score: float


class _SectionRequired(TypedDict):
    id: str
    layer: Layer
    tokens: int
    chars: int
    bytes: int
    sticky: bool
    stable: bool
    provenance: Provenance


class _Section(_SectionRequired, total=False):
    filled: bool
    role: Literal["user", "assistant", "tool_call", "tool_result"]


class KeptSection(_Section):
    """A section rendered whole."""

    status: Literal["kept"]


class _CutSectionRequired(_Section):
    status: Literal["cut"]
    head_bytes: int
    tail_bytes: int


class CutSection(_CutSectionRequired, total=False):
    """A section cut to fit: ``head_bytes`` from its start and ``tail_bytes`` from its end were
    kept of its ``bytes``; ``full_tokens`` are its tokens whole, when they were counted."""

    full_tokens: int


class DroppedSection(_Section):
    """A section left out to fit the budget; ``reason`` says which limit."""

    status: Literal["dropped"]
    reason: str


class FilteredSection(_Section):
    """A section not taking part in this mode or path; ``reason`` says why."""

    status: Literal["filtered"]
    reason: str


class OverriddenSection(_Section):
    """A section that lost the conflict ``on`` a key to ``by_id`` of the higher ``by_layer``."""

    status: Literal["overridden"]
    by_layer: Layer
    by_id: str
    on: str


SectionReport = KeptSection | CutSection | DroppedSection | FilteredSection | OverriddenSection
"""What happened to one runtime section; ``status`` tells the kinds apart."""


class LayerReport(TypedDict):
    """Totals of one runtime layer."""

    layer: Layer
    tokens: int
    budget: int | None
    kept: int
    cut: int
    dropped: int
    dropped_bytes: int


class Breakpoint(TypedDict):
    """Where a cacheable prefix ends: a byte and token offset, after a layer."""

    byte: int
    token: int
    after_layer: Layer


class Conflict(TypedDict):
    """A conflict resolved for the higher layer; ``winner`` and ``loser`` are ``[layer, id]``."""

    on: str
    winner: list[str]
    loser: list[str]


class Omission(TypedDict):
    """A section that never reached the assembler (a failed or slow contributor)."""

    id: str
    layer: Layer
    reason: str


class SchemaTextRemoved(TypedDict):
    """The free text removed from one unpinned tool's announced schema (JSON pointers)."""

    tool: str
    paths: list[str]


class RefusedTool(TypedDict):
    """A tool announced for a turn that its request does not offer, and why: ``reason`` in
    words, ``cause`` as a stable code (``definition_changed`` when a live MCP server's tool no
    longer matches its signed pin)."""

    name: str
    reason: str
    cause: str


class _ToolsNarrowed(TypedDict):
    effective: list[str]
    refused: list[RefusedTool]


class ToolsReport(_ToolsNarrowed, total=False):
    """The tools after narrowing: those offered, those refused (name, reason in words, cause as
    a code), and the free text removed from announced schemas (absent when nothing was
    removed)."""

    schema_text_removed: list[SchemaTextRemoved]


# What a turn changed for its session: ``{"type": "prompt_updated", "digest": ...}`` when its
# standing prompt (system channel, tools, stable context, goal, operational template) changed,
# ``{"type": "mode_changed", "from": ..., "to": ...}`` when its operational mode did,
# ``{"type": "skills_updated", "skills": [...]}`` when its active skills' ids did and
# ``{"type": "tools_updated", "tools": [...]}`` when the names of the tools its request offers
# did (both sorted; a session's first turn on a server tells its prompt, skills and tools).
# (The functional form, since ``from`` is a keyword.)
TurnEvent = TypedDict(
    "TurnEvent",
    {
        "type": str,
        "digest": str,
        "from": str,
        "to": str,
        "skills": list[str],
        "tools": list[str],
    },
    total=False,
)


class RequestReport(TypedDict):
    """The provider request's token count (``exact`` or ``estimate``) and caching."""

    provider: str
    count: Literal["exact", "estimate"]
    system_tokens: int
    tool_tokens: int
    message_tokens: int
    margin_pct: int
    total_tokens: int
    messages: int
    stable_prefix_tokens: int
    expected_cached_tokens: int
    min_cacheable_tokens: int


class _AssemblyReportRequired(TypedDict):
    agent_id: str
    identity_digest: str
    tokenizer: str
    tier: Tier
    total_tokens: int
    response_reserve: int
    prompt_budget: int
    used_tokens: int
    idle_tokens: int
    chars: int
    max_total_chars: int | None
    identity_tokens: int
    stable_prefix: Breakpoint
    breakpoints: list[Breakpoint]
    layers: list[LayerReport]
    sections: list[SectionReport]
    conflicts: list[Conflict]
    tools: ToolsReport
    omissions: list[Omission]


class AssemblyReport(_AssemblyReportRequired, total=False):
    """The report of one assembly: the budget and what was used of it, per layer and per
    section what was kept, cut, dropped and why, conflicts, tools, and the provider request's
    count (``request``, absent for plain text)."""

    request: RequestReport


@dataclass(frozen=True)
class PreparedTurn:
    """A prepared turn: ``request`` is the provider request body, ready for the official SDK;
    ``request_for(provider)`` gives it typed as that SDK's parameters::

        anthropic.Anthropic().messages.create(**turn.request_for("anthropic"))
        openai.OpenAI().chat.completions.create(**turn.request_for("openai-chat"))
        openai.OpenAI().responses.create(**turn.request_for("openai-responses"))

    ``report`` says what the assembly kept, cut and dropped, and why; ``dropped_turns`` the
    ``seq`` of each of the session's entries the request left out for lack of room (what a
    runtime may summarise with ``compact_session``)."""

    session_id: str
    provider: str
    request: dict[str, Any]
    report: AssemblyReport
    identity_digest: str
    receipt: dict[str, Any] | None
    refused_tools: list[RefusedTool]
    events: list[TurnEvent]
    dropped_turns: list[int]

    @classmethod
    def from_json(cls, data: Any) -> PreparedTurn:
        return cls(
            session_id=_get(data, "session_id", str),
            provider=_get(data, "provider", str),
            request=_get(data, "request", dict),
            report=cast(AssemblyReport, _get(data, "report", dict)),
            identity_digest=_get(data, "identity_digest", str),
            receipt=_get_optional(data, "receipt", dict),
            # Servers before the field existed send none.
            refused_tools=cast(list[RefusedTool], _get_optional(data, "refused_tools", list) or []),
            # Servers before the field existed send none.
            events=cast(list[TurnEvent], _get_optional(data, "events", list) or []),
            # Servers before the field existed send none.
            dropped_turns=cast(list[int], _get_optional(data, "dropped_turns", list) or []),
        )

    @overload
    def request_for(self, provider: Literal["anthropic"]) -> MessageCreateParamsNonStreaming: ...

    @overload
    def request_for(
        self, provider: Literal["openai-chat"]
    ) -> CompletionCreateParamsNonStreaming: ...

    @overload
    def request_for(
        self, provider: Literal["openai-responses"]
    ) -> ResponseCreateParamsNonStreaming: ...

    def request_for(self, provider: Provider) -> Mapping[str, object]:
        """The request, typed as the parameters of the ``provider`` SDK's create call
        (``anthropic``: ``messages.create``; ``openai-chat``: ``chat.completions.create``;
        ``openai-responses``: ``responses.create``). Raises ``ValueError`` when the server
        prepared it for another provider (``strata serve --provider``)."""
        if self.provider != provider:
            raise ValueError(
                f"the turn was prepared for {self.provider!r}, not {provider!r}; start "
                f"`strata serve` with `--provider {provider}`, or ask for "
                f"request_for({self.provider!r})"
            )
        return self.request


@dataclass(frozen=True)
class Compaction:
    """A stored summary of the session's entries ``first_seq..=last_seq``: later turns carry
    it, as data, in place of those entries, which stay in the session."""

    first_seq: int
    last_seq: int
    entries: int
    summary: str
    model: str | None
    at_ms: int

    @classmethod
    def from_json(cls, data: Any) -> Compaction:
        return cls(
            first_seq=_get(data, "first_seq", int),
            last_seq=_get(data, "last_seq", int),
            entries=_get(data, "entries", int),
            summary=_get(data, "summary", str),
            model=_get_optional(data, "model", str),
            at_ms=_get(data, "at_ms", int),
        )


def compactions_of(data: Any) -> list[Compaction]:
    """The summaries of a ``GET .../compactions`` answer."""
    return [Compaction.from_json(c) for c in _get(data, "compactions", list)]


@dataclass(frozen=True)
class ToolRun:
    """A tool call run through its live MCP server and recorded as the call's result; the
    output is the server's data."""

    call_id: str
    tool: str
    output: str
    is_error: bool

    @classmethod
    def from_json(cls, data: Any) -> ToolRun:
        return cls(
            call_id=_get(data, "call_id", str),
            tool=_get(data, "tool", str),
            output=_get(data, "output", str),
            is_error=_get(data, "is_error", bool),
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


def goal_of(data: Any) -> Goal:
    """A goal the server answered."""
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise _bad("a goal", str(data)[:80])
    for key in ("checkpoints", "decisions", "artifacts"):
        _get(data, key, list)
    return cast(Goal, data)


def goals_of(data: Any) -> Goals:
    """A session's goals the server answered."""
    for goal in _get(data, "goals", list):
        goal_of(goal)
    _get(data, "pending_locks", list)
    return cast(Goals, data)


def openapi_document(data: Any) -> dict[str, Any]:
    """The OpenAPI document, which must be a JSON object naming its version."""
    if not isinstance(data, dict) or not isinstance(data.get("openapi"), str):
        raise _bad("an OpenAPI document", str(data)[:80])
    return data
