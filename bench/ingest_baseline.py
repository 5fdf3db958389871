"""The ceiling for the ingest benchmark: a bare FastAPI endpoint served the same way.

It reads the body and answers JSON, nothing else: no signature, no validation, no
database. The ingest's throughput is reported as a fraction of this one's.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


def create_bare_app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/webhooks/payments")
    async def bare(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse({"status": "accepted", "bytes": len(body)})

    return app
