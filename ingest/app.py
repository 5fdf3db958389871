"""The ingest HTTP app: provider webhooks in, one outbox transaction per delivery out.

Order of checks for every webhook, cheapest and most hostile first:
  rate limit (429) -> Content-Type (415) -> bounded body read (413)
  -> signature on the raw bytes (401) -> strict JSON + validation (400)
  -> the delivery's savepoint in a group commit (409 conflict, 503 database
     unavailable) -> 200, sent only after the COMMIT that holds the delivery returned.
Nothing is written unless every check passed, and a whole delivery commits or nothing
(ingest/writer.py: many deliveries share one transaction, each in its own savepoint).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, disable_created_metrics, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from ingest import alchemy, alchemy_signature, api_schema, payments, standard_webhooks
from ingest.errors import ConflictError, DatabaseUnavailableError, IngestError
from ingest.metrics import IngestMetrics
from ingest.observe import LOG_SCOPE_KEY, TRACE_SCOPE_KEY, RequestObserver
from ingest.rate_limit import TokenBuckets
from ingest.recording import Recorded, record_alchemy
from ingest.request_body import parse_json, read_bounded, require_json
from ingest.settings import IngestSettings
from ingest.store import EventStore
from ingest.trace import Trace
from ingest.writer import GroupCommitWriter
from schema.logs import configure_logging
from schema.outbox import WriteOutcome

log = structlog.get_logger("ingest")
PROVIDER_OF_PATH = {"/webhooks/alchemy": alchemy.PROVIDER, "/webhooks/payments": "payments"}


def create_app(settings: IngestSettings, *, store: EventStore | None = None) -> FastAPI:
    """Build the app; nothing connects to Postgres until the first request needs it."""
    configure_logging("ingest")
    disable_created_metrics()  # the *_created series only double the scrape size
    store = store or EventStore(
        settings.database_url, connect_timeout_s=settings.db_connect_timeout_s,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        retry_after_s=settings.retry_after_s)
    metrics = IngestMetrics()
    buckets = TokenBuckets(settings.rate_per_second, settings.rate_burst)
    writer = GroupCommitWriter(store, writers=settings.db_writers,
                               max_batch=settings.commit_batch_max,
                               linger_s=settings.commit_linger_ms / 1000,
                               on_commit=metrics.observe_commit)
    in_database = writer.write

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        writer.close()  # the writers finish what is queued first
        store.close()

    app = FastAPI(title="paystream ingest", version="0.1.0", lifespan=lifespan,
                  description="Provider webhooks -> verified, validated, idempotent "
                              "transactional outbox writes.")
    app.add_middleware(RequestObserver, metrics=metrics)
    app.state.settings = settings
    app.state.store = store
    app.state.writer = writer
    app.state.metrics = metrics

    @app.post("/webhooks/alchemy", responses=api_schema.WEBHOOK_RESPONSES,
              openapi_extra=api_schema.ALCHEMY_OPENAPI, response_model=None,
              summary="Alchemy Notify Address Activity")
    async def alchemy_webhook(request: Request) -> JSONResponse:
        body = await _authentic_body(request, alchemy.PROVIDER)
        alchemy_signature.verify(body, request.headers.get(alchemy_signature.HEADER),
                                 settings.alchemy_signing_keys)
        obj = parse_json(body)
        trace = _trace(request)
        trace.adopt_delivery_id(obj.get("id") if isinstance(obj, dict) else None)
        delivery = alchemy.parse_delivery(obj)
        recorded = await in_database(
            partial(_bound, record_alchemy, delivery=delivery, trace_id=trace.trace_id))
        return _answer(request, alchemy.PROVIDER, recorded)

    @app.post("/webhooks/payments", responses=api_schema.WEBHOOK_RESPONSES,
              openapi_extra=api_schema.PAYMENTS_OPENAPI, response_model=None,
              summary="Payment gateway (Standard Webhooks)")
    async def payments_webhook(request: Request) -> JSONResponse:
        body = await _authentic_body(request, payments.PROVIDER)
        standard_webhooks.verify(body, request.headers, settings.payments_secrets,
                                 tolerance_s=settings.timestamp_tolerance_s)
        event = payments.parse_payment(parse_json(body), settings.payments_default_asset)
        trace_id = _trace(request).trace_id
        recorded = await in_database(payments.PaymentWrite(event, trace_id))
        return _answer(request, payments.PROVIDER, recorded)

    async def _authentic_body(request: Request, provider: str) -> bytes:
        """The raw body, once the cheap refusals (429, 415, 413) are out of the way."""
        buckets.take(provider, request.client.host if request.client else "unknown")
        require_json(request)
        return await read_bounded(request, settings.max_body_bytes)

    def _answer(request: Request, provider: str, recorded: Recorded) -> JSONResponse:
        for _, outcome in recorded.events:
            metrics.events.labels(provider, outcome.value).inc()
        for notice in recorded.notices_new:
            metrics.notices.labels(provider, notice.kind.value).inc()
            if notice.event_id is not None:  # a transfer we saw and did not credit
                metrics.events.labels(provider, "ignored").inc()
            log.info("delivery item not credited", kind=notice.kind.value,
                     reason=notice.reason, event_id=notice.event_id, notice_id=notice.notice_id)
        status = "accepted" if recorded.wrote_anything else "duplicate"
        trace_id = _trace(request).trace_id
        request.scope[LOG_SCOPE_KEY].update(
            provider=provider, outcome=status,
            events={e: o.value for e, o in recorded.events},
            notices_recorded=len(recorded.notices_new))
        return JSONResponse({
            "status": status, "trace_id": trace_id,
            "events": [{"event_id": e, "outcome": o.value} for e, o in recorded.events],
            "notices_recorded": len(recorded.notices_new),
            "notices_known": recorded.notices_known,
        })

    @app.get("/healthz", response_model=api_schema.HealthAnswer, summary="process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", responses=api_schema.READY_RESPONSES, response_model=None,
             summary="the database answers")
    async def readyz(request: Request) -> JSONResponse:
        await in_database(lambda cur: cur.execute("SELECT 1"))
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", responses=api_schema.METRICS_RESPONSES, response_class=Response,
             summary="Prometheus metrics")
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(IngestError)
    async def on_ingest_error(request: Request, exc: IngestError) -> JSONResponse:
        provider = PROVIDER_OF_PATH.get(request.url.path, "none")
        trace_id = _trace(request).trace_id
        body: dict[str, Any] = {"status": "error", "code": exc.code, "reason": exc.detail,
                                "trace_id": trace_id}
        if isinstance(exc, ConflictError):
            body["event_id"] = exc.event_id
            metrics.events.labels(provider, WriteOutcome.CONFLICT.value).inc()
            log.warning("conflicting duplicate: same event id, different content",
                        provider=provider, event_id=exc.event_id)
        else:
            metrics.refusals.labels(provider, exc.code).inc()
        if isinstance(exc, DatabaseUnavailableError):
            log.warning("database unavailable; asked the provider to retry",
                        provider=provider)
        request.scope[LOG_SCOPE_KEY].update(provider=provider, code=exc.code,
                                            reason=exc.detail[:300])
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"status": "error", "code": f"http_{exc.status_code}",
                             "reason": str(exc.detail), "trace_id": _trace(request).trace_id},
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError
                                  ) -> JSONResponse:
        return JSONResponse({"status": "error", "code": "invalid_request",
                             "reason": str(exc.errors())[:500],
                             "trace_id": _trace(request).trace_id}, status_code=400)

    return app


def create_app_from_env() -> FastAPI:
    """uvicorn's factory (`paystream ingest`, one call per worker process)."""
    return create_app(IngestSettings.from_env(os.environ))


def _trace(request: Request) -> Trace:
    return request.scope[TRACE_SCOPE_KEY]


def _bound(record: Callable[..., Recorded], cur: Any, **kwargs: Any) -> Recorded:
    # store.run passes the cursor first; the delivery and trace id are bound by name.
    return record(cur, **kwargs)
