"""The ceiling for the API benchmark: a bare FastAPI endpoint doing one database read.

GET /v1/users/{user_id}/balances answers the user's balances rows with ONE query on a
per-thread autocommit connection (as the API's role): no key, no snapshot transaction,
no existence check, no response model. The API's throughput is reported as a fraction
of this one's.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg2
from fastapi import FastAPI

from paystream.schema.db import Connection, database_url


def create_bare_app() -> FastAPI:
    app = FastAPI()
    local = threading.local()
    dsn = database_url("api")

    def connection() -> Connection:
        conn: Connection | None = getattr(local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg2.connect(dsn)
            conn.autocommit = True
            local.conn = conn
        return conn

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/users/{user_id}/balances")
    def balances(user_id: str) -> dict[str, Any]:
        with connection().cursor() as cur:
            cur.execute("SELECT asset, balance, pending, held FROM balances"
                        " WHERE user_id = %s ORDER BY asset", (user_id,))
            rows = cur.fetchall()
        return {"user_id": user_id, "balances": [
            {"asset": a, "available": str(b), "pending": str(p), "held": str(h)}
            for a, b, p, h in rows]}

    return app
