"""Every merchant API metric, declared once, each with what it counts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from paystream.edge.metrics import AnswerMetrics

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # Answers by route template (bounded: the routes, or "other") and status code.
        self.answers = AnswerMetrics(
            self.registry, requests="paystream_api_requests",
            latency="paystream_api_request_duration_seconds", label="route",
            buckets=LATENCY_BUCKETS)
        # Withdrawal requests by outcome: accepted (event written), replayed (the stored
        # answer of an Idempotency-Key), conflict (the key with another body).
        self.withdrawals = Counter("paystream_api_withdrawal_requests",
                                   "Withdrawal requests by outcome", ["outcome"],
                                   registry=self.registry)
        # Invoice creations by outcome: created, replayed (the invoice of an
        # Idempotency-Key), conflict (the key with another body), no_address (a chain
        # invoice found no spare or pooled deposit address).
        self.invoices = Counter("paystream_api_invoice_requests",
                                "Invoice creations by outcome", ["outcome"],
                                registry=self.registry)
        # Invoice cancels by outcome: cancelled, refused (not open, or paid).
        self.invoice_cancels = Counter("paystream_api_invoice_cancels",
                                       "Invoice cancels by outcome", ["outcome"],
                                       registry=self.registry)
