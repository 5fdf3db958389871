"""Who may call: `Authorization: Bearer <API key>`, the key live and holding the route's
scope, within its rate limit. The key is looked up in the request's own transaction
(no second transaction), before the route writes anything: by `check` as the
transaction's first statement, or inside the route's one statement (`admit` then
judges what it found, e.g. the balances read, api/reads.py)."""

from __future__ import annotations

import threading

from paystream.api import keys
from paystream.edge.errors import ForbiddenError, UnauthorizedError
from paystream.rate_limit import TokenBuckets
from paystream.schema.db import Cursor

BEARER = "bearer "


class Authenticator:
    def __init__(self, rate_per_second: float, burst: int) -> None:
        self._buckets = TokenBuckets(rate_per_second, burst, what="API key")
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
            raise UnauthorizedError("the API key is not valid or was revoked",
                                    code="invalid_api_key")
        return key

    def check(self, cur: Cursor, key: str, scope: keys.Scope) -> str:
        """The calling key's id, or a refusal: 401 (no live key), 403 (scope), 429 (its
        bucket is empty; Retry-After)."""
        return self.admit(keys.live_key(cur, key), scope)

    def admit(self, found: keys.Caller | None, scope: keys.Scope) -> str:
        """`check` on a key already looked up (keys.LIVE_KEY_SQL)."""
        if found is None:
            raise UnauthorizedError("the API key is not valid or was revoked",
                                    code="invalid_api_key")
        key_id, scopes = found
        with self._lock:
            self._buckets.take(key_id)
        if scope not in scopes:
            raise ForbiddenError(f"this API key lacks the {scope.value!r} scope",
                                 code="insufficient_scope")
        return key_id
