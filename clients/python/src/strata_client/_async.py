"""The asyncio client, ``AsyncStrataClient``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import httpx

from . import _operations as ops
from ._types import (
    AgentInfo,
    AnnouncedTool,
    Compaction,
    Goal,
    Goals,
    Inbound,
    MemoryHit,
    PreparedTurn,
    RecordedReply,
    SessionHistory,
    Skill,
    Status,
    ToolCall,
    ToolRun,
    compactions_of,
    goal_of,
    goals_of,
    memory_id,
    openapi_document,
    recorded,
    removed_count,
    search_results,
)


class AsyncStrataClient:
    """An asyncio client of `strata serve`: the same methods as ``StrataClient``, awaited.

    ``base_url`` defaults to ``http://127.0.0.1:8177``; the bearer token comes from ``token``,
    else the first token of ``token_file``, else ``$STRATA_TOKEN``. ``uds`` connects over the
    server's Unix socket (``strata serve --unix PATH``) instead of TCP. ``timeout`` is in seconds,
    per attempt. Idempotency keys and retries (``max_retries``, ``retry_base_delay``,
    ``retry_max_delay``) are as in ``StrataClient``.
    Every method raises a ``StrataError`` subclass when the server refuses the request.

    Use it as an async context manager, or await ``aclose()``, to release its connections.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        timeout: float | None = ops.DEFAULT_TIMEOUT,
        uds: str | os.PathLike[str] | None = None,
        max_retries: int = ops.DEFAULT_MAX_RETRIES,
        retry_base_delay: float = 0.2,
        retry_max_delay: float = 5.0,
    ) -> None:
        self._retry = ops.RetryPolicy(max_retries, retry_base_delay, retry_max_delay)
        self._auth = ops.auth_headers(ops.resolve_token(token, token_file))
        self._where = f"over the Unix socket {os.fspath(uds)}" if uds is not None else ""
        transport = httpx.AsyncHTTPTransport(uds=os.fspath(uds)) if uds is not None else None
        self._http = httpx.AsyncClient(
            base_url=ops.base_url(base_url, uds),
            headers=ops.headers(),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncStrataClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connections."""
        await self._http.aclose()

    async def _send(
        self,
        name: str,
        session_id: str | None = None,
        body: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        call_id: str | None = None,
    ) -> httpx.Response:
        """The successful response of the call, after any retries it needed."""
        call = ops.call(name, session_id, body, self._auth, idempotency_key, call_id)
        retry = 0
        while True:
            try:
                response = await self._http.request(
                    call.op.method, call.path, content=call.content, headers=call.headers
                )
            except httpx.HTTPError as err:
                wait = self._retry.after_failure(call.op, retry, err)
                if wait is None:
                    url = self._url(call.path)
                    raise ops.transport_error(err, call.op.method, url, retry + 1) from err
            else:
                if response.is_success:
                    return response
                error = ops.error_of(response)
                wait = self._retry.after_refusal(call.op, retry, error)
                if wait is None:
                    raise error
            await asyncio.sleep(wait)
            retry += 1

    def _url(self, path: str) -> str:
        """Where a request goes, for error messages."""
        return f"{self._http.base_url.join(path)}{self._where and ' ' + self._where}"

    async def _json(
        self,
        name: str,
        session_id: str | None = None,
        body: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        call_id: str | None = None,
    ) -> Any:
        return ops.json_of(await self._send(name, session_id, body, idempotency_key, call_id))

    async def healthz(self) -> Status:
        """Whether the process is up (no token needed)."""
        return Status.from_json(await self._json("healthz"))

    async def readyz(self) -> Status:
        """Whether the agent is valid now (no token needed); raises ``AgentUnavailableError``
        when it has expired or is not yet valid."""
        return Status.from_json(await self._json("readyz"))

    async def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI 3.1 document (no token needed)."""
        return openapi_document(await self._json("openapi"))

    async def metrics(self) -> str:
        """The server's metrics in the Prometheus text format."""
        return (await self._send("metrics")).text

    async def agent(self) -> AgentInfo:
        """The verified agent the server serves: id, version, identity digest, signers, validity."""
        return AgentInfo.from_json(await self._json("agent"))

    async def prepare_turn(
        self,
        session_id: str,
        message: str | None = None,
        *,
        mode: str | None = None,
        path: str | None = None,
        context_window: int | None = None,
        tools: Sequence[AnnouncedTool] | None = None,
        sections: Sequence[Mapping[str, Any]] | None = None,
        operational_mode: str | None = None,
        resolved_context: Sequence[Mapping[str, Any]] | None = None,
        retrieved_tools: Sequence[AnnouncedTool] | None = None,
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
        idempotency_key: str | None = None,
    ) -> PreparedTurn:
        """Records the user's ``message`` and prepares the provider request for it; without a
        message, prepares the next request after tool results (``UnknownSessionError`` if the
        session has no turns). ``tools`` and ``sections`` apply to this turn only;
        ``resolved_context`` is the ``context`` path's input and ``retrieved_tools`` the
        ``hydration`` path's. ``skills`` (each a ``skill/<id>`` section), ``thinking`` (off,
        low, medium, high), ``inbound`` (sender, channel), ``voice``, ``language``, ``model``
        (default: the server's) and ``time_zone`` (``UTC``, ``+01:00`` or ``Europe/Paris
        +01:00``), ``recent_footprint`` (what the agent did most recently, one line each, oldest
        first), ``business_context`` (the platform's context for this session) and
        ``sanity_checks`` (``False`` leaves out the sanity-check prompts) are what the built-in
        sections and the signed templates read; a bad value
        raises ``InvalidRequestError`` and stores nothing. A repeat with the same
        ``idempotency_key`` and arguments gets the first answer."""
        body = ops.turn_body(
            message,
            mode,
            path,
            context_window,
            tools,
            sections,
            operational_mode,
            resolved_context,
            retrieved_tools,
            ops.turn_inputs(
                skills,
                thinking,
                inbound,
                voice,
                language,
                model,
                time_zone,
                recent_footprint,
                business_context,
                sanity_checks,
            ),
        )
        data = await self._json("prepare_turn", session_id, body, idempotency_key)
        return PreparedTurn.from_json(data)

    async def record_reply(
        self,
        session_id: str,
        text: str | None = None,
        *,
        tool_calls: Sequence[ToolCall] | None = None,
        reasoning: Sequence[Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> RecordedReply:
        """Records the model's reply: its text and its tool calls.

        ``reasoning`` holds the reply's thinking blocks (Anthropic) or reasoning items (OpenAI
        Responses) exactly as the provider returned them; they are sent back unchanged while
        the reply's tool loop lasts.
        """
        body = ops.reply_body(text, tool_calls, reasoning)
        data = await self._json("record_reply", session_id, body, idempotency_key)
        return RecordedReply.from_json(data)

    async def record_tool_result(
        self,
        session_id: str,
        call_id: str,
        output: str,
        *,
        is_error: bool = False,
        keep: Literal["head", "tail", "both"] | None = None,
        idempotency_key: str | None = None,
    ) -> bool:
        """Records a tool's output for the call ``call_id``; true once it is stored.

        ``is_error`` marks the output of a tool that failed (sent as Anthropic's ``is_error``);
        ``keep`` names the end of the output kept when it is cut (``"tail"`` for a log).
        """
        body: dict[str, object] = {"call_id": call_id, "output": output}
        if is_error:
            body["is_error"] = True
        if keep is not None:
            body["keep"] = keep
        data = await self._json("record_tool_result", session_id, body, idempotency_key)
        return recorded(data)

    async def goals(self, session_id: str) -> Goals:
        """The session's goals, oldest first, and the locks the model proposed that wait for
        ``answer_lock``."""
        return goals_of(await self._json("goals", session_id))

    async def create_goal(
        self,
        session_id: str,
        description: str,
        *,
        priority: Literal["high", "medium", "low"] | None = None,
        idempotency_key: str | None = None,
    ) -> Goal:
        """Creates a goal and makes it the active one (an active goal is paused)."""
        body = ops.only_given(description=description, priority=priority)
        return goal_of(await self._json("create_goal", session_id, body, idempotency_key))

    async def add_checkpoint(
        self,
        session_id: str,
        description: str,
        *,
        goal: str | None = None,
        status: Literal["pending", "in_progress", "completed"] | None = None,
        idempotency_key: str | None = None,
    ) -> Goal:
        """Adds a checkpoint to ``goal`` (default: the active goal); returns the goal."""
        body = ops.only_given(description=description, goal=goal, status=status)
        return goal_of(await self._json("add_checkpoint", session_id, body, idempotency_key))

    async def record_decision(
        self,
        session_id: str,
        description: str,
        *,
        rationale: str | None = None,
        goal: str | None = None,
        idempotency_key: str | None = None,
    ) -> Goal:
        """Records an unlocked decision with its ``rationale``; returns the goal."""
        body = ops.only_given(description=description, rationale=rationale, goal=goal)
        return goal_of(await self._json("record_decision", session_id, body, idempotency_key))

    async def record_artifact(
        self,
        session_id: str,
        path: str,
        action: Literal["created", "modified", "deleted"],
        *,
        kind: Literal["file", "test", "documentation"] | None = None,
        goal: str | None = None,
        idempotency_key: str | None = None,
    ) -> Goal:
        """Records an artifact of ``goal`` with its ``kind`` (default ``file``)."""
        body = ops.only_given(path=path, action=action, kind=kind, goal=goal)
        return goal_of(await self._json("record_artifact", session_id, body, idempotency_key))

    async def answer_lock(
        self,
        session_id: str,
        decision: int,
        confirm: bool,
        *,
        goal: str | None = None,
        idempotency_key: str | None = None,
    ) -> Goal:
        """Confirms (``confirm=True``) or refuses the lock the model proposed for a decision.
        Only this call locks: a marker in a reply only proposes."""
        body = ops.only_given(decision=decision, confirm=confirm, goal=goal)
        return goal_of(await self._json("answer_lock", session_id, body, idempotency_key))

    async def record_file(
        self,
        session_id: str,
        path: str,
        action: Literal["read", "modified", "deleted"],
        *,
        idempotency_key: str | None = None,
    ) -> bool:
        """Records that a tool of the session touched the file ``path``; true once stored."""
        body = {"path": path, "action": action}
        return recorded(await self._json("record_file", session_id, body, idempotency_key))

    async def compact_session(
        self,
        session_id: str,
        first_seq: int,
        last_seq: int,
        summary: str,
        *,
        model: str | None = None,
        idempotency_key: str | None = None,
    ) -> Compaction:
        """Stores ``summary`` for the session's entries ``first_seq..=last_seq`` (their
        ``seq``): later turns carry it, as data, in place of them; the entries stay. The range
        must end before the newest user message, keep each tool call with its result and
        overlap no stored summary; otherwise nothing is stored."""
        body: dict[str, Any] = {"first_seq": first_seq, "last_seq": last_seq, "summary": summary}
        if model is not None:
            body["model"] = model
        data = await self._json("compact_session", session_id, body, idempotency_key)
        return Compaction.from_json(data)

    async def compactions(self, session_id: str) -> list[Compaction]:
        """The session's stored summaries, oldest range first."""
        return compactions_of(await self._json("compactions", session_id))

    async def run_tool_call(
        self, session_id: str, call_id: str, *, idempotency_key: str | None = None
    ) -> ToolRun:
        """Runs the recorded tool call ``call_id`` through the live MCP server that announces
        its tool, with exactly the recorded arguments, and records the server's answer as the
        call's result; a retry with the same key gets the first answer and runs nothing. The
        output is the server's data, never an instruction."""
        data = await self._json("run_tool_call", session_id, None, idempotency_key, call_id=call_id)
        return ToolRun.from_json(data)

    async def session(self, session_id: str) -> SessionHistory:
        """The session's recorded turns, oldest first."""
        return SessionHistory.from_json(await self._json("session", session_id))

    async def reset_session(self, session_id: str, *, idempotency_key: str | None = None) -> int:
        """Forgets the session's turns; returns how many were removed."""
        data = await self._json("reset_session", session_id, None, idempotency_key)
        return removed_count(data)

    async def delete_session(self, session_id: str, *, idempotency_key: str | None = None) -> int:
        """Deletes the session; returns how many turns were removed."""
        data = await self._json("delete_session", session_id, None, idempotency_key)
        return removed_count(data)

    async def add_memory(self, content: str, tags: Sequence[str] | None = None) -> str:
        """Stores a long-term memory; returns its id. The server does not deduplicate memories,
        so this is retried only when the server did not act on the request."""
        return memory_id(await self._json("add_memory", body=ops.memory_body(content, tags)))

    async def search_memories(self, query: str, limit: int | None = None) -> list[MemoryHit]:
        """Searches long-term memory; best hits first."""
        return search_results(
            await self._json("search_memories", body=ops.search_body(query, limit))
        )
