"""The ingest's HTTP/1.1 connections: uvicorn's httptools protocol plus the limits it lacks.

What uvicorn 0.54 enforces by itself when it runs on httptools (it does whenever
httptools is installed, as here; `--http auto`):
  - no limit on the size or the number of request headers: llhttp has none, and
    `h11_max_incomplete_event_size` (16 KiB by default) applies to the h11 parser only;
  - no deadline for a request head: its keep-alive timer runs only between requests
    and any byte received cancels it, so a head trickled a byte at a time is held open;
  - `--limit-concurrency` counts connections and tasks, but answers a plain-text 503
    without Retry-After;
  - `--proxy-headers` is on by default and trusts X-Forwarded-For from 127.0.0.1.

EdgeProtocol adds, per connection and with nothing added to a request's ASGI path:
  - 431 once the head passes `max_header_bytes` (counted as it streams in, so a single
    huge header is refused before it is buffered whole) or `max_headers` headers;
  - 408 (or a plain close if nothing arrived) when a head is not complete within
    `header_timeout_s` of the connection opening or the previous answer;
  - a body not complete within `body_timeout_s` of its head: the request's scope is
    marked and the app woken; the webhook reader (ingest/request_body.py) answers 408
    and the connection is closed;
  - past `max_connections` open public connections (per worker), the request is
    answered 503 with Retry-After and the connection closed.
Admin connections (the loopback admin port) are exempt from the connection cap.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Any, cast

import orjson
import structlog
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from paystream.edge.errors import error_body
from paystream.ingest.request_body import BODY_LATE_SCOPE_KEY
from paystream.ingest.settings import IngestSettings

log = structlog.get_logger("ingest")


@functools.cache
def _settings() -> IngestSettings:
    # Read once per worker process (uvicorn builds one protocol per connection); the
    # app factory reads the same environment and refuses to start on a bad one.
    return IngestSettings.from_env()


class _HeadTooLargeError(Exception):
    """Raised from a parser callback: httptools turns it into a parser error."""


class EdgeProtocol(HttpToolsProtocol):
    open_public = 0  # public connections of this worker, against max_connections

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None,
                 settings: IngestSettings | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.edge = edge = settings or _settings()
        self._max_head_bytes = edge.max_header_bytes  # read per header: kept at hand
        self._max_headers = edge.max_headers
        self._public = True
        self._in_head = True
        self._head_bytes = 0  # bytes of chunks received while the head was incomplete
        self._head_size = 0  # URL and headers parsed so far
        self._header_count = 0
        # When the head being awaited began to be awaited, and when the body being
        # awaited did (None when none is). One timer per connection checks both, instead
        # of a timer armed and cancelled for every request of a keep-alive connection.
        self._head_since: float | None = None
        self._body_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._public = self.server is None or self.server[1] != self.edge.admin_port
        if self._public:
            EdgeProtocol.open_public += 1
            if EdgeProtocol.open_public > self.edge.max_connections:
                self.app = _over_capacity(self.edge.retry_after_s)  # this connection only
        self._head_since = self.loop.time()
        self._timer = self.loop.call_later(self.edge.header_timeout_s, self._check_deadlines)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._public:
            EdgeProtocol.open_public -= 1
            self._public = False  # counted once
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head:
            if self._head_bytes > self._max_head_bytes and not self.transport.is_closing():
                self._refuse(431, "headers_too_large",
                             f"the request head exceeds {self._max_head_bytes} bytes")
        elif self._body_since is not None:  # a body still to come: check it in time
            due = self._body_since + self.edge.body_timeout_s
            if self._timer is not None and self._timer.when() > due:
                self._timer.cancel()
                self._timer = self.loop.call_at(due, self._check_deadlines)

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_count > self._max_headers or \
                self._head_size > self._max_head_bytes:
            raise _HeadTooLargeError  # uvicorn answers a parser error with send_400_response
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_since = None
        self._body_since = self.loop.time()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_since = None
        self._in_head = True  # what follows is the next request's head
        if self.cycle.response_complete:  # answered before its body ended: clock starts
            self._head_since = self.loop.time()
        self._head_bytes = self._head_size = self._header_count = 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._in_head:  # else the body's deadline still runs (the next head's later)
            self._head_since = self.loop.time()  # the next head: the first one's deadline

    def send_400_response(self, msg: str) -> None:
        if self._header_count > self.edge.max_headers:
            self._refuse(431, "too_many_headers",
                         f"more than {self.edge.max_headers} request headers")
        elif self._head_size > self.edge.max_header_bytes:
            self._refuse(431, "headers_too_large",
                         f"the request head exceeds {self.edge.max_header_bytes} bytes")
        else:
            super().send_400_response(msg)

    def _check_deadlines(self) -> None:
        """The connection's timer: refuse a late head, tell the app its body is late, or
        look again when the awaited head or body would be late."""
        self._timer = None
        if self.transport.is_closing():
            return
        edge, now = self.edge, self.loop.time()
        if self._head_since is not None:
            due = self._head_since + edge.header_timeout_s
            if now >= due:
                if self._head_bytes:
                    self._refuse(408, "header_timeout", f"the request head did not arrive "
                                                        f"within {edge.header_timeout_s:g} s")
                else:
                    self.transport.close()  # an idle connection: nothing to answer
                return
        elif self._body_since is not None:
            due = self._body_since + edge.body_timeout_s
            if now >= due:
                scope = cast(dict[str, Any], self.scope)
                if self.cycle.response_complete or BODY_LATE_SCOPE_KEY in scope:
                    self.transport.close()  # answered without the body, or still late
                    return
                # The webhook reader wakes up, sees the mark and answers 408 (closing the
                # connection); a route that reads no body never looks, so look again.
                scope[BODY_LATE_SCOPE_KEY] = True
                self.cycle.message_event.set()
                due = now + edge.body_timeout_s
        else:  # the request is being answered: the next head's clock has not started
            due = now + edge.header_timeout_s
        self._timer = self.loop.call_at(due, self._check_deadlines)

    def _refuse(self, status: int, code: str, reason: str) -> None:
        """Answer from the connection itself (no request reached the app) and close."""
        if self._refused:
            return
        self._refused = True
        trace_id = uuid.uuid4().hex
        log.warning("request refused at the HTTP edge", status=status, code=code,
                    reason=reason, trace_id=trace_id,
                    client=self.client[0] if self.client else None)
        self.transport.write(_raw_answer(status, code, reason, trace_id))
        self.transport.close()


_PHRASES = {408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}


def _raw_answer(status: int, code: str, reason: str, trace_id: str,
                extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    body = orjson.dumps(error_body(code, reason, trace_id))
    head = [b"HTTP/1.1 %d %s" % (status, _PHRASES[status]),
            b"content-type: application/json",
            b"content-length: %d" % len(body), b"connection: close",
            b"x-request-id: " + trace_id.encode("ascii"),
            *(name + b": " + value for name, value in extra)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _over_capacity(retry_after_s: int) -> Any:
    """The ASGI app of a connection past the cap: 503, Retry-After, close."""
    async def answer(scope: Any, receive: Any, send: Any) -> None:
        trace_id = uuid.uuid4().hex
        body = orjson.dumps(error_body(
            "too_many_connections", "the ingest has too many open connections; retry later",
            trace_id))
        log.warning("request refused: too many connections", trace_id=trace_id)
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"retry-after", str(retry_after_s).encode("ascii")),
            (b"connection", b"close"), (b"x-request-id", trace_id.encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})
    return answer
