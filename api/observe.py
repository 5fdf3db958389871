"""Per-request observation for the API: the trace id (X-Request-ID, else a new one) bound
to every log line and returned in the answer, one log line and the metrics per answer,
and a JSON 500 for an exception nothing else answered. A plain ASGI middleware."""

from __future__ import annotations

import time
from typing import Any

import orjson
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paystream import trace as tracing
from paystream.api.metrics import ApiMetrics
from paystream.edge.errors import error_body

TRACE_SCOPE_KEY = "paystream.trace"
log = structlog.get_logger("api")


class RequestObserver:
    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = next((v.decode("latin-1") for k, v in scope["headers"]
                           if k == b"x-request-id"), None)
        trace = tracing.from_headers(request_id, None)
        scope[TRACE_SCOPE_KEY] = trace
        structlog.contextvars.bind_contextvars(service="api", trace_id=trace.trace_id)
        answer: dict[str, Any] = {"status": 500, "started": False}

        async def send_with_trace(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["started"] = True
                message = {**message, "headers": [
                    *message.get("headers", []),
                    (b"x-request-id", trace.trace_id.encode("ascii"))]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_trace)
        except Exception:
            log.exception("unexpected error")
            if not answer["started"]:
                body = orjson.dumps(error_body("internal_error", "unexpected server error",
                                               trace.trace_id))
                await send_with_trace({"type": "http.response.start", "status": 500,
                                       "headers": [(b"content-type", b"application/json")]})
                await send_with_trace({"type": "http.response.body", "body": body})
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "other"
            status = int(answer["status"])
            self.metrics.observe_answer(route, status, elapsed)
            (log.info if status < 400 else log.warning)(
                "request answered", method=scope.get("method"),
                path=scope.get("path", "")[:200], route=route, status=status,
                duration_ms=round(elapsed * 1000, 2))
            structlog.contextvars.unbind_contextvars("trace_id")
