"""The event types, each declared once, with everything the other parts need to know.

Adding an event type is one declaration in the module of its family (or a new module
imported below): the ingest accepts it if a gateway may send it, the ledger plans and
posts it by its shape and counter-account, notify raises the intents it declares, and
the migrator keeps the database's CHECK on payment_events.event_type equal to the
declared names (schema/migrate.py, sync_event_types). No other file changes.

  declaration.py  what an event type is (Shape, Counter, Reach, EventType), `declare`,
                  and the registry of the declared ones
  deposits.py     deposit, airdrop
  withdrawals.py  withdrawal, withdrawal_fee, and the holds: withdrawal_requested,
                  withdrawal_settled, withdrawal_failed, hold_expired
  reversals.py    refund, chargeback, revert
  adjustments.py  adjustment_credit, adjustment_debit

The finality watcher's settlement events (deposit_finalized, ...) are not event types a
provider or an operator sends: schema/events.py's SettlementType.
"""

from __future__ import annotations

# The families in declaration order (the order EventType and gateway_types() walk).
# isort: off
from paystream.schema.event_types import deposits, withdrawals, reversals, adjustments
# isort: on
from paystream.schema.event_types.declaration import (
    ADJUSTMENTS,
    BY_NAME,
    FEES,
    PLAIN_SHAPES,
    SETTLEMENT,
    Counter,
    EventType,
    Reach,
    Shape,
    declare,
    declared,
    retract,
)

__all__ = [
    "ADJUSTMENTS",
    "BY_NAME",
    "FEES",
    "PLAIN_SHAPES",
    "SETTLEMENT",
    "Counter",
    "EventType",
    "Reach",
    "Shape",
    "adjustments",
    "declare",
    "declared",
    "deposits",
    "gateway_types",
    "retract",
    "reversals",
    "withdrawals",
]


def gateway_types() -> tuple[EventType, ...]:
    """What a payment gateway may send, in declaration order."""
    return tuple(t for t in EventType if t.gateway)
