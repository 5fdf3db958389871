"""The webhook routes as FastAPI declares them, one per provider: what /docs and
/openapi.json describe. IngestApp (ingest/app.py) answers a POST to these paths itself,
before FastAPI (ingest/webhooks.py says why); these call the same handlers if the
FastAPI app is ever served on its own."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from paystream.ingest import api_schema
from paystream.ingest.webhooks import ALCHEMY_PATH, PAYMENTS_PATH, Answer, Webhooks


def router(webhooks: Webhooks) -> APIRouter:
    routes = APIRouter()

    @routes.post(ALCHEMY_PATH, responses=api_schema.WEBHOOK_RESPONSES,
                 openapi_extra=api_schema.ALCHEMY_OPENAPI, response_model=None,
                 summary="Alchemy Notify Address Activity")
    async def alchemy_webhook(request: Request) -> JSONResponse:
        return response(await webhooks.alchemy(request.scope, request.receive))

    @routes.post(PAYMENTS_PATH, responses=api_schema.WEBHOOK_RESPONSES,
                 openapi_extra=api_schema.PAYMENTS_OPENAPI, response_model=None,
                 summary="Payment gateway (Standard Webhooks)")
    async def payments_webhook(request: Request) -> JSONResponse:
        return response(await webhooks.payments(request.scope, request.receive))

    return routes


def response(answer: Answer) -> JSONResponse:
    """A handler's answer as FastAPI sends it."""
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)
