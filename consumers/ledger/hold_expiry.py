"""The hold expiry scheduler: holds past their expiry voided through the ledger's topic.

Each round is one transaction (operator_events.py: the hold claimed in its table and
the `hold.expired` event written to the outbox together), so a crash between rounds
loses nothing and a restarted scheduler does not void a hold twice. A full round is taken
again at once, so a backlog drains without waiting for the next period.
"""

from __future__ import annotations

import time
from typing import NoReturn

import structlog

from paystream.consumers.ledger.operator_events import Written, expire_holds
from paystream.operator_cli import transaction

log = structlog.get_logger("ops.holds")


def expire_round(limit: int) -> list[Written]:
    """Void up to `limit` holds past their expiry, in one transaction; log each."""
    with transaction("paystream-holds-expire") as cur:
        written = expire_holds(cur, limit)
    for w in written:
        log.info("hold_expired", trace_id=w.trace_id, event_id=w.event.event_id,
                 hold_id=w.event.reference, user_id=w.event.user_id)
    return written


def run_forever(limit: int, interval_s: float) -> NoReturn:
    """Rounds until the process is stopped; a full round is followed by the next at once."""
    while True:
        if len(expire_round(limit)) < limit:
            time.sleep(interval_s)
