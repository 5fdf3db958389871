"""Every sender and reminder metric, declared once (the notifier consumer's own are the runtime's,
consumers/metrics.py, under group `notifier`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Attempts as they ended: delivered, retry (a 5xx, 408, 429, 3xx, no answer), refused
# (another 4xx), by endpoint.
ATTEMPTS = Counter("paystream_notify_attempts_total", "Delivery attempts, by result",
                   ["endpoint", "result"])
# From the request's start to its answer (or its failure), per attempt.
ATTEMPT_SECONDS = Histogram(
    "paystream_notify_attempt_seconds", "Delivery attempt latency", ["endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
# From the intent's created_at (the ledger's commit) to the 2xx that delivered it.
DELIVERY_SECONDS = Histogram(
    "paystream_notify_delivery_seconds", "Intent to delivery latency",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600))
# Slots that failed for good (refused, or the schedule spent).
GAVE_UP = Counter("paystream_notify_gave_up_total", "Deliveries given up", ["endpoint", "why"])
# Endpoints this process disabled after failing for PAYSTREAM_NOTIFY_DISABLE_AFTER_S.
ENDPOINTS_DISABLED = Counter("paystream_notify_endpoints_disabled_total",
                             "Endpoints disabled for failing too long", ["endpoint"])
# Attempts in flight now.
IN_FLIGHT = Gauge("paystream_notify_in_flight", "Delivery attempts in flight")
# Slots claimed whose answer was recorded after their lease was taken over (a sender
# stalled past its lease): the attempt is recorded, the slot is the new claimant's.
LOST_CLAIMS = Counter("paystream_notify_lost_claims_total",
                      "Answers recorded after the claim was lost")
# Reminders claimed as skipped, never sent: their moment passed more than the window ago
# while no scan ran (the notifier down), by kind (`invoice_unpaid`).
REMINDERS_SKIPPED = Counter("paystream_reminders_skipped_total",
                            "Reminders skipped: their moment passed while nothing ran",
                            ["kind"])
