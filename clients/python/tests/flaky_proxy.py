"""A loopback HTTP server between a client and `strata serve` that misbehaves on purpose: it
refuses requests with an error of its choosing, or forwards one and then loses the answer, and
forwards everything else unchanged. It keeps every request it received, so a test can see how
often the client tried and with which headers."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx

FORWARDED = ("authorization", "content-type", "idempotency-key")
"""The request headers passed on to the server."""

ANSWERED = ("content-type", "retry-after", "idempotent-replayed")
"""The response headers passed back to the client."""


@dataclass(frozen=True)
class Refuse:
    """Answer with this error instead of forwarding."""

    status: int
    code: str
    retry_after: str | None = "0"


@dataclass(frozen=True)
class Page:
    """Answer with an HTML page of this status, as a proxy of its own would."""

    status: int


@dataclass(frozen=True)
class Drop:
    """Forward the request, then close the connection without answering: the server acted,
    the client never hears of it."""


Fault = Refuse | Page | Drop | None
"""What to do with one request; ``None`` forwards it."""


@dataclass
class Seen:
    """A request the proxy received, and what the server said of it when it was forwarded."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    replayed: bool | None = None

    @property
    def key(self) -> str | None:
        return self.headers.get("idempotency-key")


@dataclass
class FlakyProxy:
    """Applies ``faults`` to the requests in the order they arrive; once they are used up,
    forwards every request to ``upstream``."""

    upstream: str
    faults: list[Fault]
    seen: list[Seen] = field(default_factory=list)
    _httpd: ThreadingHTTPServer | None = field(default=None, repr=False)
    _upstream: httpx.Client | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _listening: bool = field(default=False, repr=False)

    @classmethod
    def on(
        cls, upstream: str, faults: Sequence[Fault] = (), sock: socket.socket | None = None
    ) -> FlakyProxy:
        """A proxy bound to ``sock`` (a bound TCP socket, not yet listening), else to a free
        loopback port; it answers once ``listen()`` is called."""
        proxy = cls(upstream, list(faults))
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), proxy._handler(), bind_and_activate=False)
        if sock is None:
            httpd.server_bind()
        else:
            httpd.socket.close()
            httpd.socket = sock
            httpd.server_address = sock.getsockname()
        httpd.daemon_threads = True
        proxy._httpd = httpd
        proxy._upstream = httpx.Client(base_url=upstream, timeout=30)
        return proxy

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def listen(self) -> FlakyProxy:
        assert self._httpd is not None
        self._listening = True
        self._httpd.server_activate()
        serve = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        serve.start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            if self._listening:
                self._httpd.shutdown()
            self._httpd.server_close()
        if self._upstream is not None:
            self._upstream.close()

    def __enter__(self) -> FlakyProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def keys(self) -> list[str | None]:
        """The ``Idempotency-Key`` of every request received, in order."""
        return [s.key for s in self.seen]

    def _next(self, seen: Seen) -> Fault:
        with self._lock:
            self.seen.append(seen)
            return self.faults.pop(0) if self.faults else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                seen = Seen(self.command, self.path, headers, body)
                fault = proxy._next(seen)
                if isinstance(fault, Refuse):
                    message = f"{fault.code} planted by the test proxy"
                    error = {"error": {"code": fault.code, "message": message}}
                    extra = {} if fault.retry_after is None else {"retry-after": fault.retry_after}
                    self._answer(fault.status, json.dumps(error).encode(), extra)
                    return
                if isinstance(fault, Page):
                    page = f"<html><body>{fault.status} from a proxy</body></html>".encode()
                    self._answer(fault.status, page, {"content-type": "text/html"})
                    return
                assert proxy._upstream is not None
                forwarded = {k: v for k, v in headers.items() if k in FORWARDED}
                response = proxy._upstream.request(
                    self.command, self.path, content=body or None, headers=forwarded
                )
                seen.replayed = response.headers.get("idempotent-replayed") == "true"
                if isinstance(fault, Drop):
                    self.close_connection = True
                    return
                passed = {k: v for k, v in response.headers.items() if k.lower() in ANSWERED}
                self._answer(response.status_code, response.content, passed)

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
