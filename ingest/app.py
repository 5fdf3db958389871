"""The ingest HTTP app: provider webhooks in, one outbox transaction per delivery out.

What uvicorn serves is IngestApp (ingest/serve.py: a public and an admin listener):
every request passes the edge kit's RequestObserver (paystream/edge/observe.py: trace
id, log line, metrics). On the public port a POST to a provider's webhook path is
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
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Scope

from paystream.edge import handlers
from paystream.edge.app import EdgeApp, add_routes, fastapi_app
from paystream.edge.errors import RefusalError
from paystream.edge.observe import not_found
from paystream.edge.probes import probes
from paystream.edge.serve import frozen
from paystream.ingest import api_schema, routes_webhooks
from paystream.ingest.metrics import IngestMetrics
from paystream.ingest.settings import IngestSettings
from paystream.ingest.store import EventStore
from paystream.ingest.webhooks import Webhooks
from paystream.ingest.writer import GroupCommitWriter

FACTORY = "paystream.ingest.app:create_app_from_env"
PUBLIC_API_PATHS = frozenset({"/healthz"})  # what the public port serves besides webhooks
# The paths counted by name in the request metrics, with the providers'; any other is
# "other" (bounded).
KNOWN_ENDPOINTS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})


class IngestApp(EdgeApp):
    """Webhooks straight to their handler, the rest to FastAPI."""

    def __init__(self, api: FastAPI, webhooks: Webhooks, metrics: IngestMetrics,
                 admin_port: int) -> None:
        # The FastAPI app's state holds the settings, store, writer and metrics.
        super().__init__(api, admin_port, metrics.answers.observe, service="ingest",
                         endpoint=_endpoint(frozenset({*KNOWN_ENDPOINTS, *webhooks.routes})),
                         delivery_id_header="webhook-id")
        self._webhooks = webhooks

    def route(self, scope: Scope, on_admin: bool) -> ASGIApp:
        path = scope["path"]
        webhook = path in self._webhooks.routes
        if on_admin:  # money enters by the public door only
            return not_found if webhook else self.api
        if scope["method"] == "POST" and webhook:
            return self._webhooks
        if path in PUBLIC_API_PATHS or webhook:  # 405 for a GET
            return self.api
        return not_found


def create_app(settings: IngestSettings, *, store: EventStore | None = None) -> IngestApp:
    """Build the app; nothing connects to Postgres until the first request needs it."""
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

    def close() -> None:
        writer.close()  # the writers finish what is queued first
        store.close()

    app = fastapi_app("ingest", close, title="paystream ingest", version="0.1.0",
                      description="Provider webhooks -> verified, validated, idempotent "
                                  "transactional outbox writes.")
    app.state.settings = settings
    app.state.store = store
    app.state.writer = writer
    app.state.metrics = metrics
    add_routes(app, routes_webhooks.router(webhooks), probes(
        lambda: writer.write(lambda cur: cur.execute("SELECT 1")), metrics.registry,
        health_model=api_schema.HealthAnswer, ready_model=None,
        ready_responses=api_schema.READY_RESPONSES,
        metrics_responses=api_schema.METRICS_RESPONSES))

    def refusal(request: Request, exc: RefusalError) -> JSONResponse:
        # Counted and logged as the webhooks' own refusals are.
        served = webhooks.routes.get(request.url.path)
        provider = served.name if served is not None else "none"
        return routes_webhooks.response(webhooks.refusal(request.scope, provider, exc))

    handlers.install(app, invalid=_invalid, refusal=refusal)
    return IngestApp(app, webhooks, metrics, settings.admin_port)


def create_app_from_env() -> IngestApp:
    """uvicorn's factory (`paystream ingest`, one call per worker process)."""
    return frozen(create_app(IngestSettings.from_env(os.environ)))


def _endpoint(known: frozenset[str]) -> Callable[[Scope], str]:
    """A request's endpoint label: its path if `known`, else "other"."""
    def endpoint(scope: Scope) -> str:
        path: str = scope.get("path", "")
        return path if path in known else "other"
    return endpoint


def _invalid(exc: RequestValidationError) -> tuple[str, str]:
    return "invalid_request", str(exc.errors())[:500]
