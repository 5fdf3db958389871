"""Who may call: `Authorization: Bearer <API key>`, the key live and holding the route's
scope, within its rate limit. Checked in the request's own transaction (one round trip
more, no second transaction), before the route reads or writes anything."""

from __future__ import annotations

import threading

from paystream.api import keys
from paystream.api.errors import ForbiddenError, UnauthorizedError
from paystream.rate_limit import TokenBuckets
from paystream.schema.db import Cursor

BEARER = "bearer "


class Authenticator:
    def __init__(self, rate_per_second: float, burst: int) -> None:
        self._buckets = TokenBuckets(rate_per_second, burst, what="API key")
        # The routes run in a thread pool; the buckets were written for one event loop.
        self._lock = threading.Lock()

    def check(self, cur: Cursor, authorization: str | None, scope: keys.Scope) -> str:
        """The calling key's id, or a refusal: 401 (no or no live key), 403 (scope), 429
        (its bucket is empty; Retry-After)."""
        if authorization is None or not authorization[:len(BEARER)].lower() == BEARER:
            raise UnauthorizedError("an API key is required: Authorization: Bearer <key>",
                                    code="missing_api_key")
        found = keys.live_key(cur, authorization[len(BEARER):].strip())
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
