"""Reversals of an applied event (wire `reverses` names it): a gateway's refund or
chargeback of its own credit, an operator's revert of any credit or debit. A reversal
of a credit takes what available holds and the rest is owed (outcome shortfall).
"""

from __future__ import annotations

from paystream.schema.event_types.declaration import Reach, Shape, declare
from paystream.schema.processed_events import Outcome

_REVERSED = {Outcome.APPLIED: "balance.reversed", Outcome.SHORTFALL: "balance.reversed"}

REFUND = declare("refund", Shape.REVERSAL, gateway=True, reverses=Reach.GATEWAY_CREDITS,
                 intents=_REVERSED)
CHARGEBACK = declare("chargeback", Shape.REVERSAL, gateway=True,
                     reverses=Reach.GATEWAY_CREDITS, intents=_REVERSED)
REVERT = declare("revert", Shape.REVERSAL, reverses=Reach.ANY_PLAIN, intents=_REVERSED)
