"""Token buckets, and the order the webhooks charge them in: only a verified delivery
spends from its provider's bucket; anything refused before or at the signature spends
from its source's small failure bucket."""

from __future__ import annotations

import asyncio

import pytest

from paystream.ingest.errors import RateLimitError
from paystream.ingest.settings import IngestSettings
from paystream.ingest.webhooks import Webhooks
from paystream.rate_limit import TokenBuckets
from tests.support.ingest import ingest_env, payment_body, payment_headers


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_passes_then_the_bucket_refuses_with_retry_after() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate_per_second=2, burst=3, clock=clock)
    for _ in range(3):
        buckets.take("alchemy")
    with pytest.raises(RateLimitError) as refused:
        buckets.take("alchemy")
    assert refused.value.retry_after == 1 and refused.value.status == 429
    clock.now += 0.5  # one token back at 2/s
    buckets.take("alchemy")


def test_buckets_are_per_key() -> None:
    buckets = TokenBuckets(rate_per_second=1, burst=1, clock=FakeClock())
    buckets.take("alchemy")
    buckets.take("payments")
    with pytest.raises(RateLimitError):
        buckets.take("alchemy")


def test_require_spends_nothing_and_spend_never_raises() -> None:
    buckets = TokenBuckets(rate_per_second=1, burst=2, clock=FakeClock())
    for _ in range(5):
        buckets.require("10.0.0.1")  # an unknown or full bucket: nothing spent
    buckets.spend("10.0.0.1")
    buckets.spend("10.0.0.1")
    buckets.spend("10.0.0.1")  # already empty: still no exception
    with pytest.raises(RateLimitError):
        buckets.require("10.0.0.1")


class _NoWriter:
    """Nothing may reach the writer in these tests: every request is refused before."""

    async def write(self, work: object) -> object:
        raise AssertionError("a refused request reached the database")


def _post(webhooks: Webhooks, source: str, body: bytes, headers: dict[str, str]) -> int:
    from paystream.edge.observe import HEADERS_SCOPE_KEY, LOG_SCOPE_KEY, TRACE_SCOPE_KEY
    from paystream.trace import Trace

    scope = {"type": "http", "method": "POST", "path": "/webhooks/payments",
             "client": (source, 5000), "headers": [], HEADERS_SCOPE_KEY: headers,
             TRACE_SCOPE_KEY: Trace("t", False), LOG_SCOPE_KEY: {}}
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    asyncio.run(webhooks(scope, receive, send))
    return int(sent[0]["status"])  # type: ignore[call-overload]


def _webhooks(**overrides: object) -> Webhooks:
    from paystream.ingest.metrics import IngestMetrics

    settings = IngestSettings.from_env(ingest_env(), overrides)
    return Webhooks(settings, _NoWriter(), IngestMetrics())  # type: ignore[arg-type]


def test_unsigned_junk_spends_its_source_bucket_not_the_providers() -> None:
    webhooks = _webhooks(rate_per_second=0.001, rate_burst=1,
                         auth_failure_rate_per_second=0.001, auth_failure_burst=3)
    junk = payment_body("ev-junk", "u1")
    statuses = [_post(webhooks, "10.0.0.66", junk, {"content-type": "application/json"})
                for _ in range(6)]
    assert statuses == [401, 401, 401, 429, 429, 429]
    # The provider's one-token bucket is untouched: a signed delivery from elsewhere
    # passes the rate limit (and reaches the writer, which this test refuses to run).
    body = payment_body("ev-good", "u1")
    with pytest.raises(AssertionError, match="reached the database"):
        _post(webhooks, "10.0.0.1", body, payment_headers(body))
