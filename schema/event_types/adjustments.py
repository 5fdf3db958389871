"""Operator adjustments (provider `operator`, with a `reason`), against the platform's
adjustments account. A debit adjustment is never refused: what available lacks is owed.
"""

from __future__ import annotations

from paystream.schema.event_types.declaration import ADJUSTMENTS, Shape, declare
from paystream.schema.processed_events import Outcome

ADJUSTMENT_CREDIT = declare(
    "adjustment_credit", Shape.CREDIT, counter=ADJUSTMENTS,
    intents={Outcome.APPLIED: "balance.adjusted"})
ADJUSTMENT_DEBIT = declare(
    "adjustment_debit", Shape.FORCED_DEBIT, counter=ADJUSTMENTS,
    intents={Outcome.APPLIED: "balance.adjusted", Outcome.SHORTFALL: "balance.adjusted"})
