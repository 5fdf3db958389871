"""The console's app: a FastAPI app of HTML pages (no /docs, no OpenAPI document), behind
the request observer (trace id, one JSON log line per request) and the Guard (host
check, origin check, security headers). One listener, loopback by default: it is never
the ingest's or the merchant API's port."""

from __future__ import annotations

import os
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from jinja2 import Environment
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Scope

from paystream.console import (
    pages,
    routes_alerts,
    routes_audit,
    routes_auth,
    routes_health,
    routes_search,
)
from paystream.console_kit import web
from paystream.console_kit.database import ConsoleDatabase, DatabaseUnavailable, ValueRefused
from paystream.console_kit.settings import ConsoleSettings
from paystream.console_kit.web import Console, Guard, LoginRequired, Refused, render
from paystream.consumers.ledger import console_routes as ledger_pages
from paystream.edge.app import add_routes
from paystream.edge.observe import RequestObserver
from paystream.logs import configure_logging
from paystream.notify.ledger_consequence import tell_shortfall_resolved
from paystream.rate_limit import TokenBuckets
from paystream.reconcile_checks import FEATURE_CHECKS

FACTORY = "paystream.console.app:create_app_from_env"
# The console's own pages, then every feature's, found in its folder (pages.py).
ROUTERS = (routes_auth, routes_search, routes_health, routes_alerts, routes_audit,
           *pages.found())
pages.refuse_duplicates(ROUTERS)
NAV = (("/search", "Search"), ("/dead-letters", "Dead letters"),
       ("/notifications", "Notifications"), ("/endpoints", "Endpoints"),
       ("/keys", "API keys"),
       ("/ledger", "Ledger"), ("/statements", "Statements"), ("/health", "Health"),
       ("/alerts", "Alerts"), ("/audit", "Audit"))


def templates() -> Environment:
    """Every page's template: the kit's frame (console_kit/templates/), the console's own
    pages (templates/) and each feature's, beside its routes; with the navigation every
    page shows."""
    env = web.templates(pages.template_packages(ROUTERS))
    env.globals["nav"] = NAV
    return env


def stylesheet() -> bytes:
    return (resources.files("paystream.console") / "static" / "console.css").read_bytes()


def create_app(settings: ConsoleSettings) -> ASGIApp:
    configure_logging("console")
    db = ConsoleDatabase(settings)
    app = FastAPI(title="paystream console", docs_url=None, redoc_url=None,
                  openapi_url=None, on_shutdown=[db.close])
    app.state.console = Console(settings, db, templates(), TokenBuckets(
        settings.login_failures_per_minute / 60.0, settings.login_failure_burst,
        "failed logins"))
    css = stylesheet()

    @app.get("/static/console.css", include_in_schema=False)
    async def style() -> Response:
        return Response(css, media_type="text/css")

    add_routes(app, *(module.router for module in ROUTERS))
    # What the ledger's pages are handed of the features it imports none of.
    app.state.ledger_pages = ledger_pages.Handed(tell_shortfall_resolved, FEATURE_CHECKS)

    @app.exception_handler(LoginRequired)
    async def login_first(request: Request, _: LoginRequired) -> Response:
        if request.method == "GET":
            return RedirectResponse("/login", status_code=303)
        return render(request, "error.html", 401, reason="log in first")

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        return render(request, "error.html", exc.status, reason=exc.reason)

    @app.exception_handler(DatabaseUnavailable)
    async def no_database(request: Request, exc: DatabaseUnavailable) -> Response:
        return render(request, "error.html", 503, reason=str(exc))

    @app.exception_handler(ValueRefused)
    async def value_refused(request: Request, exc: ValueRefused) -> Response:
        return render(request, "error.html", 400, reason=str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        where = "; ".join(".".join(str(p) for p in e.get("loc", ())) + ": "
                          + str(e.get("msg", "invalid")) for e in exc.errors()[:3])
        return render(request, "error.html", 400, reason=f"a bad request: {where}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        reason = "no such page" if exc.status_code == 404 else str(exc.detail)
        return render(request, "error.html", exc.status_code, reason=reason)

    observed = RequestObserver(app, lambda *_: None, service="console", endpoint=_route)
    return Guard(observed, settings.allowed_hosts)


def create_app_from_env() -> ASGIApp:
    """uvicorn's factory (`paystream console`)."""
    return create_app(ConsoleSettings.from_env(os.environ))


def _route(scope: Scope) -> str:
    return getattr(scope.get("route"), "path", None) or "other"
