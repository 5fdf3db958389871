"""The ingest HTTP app: provider webhooks in, one outbox transaction per delivery out.

What uvicorn serves is IngestApp (ingest/serve.py: a public and an admin listener):
every request passes the edge kit's RequestObserver (paystream/edge/observe.py: trace
id, log line, metrics). On the public port a POST to one of the two webhook paths is
answered by ingest.webhooks (the checks, in order, and the group-commit write; see
there), `/healthz` by the FastAPI app, and anything else is a 404: nothing else is
exposed to the internet. On the admin port (loopback by default) the FastAPI app serves
health, readiness (a database round trip), metrics, /docs and OpenAPI; the webhooks are
not taken there.
Nothing is written unless every check passed, and a whole delivery commits or nothing
(ingest/writer.py: many deliveries share one transaction, each in its own savepoint;
the answer is sent only after that COMMIT).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import disable_created_metrics
from starlette.types import Receive, Scope, Send

from paystream.edge import handlers
from paystream.edge.errors import RefusalError
from paystream.edge.observe import RequestObserver, not_found
from paystream.edge.probes import probes
from paystream.edge.serve import frozen
from paystream.ingest import api_schema, routes_webhooks
from paystream.ingest.metrics import IngestMetrics
from paystream.ingest.settings import IngestSettings
from paystream.ingest.store import EventStore
from paystream.ingest.webhooks import ALCHEMY_PATH, PAYMENTS_PATH, PROVIDER_OF_PATH, Webhooks
from paystream.ingest.writer import GroupCommitWriter
from paystream.logs import configure_logging

FACTORY = "paystream.ingest.app:create_app_from_env"
PUBLIC_API_PATHS = frozenset({"/healthz"})  # what the public port serves besides webhooks
# The paths counted by name in the request metrics; any other is "other" (bounded).
KNOWN_ENDPOINTS = frozenset({ALCHEMY_PATH, PAYMENTS_PATH, "/healthz", "/readyz",
                             "/metrics", "/docs", "/openapi.json"})


class IngestApp:
    """The ASGI app: webhooks straight to their handler, the rest to FastAPI."""

    def __init__(self, api: FastAPI, webhooks: Webhooks, metrics: IngestMetrics,
                 admin_port: int) -> None:
        self.api = api  # its `state` holds the settings, store, writer and metrics
        self._webhooks = webhooks
        self._admin_port = admin_port
        self._observed = RequestObserver(self._dispatch, metrics.observe_answer,
                                         service="ingest", endpoint=_endpoint,
                                         delivery_id_header="webhook-id")

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
                await not_found(scope, send)
            else:
                await self.api(scope, receive, send)
        elif scope["method"] == "POST" and path in self._webhooks.routes:
            await self._webhooks(scope, receive, send)
        elif path in PUBLIC_API_PATHS or path in self._webhooks.routes:  # 405 for a GET
            await self.api(scope, receive, send)
        else:
            await not_found(scope, send)


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
    app.include_router(routes_webhooks.router(webhooks))
    app.include_router(probes(
        lambda: writer.write(lambda cur: cur.execute("SELECT 1")), metrics.registry,
        health_model=api_schema.HealthAnswer, ready_model=None,
        ready_responses=api_schema.READY_RESPONSES,
        metrics_responses=api_schema.METRICS_RESPONSES))

    def refusal(request: Request, exc: RefusalError) -> JSONResponse:
        # Counted and logged as the webhooks' own refusals are.
        provider = PROVIDER_OF_PATH.get(request.url.path, "none")
        return routes_webhooks.response(webhooks.refusal(request.scope, provider, exc))

    handlers.install(app, invalid=_invalid, refusal=refusal)
    return IngestApp(app, webhooks, metrics, settings.admin_port)


def create_app_from_env() -> IngestApp:
    """uvicorn's factory (`paystream ingest`, one call per worker process)."""
    return frozen(create_app(IngestSettings.from_env(os.environ)))


def _endpoint(scope: Scope) -> str:
    path: str = scope.get("path", "")
    return path if path in KNOWN_ENDPOINTS else "other"


def _invalid(exc: RequestValidationError) -> tuple[str, str]:
    return "invalid_request", str(exc.errors())[:500]
