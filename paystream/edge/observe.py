"""Per-request observation for an HTTP edge: trace id, one log line, request metrics.

A plain ASGI middleware (not BaseHTTPMiddleware, which costs a task per request), the
outermost layer of each edge's app. It decodes the request headers once (the ingest's
webhook routes read them from the scope), resolves the trace id before the handler runs,
binds it to the log context, adds it to the answer's headers, and turns an unexpected
exception into a JSON 500 that is counted and logged like any other answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import orjson
import structlog
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paystream import trace as tracing
from paystream.edge.errors import error_body

TRACE_SCOPE_KEY = "paystream.trace"
LOG_SCOPE_KEY = "paystream.log"  # handlers add fields to the request's log line here
HEADERS_SCOPE_KEY = "paystream.headers"  # lowercase name -> first value, decoded once

# What an answer is counted as: a bounded label (a route or "other") from the scope.
Endpoint = Callable[[Scope], str]
# Records one answer: (endpoint, status, seconds).
ObserveAnswer = Callable[[str, int, float], None]


class RequestObserver:
    def __init__(self, app: ASGIApp, observe_answer: ObserveAnswer, *, service: str,
                 endpoint: Endpoint, delivery_id_header: str | None = None,
                 endpoint_log_field: str | None = None) -> None:
        """`service`: bound to every log line; `delivery_id_header`: a provider's delivery
        id, the trace id when the caller sent no X-Request-ID; `endpoint_log_field`: the
        log line's name for the endpoint, when it carries one."""
        self.app = app
        self._observe_answer = observe_answer
        self._service = service
        self._endpoint = endpoint
        self._delivery_id_header = delivery_id_header
        self._endpoint_log_field = endpoint_log_field
        self._log = structlog.get_logger(service)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = header_map(scope)
        scope[HEADERS_SCOPE_KEY] = headers
        delivery_id = (None if self._delivery_id_header is None
                       else headers.get(self._delivery_id_header))
        trace = tracing.from_headers(headers.get(tracing.REQUEST_ID_HEADER), delivery_id)
        scope[TRACE_SCOPE_KEY] = trace
        fields: dict[str, Any] = {}
        scope[LOG_SCOPE_KEY] = fields
        structlog.contextvars.bind_contextvars(service=self._service, trace_id=trace.trace_id)
        answer = {"status": 500, "started": False}

        async def send_with_trace(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["started"] = True
                message = {**message, "headers": [
                    *message.get("headers", []),
                    (b"x-request-id", trace.trace_id.encode("ascii")),
                ]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_trace)
        except Exception:
            self._log.exception("unexpected error")
            if not answer["started"]:
                await _send_500(send_with_trace, trace.trace_id)
        finally:
            elapsed = time.perf_counter() - started
            path = scope.get("path", "")
            endpoint = self._endpoint(scope)
            status = int(answer["status"])
            self._observe_answer(endpoint, status, elapsed)
            line: dict[str, Any] = {"method": scope.get("method"), "path": path[:200]}
            if self._endpoint_log_field is not None:
                line[self._endpoint_log_field] = endpoint
            level = self._log.info if status < 400 else self._log.warning
            level("request answered", **line, status=status,
                  duration_ms=round(elapsed * 1000, 2), **fields)
            structlog.contextvars.unbind_contextvars("trace_id")


def header_map(scope: Scope) -> dict[str, str]:
    """The request headers by lowercase name, the first value of each (as starlette's
    Headers.get answers), decoded as latin-1; one pass instead of a scan per lookup."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1")
        if key not in headers:
            headers[key] = value.decode("latin-1")
    return headers


def trace_of(scope: Scope) -> tracing.Trace:
    """The request's trace (the observer put it in the scope)."""
    trace: tracing.Trace = scope[TRACE_SCOPE_KEY]
    return trace


def request_trace_id(request: Request) -> str:
    return trace_of(request.scope).trace_id


def internal_error(trace_id: str) -> dict[str, Any]:
    """The body of a 500: the cause is in the log line, never in the answer."""
    return error_body("internal_error", "unexpected server error", trace_id)


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """A port's answer for a path it does not serve (nothing reaches the app)."""
    body = orjson.dumps(error_body("http_404", "Not Found", trace_of(scope).trace_id))
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": body})


async def _send_500(send: Send, trace_id: str) -> None:
    body = json.dumps(internal_error(trace_id)).encode()
    await send({"type": "http.response.start", "status": 500,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
