"""Every ingest metric, declared once, each with what it counts.

Each app owns its registry, so several apps (tests, benchmarks) can live in one process.
With `--workers N` each worker process counts its own requests (scrape each, or run one
worker per container).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from paystream.edge.metrics import AnswerMetrics

# Tuned to the answer budget: milliseconds matter, 5 s is the provider's timeout.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # HTTP answers by route template (not raw path: bounded cardinality) and status.
        self.answers = AnswerMetrics(
            self.registry, requests="paystream_ingest_requests",
            latency="paystream_ingest_request_duration_seconds", label="endpoint",
            buckets=LATENCY_BUCKETS)
        # Payment events by outcome: accepted (new, sent to the outbox), duplicate
        # (identical redelivery), conflict (same id, other content: 409), ignored
        # (a transfer recorded as a notice, never credited).
        self.events = Counter(
            "paystream_ingest_events", "Payment events by outcome",
            ["provider", "outcome"], registry=self.registry)
        # Notices newly recorded, by kind (nft, capacity_error, ignored, unsupported, reorg).
        self.notices = Counter(
            "paystream_ingest_notices", "Deliveries recorded but never credited",
            ["provider", "kind"], registry=self.registry)
        # Deliveries per group commit (ingest/writer.py): one COMMIT, one WAL flush each.
        # Its _count is the number of commits, its _sum the deliveries they carried.
        self.group_size = Histogram(
            "paystream_ingest_commit_group_size", "Deliveries committed per transaction",
            buckets=GROUP_BUCKETS, registry=self.registry)
        # Wall time of one group commit: BEGIN, every delivery's statements, COMMIT.
        self.commit_seconds = Histogram(
            "paystream_ingest_commit_duration_seconds", "Time to write and commit a group",
            buckets=LATENCY_BUCKETS, registry=self.registry)
        # Requests refused, by reason: before any work (signature, rate limit, size ...),
        # or in the database, known not to apply (unknown_user, reference_of_other_user).
        self.refusals = Counter(
            "paystream_ingest_refusals", "Requests refused, by reason code",
            ["provider", "code"], registry=self.registry)

        # Labelled children by (provider, outcome): labels() costs a lock and a few
        # allocations per call, paid on every event otherwise. A bounded set.
        self._events_by: dict[tuple[str, str], Counter] = {}

    def count_event(self, provider: str, outcome: str) -> None:
        """One payment event of `provider` with `outcome` (the `events` counter)."""
        child = self._events_by.get((provider, outcome))
        if child is None:  # both are bounded sets: providers, WriteOutcome + "ignored"
            child = self._events_by[(provider, outcome)] = self.events.labels(provider,
                                                                              outcome)
        child.inc()

    def observe_commit(self, deliveries: int, seconds: float) -> None:
        """One group commit (ingest/writer.py), from a writer thread."""
        self.group_size.observe(deliveries)
        self.commit_seconds.observe(seconds)
