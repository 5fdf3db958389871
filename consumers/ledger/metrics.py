"""The ledger's reversal and shortfall metrics, declared once (the consumer runtime's
own metrics are in consumers/metrics.py). Served from the ledger's metrics port."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg2
import structlog
from prometheus_client import Counter, Gauge

from paystream.schema.db import Connection

# Compensating debits applied (deposit_reversed), by whether available covered them.
REVERSALS = Counter(
    "paystream_ledger_reversals_total", "Credited chain deposits reversed", ["covered"])
# Reversals available could not fully cover: each one flags its user (alert on any).
SHORTFALLS = Counter(
    "paystream_ledger_shortfalls_total", "Reversals that left a shortfall")
# Open account_shortfalls rows (flagged accounts' debts) at the latest refresh; stays
# above zero until an operator resolves them.
OPEN_SHORTFALLS = Gauge(
    "paystream_ledger_open_shortfalls", "Unresolved shortfalls (flagged accounts)")


def count_reversal(shortfall: bool) -> None:
    REVERSALS.labels(covered=str(not shortfall).lower()).inc()
    if shortfall:
        SHORTFALLS.inc()


class ShortfallGauge:
    """Refreshes OPEN_SHORTFALLS between batches, at most once per `interval_s`; a
    failing query is logged, never raised (it must not stall payments)."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self._last = float("-inf")

    def maybe_refresh(self, connection: Callable[[], Connection]) -> int | None:
        if time.monotonic() - self._last < self.interval_s:
            return None
        self._last = time.monotonic()
        from paystream.schema.db import snapshot

        try:
            with snapshot(connection()) as cur:
                cur.execute("SELECT count(*) FROM account_shortfalls WHERE resolved_at IS NULL")
                row = cur.fetchone()
                count = int(row[0]) if row is not None else 0  # count(*): always a row
        except (psycopg2.Error, RuntimeError) as exc:
            structlog.get_logger("consumers.ledger").warning(
                "open_shortfalls_unavailable", error=str(exc).strip()[:300])
            return None
        OPEN_SHORTFALLS.set(count)
        return count
