"""Every merchant API metric, declared once, each with what it counts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # Answers by route template (bounded: the routes, or "other") and status code.
        self.requests = Counter("paystream_api_requests", "HTTP requests answered",
                                ["route", "status"], registry=self.registry)
        # Time from the request's first byte to its answer, by route and status class.
        self.latency = Histogram("paystream_api_request_duration_seconds",
                                 "Time to answer a request", ["route", "status_class"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        # Withdrawal requests by outcome: accepted (event written), replayed (the stored
        # answer of an Idempotency-Key), conflict (the key with another body).
        self.withdrawals = Counter("paystream_api_withdrawal_requests",
                                   "Withdrawal requests by outcome", ["outcome"],
                                   registry=self.registry)

        # The two series of each (route, status), found once: labels() per answer was
        # a few us of every request's CPU (bench/api_bench.py). Bounded as the labels.
        self._series: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def observe_answer(self, route: str, status: int, seconds: float) -> None:
        series = self._series.get((route, status))
        if series is None:
            series = self._series[(route, status)] = (
                self.requests.labels(route, str(status)),
                self.latency.labels(route, f"{status // 100}xx"))
        series[0].inc()
        series[1].observe(seconds)
