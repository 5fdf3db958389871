"""Who may call: `Authorization: Bearer <API key>`, the key live and holding the route's
scope, within its rate limit; and what it sees: its merchant's, set by the same check
for the transaction the route's work runs in (migration 0033's row-level security).

A `/v1` route takes its database as a FastAPI dependency, `Reading` or `Writing`: an
Access whose every transaction checks the key first, in the request's own transaction
(no second transaction), before the route's work: by `Authenticator.check` as the
transaction's first statement, or inside the route's one statement (`read_with_key`,
then `Authenticator.admit` judges what it found, e.g. the balances read,
api/reads.py). The bearer token itself is read when the route first needs the database
(or asks for `Access.key`), so the route's own rules on its parameters may come first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from paystream.api import keys
from paystream.api.database import Database
from paystream.api.key_use import KeyUse
from paystream.edge.errors import ForbiddenError, UnauthorizedError
from paystream.rate_limit import TokenBuckets
from paystream.schema.db import Cursor

BEARER = "bearer "
T = TypeVar("T")


class Authenticator:
    def __init__(self, rate_per_second: float, burst: int, used: KeyUse) -> None:
        self._buckets = TokenBuckets(rate_per_second, burst, what="API key")
        self.used = used
        # `check` runs in the database threads; the buckets were written for one loop.
        self._lock = threading.Lock()

    @staticmethod
    def bearer(authorization: str | None) -> str:
        """The key an `Authorization: Bearer <key>` header carries; 401 (before any
        database work) if there is none or it cannot be a key."""
        if authorization is None or authorization[:len(BEARER)].lower() != BEARER:
            raise UnauthorizedError("an API key is required: Authorization: Bearer <key>",
                                    code="missing_api_key")
        key = authorization[len(BEARER):].strip()
        if keys.KEY_PATTERN.fullmatch(key) is None:
            raise UnauthorizedError("the API key is not valid, expired or was revoked",
                                    code="invalid_api_key")
        return key

    def check(self, cur: Cursor, key: str, scope: keys.Scope) -> keys.Caller:
        """The calling key, its merchant set for the rest of the transaction (what the
        database's tenancy policies admit: migration 0033), or a refusal: 401 (no live
        key), 403 (scope), 429 (its bucket is empty; Retry-After)."""
        return self.admit(keys.live_key(cur, key), scope)

    def admit(self, found: keys.Caller | None, scope: keys.Scope) -> keys.Caller:
        """`check` on a key already looked up (keys.LIVE_KEY_SQL)."""
        if found is None:
            raise UnauthorizedError("the API key is not valid, expired or was revoked",
                                    code="invalid_api_key")
        with self._lock:
            self._buckets.take(found.key_id)
        self.used.seen(found.key_id)
        if not keys.grants(found.scopes, scope):
            raise ForbiddenError(f"this API key lacks the {scope.value!r} scope",
                                 code="insufficient_scope")
        return found


class Access:
    """A request's transactions (api/database.py), each opened by its key's check for
    `scope`: no route's work runs for a caller the key does not admit."""

    def __init__(self, credentials: HTTPAuthorizationCredentials | None, scope: keys.Scope,
                 authenticator: Authenticator, database: Database) -> None:
        self._credentials = credentials
        self._scope = scope
        self._auth = authenticator
        self._db = database

    def key(self) -> str:
        """The bearer token as a key, or 401 before any database work."""
        credentials = self._credentials
        return Authenticator.bearer(None if credentials is None
                                    else f"Bearer {credentials.credentials}")

    async def read(self, work: Callable[[Cursor], T]) -> T:
        """`work` in one read snapshot, after the key's check."""
        key, scope, auth = self.key(), self._scope, self._auth

        def checked(cur: Cursor) -> T:
            auth.check(cur, key, scope)
            return work(cur)

        return await self._db.read(checked)

    async def read_with_key(
            self, statement: Callable[[Cursor, str], tuple[keys.Caller | None, T]]) -> T:
        """A one-statement read that looks the key up along with its answer (the key,
        or None, first); the key is judged when it returns."""
        key = self.key()
        found, answer = await self._db.read(lambda cur: statement(cur, key),
                                            one_statement=True)
        self._auth.admit(found, self._scope)
        return answer

    async def write(self, work: Callable[[Cursor, keys.Caller], T]) -> T:
        """`work(cursor, the calling key)` in one write transaction, after the key's
        check."""
        key, scope, auth = self.key(), self._scope, self._auth
        return await self._db.write(lambda cur: work(cur, auth.check(cur, key, scope)))


class KeyAccess(HTTPBearer):
    """The dependency: the request's Access for `scope`. It is the route's bearer
    security scheme itself: one dependency per request, as FastAPI's HTTPBearer alone was
    (a dependency wrapping it cost every request several us of CPU more, in process)."""

    def __init__(self, scope: keys.Scope) -> None:
        super().__init__(auto_error=False, scheme_name="HTTPBearer",
                         description="an API key (paystream apikeys)")
        self._scope = scope

    async def __call__(self, request: Request) -> Access:  # type: ignore[override]
        credentials = await super().__call__(request)
        state = request.app.state  # set by api/app.py create_app
        return Access(credentials, self._scope, state.authenticator, state.database)


# What a /v1 route declares to get its database: with a key holding its resource's scope.
UsersRead = Annotated[Access, Depends(KeyAccess(keys.Scope.USERS_READ))]
UsersWrite = Annotated[Access, Depends(KeyAccess(keys.Scope.USERS_WRITE))]
BalancesRead = Annotated[Access, Depends(KeyAccess(keys.Scope.BALANCES_READ))]
TransactionsRead = Annotated[Access, Depends(KeyAccess(keys.Scope.TRANSACTIONS_READ))]
EventsRead = Annotated[Access, Depends(KeyAccess(keys.Scope.EVENTS_READ))]
WithdrawalsRead = Annotated[Access, Depends(KeyAccess(keys.Scope.WITHDRAWALS_READ))]
WithdrawalsWrite = Annotated[Access, Depends(KeyAccess(keys.Scope.WITHDRAWALS_WRITE))]
InvoicesRead = Annotated[Access, Depends(KeyAccess(keys.Scope.INVOICES_READ))]
InvoicesWrite = Annotated[Access, Depends(KeyAccess(keys.Scope.INVOICES_WRITE))]
EndpointsRead = Annotated[Access, Depends(KeyAccess(keys.Scope.ENDPOINTS_READ))]
EndpointsWrite = Annotated[Access, Depends(KeyAccess(keys.Scope.ENDPOINTS_WRITE))]
