"""The ingest HTTP app: provider webhooks in, one outbox transaction per delivery out.

What uvicorn serves is IngestApp (ingest/serve.py: a public and an admin listener):
every request passes the RequestObserver (trace id, log line, metrics). On the public
port a POST to one of the two webhook paths is answered by ingest.webhooks (the checks,
in order, and the group-commit write; see there), `/healthz` by the FastAPI app, and
anything else is a 404: nothing else is exposed to the internet. On the admin port
(loopback by default) the FastAPI app serves health, readiness (a database round
trip), metrics, /docs and OpenAPI; the webhooks are not taken there.
Nothing is written unless every check passed, and a whole delivery commits or nothing
(ingest/writer.py: many deliveries share one transaction, each in its own savepoint;
the answer is sent only after that COMMIT).
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, disable_created_metrics, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from paystream.ingest import api_schema
from paystream.ingest.errors import IngestError
from paystream.ingest.metrics import IngestMetrics
from paystream.ingest.observe import TRACE_SCOPE_KEY, RequestObserver, internal_error
from paystream.ingest.settings import IngestSettings
from paystream.ingest.store import EventStore
from paystream.ingest.webhooks import (
    ALCHEMY_PATH,
    PAYMENTS_PATH,
    PROVIDER_OF_PATH,
    Answer,
    Webhooks,
)
from paystream.ingest.writer import GroupCommitWriter
from paystream.logs import configure_logging
from paystream.trace import Trace

PUBLIC_API_PATHS = frozenset({"/healthz"})  # what the public port serves besides webhooks


class IngestApp:
    """The ASGI app: webhooks straight to their handler, the rest to FastAPI."""

    def __init__(self, api: FastAPI, webhooks: Webhooks, metrics: IngestMetrics,
                 admin_port: int) -> None:
        self.api = api  # its `state` holds the settings, store, writer and metrics
        self._webhooks = webhooks
        self._admin_port = admin_port
        self._observed = RequestObserver(self._dispatch, metrics=metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._observed(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.api(scope, receive, send)
            return
        path = scope["path"]
        server = scope.get("server")
        if server is not None and server[1] == self._admin_port:
            if path in self._webhooks.routes:  # money enters by the public door only
                await _not_found(scope, send)
            else:
                await self.api(scope, receive, send)
        elif scope["method"] == "POST" and path in self._webhooks.routes:
            await self._webhooks(scope, receive, send)
        elif path in PUBLIC_API_PATHS or path in self._webhooks.routes:  # 405 for a GET
            await self.api(scope, receive, send)
        else:
            await _not_found(scope, send)


def create_app(settings: IngestSettings, *, store: EventStore | None = None) -> IngestApp:
    """Build the app; nothing connects to Postgres until the first request needs it."""
    configure_logging("ingest")
    # The *_created series only double the scrape size (prometheus_client leaves this
    # one function unannotated).
    disable_created_metrics()  # type: ignore[no-untyped-call]
    store = store or EventStore(
        settings.database_url, connect_timeout_s=settings.db_connect_timeout_s,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        retry_after_s=settings.retry_after_s)
    metrics = IngestMetrics()
    writer = GroupCommitWriter(store, writers=settings.db_writers,
                               max_batch=settings.commit_batch_max,
                               linger_s=settings.commit_linger_ms / 1000,
                               on_commit=metrics.observe_commit)
    webhooks = Webhooks(settings, writer, metrics)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        writer.close()  # the writers finish what is queued first
        store.close()

    app = FastAPI(title="paystream ingest", version="0.1.0", lifespan=lifespan,
                  description="Provider webhooks -> verified, validated, idempotent "
                              "transactional outbox writes.")
    app.state.settings = settings
    app.state.store = store
    app.state.writer = writer
    app.state.metrics = metrics

    # IngestApp answers POST on these two paths before FastAPI sees them; the routes are
    # here for /docs and /openapi.json, and call the same handlers if this FastAPI app
    # is ever served on its own.
    @app.post(ALCHEMY_PATH, responses=api_schema.WEBHOOK_RESPONSES,
              openapi_extra=api_schema.ALCHEMY_OPENAPI, response_model=None,
              summary="Alchemy Notify Address Activity")
    async def alchemy_webhook(request: Request) -> JSONResponse:
        return _response(await webhooks.alchemy(request.scope, request.receive))

    @app.post(PAYMENTS_PATH, responses=api_schema.WEBHOOK_RESPONSES,
              openapi_extra=api_schema.PAYMENTS_OPENAPI, response_model=None,
              summary="Payment gateway (Standard Webhooks)")
    async def payments_webhook(request: Request) -> JSONResponse:
        return _response(await webhooks.payments(request.scope, request.receive))

    @app.get("/healthz", response_model=api_schema.HealthAnswer, summary="process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", responses=api_schema.READY_RESPONSES, response_model=None,
             summary="the database answers")
    async def readyz(request: Request) -> JSONResponse:
        await writer.write(lambda cur: cur.execute("SELECT 1"))
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", responses=api_schema.METRICS_RESPONSES, response_class=Response,
             summary="Prometheus metrics")
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(IngestError)
    async def on_ingest_error(request: Request, exc: IngestError) -> JSONResponse:
        provider = PROVIDER_OF_PATH.get(request.url.path, "none")
        return _response(webhooks.refusal(request.scope, provider, exc))

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

    @app.exception_handler(Exception)
    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        # The JSON 500 of every route; the RequestObserver outside logs the exception.
        return JSONResponse(internal_error(_trace(request).trace_id), status_code=500)

    return IngestApp(app, webhooks, metrics, settings.admin_port)


def create_app_from_env() -> IngestApp:
    """uvicorn's factory (`paystream ingest`, one call per worker process)."""
    app = create_app(IngestSettings.from_env(os.environ))
    # What exists now (modules, the app) lives as long as the process: freezing it keeps
    # it out of every later collection, which otherwise re-scans it each time the
    # per-request garbage reaches an older generation (+5 % saturated throughput,
    # bench/ingest_bench.py).
    gc.collect()
    gc.freeze()
    return app


async def _not_found(scope: Scope, send: Send) -> None:
    """The public port's answer for everything but the webhooks and /healthz."""
    trace: Trace = scope[TRACE_SCOPE_KEY]
    body = orjson.dumps({"status": "error", "code": "http_404", "reason": "Not Found",
                         "trace_id": trace.trace_id})
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": body})


def _trace(request: Request) -> Trace:
    trace: Trace = request.scope[TRACE_SCOPE_KEY]  # the observer put it there
    return trace


def _response(answer: Answer) -> JSONResponse:
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)
