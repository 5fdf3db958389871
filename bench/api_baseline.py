"""The ceiling for the API benchmark: a bare FastAPI endpoint doing one database read.

GET /v1/users/{user_id}/balances answers the user's balances rows with ONE query, as
the API's role, the best way this machine has to read from FastAPI and the one the API
uses (paystream/edge/db_threads.py: an async route handing the read to one of
PAYSTREAM_API_DB_POOL_SIZE threads that each own an autocommit connection). Nothing
else: no key, no snapshot transaction or statement timeout, no existence check, no
response model, no metrics, no trace id. The API's throughput is reported as a
fraction of this one's.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from paystream.edge.db_threads import DatabaseThreads
from paystream.schema.db import Connection, connect, database_url


def create_bare_app() -> FastAPI:
    dsn = database_url("api")

    def open_connection() -> Connection:
        conn = connect(dsn, application_name="paystream-bench-bare")
        conn.autocommit = True
        return conn

    threads = DatabaseThreads(int(os.environ.get("PAYSTREAM_API_DB_POOL_SIZE", "8")),
                              open_connection, name="bare-db")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        threads.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    def read(conn: Connection, user_id: str) -> list[tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute("SELECT asset, balance, pending, held FROM balances"
                        " WHERE user_id = %s ORDER BY asset", (user_id,))
            return cur.fetchall()

    @app.get("/v1/users/{user_id}/balances")
    async def balances(user_id: str) -> dict[str, Any]:
        rows = await threads.run(lambda conn: read(conn, user_id))
        return {"user_id": user_id, "balances": [
            {"asset": a, "available": str(b), "pending": str(p), "held": str(h)}
            for a, b, p, h in rows]}

    return app
