"""The webhook routes as FastAPI declares them, one per provider served (ingest/registry.py):
what /docs and /openapi.json describe. IngestApp (ingest/app.py) answers a POST to these
paths itself, before FastAPI (ingest/webhooks.py says why); these call the same handler
if the FastAPI app is ever served on its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from paystream.ingest import api_schema
from paystream.ingest.registry import Served
from paystream.ingest.webhooks import Answer, Webhooks


def router(webhooks: Webhooks) -> APIRouter:
    routes = APIRouter()
    for path, served in webhooks.routes.items():
        routes.add_api_route(
            path, _handler(webhooks, served), methods=["POST"],
            responses=api_schema.WEBHOOK_RESPONSES, openapi_extra=served.provider.openapi,
            response_model=None, summary=served.provider.summary,
            name=f"{served.name}_webhook")
    return routes


def _handler(webhooks: Webhooks, provider: Served
             ) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def webhook(request: Request) -> JSONResponse:
        return response(await webhooks.deliver(provider, request.scope, request.receive))
    return webhook


def response(answer: Answer) -> JSONResponse:
    """A handler's answer as FastAPI sends it."""
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)
