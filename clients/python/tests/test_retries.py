"""Retry-safe calls against a real `strata serve`: every call that changes a session carries an
Idempotency-Key, a repeat under the key changes nothing, and the client retries passing
refusals and broken connections with the same key, through a proxy that misbehaves on
purpose."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from strata_client import (
    ERROR_CLASSES,
    AsyncStrataClient,
    IdempotencyKeyReusedError,
    OverloadedError,
    ServerTimeoutError,
    StrataClient,
    TransportError,
)
from strata_client._operations import IDEMPOTENCY_KEY, RetryPolicy, call

import scenario
from flaky_proxy import Drop, Fault, FlakyProxy, Page, Refuse
from strata_server import TOKEN, Server


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_TOKEN", raising=False)


def _fast(url: str, max_retries: int = 4) -> StrataClient:
    """A client whose retries wait milliseconds, not seconds."""
    return StrataClient(
        url,
        token=TOKEN,
        timeout=10,
        max_retries=max_retries,
        retry_base_delay=0.01,
        retry_max_delay=0.05,
    )


def _is_uuid4(key: str | None) -> bool:
    return key is not None and uuid.UUID(key).version == 4


def test_a_repeat_under_the_same_key_changes_nothing(client: StrataClient, session_id: str) -> None:
    first = client.prepare_turn(session_id, "hello", idempotency_key="turn-1")
    again = client.prepare_turn(session_id, "hello", idempotency_key="turn-1")
    assert again == first, "the repeat gets the first answer"
    for _ in range(2):
        client.record_reply(session_id, "hi there", idempotency_key="reply-1")
    assert [(t.role, t.content) for t in client.session(session_id).turns] == [
        ("user", "hello"),
        ("assistant", "hi there"),
    ]
    # Without a key of its own, each call is new: the same message twice is two turns.
    client.prepare_turn(session_id, "again")
    client.prepare_turn(session_id, "again")
    assert [t.content for t in client.session(session_id).turns][2:] == ["again", "again"]

    assert client.reset_session(session_id, idempotency_key="reset-1") == 4
    assert client.reset_session(session_id, idempotency_key="reset-1") == 4, "the first answer"
    client.prepare_turn(session_id, "after the reset")
    assert client.delete_session(session_id, idempotency_key="delete-1") == 1
    assert client.delete_session(session_id, idempotency_key="delete-1") == 1


def test_every_call_that_changes_a_session_sends_a_fresh_key(
    server: Server, session_id: str
) -> None:
    with FlakyProxy.on(server.url).listen() as proxy, _fast(proxy.url) as client:
        client.prepare_turn(session_id, scenario.QUESTION, tools=[scenario.FILE_READ])
        client.record_reply(session_id, tool_calls=[scenario.CALL])
        client.record_tool_result(session_id, scenario.CALL["id"], scenario.RESULT)
        client.prepare_turn(session_id, tools=[scenario.FILE_READ])
        client.session(session_id)
        client.reset_session(session_id)
        client.prepare_turn(session_id, "again")
        client.delete_session(session_id)
        client.add_memory(f"a fact {uuid.uuid4()}")
        client.search_memories("fact")
    keyed = [s for s in proxy.seen if s.key is not None]
    assert [(s.method, s.path.rsplit("/", 1)[-1]) for s in keyed] == [
        ("POST", "turns"),
        ("POST", "replies"),
        ("POST", "tool-results"),
        ("POST", "turns"),
        ("POST", "reset"),
        ("POST", "turns"),
        ("DELETE", session_id),
    ]
    assert all(_is_uuid4(s.key) for s in keyed)
    assert len({s.key for s in keyed}) == len(keyed), "one key per call"
    unkeyed = [(s.method, s.path) for s in proxy.seen if s.key is None]
    assert unkeyed == [
        ("GET", f"/v1/sessions/{session_id}"),
        ("POST", "/v1/memories"),
        ("POST", "/v1/memories/search"),
    ]


def test_a_lost_answer_is_asked_again_under_the_same_key(server: Server, session_id: str) -> None:
    # The server prepares the turn and stores the message; its answer never reaches the client.
    with FlakyProxy.on(server.url, [Drop()]).listen() as proxy, _fast(proxy.url) as client:
        turn = client.prepare_turn(session_id, "only once, please")
        assert turn.session_id == session_id
        assert len(proxy.seen) == 2
        assert proxy.keys()[0] == proxy.keys()[1] and _is_uuid4(proxy.keys()[0])
        assert [s.replayed for s in proxy.seen] == [False, True], "the retry was answered again"
        assert [t.content for t in client.session(session_id).turns] == ["only once, please"]


def test_passing_refusals_are_retried_under_the_same_key(server: Server, session_id: str) -> None:
    faults: list[Fault] = [
        Refuse(503, "overloaded"),
        Refuse(503, "store_unavailable", retry_after="0"),
        Refuse(409, "session_conflict"),
        Refuse(408, "request_timeout", retry_after=None),
    ]
    with FlakyProxy.on(server.url, faults).listen() as proxy, _fast(proxy.url) as client:
        client.prepare_turn(session_id, "hello")
        assert len(proxy.seen) == 5
        assert len(set(proxy.keys())) == 1
        assert [s.body for s in proxy.seen] == [proxy.seen[0].body] * 5, "the same bytes"
        assert [t.content for t in client.session(session_id).turns] == ["hello"]


def test_retries_stop_after_max_retries(server: Server, session_id: str) -> None:
    faults: list[Fault] = [Refuse(503, "overloaded")] * 10
    with FlakyProxy.on(server.url, faults).listen() as proxy:
        with _fast(proxy.url, max_retries=2) as client, pytest.raises(OverloadedError) as err:
            client.prepare_turn(session_id, "hello")
        assert (err.value.status, err.value.code, err.value.retry_after) == (503, "overloaded", 0)
        assert len(proxy.seen) == 3
        assert len(set(proxy.keys())) == 1
        with _fast(proxy.url, max_retries=0) as client, pytest.raises(OverloadedError):
            client.prepare_turn(session_id, "hello")
        assert len(proxy.seen) == 4, "max_retries=0 sends once"


@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (503, "overloaded", True),
        (503, "store_unavailable", True),
        (503, "timeout", True),
        (409, "session_conflict", True),
        (408, "request_timeout", True),
        (503, "agent_unavailable", False),
        (500, "internal", False),
        (400, "invalid_request", False),
        (401, "unauthorized", False),
        (413, "body_too_large", False),
        (422, "budget", False),
        (422, "message_too_large", False),
        (422, "tool_not_allowed", False),
        (409, "tool_not_offered", False),
        (422, "idempotency_key_reused", False),
    ],
)
def test_which_refusals_are_retried(
    server: Server, session_id: str, status: int, code: str, retried: bool
) -> None:
    with FlakyProxy.on(server.url, [Refuse(status, code)]).listen() as proxy:
        with _fast(proxy.url) as client:
            if retried:
                client.prepare_turn(session_id, "hello")
            else:
                with pytest.raises(ERROR_CLASSES[code]) as err:
                    client.prepare_turn(session_id, "hello")
                assert (err.value.status, err.value.code) == (status, code)
        assert len(proxy.seen) == (2 if retried else 1)


def test_a_foreign_503_is_retried(server: Server, session_id: str) -> None:
    # A proxy in front of the server may answer 503 with a page of its own.
    with FlakyProxy.on(server.url, [Page(503)]).listen() as proxy, _fast(proxy.url) as client:
        client.prepare_turn(session_id, "hello")
        assert len(proxy.seen) == 2
        proxy.faults = [Page(502)]
        with pytest.raises(TransportError) as err:
            client.prepare_turn(session_id, "hello again")
        assert (err.value.status, err.value.code) == (502, "unexpected_response")
        assert len(proxy.seen) == 3, "only a 503 is retried"


def test_a_reused_key_is_refused_and_not_retried(server: Server, session_id: str) -> None:
    with FlakyProxy.on(server.url).listen() as proxy, _fast(proxy.url) as client:
        client.prepare_turn(session_id, "first", idempotency_key="mine")
        with pytest.raises(IdempotencyKeyReusedError) as err:
            client.prepare_turn(session_id, "second", idempotency_key="mine")
        assert (err.value.status, err.value.code) == (422, "idempotency_key_reused")
        assert proxy.keys() == ["mine", "mine"], "sent once each"
        assert [t.content for t in client.session(session_id).turns] == ["first"]


def test_adding_a_memory_is_retried_only_when_the_server_did_not_act(server: Server) -> None:
    # The server keeps every memory it is given: a retry after it may have acted could store
    # a second copy.
    faults: list[Fault] = [Refuse(503, "overloaded"), Refuse(503, "timeout")]
    with FlakyProxy.on(server.url, faults).listen() as proxy, _fast(proxy.url) as client:
        with pytest.raises(ServerTimeoutError):
            client.add_memory("stored at most once")
        assert len(proxy.seen) == 2, "retried after overloaded, not after timeout"
        proxy.faults = [Drop()]
        with pytest.raises(TransportError) as err:
            client.add_memory(f"stored once {uuid.uuid4()}")
        assert err.value.code == "connection"
        assert len(proxy.seen) == 3, "a lost answer is not asked again"
        assert proxy.seen[2].key is None


def test_a_refused_connection_is_retried_until_the_server_listens(
    server: Server, session_id: str
) -> None:
    # A bound socket that does not listen yet refuses connections; the proxy then listens on it.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    proxy = FlakyProxy.on(server.url, sock=sock)
    late = threading.Timer(0.3, proxy.listen)
    started = time.monotonic()
    late.start()
    try:
        with StrataClient(
            proxy.url, token=TOKEN, max_retries=10, retry_base_delay=0.02, retry_max_delay=0.2
        ) as client:
            turn = client.prepare_turn(session_id, "are you there?")
        assert time.monotonic() - started >= 0.3
        assert turn.session_id == session_id
        assert len(proxy.seen) == 1, "the refused attempts never reached a server"
        with _fast(proxy.url) as client:
            assert [t.content for t in client.session(session_id).turns] == ["are you there?"]
    finally:
        late.cancel()
        late.join()
        proxy.close()


def test_nothing_listening_fails_after_the_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        started = time.monotonic()
        with (
            StrataClient(url, token=TOKEN, max_retries=3, retry_base_delay=0.1) as client,
            pytest.raises(TransportError) as err,
        ):
            client.healthz()
        # Three waits of at least 0.05, 0.1 and 0.2 seconds.
        assert time.monotonic() - started >= 0.35
    assert (err.value.status, err.value.code) == (None, "connection")
    assert "(attempt 4)" in err.value.message


def test_the_async_client_retries_the_same_way(server: Server, session_id: str) -> None:
    async def run(url: str) -> None:
        async with AsyncStrataClient(
            url, token=TOKEN, retry_base_delay=0.01, retry_max_delay=0.05
        ) as client:
            await client.prepare_turn(session_id, "hello")
            await client.record_reply(session_id, "hi", idempotency_key="async-reply")
            with pytest.raises(IdempotencyKeyReusedError):
                await client.record_reply(session_id, "other", idempotency_key="async-reply")
            turns = (await client.session(session_id)).turns
            assert [t.content for t in turns] == ["hello", "hi"]

    faults: list[Fault] = [Refuse(503, "overloaded"), Drop()]
    with FlakyProxy.on(server.url, faults).listen() as proxy:
        asyncio.run(run(proxy.url))
    keys = proxy.keys()
    assert len(keys) == 6
    assert keys[0] == keys[1] == keys[2] and _is_uuid4(keys[0])
    assert [s.replayed for s in proxy.seen[:3]] == [None, False, True]
    assert keys[3:] == ["async-reply", "async-reply", None]


def test_retry_waits() -> None:
    policy = RetryPolicy(max_retries=3, base_delay=0.2, max_delay=1.0)
    for retry, top in [(0, 0.2), (1, 0.4), (2, 0.8)]:
        waits = [policy.wait(retry, None) for _ in range(50)]
        assert all(w is not None and top / 2 <= w <= top for w in waits), waits
    assert policy.wait(3, None) is None, "three retries, then no more"
    assert policy.wait(0, 0.9) == 0.9, "never sooner than Retry-After"
    assert policy.wait(0, 2.0) is None, "a Retry-After beyond max_delay is left to the caller"
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


def test_the_client_refuses_bad_retry_settings() -> None:
    bad: list[Callable[[], object]] = [
        lambda: StrataClient(max_retries=-1),
        lambda: StrataClient(retry_base_delay=-0.1),
        lambda: AsyncStrataClient(retry_max_delay=-1),
    ]
    for make in bad:
        with pytest.raises(ValueError):
            make()


def test_a_key_goes_only_where_the_api_takes_one() -> None:
    with pytest.raises(ValueError, match="takes no idempotency key"):
        call("add_memory", None, {"content": "x"}, {}, "k")
    assert IDEMPOTENCY_KEY not in call("session", "s1", None, {}, None).headers
    keyed = call("prepare_turn", "s1", {"message": "x"}, {}, None).headers[IDEMPOTENCY_KEY]
    assert _is_uuid4(keyed)
    assert call("prepare_turn", "s1", {}, {}, "mine").headers[IDEMPOTENCY_KEY] == "mine"
