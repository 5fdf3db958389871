"""The request metrics of an edge, under the edge's own names: answers by endpoint and
status, and the time to answer by endpoint and class of status (2xx, 4xx, 5xx: a fast
refusal must not hide a slow acceptance; the class, not the code, keeps the series few).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram


class AnswerMetrics:
    def __init__(self, registry: CollectorRegistry, *, requests: str, latency: str,
                 label: str, buckets: Sequence[float]) -> None:
        """`requests`, `latency`: the two metrics' names; `label`: the endpoint label's
        name (a bounded set of values: route templates, or "other")."""
        self.requests = Counter(requests, "HTTP requests answered", [label, "status"],
                                registry=registry)
        # From the request's first byte to its answer.
        self.latency = Histogram(latency, "Time to answer a request",
                                 [label, "status_class"], buckets=buckets,
                                 registry=registry)
        # The two series of each (endpoint, status), found once: labels() costs a lock
        # and a few allocations, a few us of every request's CPU (bench/api_bench.py).
        self._series: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """One HTTP answer (the request counter and the latency histogram)."""
        series = self._series.get((endpoint, status))
        if series is None:
            series = self._series[(endpoint, status)] = (
                self.requests.labels(endpoint, str(status)),
                self.latency.labels(endpoint, f"{status // 100}xx"))
        series[0].inc()
        series[1].observe(seconds)
