"""The token bucket per (provider, source)."""

from __future__ import annotations

import pytest

from paystream.ingest.errors import RateLimitError
from paystream.ingest.rate_limit import TokenBuckets


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_passes_then_the_bucket_refuses_with_retry_after() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate_per_second=2, burst=3, clock=clock)
    for _ in range(3):
        buckets.take("alchemy", "10.0.0.1")
    with pytest.raises(RateLimitError) as refused:
        buckets.take("alchemy", "10.0.0.1")
    assert refused.value.retry_after == 1 and refused.value.status == 429
    clock.now += 0.5  # one token back at 2/s
    buckets.take("alchemy", "10.0.0.1")


def test_buckets_are_per_provider_and_per_source() -> None:
    buckets = TokenBuckets(rate_per_second=1, burst=1, clock=FakeClock())
    buckets.take("alchemy", "10.0.0.1")
    buckets.take("payments", "10.0.0.1")
    buckets.take("alchemy", "10.0.0.2")
    with pytest.raises(RateLimitError):
        buckets.take("alchemy", "10.0.0.1")
