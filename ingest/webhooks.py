"""The webhook routes (one per provider served, ingest/registry.py), answered as plain
ASGI: the checks, the write, the answer.

Order of checks for every webhook, cheapest and most hostile first:
  a source that keeps failing authentication (429) -> Content-Type (415)
  -> bounded body read (413, 408 past the body deadline) -> signature on the raw bytes
  (401; each refusal so far spends from the source's small failure bucket)
  -> the provider's rate limit, charged only now (429) -> strict JSON + validation (400)
  -> the delivery's savepoint in a group commit: the gateway's event known not to apply
     (422 unknown_user / reference_of_other_user, ingest.refusals: only the refusal is
     recorded), 409 conflict, 503 database unavailable
  -> 200, sent only after the COMMIT that holds the delivery returned (a 422 too).

Why not FastAPI routes: these handlers read the raw body themselves (the signature
covers the exact bytes) and answer JSON built by hand, so FastAPI's routing, dependency
solving, exception middleware and telemetry layers did no work for them, yet cost about
as much CPU per request as the checks and the write together (bench/ingest_bench.py).
ingest.app serves POST to these paths here, before FastAPI, and declares them on the
FastAPI app too (ingest/routes_webhooks.py): /docs and /openapi.json describe them, and
that route calls the same handler when the FastAPI app is served on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from starlette.types import Receive, Scope, Send

from paystream.edge.errors import error_body
from paystream.edge.observe import HEADERS_SCOPE_KEY, LOG_SCOPE_KEY, header_map, trace_of
from paystream.ingest.errors import (
    BodyTimeoutError,
    ConflictingDuplicateError,
    DatabaseUnavailableError,
    IngestError,
    NotApplicableError,
)
from paystream.ingest.metrics import IngestMetrics
from paystream.ingest.recording import Recorded
from paystream.ingest.registry import Served
from paystream.ingest.request_body import parse_json, read_bounded, require_json
from paystream.ingest.settings import IngestSettings
from paystream.ingest.writer import GroupCommitWriter
from paystream.rate_limit import TokenBuckets
from paystream.schema.outbox import WriteOutcome

log = structlog.get_logger("ingest")


@dataclass(frozen=True, slots=True)
class Answer:
    """A JSON answer: status, body, extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] | None = None

    def encoded(self) -> bytes:
        # What starlette's JSONResponse renders (compact, UTF-8), in a third of the time.
        # Answers hold only strings, ints and lists/dicts of them: no float, no NaN.
        return orjson.dumps(self.body)


class Webhooks:
    """POST to every served provider's path (ingest/registry.py), as one ASGI app."""

    def __init__(self, settings: IngestSettings, writer: GroupCommitWriter,
                 metrics: IngestMetrics) -> None:
        self._settings = settings
        self._writer = writer
        self._metrics = metrics
        # Charged after authentication, so unsigned junk cannot drain a provider's
        # bucket; the source address is the TCP peer unless a trusted proxy named it.
        self._buckets = TokenBuckets(settings.rate_per_second, settings.rate_burst,
                                     what="verified deliveries")
        self._failures = TokenBuckets(settings.auth_failure_rate_per_second,
                                      settings.auth_failure_burst,
                                      what="unauthenticated requests")
        # The providers by path, built once: a request's route is one dict lookup.
        self.routes: dict[str, Served] = {s.provider.path: s for s in settings.providers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a POST to one of `routes` (the caller checked path and method)."""
        provider = self.routes[scope["path"]]
        try:
            answer = await self.deliver(provider, scope, receive)
        except IngestError as exc:
            answer = self.refusal(scope, provider.name, exc)
        body = answer.encoded()
        headers = [(b"content-length", str(len(body)).encode("ascii")),
                   (b"content-type", b"application/json")]
        if answer.headers:
            headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in answer.headers.items()]
        await send({"type": "http.response.start", "status": answer.status,
                    "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def deliver(self, provider: Served, scope: Scope, receive: Receive) -> Answer:
        """One delivery of `provider`: verified, validated, written, answered; an
        IngestError for every refusal."""
        headers = _headers(scope)
        settings, own = self._settings, provider.settings
        body = await self._authentic_body(
            scope, receive, headers, provider.name,
            lambda raw: provider.verify(raw, headers, own, settings))
        write = provider.delivery(parse_json(body), own, trace_of(scope))
        recorded = await self._writer.write(write)
        if recorded.refused is not None:  # recorded in refused_deliveries, nothing else
            raise recorded.refused.error(recorded.refused_event_id or "")
        return self._accepted(scope, provider.name, recorded)

    async def _authentic_body(self, scope: Scope, receive: Receive, headers: dict[str, str],
                              provider: str, verify: Callable[[bytes], object]) -> bytes:
        """The raw body once `verify` accepted it, the provider's rate limit charged."""
        client = scope.get("client")
        source = client[0] if client else "unknown"
        failures = self._failures
        failures.require(source)  # a source that keeps failing: refused before any work
        try:
            require_json(headers.get("content-type"))
            body = await read_bounded(scope, receive, headers.get("content-length"),
                                      self._settings.max_body_bytes)
            verify(body)
        except IngestError:
            failures.spend(source)
            raise
        self._buckets.take(provider)
        return body

    def _accepted(self, scope: Scope, provider: str, recorded: Recorded) -> Answer:
        metrics = self._metrics
        for _, outcome in recorded.events:
            metrics.count_event(provider, outcome.value)
        for notice in recorded.notices_new:
            metrics.notices.labels(provider, notice.kind.value).inc()
            if notice.event_id is not None:  # a transfer we saw and did not credit
                metrics.count_event(provider, "ignored")
            log.info("delivery item not credited", kind=notice.kind.value,
                     reason=notice.reason, event_id=notice.event_id,
                     notice_id=notice.notice_id)
        status = "accepted" if recorded.wrote_anything else "duplicate"
        scope[LOG_SCOPE_KEY].update(
            provider=provider, outcome=status,
            events={e: o.value for e, o in recorded.events},
            notices_recorded=len(recorded.notices_new))
        return Answer(200, {
            "status": status, "trace_id": trace_of(scope).trace_id,
            "events": [{"event_id": e, "outcome": o.value} for e, o in recorded.events],
            "notices_recorded": len(recorded.notices_new),
            "notices_known": recorded.notices_known,
        })

    def refusal(self, scope: Scope, provider: str, exc: IngestError) -> Answer:
        """The error answer for `exc`, counted and logged (every route's refusals)."""
        body = error_body(exc.code, exc.detail, trace_of(scope).trace_id)
        if isinstance(exc, ConflictingDuplicateError):
            body["event_id"] = exc.event_id
            self._metrics.count_event(provider, WriteOutcome.CONFLICT.value)
            log.warning("conflicting duplicate: same event id, different content",
                        provider=provider, event_id=exc.event_id)
        else:
            self._metrics.refusals.labels(provider, exc.code).inc()
        if isinstance(exc, NotApplicableError):
            body["event_id"] = exc.event_id
            log.warning("event refused: known not to apply; recorded in refused_deliveries",
                        provider=provider, code=exc.code, event_id=exc.event_id)
        if isinstance(exc, DatabaseUnavailableError):
            log.warning("database unavailable; asked the provider to retry",
                        provider=provider)
        scope[LOG_SCOPE_KEY].update(provider=provider, code=exc.code,
                                    reason=exc.detail[:300])
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        if isinstance(exc, BodyTimeoutError):  # the rest of a trickled body is not awaited
            headers = {"Connection": "close"}
        return Answer(exc.status, body, headers)


def _headers(scope: Scope) -> dict[str, str]:
    # Decoded once by the RequestObserver that wraps every request.
    headers = scope.get(HEADERS_SCOPE_KEY)
    return headers if headers is not None else header_map(scope)
