"""A token bucket per (provider, source): bursts pass, a sustained flood gets 429.

In-process and lock-free (the event loop is single-threaded); each worker process has
its own buckets, so the effective limit is per worker.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from paystream.ingest.errors import RateLimitError

MAX_BUCKETS = 10_000  # memory bound: the least recently seen sources are forgotten


class TokenBuckets:
    def __init__(self, rate_per_second: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_second
        self._burst = float(burst)
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def take(self, provider: str, source: str) -> None:
        """Spend one token or raise RateLimitError with the seconds to wait."""
        key = (provider, source)
        now = self._clock()
        tokens, last = self._buckets.pop(key, (self._burst, now))
        tokens = min(self._burst, tokens + (now - last) * self._rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            wait = max(1, math.ceil((1.0 - tokens) / self._rate))
            raise RateLimitError(f"rate limit for {provider} from this source exceeded",
                                 retry_after=wait)
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
