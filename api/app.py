"""The merchant API's HTTP app (docs/api.md).

What uvicorn serves is ApiApp (served by paystream/edge/serve.py: a public and an admin
listener), every request observed by paystream/edge/observe.py (trace id, log line,
metrics). The public port answers `/v1/*` and `/healthz`; the admin port (loopback by
default) health, readiness, metrics, /docs and /openapi.json, never `/v1/*`.

The `/v1` routes live in one router per resource (api/routes_*.py). Each is an
`async def` that hands ONE database transaction to a database thread (api/database.py):
a read in one REPEATABLE READ READ ONLY snapshot, a write in one READ COMMITTED
transaction, the key checked inside it first (api/auth.py: the routes take their
database as a dependency naming the scope it needs, e.g. `BalancesRead`). Refusals are
answered in the ingest's error format (paystream/edge/errors.py).
"""

from __future__ import annotations

import os

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Scope

from paystream.api import (
    models,
    routes_balances,
    routes_endpoints,
    routes_events,
    routes_exports,
    routes_invoices,
    routes_transactions,
    routes_users,
    routes_withdrawals,
)
from paystream.api.auth import Authenticator
from paystream.api.database import Database
from paystream.api.key_use import KeyUse
from paystream.api.metrics import ApiMetrics
from paystream.api.settings import ApiSettings
from paystream.edge import handlers
from paystream.edge.app import EdgeApp, add_routes, fastapi_app
from paystream.edge.observe import not_found
from paystream.edge.probes import probes
from paystream.edge.serve import frozen
from paystream.notify.settings import NotifySettings

FACTORY = "paystream.api.app:create_app_from_env"
PUBLIC_PREFIX = "/v1/"
PUBLIC_PATHS = frozenset({"/healthz"})
ROUTERS = (routes_balances, routes_endpoints, routes_events, routes_exports, routes_invoices,
           routes_transactions, routes_users, routes_withdrawals)


class ApiApp(EdgeApp):
    """The public port serves /v1 and /healthz, the admin port the rest."""

    def __init__(self, api: FastAPI, metrics: ApiMetrics, admin_port: int) -> None:
        super().__init__(api, admin_port, metrics.answers.observe, service="api",
                         endpoint=_route, endpoint_log_field="route")

    def route(self, scope: Scope, on_admin: bool) -> ASGIApp:
        path: str = scope["path"]
        public = path.startswith(PUBLIC_PREFIX) or path in PUBLIC_PATHS
        return self.api if public != on_admin or path in PUBLIC_PATHS else not_found


def create_app(settings: ApiSettings, *, database: Database | None = None) -> ApiApp:
    """Build the app; nothing connects to Postgres until a request needs it."""
    db = database or Database(settings)
    metrics = ApiMetrics()
    used = KeyUse(db.connect, settings.key_use_flush_s)

    def close() -> None:
        used.close()
        db.close()

    app = fastapi_app("api", close, title="paystream merchant API", version="1.0.0",
                      description="Balances, event status and history out; users, deposit "
                                  "addresses, withdrawal requests and invoices in "
                                  "(docs/api.md).")
    # What the routes' dependencies and rules read (api/auth.py, api/routes_*.py).
    app.state.settings = settings
    app.state.database = db
    app.state.metrics = metrics
    # Endpoints a merchant adds are checked by the sender's own SSRF guard and rotated
    # with its overlap (the notifier's settings: one rule for every door).
    notify = NotifySettings.from_env()
    app.state.endpoint_guard = notify.guard()
    app.state.rotation_overlap_s = notify.rotation_overlap_s
    app.state.authenticator = Authenticator(settings.rate_per_second, settings.rate_burst,
                                            used)
    add_routes(app, *(routes.router for routes in ROUTERS), probes(
        lambda: db.read(lambda cur: cur.execute("SELECT 1"), one_statement=True),
        metrics.registry, health_model=models.Health, ready_model=models.Health,
        ready_responses=models.ERRORS))
    handlers.install(app, invalid=_invalid)
    return ApiApp(app, metrics, settings.admin_port)


def create_app_from_env() -> ApiApp:
    """uvicorn's factory (`paystream api`, one call per worker process)."""
    return frozen(create_app(ApiSettings.from_env(os.environ)))


def _route(scope: Scope) -> str:
    """A request's metrics label: its route's template (bounded), or "other"."""
    return getattr(scope.get("route"), "path", None) or "other"


def _invalid(exc: RequestValidationError) -> tuple[str, str]:
    """invalid_request, or the documented missing_idempotency_key for a POST without the
    header (FastAPI finds it missing before the route's own check would); and the first
    few problems, where and what (never the whole input back)."""
    missing_key = any(e.get("type") == "missing" and tuple(e.get("loc", ())) == (
        "header", routes_withdrawals.IDEMPOTENCY_HEADER) for e in exc.errors())
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return ("missing_idempotency_key" if missing_key else "invalid_request",
            "; ".join(parts)[:500] or "invalid request")
