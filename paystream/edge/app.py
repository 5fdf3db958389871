"""The app an edge serves: a FastAPI app for its routes, behind a plain ASGI front that
observes every request (paystream/edge/observe.py) and decides, by port and path, who
answers it: the public port must never reach what only the admin port serves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from prometheus_client import disable_created_metrics
from starlette.types import ASGIApp, Receive, Scope, Send

from paystream.edge.observe import Endpoint, ObserveAnswer, RequestObserver
from paystream.logs import configure_logging


class EdgeApp:
    """What uvicorn serves: lifespan to the FastAPI app `api`, each HTTP request to the
    app `route` picks for it (a subclass says which)."""

    def __init__(self, api: FastAPI, admin_port: int, observe_answer: ObserveAnswer, *,
                 service: str, endpoint: Endpoint, delivery_id_header: str | None = None,
                 endpoint_log_field: str | None = None) -> None:
        self.api = api
        self._admin_port = admin_port
        self._observed = RequestObserver(
            self._dispatch, observe_answer, service=service, endpoint=endpoint,
            delivery_id_header=delivery_id_header, endpoint_log_field=endpoint_log_field)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._observed(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.api(scope, receive, send)
            return
        server = scope.get("server")
        on_admin = server is not None and server[1] == self._admin_port
        await self.route(scope, on_admin)(scope, receive, send)

    def route(self, scope: Scope, on_admin: bool) -> ASGIApp:
        """Who answers this HTTP request (`on_admin`: it came in on the admin port)."""
        raise NotImplementedError


def fastapi_app(service: str, close: Callable[[], None], *, title: str, version: str,
                description: str) -> FastAPI:
    """An edge's FastAPI app: the service's JSON logging configured, `close` called when
    the server stops (after the last request)."""
    configure_logging(service)
    # The *_created series only double the scrape size (prometheus_client leaves this
    # one function unannotated).
    disable_created_metrics()  # type: ignore[no-untyped-call]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        close()

    return FastAPI(title=title, version=version, lifespan=lifespan, description=description)


def add_routes(app: FastAPI, *routers: APIRouter) -> None:
    """The routers' routes, in order, as the app's own. Not `include_router`: FastAPI
    keeps an included router as a branch looked up on every request, which cost each
    request ~20 us of CPU more (measured on the merchant API, in process)."""
    for router in routers:
        app.router.routes.extend(router.routes)
