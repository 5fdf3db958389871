"""The ledger's record of what a debit could not take: account_shortfalls rows, written
in the batch transaction that planned them (the user is flagged while one is open;
`paystream shortfalls resolve` closes it, ops/shortfalls.py)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

import structlog

from paystream.consumers.ledger.plan import Candidate, Plan
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor

log = structlog.get_logger("consumers.ledger")

# (user, asset, the event that could not take it all, the deposit or original it
# reverses, the amount owed)
Shortfall = tuple[str, str, str, str, Decimal]


def record(cur: Cursor, shortfalls: Sequence[Shortfall]) -> None:
    """One row per source event; a replay of the same event adds nothing."""
    if not shortfalls:
        return
    cur.executemany(
        "INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
        " deposit_event_id, amount) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (source_event_id) DO NOTHING",
        [(user, asset, source, reverses, format_amount(amount))
         for user, asset, source, reverses, amount in shortfalls])


def open_for_debits(cur: Cursor, short: Sequence[Candidate], plan: Plan) -> None:
    """What a refund, chargeback, revert or debit adjustment could not take from
    available: a row each (the user is flagged), the platform's receivable already
    posted, and a critical line each (the notifications tell the user). A chain
    reversal's is chain_consequence.py's."""
    owed = {id(c): amount for c, amount in plan.shortfalls}
    record(cur, [(c.event.user_id, c.event.asset, c.event.event_id,
                  c.event.reference or c.event.event_id, owed[id(c)]) for c in short])
    for c in short:
        event = c.event
        log.critical("shortfall_opened", trace_id=c.trace_id or event.event_id,
                     event_id=event.event_id, event_type=event.event_type.value,
                     reverses=event.reference, user_id=event.user_id, asset=event.asset,
                     amount=format_amount(event.amount),
                     shortfall=format_amount(owed[id(c)]), account_flagged=True)
