"""Token buckets: bursts pass, a sustained flood gets 429 with Retry-After.

Used by the ingest (ingest/webhooks.py) and the merchant API (api/auth.py). The ingest
uses two, both charged only once a request's fate is known:
a verified delivery spends from its provider's bucket, and a request that fails
authentication (or is refused before it) spends from a small bucket of its source
address. Unsigned junk therefore never drains a provider's bucket, and a source that
keeps failing is refused before its body is read.

In-process and lock-free (the event loop is single-threaded); each worker process has
its own buckets, so the effective limit is per worker.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from paystream.edge.errors import RateLimitError

MAX_BUCKETS = 10_000  # memory bound: the least recently seen keys are forgotten


class TokenBuckets:
    def __init__(self, rate_per_second: float, burst: int, what: str = "requests",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_second
        self._burst = float(burst)
        self._what = what  # says in the refusal which limit this is
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> None:
        """Spend one token or raise RateLimitError with the seconds to wait."""
        tokens, now = self._refilled(key)
        if tokens < 1.0:
            self._store(key, tokens, now)
            raise self._refusal(key, tokens)
        self._store(key, tokens - 1.0, now)

    def require(self, key: str) -> None:
        """Raise RateLimitError if `key` has no token left, without spending one."""
        if key in self._buckets:  # an unknown key has a full bucket
            tokens, _ = self._refilled(key)
            if tokens < 1.0:
                raise self._refusal(key, tokens)

    def spend(self, key: str) -> None:
        """Spend one token if there is one (never raises: the caller is refusing anyway)."""
        tokens, now = self._refilled(key)
        self._store(key, max(0.0, tokens - 1.0), now)

    def _refilled(self, key: str) -> tuple[float, float]:
        now = self._clock()
        tokens, last = self._buckets.get(key, (self._burst, now))
        return min(self._burst, tokens + (now - last) * self._rate), now

    def _store(self, key: str, tokens: float, now: float) -> None:
        self._buckets.pop(key, None)
        self._buckets[key] = (tokens, now)  # most recently seen last
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)

    def _refusal(self, key: str, tokens: float) -> RateLimitError:
        wait = max(1, math.ceil((1.0 - tokens) / self._rate))
        return RateLimitError(f"rate limit for {self._what} of {key} exceeded",
                              retry_after=wait)
