"""The merchant API's HTTP app (docs/api.md).

What uvicorn serves is ApiApp (api/serve.py: a public and an admin listener), every
request observed by api/observe.py (trace id, log line, metrics). The public port
answers `/v1/*` and `/healthz`; the admin port (loopback by default) health, readiness,
metrics, /docs and /openapi.json, never `/v1/*`.

Every `/v1` route is an `async def` that hands ONE database transaction to a database
thread (api/database.py): a read in one REPEATABLE READ READ ONLY snapshot, a write in
one READ COMMITTED transaction. The key is checked inside it first (api/auth.py), then
the route's rule. Refusals are answered in the ingest's error format
(paystream/edge/errors.py).
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, disable_created_metrics, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from paystream.api import models, reads, withdrawals
from paystream.api.auth import Authenticator
from paystream.api.database import Database
from paystream.api.keys import Scope as KeyScope
from paystream.api.metrics import ApiMetrics
from paystream.api.observe import TRACE_SCOPE_KEY, RequestObserver
from paystream.api.settings import MAX_LIMIT, ApiSettings
from paystream.edge.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    RefusalError,
    error_body,
    retry_headers,
)
from paystream.logs import configure_logging
from paystream.schema import balances as books
from paystream.schema import users
from paystream.schema.db import Cursor
from paystream.trace import Trace

PUBLIC_PREFIX = "/v1/"
PUBLIC_PATHS = frozenset({"/healthz"})
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": models.Error, "description": what} for code, what in (
        (400, "invalid parameter or body"), (401, "no valid API key"),
        (403, "the key lacks the scope"), (404, "no such resource"),
        (409, "conflict"), (429, "rate limited (Retry-After)"),
        (503, "database unavailable (Retry-After)"))}
# A user id in a path: the users table's own rule (schema/events.py USER_ID_PATTERN).
UserId = Annotated[str, Path(pattern=f"^{models.USER_ID}$", max_length=64)]
Credentials = Annotated[HTTPAuthorizationCredentials | None,
                        Depends(HTTPBearer(auto_error=False,
                                           description="an API key (paystream apikeys)"))]
USER_ERROR_STATUS = {"unknown_user": NotFoundError, "address_taken": ConflictError}
IDEMPOTENCY_HEADER = "Idempotency-Key"


class ApiApp:
    """The ASGI app: the public port serves /v1 and /healthz, the admin port the rest."""

    def __init__(self, api: FastAPI, metrics: ApiMetrics, admin_port: int) -> None:
        self.api = api
        self._admin_port = admin_port
        self._observed = RequestObserver(self._dispatch, metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._observed(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.api(scope, receive, send)
            return
        path: str = scope["path"]
        server = scope.get("server")
        on_admin = server is not None and server[1] == self._admin_port
        public = path.startswith(PUBLIC_PREFIX) or path in PUBLIC_PATHS
        if public != on_admin or path in PUBLIC_PATHS:
            await self.api(scope, receive, send)
        else:
            await _not_found(scope, send)


def _key(credentials: HTTPAuthorizationCredentials | None) -> str:
    """The bearer token as a key, or 401 before any database work."""
    return Authenticator.bearer(None if credentials is None
                                else f"Bearer {credentials.credentials}")


def _moment(at: datetime | None) -> str | None:
    """?at= as Postgres reads it, in UTC (a moment without an offset is UTC): Postgres
    refuses offsets beyond 15:59 that ISO 8601 allows, and a refused one was a 500."""
    if at is None:
        return None
    try:
        return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(
            UTC).isoformat()
    except OverflowError:  # before year 1 in UTC
        raise InvalidRequestError("at is out of range", code="invalid_request") from None


def create_app(settings: ApiSettings, *, database: Database | None = None) -> ApiApp:
    """Build the app; nothing connects to Postgres until a request needs it."""
    configure_logging("api")
    disable_created_metrics()  # type: ignore[no-untyped-call]
    db = database or Database(settings)
    auth = Authenticator(settings.rate_per_second, settings.rate_burst)
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        db.close()

    app = FastAPI(title="paystream merchant API", version="1.0.0", lifespan=lifespan,
                  description="Balances, event status and history out; users, deposit "
                              "addresses and withdrawal requests in (docs/api.md).")
    app.state.settings = settings
    app.state.database = db
    app.state.metrics = metrics

    @app.get("/v1/users/{user_id}/balances", response_model=models.Balances,
             responses=ERRORS, summary="a user's balances, now or at a moment")
    async def get_balances(user_id: UserId, credentials: Credentials,
                           at: Annotated[datetime | None, Query(
                               description="ISO 8601; the balances at that moment, from"
                                           " the postings (UTC when no offset is given)")
                           ] = None) -> dict[str, Any]:
        moment = _moment(at)
        key = _key(credentials)
        if moment is None:  # now: the key, the user and the rows in one statement
            found, exists, answers = await db.read(
                lambda cur: reads.balances_with_key(cur, key, user_id), one_statement=True)
            auth.admit(found, KeyScope.READ)
        else:
            def at_moment(cur: Cursor) -> tuple[bool, list[dict[str, str]]]:
                auth.check(cur, key, KeyScope.READ)
                rows = books.read(cur, user_id, moment)
                # A user's accounts exist only for a user: asked only when there are none.
                return (bool(rows) or users.exists(cur, user_id)), reads.balance_answers(rows)

            exists, answers = await db.read(at_moment)
        if not exists:
            raise NotFoundError(f"no user {user_id!r}", code="unknown_user")
        return {"user_id": user_id, "at": at, "balances": answers}

    @app.get("/v1/events/{event_id:path}", response_model=models.EventStatus,
             responses=ERRORS, summary="an event's status, outcome and ledger entries")
    async def get_event(event_id: Annotated[str, Path(pattern=r"^[!-~]{1,200}$")],
                        credentials: Credentials) -> dict[str, Any]:
        key = _key(credentials)

        def work(cur: Cursor) -> dict[str, Any] | None:
            auth.check(cur, key, KeyScope.READ)
            return reads.event(cur, event_id)

        found = await db.read(work)
        if found is None:
            raise NotFoundError(f"no event {event_id[:200]!r}", code="unknown_event")
        return found

    @app.get("/v1/users/{user_id}/transactions", response_model=models.Transactions,
             responses=ERRORS, summary="a user's transfers, newest first, by cursor")
    async def get_transactions(user_id: UserId, credentials: Credentials,
                               cursor: Annotated[str | None, Query(max_length=19)] = None,
                               limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50
                               ) -> dict[str, Any]:
        before = reads.parse_cursor(cursor)
        key = _key(credentials)

        def work(cur: Cursor) -> tuple[list[dict[str, Any]], str | None]:
            auth.check(cur, key, KeyScope.READ)
            items, next_cursor = reads.transactions(cur, user_id, before, limit)
            if not items and not users.exists(cur, user_id):
                raise NotFoundError(f"no user {user_id!r}", code="unknown_user")
            return items, next_cursor

        items, next_cursor = await db.read(work)
        return {"items": items, "next_cursor": next_cursor}

    @app.post("/v1/users", response_model=models.User, status_code=201,
              responses={**ERRORS, 200: {"model": models.User,
                                         "description": "the user existed already"}},
              summary="create a user")
    async def post_user(body: models.NewUser, credentials: Credentials) -> JSONResponse:
        key = _key(credentials)

        def work(cur: Cursor) -> bool:
            auth.check(cur, key, KeyScope.WRITE)
            return _user_rule(lambda: users.add_user(cur, body.user_id))

        created = await db.write(work)
        return JSONResponse({"user_id": body.user_id, "created": created},
                            status_code=201 if created else 200)

    @app.post("/v1/users/{user_id}/deposit-addresses", response_model=models.AddressAdded,
              status_code=201,
              responses={**ERRORS, 200: {"model": models.AddressAdded,
                                         "description": "it was this user's already"}},
              summary="assign a deposit address to a user")
    async def post_address(user_id: UserId, body: models.NewAddress,
                           credentials: Credentials) -> JSONResponse:
        key = _key(credentials)

        def work(cur: Cursor) -> bool:
            auth.check(cur, key, KeyScope.WRITE)
            return _user_rule(lambda: users.add_address(cur, body.network, body.address,
                                                        user_id))

        created = await db.write(work)
        network, address = users.normal_address(body.network, body.address)
        return JSONResponse({"network": network, "address": address, "user_id": user_id,
                             "created": created}, status_code=201 if created else 200)

    @app.get("/v1/users/{user_id}/deposit-addresses", response_model=models.Addresses,
             responses=ERRORS, summary="a user's deposit addresses")
    async def get_addresses(user_id: UserId, credentials: Credentials,
                            limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = MAX_LIMIT
                            ) -> dict[str, Any]:
        key = _key(credentials)

        def work(cur: Cursor) -> list[users.DepositAddress]:
            auth.check(cur, key, KeyScope.READ)
            if not users.exists(cur, user_id):
                raise NotFoundError(f"no user {user_id!r}", code="unknown_user")
            return users.addresses(cur, user_id, limit)

        found = await db.read(work)
        return {"user_id": user_id, "items": [
            {"network": a.network, "address": a.address, "user_id": a.user_id,
             "created_at": a.created_at} for a in found]}

    @app.post("/v1/withdrawals", response_model=models.WithdrawalRequested, status_code=202,
              responses=ERRORS, summary="request a withdrawal (held until the gateway"
                                        " settles or fails it)")
    async def post_withdrawal(request: Request, body: models.NewWithdrawal,
                              credentials: Credentials,
                              idempotency_key: Annotated[str, Header(
                                  alias=IDEMPOTENCY_HEADER, min_length=1, max_length=200,
                                  description="the same key with the same body answers"
                                              " the first answer again; with another"
                                              " body 409")]
                              ) -> JSONResponse:
        key = _key(credentials)
        idem = withdrawals.check_idempotency_key(idempotency_key)
        wanted = withdrawals.parse_request(body.user_id, body.asset, body.amount,
                                           body.destination, settings.withdrawal_assets)
        trace_id = _trace(request).trace_id

        def work(cur: Cursor) -> tuple[int, dict[str, Any], bool]:
            key_id = auth.check(cur, key, KeyScope.WRITE)
            return withdrawals.request(
                cur, key_id=key_id, idempotency_key=idem, wanted=wanted,
                provider=settings.withdrawal_provider, trace_id=trace_id)

        try:
            status, answer, replayed = await db.write(work)
        except ConflictError:
            metrics.withdrawals.labels("conflict").inc()
            raise
        metrics.withdrawals.labels("replayed" if replayed else "accepted").inc()
        return JSONResponse(answer, status_code=status)

    @app.get("/v1/withdrawals/{withdrawal_id}", response_model=models.Withdrawal,
             responses=ERRORS, summary="a requested withdrawal's state")
    async def get_withdrawal(withdrawal_id: Annotated[str, Path(pattern=r"^[!-~]{1,200}$")],
                             credentials: Credentials) -> dict[str, Any]:
        key = _key(credentials)

        def work(cur: Cursor) -> dict[str, Any] | None:
            auth.check(cur, key, KeyScope.READ)
            return reads.withdrawal(cur, withdrawal_id)

        found = await db.read(work)
        if found is None:
            raise NotFoundError(f"no withdrawal {withdrawal_id[:200]!r}",
                                code="unknown_withdrawal")
        return found

    @app.get("/healthz", response_model=models.Health, summary="process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=models.Health, responses=ERRORS,
             summary="the database answers")
    async def readyz() -> dict[str, str]:
        await db.read(lambda cur: cur.execute("SELECT 1"), one_statement=True)
        return {"status": "ready"}

    @app.get("/metrics", response_class=Response, summary="Prometheus metrics")
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(RefusalError)
    async def on_refusal(request: Request, exc: RefusalError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.detail, _trace(request).trace_id),
                            status_code=exc.status, headers=retry_headers(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(f"http_{exc.status_code}", str(exc.detail),
                                       _trace(request).trace_id),
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(_validation_code(exc), _validation_reason(exc),
                                       _trace(request).trace_id), status_code=400)

    @app.exception_handler(Exception)
    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        # The JSON 500 of every route; the RequestObserver outside logs the exception
        # (Starlette re-raises it after this answer), never to the caller.
        return JSONResponse(error_body("internal_error", "unexpected server error",
                                       _trace(request).trace_id), status_code=500)

    return ApiApp(app, metrics, settings.admin_port)


def _user_rule(action: Any) -> bool:
    """schema/users.py's refusal as the API's: 400, or 404 / 409 by its code."""
    try:
        return bool(action())
    except users.UserError as exc:
        raise USER_ERROR_STATUS.get(exc.code, InvalidRequestError)(
            str(exc), code=exc.code) from None


def _validation_code(exc: RequestValidationError) -> str:
    """invalid_request, or the documented missing_idempotency_key for a POST without the
    header (FastAPI finds it missing before the route's own check would)."""
    missing_key = any(e.get("type") == "missing"
                      and tuple(e.get("loc", ())) == ("header", IDEMPOTENCY_HEADER)
                      for e in exc.errors())
    return "missing_idempotency_key" if missing_key else "invalid_request"


def _validation_reason(exc: RequestValidationError) -> str:
    """The first few problems, where and what (never the whole input back)."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)[:500] or "invalid request"


def create_app_from_env() -> ApiApp:
    """uvicorn's factory (`paystream api`, one call per worker process)."""
    app = create_app(ApiSettings.from_env(os.environ))
    gc.collect()
    gc.freeze()  # as the ingest: what exists now lives as long as the process
    return app


async def _not_found(scope: Scope, send: Send) -> None:
    trace: Trace = scope[TRACE_SCOPE_KEY]
    body = orjson.dumps(error_body("http_404", "Not Found", trace.trace_id))
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": body})


def _trace(request: Request) -> Trace:
    trace: Trace = request.scope[TRACE_SCOPE_KEY]
    return trace
