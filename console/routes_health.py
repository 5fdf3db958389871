"""Health: what `paystream health` says (ops/health.py), rendered and refreshed."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paystream.console_kit.web import Operator, render

router = APIRouter()
REFRESH_S = 15


@router.get("/health")
async def health(request: Request, _: Operator) -> Response:
    from paystream.ops.health import HealthChecker, worst
    from paystream.ops.health_settings import HealthSettings

    results = await asyncio.to_thread(lambda: HealthChecker(HealthSettings.from_env()).run())
    return render(request, "health.html", results=results, overall=str(worst(results)),
                  refresh_s=REFRESH_S)
