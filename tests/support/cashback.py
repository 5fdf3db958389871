"""A test-only event type: `cashback`, a credit a gateway sends, paid out of the
platform's fees (not the gateway's settlement, as a deposit is).

Declared here and nowhere else: the tests that use it prove that an event type of an
existing shape needs its declaration and nothing more (schema/event_types/). It is
declared for the duration of a `with cashback_declared()` only, so no other test sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from paystream.schema.event_types import FEES, EventType, Shape, declare, retract
from paystream.schema.processed_events import Outcome


@contextmanager
def cashback_declared() -> Iterator[EventType]:
    cashback = declare("cashback", Shape.CREDIT, counter=FEES, gateway=True,
                       intents={Outcome.APPLIED: "deposit.credited"})
    try:
        yield cashback
    finally:
        retract(cashback)
