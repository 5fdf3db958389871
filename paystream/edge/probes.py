"""The admin port's probes, the same on both edges: /healthz (the process is up), /readyz
(the database answers) and /metrics (Prometheus text). Each edge passes its own check
and models, which its OpenAPI document describes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel

Responses = dict[int | str, dict[str, Any]]


def probes(ping: Callable[[], Awaitable[object]], registry: CollectorRegistry, *,
           health_model: type[BaseModel], ready_model: type[BaseModel] | None,
           ready_responses: Responses, metrics_responses: Responses | None = None
           ) -> APIRouter:
    """The three probes; `ping` is one database round trip (an error answers 503)."""
    router = APIRouter()

    @router.get("/healthz", response_model=health_model, summary="process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", response_model=ready_model, responses=ready_responses,
                summary="the database answers")
    async def readyz() -> dict[str, str]:
        await ping()
        return {"status": "ready"}

    @router.get("/metrics", responses=metrics_responses, response_class=Response,
                summary="Prometheus metrics")
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
